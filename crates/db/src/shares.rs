//! Read-only share links of a run. Only the SHA-256 of a token is stored; the token itself is
//! shown once, when the link is created. Reading through a link is in `scope`.

use crate::{DbError, RunScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// A share link as its run's members see it (never the token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShareLink {
    pub id: i64,
    pub run_id: i64,
    pub created_by: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// What the link was made for (may be empty).
    pub label: String,
    /// After this the link reads as unknown; `None` = until revoked.
    pub expires_at: Option<DateTime<Utc>>,
}

/// What a new link is: its label and how long it lives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewShare<'a> {
    pub label: &'a str,
    /// Days from now until the link expires; `None` = until revoked.
    pub expires_in_days: Option<i32>,
}

/// Creates a link to the scoped run; `user_id` is recorded as its creator.
pub async fn create(
    pool: &PgPool,
    scope: &RunScope,
    user_id: i64,
    token_hash: &[u8],
    new: &NewShare<'_>,
) -> Result<ShareLink, DbError> {
    let row = sqlx::query_as!(
        ShareLink,
        "INSERT INTO share_links (run_id, token_hash, created_by, label, expires_at)
         VALUES ($1, $2, $3, $4, now() + make_interval(days => $5::int))
         RETURNING id, run_id, created_by, created_at, revoked_at, label, expires_at",
        scope.run_id,
        token_hash,
        user_id,
        new.label,
        new.expires_in_days
    )
    .fetch_one(pool)
    .await?;
    Ok(row)
}

/// Links of the scoped run, newest first (revoked ones included, marked).
pub async fn list(pool: &PgPool, scope: &RunScope) -> Result<Vec<ShareLink>, DbError> {
    let rows = sqlx::query_as!(
        ShareLink,
        "SELECT id, run_id, created_by, created_at, revoked_at, label, expires_at FROM share_links
         WHERE run_id = $1 ORDER BY id DESC",
        scope.run_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Revokes link `id` of the scoped run; revoking twice is a no-op. `NotFound` for links of
/// other runs.
pub async fn revoke(pool: &PgPool, scope: &RunScope, id: i64) -> Result<ShareLink, DbError> {
    sqlx::query_as!(
        ShareLink,
        "UPDATE share_links SET revoked_at = coalesce(revoked_at, now())
         WHERE id = $1 AND run_id = $2
         RETURNING id, run_id, created_by, created_at, revoked_at, label, expires_at",
        id,
        scope.run_id
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("share link"))
}
