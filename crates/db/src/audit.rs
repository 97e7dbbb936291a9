//! The audit log: who changed what, for state changes made through the API (logins, team and
//! membership changes, run lifecycle, share links). Append-only.

use crate::{DbError, TeamScope};
use sqlx::PgPool;

/// One entry to append.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    pub actor_id: Option<i64>,
    pub team_id: Option<i64>,
    /// e.g. `run.cancel`, `member.add`, `share.revoke`.
    pub action: &'a str,
    /// e.g. `run:12`.
    pub target: String,
    pub detail: serde_json::Value,
}

/// Appends an entry.
pub async fn record(pool: &PgPool, e: &Entry<'_>) -> Result<(), DbError> {
    sqlx::query!(
        "INSERT INTO audit_log (actor_id, team_id, action, target, detail)
         VALUES ($1, $2, $3, $4, $5)",
        e.actor_id,
        e.team_id,
        e.action,
        e.target,
        e.detail
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The newest `limit` entries about the scoped team, as (action, target) pairs, newest first.
pub async fn recent_for_team(
    pool: &PgPool,
    scope: &TeamScope,
    limit: i64,
) -> Result<Vec<(String, String)>, DbError> {
    let rows = sqlx::query!(
        "SELECT action, target FROM audit_log WHERE team_id = $1 ORDER BY id DESC LIMIT $2",
        scope.team_id,
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.action, r.target)).collect())
}
