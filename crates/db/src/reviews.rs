//! Review marks: members with edit rights mark an environment good, broken or reward-hackable
//! with a comment, one mark per member and environment (marking again replaces it). Marks are
//! read with the environment and with its export.

use crate::types::Verdict;
use crate::{DbError, RunScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// Longest comment kept (the table's check says the same).
pub const MAX_COMMENT_CHARS: usize = 2000;

/// One member's mark on one environment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Review {
    /// The reviewer's display name.
    pub reviewer: String,
    pub verdict: Verdict,
    pub comment: String,
    pub updated_at: DateTime<Utc>,
}

/// Sets `user_id`'s mark on environment `env_id` of the scoped run. Refused for scopes that
/// cannot edit (viewers, share links, workers) even if a caller forgot to check.
pub async fn mark(
    pool: &PgPool,
    scope: &RunScope,
    user_id: i64,
    env_id: &str,
    verdict: Verdict,
    comment: &str,
) -> Result<Review, DbError> {
    if !scope.can_edit() {
        return Err(DbError::ReadOnly);
    }
    let row = sqlx::query_as!(
        Review,
        r#"WITH env AS (
               SELECT id FROM environments WHERE run_id = $1 AND env_id = $2
           ), up AS (
               INSERT INTO env_reviews (environment_id, user_id, verdict, comment)
               SELECT env.id, $3, $4, $5 FROM env
               ON CONFLICT (environment_id, user_id)
               DO UPDATE SET verdict = EXCLUDED.verdict, comment = EXCLUDED.comment,
                             updated_at = now()
               RETURNING user_id, verdict, comment, updated_at
           )
           SELECT u.display_name AS reviewer, up.verdict AS "verdict: Verdict", up.comment,
                  up.updated_at
           FROM up JOIN users u ON u.id = up.user_id"#,
        scope.run_id,
        env_id,
        user_id,
        verdict as Verdict,
        comment
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("environment"))?;
    Ok(row)
}

/// The marks on environment `env_id` of the scoped run, oldest first.
pub async fn for_env(
    pool: &PgPool,
    scope: &RunScope,
    env_id: &str,
) -> Result<Vec<Review>, DbError> {
    let rows = sqlx::query_as!(
        Review,
        r#"SELECT u.display_name AS reviewer, r.verdict AS "verdict: Verdict", r.comment,
                  r.updated_at
           FROM env_reviews r
           JOIN environments e ON e.id = r.environment_id
           JOIN users u ON u.id = r.user_id
           WHERE e.run_id = $1 AND e.env_id = $2
           ORDER BY r.created_at, r.user_id"#,
        scope.run_id,
        env_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// The marks on the environments `ids` (row ids, e.g. one export page) of the scoped run, as
/// (environment row id, mark), oldest first per environment.
pub async fn for_envs(
    pool: &PgPool,
    scope: &RunScope,
    ids: &[i64],
) -> Result<Vec<(i64, Review)>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT r.environment_id, u.display_name AS reviewer, r.verdict AS "verdict: Verdict",
                  r.comment, r.updated_at
           FROM env_reviews r
           JOIN environments e ON e.id = r.environment_id
           JOIN users u ON u.id = r.user_id
           WHERE e.run_id = $1 AND r.environment_id = ANY($2)
           ORDER BY r.environment_id, r.created_at, r.user_id"#,
        scope.run_id,
        ids
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.environment_id,
                Review {
                    reviewer: r.reviewer,
                    verdict: r.verdict,
                    comment: r.comment,
                    updated_at: r.updated_at,
                },
            )
        })
        .collect())
}

/// An accepted environment of a run that a member marked broken or reward-hackable: what the
/// ingest reply asks the worker to retire from play.
#[derive(Debug, Clone, PartialEq)]
pub struct Retirement {
    pub env_id: String,
    pub verdict: Verdict,
    pub reviewer: String,
    pub comment: String,
}

/// The still-accepted environments of run `run_id` with a broken or reward-hackable mark, the
/// latest such mark each. Once the worker reports one broken its status is `broken_in_play`
/// and it leaves this list. (Called by ingestion with the run token's run, not a member scope.)
pub async fn retirements(pool: &PgPool, run_id: i64) -> Result<Vec<Retirement>, DbError> {
    let rows = sqlx::query_as!(
        Retirement,
        r#"SELECT DISTINCT ON (e.id) e.env_id, r.verdict AS "verdict: Verdict",
                  u.display_name AS reviewer, r.comment
           FROM env_reviews r
           JOIN environments e ON e.id = r.environment_id
           JOIN users u ON u.id = r.user_id
           WHERE e.run_id = $1 AND e.status = 'accepted'
             AND r.verdict IN ('broken', 'reward_hackable')
           ORDER BY e.id, r.updated_at DESC"#,
        run_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
