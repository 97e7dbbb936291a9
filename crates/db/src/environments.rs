//! Environments a run's designer wrote, and the sampled plays on them. Listing returns summaries
//! (no code); one environment comes with its code, hint, a few plays and its parent.

use crate::types::{EnvKind, EnvStatus, Verdict};
use crate::{DbError, RunScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// One row of the environment list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvSummary {
    pub id: i64,
    pub env_id: String,
    pub step: i64,
    pub skill: String,
    pub kind: EnvKind,
    pub status: EnvStatus,
    pub rejection_reason: Option<String>,
    pub parent_env_id: Option<String>,
    pub regret: Option<f64>,
    pub win_rate_hint: Option<f64>,
    pub win_rate_no_hint: Option<f64>,
    pub designer_reward: Option<f64>,
    pub reward_levels: Option<i32>,
}

/// One environment in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvDetail {
    #[serde(flatten)]
    pub summary: EnvSummary,
    pub rejection_message: Option<String>,
    pub code: String,
    pub hint: Option<String>,
    pub attempts: i32,
    pub created_at: DateTime<Utc>,
}

/// A sampled play.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Play {
    pub id: i64,
    pub env_id: String,
    pub step: i64,
    pub with_hint: bool,
    pub episode_return: f64,
    pub won: bool,
    pub turns: i32,
    pub transcript: serde_json::Value,
}

/// Filters of [`list`]. Ranges are inclusive; `after` is the keyset cursor `(step, id)` of the
/// last row of the previous page (rows are ordered by step, then id).
#[derive(Debug, Clone, Default)]
pub struct EnvFilter {
    pub skill: Option<String>,
    pub status: Option<EnvStatus>,
    pub step_min: Option<i64>,
    pub step_max: Option<i64>,
    pub regret_min: Option<f64>,
    pub regret_max: Option<f64>,
    /// Review marks (`env_reviews`) the rows must have, or lack.
    pub review: Option<ReviewFilter>,
    pub after: Option<(i64, i64)>,
    pub limit: i64,
}

/// Which environments a review filter keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewFilter {
    /// Some member of the team marked it with this verdict (whatever others said).
    Marked(Verdict),
    /// No member marked it.
    Unreviewed,
}

impl EnvFilter {
    /// The review filter as the queries' two parameters: a verdict some mark must have, and
    /// whether no mark may exist.
    fn review_params(&self) -> (Option<Verdict>, bool) {
        match self.review {
            None => (None, false),
            Some(ReviewFilter::Marked(v)) => (Some(v), false),
            Some(ReviewFilter::Unreviewed) => (None, true),
        }
    }
}

