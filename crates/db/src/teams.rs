//! Teams, their members and their projects. Creating a team makes its creator the owner; all
//! other functions take a [`TeamScope`], i.e. a checked membership. New members come only
//! through an invitation the invited account accepts ([`invitations`]).

pub mod invitations;

use crate::{DbError, Role, TeamScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// A team with the caller's role in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Team {
    pub id: i64,
    pub name: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

/// A member of a team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    pub user_id: i64,
    pub email: String,
    pub display_name: String,
    pub role: Role,
}

/// A project (a folder of runs inside a team).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Project {
    pub id: i64,
    pub team_id: i64,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// Creates a team owned by `user_id`. Names are unique per creator, not globally, so the
/// `Conflict` a taken name gets can only be about one of the caller's own teams (a global rule
/// told anyone every other team's name).
pub async fn create_team(pool: &PgPool, user_id: i64, name: &str) -> Result<Team, DbError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query!(
        "INSERT INTO teams (name, created_by) VALUES ($1, $2) RETURNING id, name, created_at",
        name,
        user_id
    )
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| DbError::unique(e, "a team of yours with this name"))?;
    sqlx::query!(
        "INSERT INTO memberships (team_id, user_id, role) VALUES ($1, $2, 'owner')",
        row.id,
        user_id
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Team {
        id: row.id,
        name: row.name,
        role: Role::Owner,
        created_at: row.created_at,
    })
}

/// The teams `user_id` belongs to.
pub async fn teams_of(pool: &PgPool, user_id: i64) -> Result<Vec<Team>, DbError> {
    let rows = sqlx::query_as!(
        Team,
        r#"SELECT t.id, t.name, m.role AS "role: Role", t.created_at
           FROM teams t JOIN memberships m ON m.team_id = t.id
           WHERE m.user_id = $1 ORDER BY t.name"#,
        user_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Members of the scoped team.
pub async fn members(pool: &PgPool, scope: &TeamScope) -> Result<Vec<Member>, DbError> {
    let rows = sqlx::query_as!(
        Member,
        r#"SELECT u.id AS user_id, u.email, u.display_name, m.role AS "role: Role"
           FROM memberships m JOIN users u ON u.id = m.user_id
           WHERE m.team_id = $1 ORDER BY u.email"#,
        scope.team_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// A change of one membership. Both kinds go through [`change_member`], which keeps the team's
/// last owner. Neither adds anyone: joining is [`invitations::accept`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange<'a> {
    /// Changes the role of the member with this email (members only: the email is matched
    /// within the team, so the answer says nothing about accounts outside it).
    SetRole { email: &'a str, role: Role },
    /// Removes this user from the team.
    Remove { user_id: i64 },
}

/// What [`change_member`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChanged {
    RoleSet(Member),
    Removed,
    /// Refused: the change would leave the team without an owner. Nothing changed.
    LastOwner,
    /// Refused: the caller is no longer an owner (a concurrent change demoted or removed them
    /// after their request was authorised). Nothing changed.
    NotOwner,
}

/// Whether the scope's user is an owner of its team now, read in the caller's transaction: a
/// concurrent change may have demoted them after their request was authorised.
pub(crate) async fn still_owner(
    conn: &mut sqlx::PgConnection,
    scope: &TeamScope,
) -> Result<bool, DbError> {
    let role = sqlx::query_scalar!(
        r#"SELECT role AS "role: Role" FROM memberships WHERE team_id = $1 AND user_id = $2"#,
        scope.team_id,
        scope.user_id
    )
    .fetch_optional(conn)
    .await?;
    Ok(role == Some(Role::Owner))
}

/// Applies one membership change for an owner, atomically with the rule that a team always has
/// an owner. The team row is locked first (`FOR UPDATE`), so concurrent changes of one team's
/// memberships run one after another; inside that lock the caller's ownership is checked again,
/// the change is made and the owners counted, and a change that leaves none is rolled back. (Two
/// owners removing each other at the same moment: the second sees it is no longer an owner.)
/// Errors: `NotFound("member")` for an email or user that is not a member of the team.
pub async fn change_member(
    pool: &PgPool,
    scope: &TeamScope,
    change: MemberChange<'_>,
) -> Result<MemberChanged, DbError> {
    let mut tx = pool.begin().await?;
    sqlx::query_scalar!(
        "SELECT id FROM teams WHERE id = $1 FOR UPDATE",
        scope.team_id
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(DbError::NotFound("team"))?;
    if !still_owner(&mut tx, scope).await? {
        return Ok(MemberChanged::NotOwner);
    }
    let done = match change {
        MemberChange::SetRole { email, role } => {
            let row = sqlx::query_as!(
                Member,
                r#"UPDATE memberships m SET role = $3
                   FROM users u
                   WHERE m.team_id = $1 AND m.user_id = u.id AND lower(u.email) = lower($2)
                   RETURNING u.id AS user_id, u.email, u.display_name, m.role AS "role: Role""#,
                scope.team_id,
                email,
                role as Role
            )
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(DbError::NotFound("member"))?;
            MemberChanged::RoleSet(row)
        }
        MemberChange::Remove { user_id } => {
            let gone = sqlx::query!(
                "DELETE FROM memberships WHERE team_id = $1 AND user_id = $2",
                scope.team_id,
                user_id
            )
            .execute(&mut *tx)
            .await?;
            if gone.rows_affected() == 0 {
                return Err(DbError::NotFound("member"));
            }
            MemberChanged::Removed
        }
    };
    let owners = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM memberships WHERE team_id = $1 AND role = 'owner'"#,
        scope.team_id
    )
    .fetch_one(&mut *tx)
    .await?;
    if owners == 0 {
        tx.rollback().await?;
        return Ok(MemberChanged::LastOwner);
    }
    tx.commit().await?;
    Ok(done)
}

/// Creates a project in the scoped team.
pub async fn create_project(
    pool: &PgPool,
    scope: &TeamScope,
    name: &str,
) -> Result<Project, DbError> {
    sqlx::query_as!(
        Project,
        "INSERT INTO projects (team_id, name) VALUES ($1, $2)
         RETURNING id, team_id, name, created_at",
        scope.team_id,
        name
    )
    .fetch_one(pool)
    .await
    .map_err(|e| DbError::unique(e, "project with this name"))
}

/// Projects of the scoped team.
pub async fn projects(pool: &PgPool, scope: &TeamScope) -> Result<Vec<Project>, DbError> {
    let rows = sqlx::query_as!(
        Project,
        "SELECT id, team_id, name, created_at FROM projects WHERE team_id = $1 ORDER BY name",
        scope.team_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
