//! Evaluations of a run's checkpoints: people queue them (`POST /runs/{id}/evaluations`, editors)
//! and read them with their job's state; the evaluation job (`spade eval --report URL`) posts its
//! scores to `POST /evaluations/{job}/results` with the token the scheduler gave it. Automatic
//! evaluations (`eval.every_steps` in the run configuration) are queued by [`auto_for_checkpoint`]
//! when the worker reports a checkpoint.

use super::{AppState, editor_scope, member_scope};
use crate::auth::{AuthUser, bearer, tokens};
use crate::error::{ApiJson, ApiPath, ApiResult, AppError};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use spade::config::RunConfig;
use spade::report::Message;
use spade_app::dto::EvaluationRecord;
use spade_db::evaluations::{self, NewEvaluation, NewResult, Trigger};
use spade_db::{DbError, RunScope, artifacts, audit};

/// Most results one post may carry (reasoning-gym has 58 hard datasets; QA sets are per task).
pub const MAX_RESULTS: usize = 10_000;

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

/// `GET /runs/{run_id}/evaluations`: newest first, with their jobs' states.
pub async fn list(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<EvaluationRecord>>> {
    let scope = member_scope(&state, &auth, run_id).await?;
    Ok(Json(
        crate::service::artifacts::evaluations(&state.db, &scope).await?,
    ))
}

/// `POST /runs/{run_id}/evaluations`: queues `spade eval` on one checkpoint and suite.
pub async fn create(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiJson(req): ApiJson<CreateEvaluation>,
) -> ApiResult<(StatusCode, Json<EvaluationRecord>)> {
    let scope = editor_scope(&state, &auth, run_id).await?;
    spade::suites::check(&req.suite).map_err(|e| AppError::invalid("suite", e))?;
    let suite = state.paths.suite("suite", &req.suite)?;
    if req.checkpoint_step < 0 {
        return Err(AppError::invalid("checkpoint_step", "must be 0 or more"));
    }
    let cfg = run_config(&state, &scope).await?;
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
    audit::record(
        &state.db,
        &audit::Entry {
            actor_id: Some(auth.user.id),
            team_id: Some(scope.team_id()),
            action: "run.evaluate",
            target: format!("run:{run_id}"),
            detail: serde_json::json!({
                "checkpoint_step": req.checkpoint_step,
                "suite": req.suite,
                "job_id": evaluation.job_id,
            }),
        },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(crate::service::artifacts::evaluation(&evaluation)),
    ))
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

async fn run_config(state: &AppState, scope: &RunScope) -> ApiResult<RunConfig> {
    let run = spade_db::runs::get(&state.db, scope).await?;
    serde_json::from_value(run.config).map_err(|e| {
        AppError::Internal(
            anyhow::Error::new(e).context(format!("stored config of run {}", scope.run_id())),
        )
    })
}

/// Queues the automatic evaluations due for a checkpoint the worker just reported (the run
/// configuration's `eval` section). Replays of the same report queue nothing new.
pub async fn auto_for_checkpoint(
    state: &AppState,
    scope: &RunScope,
    step: i64,
) -> ApiResult<usize> {
    let cfg = run_config(state, scope).await?;
    if !cfg.eval_due(u64::try_from(step).unwrap_or(0)) {
        return Ok(0);
    }
    let mut queued = 0;
    for suite in &cfg.eval.suites {
        let new = NewEvaluation {
            checkpoint_step: step,
            suite,
            item_limit: i32::try_from(cfg.eval.limit).ok(),
            max_new_tokens: i32::try_from(cfg.eval.max_new_tokens).unwrap_or(1024),
            trigger: Trigger::Auto,
            requested_by: None,
        };
        if evaluations::create(&state.db, scope, &new).await?.is_some() {
            queued += 1;
        }
    }
    Ok(queued)
}

/// Issues the token of evaluation job `job_id` for its launch; only its hash is stored.
pub async fn issue_for_launch(db: &spade_db::Pool, job_id: i64) -> Result<String, DbError> {
    let token = tokens::random_token("spe_");
    evaluations::set_token_hash_for_launch(db, job_id, &tokens::hash_token(&token)).await?;
    Ok(token)
}

/// Body of `POST /evaluations/{job_id}/results`: the type `spade eval` sends.
pub use spade::report::EvaluationResults as ResultsRequest;

#[derive(Debug, Serialize)]
pub struct ResultsReply {
    pub evaluation_id: i64,
    pub stored: usize,
}

/// `POST /evaluations/{job_id}/results` (the job's bearer token): replaces the evaluation's
/// results. Every message must be a `benchmark_result` of the evaluation's suite and checkpoint.
pub async fn results(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(job_id): ApiPath<i64>,
    ApiJson(req): ApiJson<ResultsRequest>,
) -> ApiResult<Json<ResultsReply>> {
    let refused = || {
        AppError::unauthenticated(
            "invalid_job_token",
            "a valid evaluation job token is required",
        )
    };
    let token = bearer(&headers)?.ok_or_else(refused)?.to_owned();
    // The token first: a caller without it learns nothing about the job, not even its suite.
    let job = evaluations::authorize(&state.db, job_id, |stored| {
        tokens::token_matches(&token, stored)
    })
    .await
    .map_err(|e| match e {
        DbError::NotFound(_) => refused(),
        other => other.into(),
    })?;
    if req.messages.len() > MAX_RESULTS {
        return Err(AppError::invalid(
            "messages",
            format!(
                "at most {MAX_RESULTS} per request, got {}",
                req.messages.len()
            ),
        ));
    }
    let mut rows = Vec::with_capacity(req.messages.len());
    for (i, m) in req.messages.iter().enumerate() {
        let Message::BenchmarkResult {
            checkpoint_step,
            suite,
            task,
            score,
            n,
        } = m
        else {
            return Err(AppError::invalid(
                &format!("messages[{i}].kind"),
                "must be benchmark_result",
            ));
        };
        if suite != &job.suite {
            return Err(AppError::invalid(
                &format!("messages[{i}].suite"),
                format!("is {suite:?} but this evaluation runs {:?}", job.suite),
            ));
        }
        if checkpoint_step.is_some_and(|s| i64::try_from(s).ok() != Some(job.checkpoint_step)) {
            return Err(AppError::invalid(
                &format!("messages[{i}].checkpoint_step"),
                format!(
                    "must be {} (this evaluation's checkpoint)",
                    job.checkpoint_step
                ),
            ));
        }
        if task.is_empty() || task.len() > 500 {
            return Err(AppError::invalid(
                &format!("messages[{i}].task"),
                "must be 1 to 500 characters",
            ));
        }
        if !score.is_finite() {
            return Err(AppError::invalid(
                &format!("messages[{i}].score"),
                "must be a finite number",
            ));
        }
        let n = i32::try_from(*n)
            .map_err(|_| AppError::invalid(&format!("messages[{i}].n"), "must be below 2^31"))?;
        rows.push(NewResult {
            task: task.clone(),
            score: *score,
            n,
        });
    }
    let evaluation_id = evaluations::store_results(
        &state.db,
        job_id,
        |stored| tokens::token_matches(&token, stored),
        &rows,
    )
    .await
    .map_err(|e| match e {
        DbError::NotFound(_) => refused(),
        other => other.into(),
    })?;
    Ok(Json(ResultsReply {
        evaluation_id,
        stored: rows.len(),
    }))
}