/// Environments of the scoped run, filtered, one page.
pub async fn list(
    pool: &PgPool,
    scope: &RunScope,
    f: &EnvFilter,
) -> Result<Vec<EnvSummary>, DbError> {
    let (after_step, after_id) = f.after.unzip();
    let (marked, unreviewed) = f.review_params();
    let rows = sqlx::query_as!(
        EnvSummary,
        r#"SELECT id, env_id, step, skill, kind AS "kind: EnvKind", status AS "status: EnvStatus",
                  rejection_reason, parent_env_id, regret, win_rate_hint, win_rate_no_hint,
                  designer_reward, reward_levels
           FROM environments
           WHERE run_id = $1
             AND ($2::text IS NULL OR skill = $2)
             AND ($3::env_status IS NULL OR status = $3)
             AND ($4::bigint IS NULL OR step >= $4)
             AND ($5::bigint IS NULL OR step <= $5)
             AND ($6::float8 IS NULL OR regret >= $6)
             AND ($7::float8 IS NULL OR regret <= $7)
             AND ($8::bigint IS NULL OR (step, id) > ($8, $9::bigint))
             AND ($11::env_verdict IS NULL OR EXISTS (
                   SELECT 1 FROM env_reviews r
                   WHERE r.environment_id = environments.id AND r.verdict = $11))
             AND (NOT $12::bool OR NOT EXISTS (
                   SELECT 1 FROM env_reviews r WHERE r.environment_id = environments.id))
           ORDER BY step, id
           LIMIT $10"#,
        scope.run_id,
        f.skill,
        f.status as Option<EnvStatus>,
        f.step_min,
        f.step_max,
        f.regret_min,
        f.regret_max,
        after_step,
        after_id,
        f.limit,
        marked as Option<Verdict>,
        unreviewed
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// One environment of the scoped run by its `env_id`.
pub async fn get(pool: &PgPool, scope: &RunScope, env_id: &str) -> Result<EnvDetail, DbError> {
    let r = sqlx::query!(
        r#"SELECT id, env_id, step, skill, kind AS "kind: EnvKind", status AS "status: EnvStatus",
                  rejection_reason, rejection_message, parent_env_id, regret, win_rate_hint,
                  win_rate_no_hint, designer_reward, reward_levels, code, hint, attempts,
                  created_at
           FROM environments WHERE run_id = $1 AND env_id = $2"#,
        scope.run_id,
        env_id
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("environment"))?;
    Ok(EnvDetail {
        summary: EnvSummary {
            id: r.id,
            env_id: r.env_id,
            step: r.step,
            skill: r.skill,
            kind: r.kind,
            status: r.status,
            rejection_reason: r.rejection_reason,
            parent_env_id: r.parent_env_id,
            regret: r.regret,
            win_rate_hint: r.win_rate_hint,
            win_rate_no_hint: r.win_rate_no_hint,
            designer_reward: r.designer_reward,
            reward_levels: r.reward_levels,
        },
        rejection_message: r.rejection_message,
        code: r.code,
        hint: r.hint,
        attempts: r.attempts,
        created_at: r.created_at,
    })
}

/// Up to `limit` plays of one environment, oldest first.
pub async fn plays(
    pool: &PgPool,
    scope: &RunScope,
    env_id: &str,
    limit: i64,
) -> Result<Vec<Play>, DbError> {
    let rows = sqlx::query_as!(
        Play,
        "SELECT id, env_id, step, with_hint, episode_return, won, turns, transcript
         FROM plays WHERE run_id = $1 AND env_id = $2 ORDER BY id LIMIT $3",
        scope.run_id,
        env_id,
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// One environment as a pool export needs it: the summary's scores with the code and hint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvExport {
    pub id: i64,
    pub env_id: String,
    pub step: i64,
    pub skill: String,
    pub kind: EnvKind,
    pub status: EnvStatus,
    pub parent_env_id: Option<String>,
    pub regret: Option<f64>,
    pub win_rate_hint: Option<f64>,
    pub win_rate_no_hint: Option<f64>,
    pub designer_reward: Option<f64>,
    pub reward_levels: Option<i32>,
    pub code: String,
    pub hint: Option<String>,
}

/// Filters of [`export_page`]: the list's, and a band of the no-hint win rate.
#[derive(Debug, Clone, Default)]
pub struct ExportFilter {
    /// Filters, keyset cursor and page size, as for [`list`].
    pub env: EnvFilter,
    pub win_rate_min: Option<f64>,
    pub win_rate_max: Option<f64>,
}

/// One page of the scoped run's environments with their code, in (step, id) order. Export
/// reads a run page by page through this, so its memory is one page whatever the run's size.
pub async fn export_page(
    pool: &PgPool,
    scope: &RunScope,
    f: &ExportFilter,
) -> Result<Vec<EnvExport>, DbError> {
    let e = &f.env;
    let (after_step, after_id) = e.after.unzip();
    let (marked, unreviewed) = e.review_params();
    let rows = sqlx::query_as!(
        EnvExport,
        r#"SELECT id, env_id, step, skill, kind AS "kind: EnvKind", status AS "status: EnvStatus",
                  parent_env_id, regret, win_rate_hint, win_rate_no_hint, designer_reward,
                  reward_levels, code, hint
           FROM environments
           WHERE run_id = $1
             AND ($2::text IS NULL OR skill = $2)
             AND ($3::env_status IS NULL OR status = $3)
             AND ($4::bigint IS NULL OR step >= $4)
             AND ($5::bigint IS NULL OR step <= $5)
             AND ($6::float8 IS NULL OR regret >= $6)
             AND ($7::float8 IS NULL OR regret <= $7)
             AND ($8::float8 IS NULL OR win_rate_no_hint >= $8)
             AND ($9::float8 IS NULL OR win_rate_no_hint <= $9)
             AND ($10::bigint IS NULL OR (step, id) > ($10, $11::bigint))
             AND ($13::env_verdict IS NULL OR EXISTS (
                   SELECT 1 FROM env_reviews r
                   WHERE r.environment_id = environments.id AND r.verdict = $13))
             AND (NOT $14::bool OR NOT EXISTS (
                   SELECT 1 FROM env_reviews r WHERE r.environment_id = environments.id))
           ORDER BY step, id
           LIMIT $12"#,
        scope.run_id,
        e.skill,
        e.status as Option<EnvStatus>,
        e.step_min,
        e.step_max,
        e.regret_min,
        e.regret_max,
        f.win_rate_min,
        f.win_rate_max,
        after_step,
        after_id,
        e.limit,
        marked as Option<Verdict>,
        unreviewed
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
