//! Teams, their members and projects, as the API returns them and the teams page shows them
//! (the page's `TeamDto` / `ProjectDto` are the records less what it does not show), and the
//! changes: create a team or a project, re-role or remove a member. Joining a team is an
//! invitation the invited account accepts ([`invitations`]); nothing here adds a member.

pub mod invitations;

use super::audit;
use crate::service::{Caller, Ctx};
use crate::service::{ServiceError, ServiceResult};
use spade_app::dto;
use spade_db::teams::{self, Member, MemberChange, MemberChanged, Project, Team};
use spade_db::{Pool, Role, TeamScope};

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

/// The caller's teams, with their role in each (an API token: its own team, at most its role).
pub async fn teams_of(db: &Pool, caller: &Caller) -> ServiceResult<Vec<dto::TeamRecord>> {
    Ok(limited_teams(db, caller).await?.iter().map(team).collect())
}

/// The caller's teams as the database has them, each with the role the caller holds in it.
async fn limited_teams(db: &Pool, caller: &Caller) -> ServiceResult<Vec<Team>> {
    let mut all = teams::teams_of(db, caller.user_id).await?;
    if let Some(limit) = caller.limit {
        all.retain(|t| t.id == limit.team_id);
        for t in &mut all {
            t.role = t.role.min(limit.role);
        }
    }
    Ok(all)
}

pub async fn members(db: &Pool, scope: &TeamScope) -> ServiceResult<Vec<dto::MemberDto>> {
    Ok(teams::members(db, scope)
        .await?
        .into_iter()
        .map(member)
        .collect())
}

pub async fn projects(db: &Pool, scope: &TeamScope) -> ServiceResult<Vec<dto::ProjectRecord>> {
    Ok(teams::projects(db, scope)
        .await?
        .iter()
        .map(project)
        .collect())
}

/// The caller's access to team `team_id`, which must be at least `need` (404 outside the team;
/// 403 below the role).
pub async fn team_scope(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    need: Role,
) -> ServiceResult<TeamScope> {
    let scope = caller.team(TeamScope::for_member(&ctx.db, caller.user_id, team_id).await?)?;
    if scope.role() < need {
        return Err(match need {
            Role::Owner => ServiceError::Forbidden {
                code: "insufficient_role",
                message: "only an owner of this team can do this".into(),
            },
            _ => ServiceError::read_only(),
        });
    }
    Ok(scope)
}

/// The caller's scope in team `team_id`, any role (404 for teams the caller is not in).
pub async fn member_team(ctx: &Ctx, caller: &Caller, team_id: i64) -> ServiceResult<TeamScope> {
    team_scope(ctx, caller, team_id, Role::Viewer).await
}

/// Projects of the teams where the caller may create runs (editor or owner): the launch form's
/// choices.
pub async fn launchable_projects(
    ctx: &Ctx,
    caller: &Caller,
) -> ServiceResult<Vec<dto::ProjectOption>> {
    let mut out = Vec::new();
    for t in limited_teams(&ctx.db, caller).await? {
        if !t.role.can_edit() {
            continue;
        }
        let scope = team_scope(ctx, caller, t.id, Role::Editor).await?;
        for p in teams::projects(&ctx.db, &scope).await? {
            out.push(dto::ProjectOption {
                id: p.id,
                team: t.name.clone(),
                name: p.name,
            });
        }
    }
    Ok(out)
}

/// Longest team or project name.
const MAX_NAME_CHARS: usize = 100;

fn checked_name(name: &str) -> Result<&str, ServiceError> {
    let n = name.trim();
    if n.is_empty() || n.chars().count() > MAX_NAME_CHARS {
        return Err(ServiceError::invalid(
            "name",
            format!("must have 1 to {MAX_NAME_CHARS} characters"),
        ));
    }
    Ok(n)
}

/// Creates a team; the caller becomes its owner.
pub async fn create_team(ctx: &Ctx, caller: &Caller, name: &str) -> ServiceResult<dto::TeamRecord> {
    caller.in_person("create a team")?;
    let created = teams::create_team(&ctx.db, caller.user_id, checked_name(name)?).await?;
    let target = format!("team:{}", created.id);
    logged(ctx, caller, created.id, "team.create", target).await?;
    Ok(team(&created))
}

/// Changes the role of the member of team `team_id` with this email (owners). Only members are
/// found (404 `member` otherwise, whether or not the email has an account); adding someone is
/// an invitation. A change that would leave the team without an owner is refused (409
/// `last_owner`), also when two owners act at the same moment (see
/// `spade_db::teams::change_member`).
pub async fn set_member_role(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    email: &str,
    role: Role,
) -> ServiceResult<dto::MemberDto> {
    let scope = team_scope(ctx, caller, team_id, Role::Owner).await?;
    let email = email.trim().to_lowercase();
    let change = MemberChange::SetRole {
        email: &email,
        role,
    };
    let changed = match teams::change_member(&ctx.db, &scope, change).await? {
        MemberChanged::RoleSet(m) => m,
        other => return Err(refused(other, "step down")),
    };
    ctx.events.access_changed();
    let target = format!("user:{}", changed.user_id);
    logged(ctx, caller, team_id, "member.role", target).await?;
    Ok(member(changed))
}

/// Removes member `user_id` from team `team_id` (owners; never the last owner).
pub async fn remove_member(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    user_id: i64,
) -> ServiceResult<()> {
    let scope = team_scope(ctx, caller, team_id, Role::Owner).await?;
    match teams::change_member(&ctx.db, &scope, MemberChange::Remove { user_id }).await? {
        MemberChanged::Removed => {}
        other => return Err(refused(other, "be removed")),
    }
    // Open event streams of the removed member end now, not when they next reconnect.
    ctx.events.access_changed();
    logged(
        ctx,
        caller,
        team_id,
        "member.remove",
        format!("user:{user_id}"),
    )
    .await
}

/// The error of a membership change the database refused.
fn refused(outcome: MemberChanged, what: &str) -> ServiceError {
    match outcome {
        MemberChanged::NotOwner => ServiceError::Forbidden {
            code: "insufficient_role",
            message: "you are no longer an owner of this team".into(),
        },
        _ => ServiceError::Conflict {
            code: "last_owner",
            message: format!("the team's last owner cannot {what}; make someone else owner first"),
        },
    }
}

/// Creates a project in team `team_id` (editors).
pub async fn create_project(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    name: &str,
) -> ServiceResult<dto::ProjectRecord> {
    let scope = team_scope(ctx, caller, team_id, Role::Editor).await?;
    let created = teams::create_project(&ctx.db, &scope, checked_name(name)?).await?;
    let target = format!("project:{}", created.id);
    logged(ctx, caller, team_id, "project.create", target).await?;
    Ok(project(&created))
}

async fn logged(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    action: &str,
    target: String,
) -> ServiceResult<()> {
    audit(ctx, caller, team_id, action, target, serde_json::json!({})).await
}
