//! Read-only share links: members with the editor role create and revoke them
//! ([`service_shares::create_share`] holds the checks); anyone holding a live link reads the run, its
//! environments and its metrics without logging in. A revoked or unknown link is a 404.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiJson, ApiPath, ApiQuery, ApiResult};
use crate::service::environments::{self, EnvQuery};
use crate::service::member_scope;
use crate::service::metrics::SeriesQuery;
use crate::service::shares::{self as service_shares, CreateShareRequest};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use spade_app::dto::{CreatedShare, EnvRecord, Page, RunRecord, SeriesRecord, ShareRecord};
use spade_db::RunScope;

pub async fn create(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiJson(req): ApiJson<CreateShareRequest>,
) -> ApiResult<(StatusCode, Json<CreatedShare>)> {
    let created = service_shares::create_share(&state.ctx, &auth.caller(), run_id, &req).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

pub async fn list(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<ShareRecord>>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(service_shares::list(&state.ctx.db, &scope).await?))
}

pub async fn revoke(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((run_id, share_id)): ApiPath<(i64, i64)>,
) -> ApiResult<Json<ShareRecord>> {
    Ok(Json(
        service_shares::revoke_share(&state.ctx, &auth.caller(), run_id, share_id).await?,
    ))
}

async fn shared_scope(state: &AppState, token: &str) -> ApiResult<RunScope> {
    Ok(service_shares::resolve(&state.ctx.db, token).await?)
}

pub async fn shared_run(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
) -> ApiResult<Json<RunRecord>> {
    let scope = shared_scope(&state, &token).await?;
    Ok(Json(
        crate::service::runs::get_record(&state.ctx.db, &scope).await?,
    ))
}

pub async fn shared_environments(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
    ApiQuery(q): ApiQuery<EnvQuery>,
) -> ApiResult<Json<Page<EnvRecord>>> {
    let scope = shared_scope(&state, &token).await?;
    Ok(Json(environments::records(&state.ctx.db, &scope, q).await?))
}

pub async fn shared_series(
    State(state): State<AppState>,
    ApiPath((token, name)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<SeriesQuery>,
) -> ApiResult<Json<SeriesRecord>> {
    let scope = shared_scope(&state, &token).await?;
    Ok(Json(
        crate::service::metrics::series(&state.ctx.db, &scope, name, q).await?,
    ))
}
