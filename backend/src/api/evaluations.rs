//! Evaluations of a run's checkpoints: people queue them (`POST /runs/{id}/evaluations`, editors)
//! and read them with their job's state; the evaluation job (`spade eval --report URL`) posts its
//! scores to `POST /evaluations/{job}/results` with the token the scheduler gave it. Automatic
//! evaluations (`eval.every_steps` in the run configuration) are queued by [`auto_for_checkpoint`]
//! when the worker reports a checkpoint.

use crate::AppState;
use crate::auth::{AuthUser, bearer};
use crate::error::{ApiJson, ApiPath, ApiResult, AppError};
use crate::service::artifacts::{self, CreateEvaluation};
use crate::service::{self, member_scope};
use crate::tokens;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Serialize;
use spade::report::Message;
use spade_app::dto::EvaluationRecord;
use spade_db::evaluations::{self, NewEvaluation, NewResult, Trigger};
use spade_db::{DbError, RunScope};

/// Most results one post may carry (reasoning-gym has 58 hard datasets; QA sets are per task).
pub const MAX_RESULTS: usize = 10_000;

/// `GET /runs/{run_id}/evaluations`: newest first, with their jobs' states.
pub async fn list(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<EvaluationRecord>>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(artifacts::evaluations(&state.ctx.db, &scope).await?))
}

/// `POST /runs/{run_id}/evaluations`: queues `spade eval` on one checkpoint and suite.
pub async fn create(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiJson(req): ApiJson<CreateEvaluation>,
) -> ApiResult<(StatusCode, Json<EvaluationRecord>)> {
    let evaluation =
        artifacts::request_evaluation(&state.ctx, &auth.caller(), run_id, &req).await?;
    Ok((StatusCode::CREATED, Json(evaluation)))
}

/// Queues the automatic evaluations due for a checkpoint the worker just reported (the run
/// configuration's `eval` section). Replays of the same report queue nothing new.
pub async fn auto_for_checkpoint(
    state: &AppState,
    scope: &RunScope,
    step: i64,
) -> ApiResult<usize> {
    let cfg = service::runs::stored_config(&state.ctx.db, scope).await?;
    if !cfg.eval_due(u64::try_from(step).unwrap_or(0)) {
        return Ok(0);
    }
    // The path rule once more, as for an evaluation people queue (ingestion checked it too).
    if artifacts::checked_checkpoint(&state.ctx, scope, step, "checkpoint_step")
        .await?
        .is_none()
    {
        return Ok(0);
    }
    let mut queued = 0;
    for suite in &cfg.eval.suites {
        let new = NewEvaluation {
            checkpoint_step: step,
            suite,
            item_limit: i32::try_from(cfg.eval.limit).ok(),
            max_new_tokens: i32::try_from(cfg.eval.max_new_tokens).unwrap_or(1024),
            samples: 1,
            temperature: 0.0,
            trigger: Trigger::Auto,
            requested_by: None,
        };
        if evaluations::create(&state.ctx.db, scope, &new)
            .await?
            .is_some()
        {
            queued += 1;
        }
    }
    Ok(queued)
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
    let job = evaluations::authorize(&state.ctx.db, job_id, |stored| {
        tokens::token_matches(&token, stored)
    })
    .await
    .map_err(|e| match e {
        DbError::NotFound(_) => refused(),
        other => other.into(),
    })?;
    // The token dies with its job: a finished evaluation takes nothing more from it.
    let ended = spade_db::jobs::get(&state.ctx.db, job_id)
        .await
        .map_err(|e| AppError::Internal(e.into()))?
        .is_none_or(|j| j.state.is_final());
    if ended {
        return Err(refused());
    }
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
            stderr,
            samples,
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
        if stderr.is_some_and(|s| !(s.is_finite() && s >= 0.0)) {
            return Err(AppError::invalid(
                &format!("messages[{i}].stderr"),
                "must be a finite number >= 0",
            ));
        }
        let samples = i32::try_from(*samples)
            .ok()
            .filter(|&k| k >= 1)
            .ok_or_else(|| {
                AppError::invalid(&format!("messages[{i}].samples"), "must be 1 to 2^31 - 1")
            })?;
        rows.push(NewResult {
            task: task.clone(),
            score: *score,
            n,
            stderr: *stderr,
            samples,
        });
    }
    let evaluation_id = evaluations::store_results(
        &state.ctx.db,
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
