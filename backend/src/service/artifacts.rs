//! What a run produced besides metrics and environments: checkpoints, benchmark scores,
//! held-out evaluations and share links, in the JSON API's shapes, and the changes: queue an
//! evaluation, create or revoke a share link. The run page's own views of them
//! (`dashboard::run_benchmarks`, the shares panel) read the same rows.

use super::{audit, editor_scope};
use crate::AppState;
use crate::auth::{AuthUser, tokens};
use crate::error::{ApiResult, AppError};
use crate::paths::PathRoots;
use serde::Deserialize;
use spade_app::dto;
use spade_db::artifacts::{self, BenchmarkResult, Checkpoint};
use spade_db::evaluations::{self, Evaluation, NewEvaluation, Trigger};
use spade_db::shares::{self, NewShare, ShareLink};
use spade_db::{DbError, Pool, RunScope};

type Time = chrono::DateTime<chrono::Utc>;

fn time(t: &Time) -> String {
    // What chrono's own serializer writes, so the API's times read as before it served DTOs.
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A checkpoint as people see it: its path relative to the run's state directory or model
/// root, never the server's absolute path (`paths::PathRoots::shown_checkpoint`).
pub fn checkpoint(c: &Checkpoint, paths: &PathRoots, run_id: i64) -> dto::CheckpointRecord {
    dto::CheckpointRecord {
        step: c.step,
        path: paths.shown_checkpoint(run_id, &c.path),
        bytes: c.bytes,
        created_at: time(&c.created_at),
    }
}

pub fn benchmark(b: &BenchmarkResult) -> dto::BenchmarkRecord {
    dto::BenchmarkRecord {
        id: b.id,
        checkpoint_step: b.checkpoint_step,
        suite: b.suite.clone(),
        task: b.task.clone(),
        score: b.score,
        n: b.n,
        created_at: time(&b.created_at),
    }
}

pub fn evaluation(e: &Evaluation) -> dto::EvaluationRecord {
    dto::EvaluationRecord {
        id: e.id,
        run_id: e.run_id,
        job_id: e.job_id,
        checkpoint_step: e.checkpoint_step,
        suite: e.suite.clone(),
        item_limit: e.item_limit,
        max_new_tokens: e.max_new_tokens,
        trigger: e.trigger.clone(),
        state: job_state(e.state),
        message: e.message.clone(),
        created_at: time(&e.created_at),
        started_at: e.started_at.as_ref().map(time),
        finished_at: e.finished_at.as_ref().map(time),
    }
}

/// A job state's name (`queued`, ..., `cancelled`), as the database's enum spells it.
pub fn job_state(s: spade_db::jobs::JobState) -> String {
    match serde_json::to_value(s) {
        Ok(serde_json::Value::String(name)) => name,
        // A unit enum variant always serializes as its name.
        other => format!("{other:?}"),
    }
}

pub fn share(l: &ShareLink) -> dto::ShareRecord {
    dto::ShareRecord {
        id: l.id,
        run_id: l.run_id,
        created_by: l.created_by,
        created_at: time(&l.created_at),
        revoked_at: l.revoked_at.as_ref().map(time),
        label: l.label.clone(),
        expires_at: l.expires_at.as_ref().map(time),
    }
}

pub async fn checkpoints(
    state: &AppState,
    scope: &RunScope,
) -> ApiResult<Vec<dto::CheckpointRecord>> {
    Ok(artifacts::checkpoints(&state.db, scope)
        .await?
        .iter()
        .map(|c| checkpoint(c, &state.paths, scope.run_id()))
        .collect())
}

/// The stored path of run `scope`'s checkpoint at `step`, held again to the path rule before
/// an evaluation loads it (a row stored before the rule, or a root an administrator has since
/// removed, is refused with a 422 about `field`); `None` when there is no such checkpoint.
pub async fn checked_checkpoint(
    state: &AppState,
    scope: &RunScope,
    step: i64,
    field: &str,
) -> ApiResult<Option<String>> {
    let Some(c) = artifacts::checkpoints(&state.db, scope)
        .await?
        .into_iter()
        .find(|c| c.step == step)
    else {
        return Ok(None);
    };
    state
        .paths
        .checkpoint(scope.run_id(), field, &c.path)
        .map(Some)
}

pub async fn benchmarks(db: &Pool, scope: &RunScope) -> ApiResult<Vec<dto::BenchmarkRecord>> {
    Ok(artifacts::benchmark_results(db, scope)
        .await?
        .iter()
        .map(benchmark)
        .collect())
}

pub async fn evaluations(db: &Pool, scope: &RunScope) -> ApiResult<Vec<dto::EvaluationRecord>> {
    Ok(evaluations::list(db, scope)
        .await?
        .iter()
        .map(evaluation)
        .collect())
}

pub async fn share_links(db: &Pool, scope: &RunScope) -> ApiResult<Vec<dto::ShareRecord>> {
    Ok(shares::list(db, scope).await?.iter().map(share).collect())
}

/// The body of `POST /runs/{id}/shares`; `{}` makes an unlabelled link that lives until revoked.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CreateShareRequest {
    /// What the link is for (at most [`LABEL_MAX_CHARS`] characters, no control characters).
    pub label: String,
    /// Days until the link stops working, 1 to [`MAX_EXPIRY_DAYS`]; absent = until revoked.
    pub expires_in_days: Option<i32>,
}

pub const LABEL_MAX_CHARS: usize = 100;
pub const MAX_EXPIRY_DAYS: i32 = 365;

