//! Accounts, teams, their members and projects, as the API returns them and the teams page shows them
//! (the page's `TeamDto` / `ProjectDto` are the records less what it does not show).

use crate::error::ApiResult;
use spade_app::dto;
use spade_db::teams::{self, Member, Project, Team};
use spade_db::{Pool, Role, TeamScope};

/// An account as the API returns it.
pub fn user(u: &spade_db::users::User) -> dto::UserRecord {
    dto::UserRecord {
        id: u.id,
        email: u.email.clone(),
        display_name: u.display_name.clone(),
        is_admin: u.is_admin,
        created_at: time(&u.created_at),
    }
}

/// A role as the API and the pages name it.
pub fn role_name(r: Role) -> &'static str {
    match r {
        Role::Viewer => "viewer",
        Role::Editor => "editor",
        Role::Owner => "owner",
    }
}

fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    // What chrono's own serializer writes, so the API's times read as before it served DTOs.
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

pub fn team(t: &Team) -> dto::TeamRecord {
    dto::TeamRecord {
        id: t.id,
        name: t.name.clone(),
        role: role_name(t.role).to_owned(),
        created_at: time(&t.created_at),
    }
}

pub fn project(p: &Project) -> dto::ProjectRecord {
    dto::ProjectRecord {
        id: p.id,
        team_id: p.team_id,
        name: p.name.clone(),
        created_at: time(&p.created_at),
    }
}

pub fn member(m: Member) -> dto::MemberDto {
    dto::MemberDto {
        user_id: m.user_id,
        email: m.email,
        display_name: m.display_name,
        role: role_name(m.role).to_owned(),
    }
}

/// The user's teams, with their role in each.
pub async fn teams_of(db: &Pool, user_id: i64) -> ApiResult<Vec<dto::TeamRecord>> {
    Ok(teams::teams_of(db, user_id)
        .await?
        .iter()
        .map(team)
        .collect())
}

pub async fn members(db: &Pool, scope: &TeamScope) -> ApiResult<Vec<dto::MemberDto>> {
    Ok(teams::members(db, scope)
        .await?
        .into_iter()
        .map(member)
        .collect())
}

pub async fn projects(db: &Pool, scope: &TeamScope) -> ApiResult<Vec<dto::ProjectRecord>> {
    Ok(teams::projects(db, scope)
        .await?
        .iter()
        .map(project)
        .collect())
}
