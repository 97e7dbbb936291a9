//! A run's job output (the worker's stdout and stderr), read through the executor that ran it:
//! the local log file or Ray's log endpoint. This is the raw process output, next to the
//! structured `Log` lines a worker reports through ingestion.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiQuery, ApiResult, AppError};
use crate::service::member_scope;
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};

/// At most this much of the end of the output is returned.
const MAX_BYTES: usize = 1 << 20;

#[derive(Debug, Deserialize)]
pub struct LogQuery {
    /// How many bytes of the end of the output (default 64 KiB, at most 1 MiB).
    pub bytes: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct JobLogs {
    pub run_id: i64,
    /// `null` when no job of the run has started yet.
    pub logs: Option<String>,
}

/// `log.txt`'s search.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSearch {
    /// Only the lines that contain this text, ignoring case.
    pub grep: Option<String>,
}

/// Characters of a log search.
const MAX_GREP_CHARS: usize = 200;

/// `GET /api/v1/runs/{run_id}/log.txt`: the run's log as a file (the last MiB of its job
/// output, or the lines its worker reported), for the run page's "Download log"; with `grep`,
/// only the lines that contain it (ignoring case).
pub async fn log_file(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<LogSearch>,
) -> ApiResult<axum::response::Response> {
    let grep = q.grep.filter(|g| !g.trim().is_empty());
    if grep
        .as_deref()
        .is_some_and(|g| g.chars().count() > MAX_GREP_CHARS)
    {
        return Err(AppError::invalid(
            "grep",
            format!("a search of at most {MAX_GREP_CHARS} characters"),
        ));
    }
    let mut text =
        crate::service::pages::log_file(&state.ctx, &auth.caller(), run_id, MAX_BYTES).await?;
    if let Some(g) = grep {
        let g = g.trim().to_lowercase();
        text = text
            .lines()
            .filter(|l| l.to_lowercase().contains(&g))
            .map(|l| format!("{l}\n"))
            .collect();
    }
    Ok(super::attachment(
        "text/plain; charset=utf-8",
        &format!("run-{run_id}.log"),
        text,
    ))
}

pub async fn job_logs(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> ApiResult<Json<JobLogs>> {
    member_scope(&state.ctx, &auth.caller(), run_id).await?;
    let bytes = q.bytes.unwrap_or(64 * 1024);
    if bytes == 0 || bytes > MAX_BYTES {
        return Err(AppError::invalid("bytes", format!("1..={MAX_BYTES}")));
    }
    let Some(settings) = state.ctx.scheduler.as_deref() else {
        return Ok(Json(JobLogs { run_id, logs: None }));
    };
    let logs = crate::scheduling::run_logs(&state.ctx.db, settings, run_id, bytes)
        .await
        .map_err(|e| AppError::Internal(anyhow::Error::new(e)))?;
    Ok(Json(JobLogs { run_id, logs }))
}
