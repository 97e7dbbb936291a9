//! Checkpoints and benchmark results of a run (read-only; workers report them via ingestion).

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiResult};
use crate::service;
use crate::service::member_scope;
use axum::Json;
use axum::extract::State;
use spade_app::dto::{BenchmarkRecord, CheckpointRecord};

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
