//! Teams, members and projects, over [`service::teams`]: managing members needs the owner
//! role; creating projects the editor role; reading any membership.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiJson, ApiPath, ApiResult};
use crate::service::{self, teams::team_scope};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use spade_app::dto::{MemberDto, ProjectRecord, TeamRecord};
use spade_db::Role;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameRequest {
    pub name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberRequest {
    pub email: String,
    pub role: Role,
}

pub async fn list(
    State(state): State<AppState>,
    auth: AuthUser,
) -> ApiResult<Json<Vec<TeamRecord>>> {
    Ok(Json(
        service::teams::teams_of(&state.db, auth.user.id).await?,
    ))
}

pub async fn create(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiJson(req): ApiJson<NameRequest>,
) -> ApiResult<(StatusCode, Json<TeamRecord>)> {
    let team = service::teams::create_team(&state, &auth, &req.name).await?;
    Ok((StatusCode::CREATED, Json(team)))
}

pub async fn members(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<MemberDto>>> {
    let scope = team_scope(&state, &auth, team_id, Role::Viewer).await?;
    Ok(Json(service::teams::members(&state.db, &scope).await?))
}

pub async fn upsert_member(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiJson(req): ApiJson<MemberRequest>,
) -> ApiResult<Json<MemberDto>> {
    let m = service::teams::upsert_member(&state, &auth, team_id, &req.email, req.role).await?;
    Ok(Json(m))
}

pub async fn remove_member(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((team_id, user_id)): ApiPath<(i64, i64)>,
) -> ApiResult<StatusCode> {
    service::teams::remove_member(&state, &auth, team_id, user_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn projects(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<ProjectRecord>>> {
    let scope = team_scope(&state, &auth, team_id, Role::Viewer).await?;
    Ok(Json(service::teams::projects(&state.db, &scope).await?))
}

pub async fn create_project(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiJson(req): ApiJson<NameRequest>,
) -> ApiResult<(StatusCode, Json<ProjectRecord>)> {
    let p = service::teams::create_project(&state, &auth, team_id, &req.name).await?;
    Ok((StatusCode::CREATED, Json(p)))
}
