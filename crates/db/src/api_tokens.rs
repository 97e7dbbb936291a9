//! API tokens for scripts. A token is one member's, for one team: it acts as that member inside
//! that team only, with at most the role it was made with (viewer or editor) and never more than
//! the member's role when it is used. Only the SHA-256 of a token is stored; the token itself is
//! shown once, when it is made. [`holder`] is what every request with a token asks, so a revoked
//! or expired token, or one whose member left the team, is refused at once.

use crate::users::User;
use crate::{DbError, Role, TeamScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// A token as the team page lists it (never the token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiToken {
    pub id: i64,
    pub team_id: i64,
    /// The member it acts as.
    pub user_id: i64,
    pub user_email: String,
    pub name: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Who a presented token acts for, as of this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub token_id: i64,
    pub team_id: i64,
    /// The lower of the token's role and its member's role now.
    pub role: Role,
    pub user: User,
}

/// What a new token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken<'a> {
    pub name: &'a str,
    pub role: Role,
    /// Days from now until it stops working; `None` = until revoked.
    pub expires_in_days: Option<i32>,
}

/// Makes a token for the scope's member in the scope's team. The role must not exceed the
/// member's (`ReadOnly` otherwise) and is never owner: tokens do not manage members or tokens.
pub async fn create(
    pool: &PgPool,
    scope: &TeamScope,
    token_hash: &[u8],
    new: &NewToken<'_>,
) -> Result<ApiToken, DbError> {
    if new.role > scope.role || new.role == Role::Owner {
        return Err(DbError::ReadOnly);
    }
    let row = sqlx::query_as!(
        ApiToken,
        r#"WITH t AS (
               INSERT INTO api_tokens (team_id, user_id, name, role, token_hash, expires_at)
               VALUES ($1, $2, $3, $4, $5, now() + make_interval(days => $6::int))
               RETURNING *)
           SELECT t.id, t.team_id, t.user_id, u.email AS user_email, t.name,
                  t.role AS "role: Role", t.created_at, t.expires_at, t.last_used_at, t.revoked_at
           FROM t JOIN users u ON u.id = t.user_id"#,
        scope.team_id,
        scope.user_id,
        new.name,
        new.role as Role,
        token_hash,
        new.expires_in_days
    )
    .fetch_one(pool)
    .await?;
    Ok(row)
}

/// The tokens of the scoped team, newest first, revoked ones included: every token of the team
/// for an owner, the member's own for anyone else.
pub async fn list(pool: &PgPool, scope: &TeamScope) -> Result<Vec<ApiToken>, DbError> {
    let rows = sqlx::query_as!(
        ApiToken,
        r#"SELECT t.id, t.team_id, t.user_id, u.email AS user_email, t.name,
                  t.role AS "role: Role", t.created_at, t.expires_at, t.last_used_at, t.revoked_at
           FROM api_tokens t JOIN users u ON u.id = t.user_id
           WHERE t.team_id = $1 AND ($2 OR t.user_id = $3)
           ORDER BY t.id DESC"#,
        scope.team_id,
        scope.role == Role::Owner,
        scope.user_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Revokes token `id` of the scoped team (an owner any, anyone else their own); a token the
/// scope cannot see is `NotFound`. Revoking twice is not an error.
pub async fn revoke(pool: &PgPool, scope: &TeamScope, id: i64) -> Result<ApiToken, DbError> {
    sqlx::query_as!(
        ApiToken,
        r#"WITH t AS (
               UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
               WHERE id = $1 AND team_id = $2 AND ($3 OR user_id = $4)
               RETURNING *)
           SELECT t.id, t.team_id, t.user_id, u.email AS user_email, t.name,
                  t.role AS "role: Role", t.created_at, t.expires_at, t.last_used_at, t.revoked_at
           FROM t JOIN users u ON u.id = t.user_id"#,
        id,
        scope.team_id,
        scope.role == Role::Owner,
        scope.user_id
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("API token"))
}

/// Who the token with this hash acts for: `None` when it is unknown, revoked or expired, or its
/// member is no longer in its team. Marks it used.
pub async fn holder(pool: &PgPool, token_hash: &[u8]) -> Result<Option<Holder>, DbError> {
    let row = sqlx::query!(
        r#"UPDATE api_tokens t SET last_used_at = now()
           FROM users u, memberships m
           WHERE t.token_hash = $1 AND t.revoked_at IS NULL
             AND (t.expires_at IS NULL OR t.expires_at > now())
             AND u.id = t.user_id AND m.team_id = t.team_id AND m.user_id = t.user_id
           RETURNING t.id, t.team_id, t.role AS "token_role: Role", m.role AS "member_role: Role",
                     u.id AS user_id, u.email, u.display_name, u.is_admin,
                     u.created_at AS user_created_at"#,
        token_hash
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Holder {
        token_id: r.id,
        team_id: r.team_id,
        role: r.token_role.min(r.member_role),
        user: User {
            id: r.user_id,
            email: r.email,
            display_name: r.display_name,
            is_admin: r.is_admin,
            created_at: r.user_created_at,
        },
    }))
}

/// Whether token `id` still works (long-lived streams ask again as they run).
pub async fn is_live(pool: &PgPool, id: i64) -> Result<bool, DbError> {
    let live = sqlx::query_scalar!(
        r#"SELECT EXISTS (
               SELECT 1 FROM api_tokens t
               JOIN memberships m ON m.team_id = t.team_id AND m.user_id = t.user_id
               WHERE t.id = $1 AND t.revoked_at IS NULL
                 AND (t.expires_at IS NULL OR t.expires_at > now())) AS "live!""#,
        id
    )
    .fetch_one(pool)
    .await?;
    Ok(live)
}
