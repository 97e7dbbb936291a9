//! Teams, members, invitations, API tokens and projects, over [`service::teams`] and
//! [`service::api_tokens`]: managing members and invitations needs the owner role; creating
//! projects and API tokens the editor role; reading any membership; answering an invitation
//! being the account it was sent to, with its code.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiJson, ApiPath, ApiResult};
use crate::service::{self, teams::team_scope};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use service::api_tokens::{self, CreateTokenRequest};
use service::teams::invitations;
use spade_app::dto::{
    ApiTokenRecord, CreatedApiToken, IncomingInvitation, InvitationRecord, MemberDto,
    ProjectRecord, TeamRecord,
};
use spade_db::Role;
use spade_db::teams::invitations::Answer;

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
        service::teams::teams_of(&state.ctx.db, &auth.caller()).await?,
    ))
}

pub async fn create(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiJson(req): ApiJson<NameRequest>,
) -> ApiResult<(StatusCode, Json<TeamRecord>)> {
    let team = service::teams::create_team(&state.ctx, &auth.caller(), &req.name).await?;
    Ok((StatusCode::CREATED, Json(team)))
}

pub async fn members(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<MemberDto>>> {
    let scope = team_scope(&state.ctx, &auth.caller(), team_id, Role::Viewer).await?;
    Ok(Json(service::teams::members(&state.ctx.db, &scope).await?))
}

pub async fn set_member_role(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiJson(req): ApiJson<MemberRequest>,
) -> ApiResult<Json<MemberDto>> {
    let m =
        service::teams::set_member_role(&state.ctx, &auth.caller(), team_id, &req.email, req.role)
            .await?;
    Ok(Json(m))
}

pub async fn invitations(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<InvitationRecord>>> {
    Ok(Json(
        invitations::of_team(&state.ctx, &auth.caller(), team_id).await?,
    ))
}

/// `201` with the invitation, for every well-formed email: the answer does not tell whether
/// the email has an account.
pub async fn invite(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiJson(req): ApiJson<MemberRequest>,
) -> ApiResult<(StatusCode, Json<InvitationRecord>)> {
    let inv =
        invitations::invite(&state.ctx, &auth.caller(), team_id, &req.email, req.role).await?;
    Ok((StatusCode::CREATED, Json(inv)))
}

pub async fn revoke_invitation(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((team_id, id)): ApiPath<(i64, i64)>,
) -> ApiResult<StatusCode> {
    invitations::revoke(&state.ctx, &auth.caller(), team_id, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn my_invitations(
    State(state): State<AppState>,
    auth: AuthUser,
) -> ApiResult<Json<Vec<IncomingInvitation>>> {
    Ok(Json(invitations::mine(&state.ctx, &auth.caller()).await?))
}

/// The body of an answer to an invitation: the code from its link.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// The invitation's code, told once to the owner who invited (`code` of the invite answer).
    pub code: String,
}

/// The team joined: `{"team_id": N}`.
pub async fn accept_invitation(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(id): ApiPath<i64>,
    ApiJson(req): ApiJson<AnswerRequest>,
) -> ApiResult<Json<serde_json::Value>> {
    let team_id =
        invitations::answer(&state.ctx, &auth.caller(), id, Answer::Accept, &req.code).await?;
    Ok(Json(serde_json::json!({ "team_id": team_id })))
}

pub async fn decline_invitation(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(id): ApiPath<i64>,
    ApiJson(req): ApiJson<AnswerRequest>,
) -> ApiResult<StatusCode> {
    invitations::answer(&state.ctx, &auth.caller(), id, Answer::Decline, &req.code).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn remove_member(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((team_id, user_id)): ApiPath<(i64, i64)>,
) -> ApiResult<StatusCode> {
    service::teams::remove_member(&state.ctx, &auth.caller(), team_id, user_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn projects(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<ProjectRecord>>> {
    let scope = team_scope(&state.ctx, &auth.caller(), team_id, Role::Viewer).await?;
    Ok(Json(service::teams::projects(&state.ctx.db, &scope).await?))
}

pub async fn create_project(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiJson(req): ApiJson<NameRequest>,
) -> ApiResult<(StatusCode, Json<ProjectRecord>)> {
    let p = service::teams::create_project(&state.ctx, &auth.caller(), team_id, &req.name).await?;
    Ok((StatusCode::CREATED, Json(p)))
}

pub async fn tokens(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<ApiTokenRecord>>> {
    Ok(Json(
        api_tokens::list(&state.ctx, &auth.caller(), team_id).await?,
    ))
}

/// `201` with the token, which is never shown again.
pub async fn create_token(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiJson(req): ApiJson<CreateTokenRequest>,
) -> ApiResult<(StatusCode, Json<CreatedApiToken>)> {
    let t = api_tokens::create(&state.ctx, &auth.caller(), team_id, &req).await?;
    Ok((StatusCode::CREATED, Json(t)))
}

pub async fn revoke_token(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((team_id, id)): ApiPath<(i64, i64)>,
) -> ApiResult<Json<ApiTokenRecord>> {
    Ok(Json(
        api_tokens::revoke(&state.ctx, &auth.caller(), team_id, id).await?,
    ))
}
