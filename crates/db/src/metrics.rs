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

/// The metrics the scoped run has logged (from the per-series summary ingestion maintains, so
/// this does not scan the points).
pub async fn names(pool: &PgPool, scope: &RunScope) -> Result<Vec<SeriesInfo>, DbError> {
    let rows = sqlx::query_as!(
        SeriesInfo,
        "SELECT name, points, first_step, last_step FROM metric_series
         WHERE run_id = $1 ORDER BY name",
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

/// Summary of one series (`None` when the run never logged it).
pub async fn info(
    pool: &PgPool,
    scope: &RunScope,
    name: &str,
) -> Result<Option<SeriesInfo>, DbError> {
    let row = sqlx::query_as!(
        SeriesInfo,
        "SELECT name, points, first_step, last_step FROM metric_series
         WHERE run_id = $1 AND name = $2",
        scope.run_id,
        name
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

/// One series in the inclusive step range `lo..=hi`, reduced in the database to at most four
/// points per bucket (`buckets` equal step ranges): each bucket's first, last, lowest and highest
/// point (the M4 reduction: a line drawn from them looks the same as from all points). One pass
/// of a hash aggregate over the primary-key range, so a million-point series costs the database
/// one index range scan and the network a few thousand rows. Returns the points, ordered by step
/// without duplicates, and how many stored points the range held.
pub async fn series_reduced(
    pool: &PgPool,
    scope: &RunScope,
    name: &str,
    lo: i64,
    hi: i64,
    buckets: i64,
) -> Result<(Vec<Point>, i64), DbError> {
    // Arrays compare element by element: min(ARRAY[step, value]) is the bucket's first point,
    // min(ARRAY[value, step]) its lowest (earliest on ties).
    let rows = sqlx::query!(
        r#"SELECT count(*) AS "n!",
                  min(ARRAY[step::float8, value]) AS "first!",
                  max(ARRAY[step::float8, value]) AS "last!",
                  min(ARRAY[value, step::float8]) AS "low!",
                  max(ARRAY[value, step::float8]) AS "high!"
           FROM metrics
           WHERE run_id = $1 AND name = $2 AND step BETWEEN $3 AND $4
           GROUP BY (step - $3) * $5 / ($4 - $3 + 1)"#,
        scope.run_id,
        name,
        lo,
        hi,
        buckets
    )
    .fetch_all(pool)
    .await?;
    let mut total = 0;
    let mut points = Vec::with_capacity(rows.len() * 4);
    for r in rows {
        total += r.n;
        for (pair, step_first) in [
            (r.first, true),
            (r.last, true),
            (r.low, false),
            (r.high, false),
        ] {
            if let [a, b] = pair[..] {
                let (step, value) = if step_first { (a, b) } else { (b, a) };
                points.push(Point {
                    step: step as i64,
                    value,
                });
            }
        }
    }
    points.sort_by_key(|p| p.step);
    points.dedup_by_key(|p| p.step);
    Ok((points, total))
}

/// A point of [`overview`]: which series, the step, the value and the wall-clock time.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedPoint {
    pub name: String,
    pub step: i64,
    pub value: f64,
    pub elapsed_s: f64,
}

/// Every series of the scoped run reduced in the database to at most four points per bucket
/// (`buckets` equal step ranges over each series' own range; the M4 reduction of
/// [`series_reduced`], with the time of each point kept): what a run page draws. One query for
/// all series, so a run with a million points costs one aggregate pass instead of shipping
/// every row. Ordered by name then step, without duplicate steps.
pub async fn overview(
    pool: &PgPool,
    scope: &RunScope,
    buckets: i64,
) -> Result<Vec<TimedPoint>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT m.name AS "name!",
                  min(ARRAY[m.step::float8, m.value, m.elapsed_s]) AS "first!",
                  max(ARRAY[m.step::float8, m.value, m.elapsed_s]) AS "last!",
                  min(ARRAY[m.value, m.step::float8, m.elapsed_s]) AS "low!",
                  max(ARRAY[m.value, m.step::float8, m.elapsed_s]) AS "high!"
           FROM metrics m
           JOIN metric_series s ON s.run_id = m.run_id AND s.name = m.name
           WHERE m.run_id = $1
           GROUP BY m.name, (m.step - s.first_step) * $2 / (s.last_step - s.first_step + 1)"#,
        scope.run_id,
        buckets.max(1)
    )
    .fetch_all(pool)
    .await?;
    let mut points = Vec::with_capacity(rows.len() * 4);
    for r in rows {
        for (triple, step_first) in [
            (&r.first, true),
            (&r.last, true),
            (&r.low, false),
            (&r.high, false),
        ] {
            if let [a, b, elapsed_s] = triple[..] {
                let (step, value) = if step_first { (a, b) } else { (b, a) };
                points.push(TimedPoint {
                    name: r.name.clone(),
                    step: step as i64,
                    value,
                    elapsed_s,
                });
            }
        }
    }
    points.sort_by(|a, b| a.name.cmp(&b.name).then(a.step.cmp(&b.step)));
    points.dedup_by(|a, b| a.name == b.name && a.step == b.step);
    Ok(points)
}
