//! Runs: create from a validated configuration, list and search, get, rename and tag, cancel,
//! resume, delete, and worker tokens, over [`service::runs`], which holds the checks.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiJson, ApiPath, ApiQuery, ApiResult};
use crate::service::{self, limit, member_scope, runs::CreateRun, runs::UpdateRun};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use spade_app::dto::{Page, RunRecord};

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub project_id: Option<i64>,
    /// A run status (`queued`, `running`, ...).
    pub status: Option<String>,
    /// Runs whose name contains this, ignoring case.
    pub q: Option<String>,
    /// `newest` (default), `oldest` or `name`.
    pub sort: Option<String>,
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page in the same order.
    pub cursor: Option<String>,
    /// Runs with this tag.
    pub tag: Option<String>,
    /// `key=value`: runs whose configuration has this value at the dotted key.
    pub config: Option<String>,
    /// Runs that logged this metric; with `metric_min` / `metric_max`, whose latest value lies
    /// in that range.
    pub metric: Option<String>,
    pub metric_min: Option<f64>,
    pub metric_max: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct TokenReply {
    /// Pass to `spade worker --token`; shown once, only its hash is stored.
    pub token: String,
}

pub async fn create(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(project_id): ApiPath<i64>,
    ApiJson(req): ApiJson<CreateRun>,
) -> ApiResult<(StatusCode, Json<RunRecord>)> {
    let run = service::runs::create(&state.ctx, &auth.caller(), project_id, &req).await?;
    Ok((StatusCode::CREATED, Json(run)))
}

pub async fn list(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<Page<RunRecord>>> {
    let scope = service::teams::member_team(&state.ctx, &auth.caller(), team_id).await?;
    let args = service::runs::ListArgs {
        project_id: q.project_id,
        status: q.status.as_deref(),
        q: q.q.as_deref(),
        sort: q.sort.as_deref(),
        cursor: q.cursor.as_deref(),
        limit: limit(q.limit)?,
        tag: q.tag.as_deref(),
        config: q.config.as_deref(),
        metric: q.metric.as_deref(),
        metric_min: q.metric_min,
        metric_max: q.metric_max,
    };
    Ok(Json(
        service::runs::records(&state.ctx.db, &scope, args).await?,
    ))
}

pub async fn get(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<RunRecord>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(
        service::runs::get_record(&state.ctx.db, &scope).await?,
    ))
}

pub async fn cancel(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<RunRecord>> {
    Ok(Json(
        service::runs::cancel(&state.ctx, &auth.caller(), run_id).await?,
    ))
}

pub async fn resume(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<RunRecord>> {
    Ok(Json(
        service::runs::resume(&state.ctx, &auth.caller(), run_id).await?,
    ))
}

/// Renames the run or sets its tags or notes (editors).
pub async fn update(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiJson(req): ApiJson<UpdateRun>,
) -> ApiResult<Json<RunRecord>> {
    Ok(Json(
        service::runs::update(&state.ctx, &auth.caller(), run_id, &req).await?,
    ))
}

pub async fn delete(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    service::runs::delete(&state.ctx, &auth.caller(), run_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Issues a new worker token (the previous one stops working), for starting a worker by hand.
pub async fn issue_token(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<TokenReply>> {
    let token = service::runs::issue_token(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(TokenReply { token }))
}
