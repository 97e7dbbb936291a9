//! Saved chart views: a person's named chart settings, private to them. Saving a name they
//! already use replaces that view, so "save" is idempotent and a list never holds two of a name.

use crate::DbError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChartView {
    pub id: i64,
    pub name: String,
    pub smoothing: f64,
    /// `step` or `time`.
    pub x_axis: String,
    pub log_y: bool,
    pub find: String,
    pub created_at: DateTime<Utc>,
}

/// What a view holds (already checked by the service).
#[derive(Debug, Clone, PartialEq)]
pub struct NewView<'a> {
    pub name: &'a str,
    pub smoothing: f64,
    pub x_axis: &'a str,
    pub log_y: bool,
    pub find: &'a str,
}

/// Most views one person keeps.
pub const MAX_PER_USER: i64 = 50;

/// Saves `v` for `user_id`, replacing their view of that name. `Ok(None)` when they already
/// have [`MAX_PER_USER`] other views. The limit keeps a runaway script from filling the table;
/// it is not a quota (two saves of new names racing may both pass it).
pub async fn save(
    pool: &PgPool,
    user_id: i64,
    v: &NewView<'_>,
) -> Result<Option<ChartView>, DbError> {
    let row = sqlx::query_as!(
        ChartView,
        r#"INSERT INTO chart_views (user_id, name, smoothing, x_axis, log_y, find)
           SELECT $1, $2, $3, $4, $5, $6
           WHERE (SELECT count(*) FROM chart_views WHERE user_id = $1 AND name <> $2) < $7
           ON CONFLICT (user_id, name) DO UPDATE
               SET smoothing = EXCLUDED.smoothing, x_axis = EXCLUDED.x_axis,
                   log_y = EXCLUDED.log_y, find = EXCLUDED.find
           RETURNING id, name, smoothing, x_axis, log_y, find, created_at"#,
        user_id,
        v.name,
        v.smoothing,
        v.x_axis,
        v.log_y,
        v.find,
        MAX_PER_USER
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

/// The views of `user_id`, by name.
pub async fn list(pool: &PgPool, user_id: i64) -> Result<Vec<ChartView>, DbError> {
    let rows = sqlx::query_as!(
        ChartView,
        "SELECT id, name, smoothing, x_axis, log_y, find, created_at
         FROM chart_views WHERE user_id = $1 ORDER BY name",
        user_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Deletes view `id` of `user_id`; another person's view is `NotFound`, like a missing one.
pub async fn delete(pool: &PgPool, user_id: i64, id: i64) -> Result<(), DbError> {
    let gone = sqlx::query!(
        "DELETE FROM chart_views WHERE id = $1 AND user_id = $2",
        id,
        user_id
    )
    .execute(pool)
    .await?;
    if gone.rows_affected() == 0 {
        return Err(DbError::NotFound("chart view"));
    }
    Ok(())
}
