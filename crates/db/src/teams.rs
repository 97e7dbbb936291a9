//! Teams, their members and their projects. Creating a team makes its creator the owner; all
//! other functions take a [`TeamScope`], i.e. a checked membership.

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

/// Creates a team owned by `user_id`.
pub async fn create_team(pool: &PgPool, user_id: i64, name: &str) -> Result<Team, DbError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query!(
        "INSERT INTO teams (name) VALUES ($1) RETURNING id, name, created_at",
        name
    )
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| DbError::unique(e, "team with this name"))?;
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

/// Adds the registered user with `email` to the team, or changes their role if already a member.
/// `NotFound("user")` when no account has that email.
pub async fn upsert_member(
    pool: &PgPool,
    scope: &TeamScope,
    email: &str,
    role: Role,
) -> Result<Member, DbError> {
    let row = sqlx::query_as!(
        Member,
        r#"WITH u AS (SELECT id, email, display_name FROM users WHERE lower(email) = lower($2)),
                m AS (INSERT INTO memberships (team_id, user_id, role)
                      SELECT $1, u.id, $3 FROM u
                      ON CONFLICT (team_id, user_id) DO UPDATE SET role = EXCLUDED.role
                      RETURNING user_id, role)
           SELECT u.id AS "user_id!", u.email AS "email!", u.display_name AS "display_name!",
                  m.role AS "role!: Role"
           FROM u JOIN m ON m.user_id = u.id"#,
        scope.team_id,
        email,
        role as Role
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("user"))?;
    Ok(row)
}

/// Number of owners of the scoped team (a team never loses its last owner).
pub async fn owner_count(pool: &PgPool, scope: &TeamScope) -> Result<i64, DbError> {
    let n = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM memberships WHERE team_id = $1 AND role = 'owner'"#,
        scope.team_id
    )
    .fetch_one(pool)
    .await?;
    Ok(n)
}

/// The role of `user_id` in the scoped team, if a member.
pub async fn role_of(
    pool: &PgPool,
    scope: &TeamScope,
    user_id: i64,
) -> Result<Option<Role>, DbError> {
    let role = sqlx::query_scalar!(
        r#"SELECT role AS "role: Role" FROM memberships WHERE team_id = $1 AND user_id = $2"#,
        scope.team_id,
        user_id
    )
    .fetch_optional(pool)
    .await?;
    Ok(role)
}

/// Removes `user_id` from the scoped team. `NotFound("member")` when not a member.
pub async fn remove_member(pool: &PgPool, scope: &TeamScope, user_id: i64) -> Result<(), DbError> {
    let done = sqlx::query!(
        "DELETE FROM memberships WHERE team_id = $1 AND user_id = $2",
        scope.team_id,
        user_id
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(DbError::NotFound("member"));
    }
    Ok(())
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
