//! Teams, members and projects. Managing members needs the owner role; creating projects the
//! editor role; reading any membership.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiJson, ApiPath, ApiResult, AppError};
use crate::service;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use spade_app::dto::{MemberDto, ProjectRecord, TeamRecord};
use spade_db::teams::{self, MemberChange, MemberChanged};
use spade_db::{Role, TeamScope, audit};

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

fn checked_name(name: &str, max: usize) -> Result<&str, AppError> {
    let n = name.trim();
    if n.is_empty() || n.chars().count() > max {
        return Err(AppError::invalid(
            "name",
            format!("must have 1 to {max} characters"),
        ));
    }
    Ok(n)
}

async fn scope(
    state: &AppState,
    auth: &AuthUser,
    team_id: i64,
    need: Role,
) -> ApiResult<TeamScope> {
    let scope = TeamScope::for_member(&state.db, auth.user.id, team_id).await?;
    if scope.role() < need {
        return Err(match need {
            Role::Owner => AppError::Forbidden {
                code: "insufficient_role",
                message: "only an owner of this team can do this".into(),
            },
            _ => AppError::read_only(),
        });
    }
    Ok(scope)
}

async fn log(
    state: &AppState,
    auth: &AuthUser,
    team_id: i64,
    action: &str,
    target: String,
) -> ApiResult<()> {
    audit::record(
        &state.db,
        &audit::Entry {
            actor_id: Some(auth.user.id),
            team_id: Some(team_id),
            action,
            target,
            detail: serde_json::json!({}),
        },
    )
    .await?;
    Ok(())
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
    let team = teams::create_team(&state.db, auth.user.id, checked_name(&req.name, 100)?).await?;
    log(
        &state,
        &auth,
        team.id,
        "team.create",
        format!("team:{}", team.id),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(service::teams::team(&team))))
}

pub async fn members(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<MemberDto>>> {
    let scope = scope(&state, &auth, team_id, Role::Viewer).await?;
    Ok(Json(service::teams::members(&state.db, &scope).await?))
}

/// Invites (adds) a registered user by email, or changes a member's role. A change that would
/// leave the team without an owner is refused (409 `last_owner`), also when two owners act at
/// the same moment (see `spade_db::teams::change_member`).
pub async fn upsert_member(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiJson(req): ApiJson<MemberRequest>,
) -> ApiResult<Json<MemberDto>> {
    let scope = scope(&state, &auth, team_id, Role::Owner).await?;
    let email = req.email.trim().to_lowercase();
    let change = MemberChange::Upsert {
        email: &email,
        role: req.role,
    };
    let member = match teams::change_member(&state.db, &scope, change).await? {
        MemberChanged::Upserted(m) => m,
        other => return Err(refused(other, "step down")),
    };
    state.events.access_changed();
    log(
        &state,
        &auth,
        team_id,
        "member.upsert",
        format!("user:{}", member.user_id),
    )
    .await?;
    Ok(Json(service::teams::member(member)))
}

pub async fn remove_member(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((team_id, user_id)): ApiPath<(i64, i64)>,
) -> ApiResult<StatusCode> {
    let scope = scope(&state, &auth, team_id, Role::Owner).await?;
    match teams::change_member(&state.db, &scope, MemberChange::Remove { user_id }).await? {
        MemberChanged::Removed => {}
        other => return Err(refused(other, "be removed")),
    }
    // Open event streams of the removed member end now, not when they next reconnect.
    state.events.access_changed();
    log(
        &state,
        &auth,
        team_id,
        "member.remove",
        format!("user:{user_id}"),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The error of a membership change the database refused.
fn refused(outcome: MemberChanged, what: &str) -> AppError {
    match outcome {
        MemberChanged::NotOwner => AppError::Forbidden {
            code: "insufficient_role",
            message: "you are no longer an owner of this team".into(),
        },
        _ => AppError::Conflict {
            code: "last_owner",
            message: format!("the team's last owner cannot {what}; make someone else owner first"),
        },
    }
}

pub async fn projects(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<ProjectRecord>>> {
    let scope = scope(&state, &auth, team_id, Role::Viewer).await?;
    Ok(Json(service::teams::projects(&state.db, &scope).await?))
}

pub async fn create_project(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiJson(req): ApiJson<NameRequest>,
) -> ApiResult<(StatusCode, Json<ProjectRecord>)> {
    let scope = scope(&state, &auth, team_id, Role::Editor).await?;
    let project = teams::create_project(&state.db, &scope, checked_name(&req.name, 100)?).await?;
    log(
        &state,
        &auth,
        team_id,
        "project.create",
        format!("project:{}", project.id),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(service::teams::project(&project))))
}
