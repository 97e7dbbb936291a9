//! Scalar metric series. Reads go through the primary key `(run_id, name, step)`, so one series
//! in a step range is an index range scan however many other metrics a run has.

use crate::{DbError, RunScope};
use serde::Serialize;
use sqlx::PgPool;

/// One point of a series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    pub step: i64,
    pub value: f64,
}

/// A metric's name with its number of points and step range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesInfo {
    pub name: String,
    pub points: i64,
    pub first_step: i64,
    pub last_step: i64,
}

/// The metrics the scoped run has logged.
pub async fn names(pool: &PgPool, scope: &RunScope) -> Result<Vec<SeriesInfo>, DbError> {
    let rows = sqlx::query_as!(
        SeriesInfo,
        r#"SELECT name, count(*) AS "points!", min(step) AS "first_step!", max(step) AS "last_step!"
           FROM metrics WHERE run_id = $1 GROUP BY name ORDER BY name"#,
        scope.run_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// One series in an inclusive step range, ordered by step.
pub async fn series(
    pool: &PgPool,
    scope: &RunScope,
    name: &str,
    step_min: Option<i64>,
    step_max: Option<i64>,
) -> Result<Vec<Point>, DbError> {
    let rows = sqlx::query_as!(
        Point,
        "SELECT step, value FROM metrics
         WHERE run_id = $1 AND name = $2
           AND ($3::bigint IS NULL OR step >= $3)
           AND ($4::bigint IS NULL OR step <= $4)
         ORDER BY step",
        scope.run_id,
        name,
        step_min,
        step_max
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// One row of a CSV export.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportRow {
    pub name: String,
    pub step: i64,
    pub value: f64,
    pub elapsed_s: f64,
}

/// Every point of the named series (all series when `names` is empty), by name then step.
pub async fn export(
    pool: &PgPool,
    scope: &RunScope,
    names: &[String],
) -> Result<Vec<ExportRow>, DbError> {
    let rows = sqlx::query_as!(
        ExportRow,
        "SELECT name, step, value, elapsed_s FROM metrics
         WHERE run_id = $1 AND (cardinality($2::text[]) = 0 OR name = ANY($2))
         ORDER BY name, step",
        scope.run_id,
        names
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