impl CreateShareRequest {
    /// The request as the database takes it, or an error naming the field at fault.
    fn checked(&self) -> Result<NewShare<'_>, AppError> {
        let label = self.label.trim();
        if label.chars().count() > LABEL_MAX_CHARS {
            return Err(AppError::invalid(
                "label",
                format!(
                    "at most {LABEL_MAX_CHARS} characters, got {}",
                    label.chars().count()
                ),
            ));
        }
        if label.chars().any(char::is_control) {
            return Err(AppError::invalid(
                "label",
                "no control characters (line breaks, tabs)",
            ));
        }
        if let Some(d) = self.expires_in_days
            && !(1..=MAX_EXPIRY_DAYS).contains(&d)
        {
            return Err(AppError::invalid(
                "expires_in_days",
                format!("expected 1 to {MAX_EXPIRY_DAYS} days, or no value for no expiry, got {d}"),
            ));
        }
        Ok(NewShare {
            label,
            expires_in_days: self.expires_in_days,
        })
    }
}

/// Creates a read-only share link of run `run_id` (editors). The token is in the answer once;
/// only its hash is stored.
pub async fn create_share(
    state: &AppState,
    auth: &AuthUser,
    run_id: i64,
    req: &CreateShareRequest,
) -> ApiResult<dto::CreatedShare> {
    let scope = editor_scope(state, auth, run_id).await?;
    let new = req.checked()?;
    let token = tokens::random_token("sps_");
    let link = shares::create(
        &state.db,
        &scope,
        auth.user.id,
        &tokens::hash_token(&token),
        &new,
    )
    .await?;
    let detail = serde_json::json!({
        "run_id": run_id,
        "label": link.label,
        "expires_at": link.expires_at,
    });
    let target = format!("share:{}", link.id);
    audit(state, auth, scope.team_id(), "share.create", target, detail).await?;
    let path = format!("/api/v1/shared/{token}");
    Ok(dto::CreatedShare {
        link: share(&link),
        token,
        path,
    })
}

/// Revokes share link `share_id` of run `run_id` (editors).
pub async fn revoke_share(
    state: &AppState,
    auth: &AuthUser,
    run_id: i64,
    share_id: i64,
) -> ApiResult<dto::ShareRecord> {
    let scope = editor_scope(state, auth, run_id).await?;
    let link = shares::revoke(&state.db, &scope, share_id).await?;
    let detail = serde_json::json!({ "run_id": run_id });
    let target = format!("share:{share_id}");
    audit(state, auth, scope.team_id(), "share.revoke", target, detail).await?;
    Ok(share(&link))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateEvaluation {
    /// The checkpoint's step; 0 is the model the run started from.
    pub checkpoint_step: i64,
    /// A `spade eval --suite` name (rg-hard, rg-logic, ..., envs, envs:DIR, qa:PATH.jsonl).
    pub suite: String,
    /// Items per task at most (default: the run configuration's `eval.limit`).
    pub limit: Option<u32>,
    /// Tokens per answer (default: the run configuration's `eval.max_new_tokens`).
    pub max_new_tokens: Option<u32>,
}

/// Queues `spade eval` on one checkpoint of run `run_id` and one suite (editors); limits left
/// out come from the run's configuration.
pub async fn request_evaluation(
    state: &AppState,
    auth: &AuthUser,
    run_id: i64,
    req: &CreateEvaluation,
) -> ApiResult<dto::EvaluationRecord> {
    let scope = editor_scope(state, auth, run_id).await?;
    spade::suites::check(&req.suite).map_err(|e| AppError::invalid("suite", e))?;
    let suite = state.paths.suite("suite", &req.suite)?;
    if req.checkpoint_step < 0 {
        return Err(AppError::invalid("checkpoint_step", "must be 0 or more"));
    }
    // The path is checked here; a missing checkpoint is answered below with the steps it has.
    checked_checkpoint(state, &scope, req.checkpoint_step, "checkpoint_step").await?;
    let cfg = super::runs::stored_config(&state.db, &scope).await?;
    let limit = positive("limit", req.limit.unwrap_or(cfg.eval.limit), 1_000_000)?;
    let max_new_tokens = positive(
        "max_new_tokens",
        req.max_new_tokens.unwrap_or(cfg.eval.max_new_tokens),
        131_072,
    )?;
    let new = NewEvaluation {
        checkpoint_step: req.checkpoint_step,
        suite: &suite,
        item_limit: Some(limit),
        max_new_tokens,
        trigger: Trigger::Manual,
        requested_by: Some(auth.user.id),
    };
    let created = match evaluations::create(&state.db, &scope, &new).await {
        Err(DbError::NotFound("checkpoint")) => {
            let steps: Vec<String> = artifacts::checkpoints(&state.db, &scope)
                .await?
                .iter()
                .map(|c| c.step.to_string())
                .collect();
            let has = if steps.is_empty() {
                "it has none yet".to_owned()
            } else {
                format!("it has {}", steps.join(", "))
            };
            return Err(AppError::invalid(
                "checkpoint_step",
                format!(
                    "run {run_id} has no checkpoint at step {} ({has})",
                    req.checkpoint_step
                ),
            ));
        }
        other => other?,
    };
    let evaluation = created.ok_or_else(|| {
        AppError::Internal(anyhow::anyhow!("a manual evaluation was not created"))
    })?;
    let detail = serde_json::json!({
        "checkpoint_step": req.checkpoint_step,
        "suite": req.suite,
        "job_id": evaluation.job_id,
    });
    let target = format!("run:{run_id}");
    audit(state, auth, scope.team_id(), "run.evaluate", target, detail).await?;
    Ok(self::evaluation(&evaluation))
}

fn positive(field: &str, v: u32, max: u32) -> ApiResult<i32> {
    if v == 0 || v > max {
        return Err(AppError::invalid(
            field,
            format!("must be 1 to {max}, got {v}"),
        ));
    }
    i32::try_from(v).map_err(|_| AppError::invalid(field, format!("must be 1 to {max}")))
}
