//! Checkpoints and benchmark results of a run (read-only; workers report them via ingestion).

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiQuery, ApiResult, AppError};
use crate::service;
use crate::service::member_scope;
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use spade_app::dto::{BenchmarkRecord, CheckpointRecord};
use spade_app::pages::benchmarks::RowsBy;

pub async fn checkpoints(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<CheckpointRecord>>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(
        service::artifacts::checkpoints(&state.ctx, &scope).await?,
    ))
}

pub async fn benchmarks(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<BenchmarkRecord>>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(
        service::artifacts::benchmarks(&state.ctx.db, &scope).await?,
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarksCsvQuery {
    /// Comma-separated run ids, in the table's order.
    pub runs: String,
    /// `newest` (default: a base-model row, then each run's newest evaluated checkpoint) or
    /// `checkpoints` (every evaluated checkpoint of every run).
    pub rows: Option<String>,
}

/// Runs one benchmarks table holds at most (the team's benchmarks page shows 50).
const MAX_TABLE_RUNS: usize = 50;

/// `GET /benchmarks.csv?runs=1,2&rows=newest|checkpoints`: the paper's table of these runs, as
/// the benchmarks page and the compare view show it (suite means and standard errors, then the
/// group averages). A run the caller cannot read is a 404 naming it.
pub async fn benchmarks_csv(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiQuery(q): ApiQuery<BenchmarksCsvQuery>,
) -> ApiResult<Response> {
    let rows_by = match q.rows.as_deref() {
        None | Some("newest") => RowsBy::Newest,
        Some("checkpoints") => RowsBy::Checkpoint,
        Some(other) => {
            return Err(AppError::invalid(
                "rows",
                format!("must be `newest` or `checkpoints`, got {other:?}"),
            ));
        }
    };
    let ids = super::metrics::run_ids(&q.runs, MAX_TABLE_RUNS)?;
    let csv = service::artifacts::benchmarks_csv(&state.ctx, &auth.caller(), &ids, rows_by).await?;
    let joined: Vec<String> = ids.iter().map(i64::to_string).collect();
    Ok(super::metrics::csv_response(
        format!("benchmarks-{}.csv", joined.join("-")),
        csv,
    ))
}
