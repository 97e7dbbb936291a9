//! Scalar metric series. Reads go through the primary key `(run_id, name, step)`, so one series
//! in a step range is an index range scan however many other metrics a run has.

use crate::{DbError, RunScope, TeamScope, rollups};
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
    /// Counts up whenever points of the series are stored (new or re-logged): equal revisions
    /// mean equal series.
    pub revision: i64,
}

/// The metrics the scoped run has logged (from the per-series summary ingestion maintains, so
/// this does not scan the points).
pub async fn names(pool: &PgPool, scope: &RunScope) -> Result<Vec<SeriesInfo>, DbError> {
    let rows = sqlx::query_as!(
        SeriesInfo,
        "SELECT name, points, first_step, last_step, revision FROM metric_series
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
        "SELECT name, points, first_step, last_step, revision FROM metric_series
         WHERE run_id = $1 AND name = $2",
        scope.run_id,
        name
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

/// One series in the inclusive step range `lo..=hi`, reduced to at most four points per block
/// of the range's rollup cover ([`rollups::cover`]: about `buckets` whole buckets of the finest
/// level that has at most that many over the range, and a few finer blocks at each ragged end,
/// down to single raw steps). Reads rollup rows and at most a few raw steps at the two ends, so
/// a million-point series costs the same as a thousand-point one. Returns the points, ordered by step without
/// duplicates, and how many stored points the range holds.
pub async fn series_reduced(
    pool: &PgPool,
    scope: &RunScope,
    name: &str,
    lo: i64,
    hi: i64,
    buckets: i64,
) -> Result<(Vec<Point>, i64), DbError> {
    let top = rollups::level_for(lo, hi, buckets);
    let (mut levels, mut ids, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for (level, bucket) in rollups::cover(lo, hi, top) {
        if level == 0 {
            raw.push(bucket);
        } else {
            levels.push(level);
            ids.push(bucket);
        }
    }
    let rows = sqlx::query!(
        "SELECT r.n, r.first_step, r.first_value, r.last_step, r.last_value,
                r.low_step, r.low_value, r.high_step, r.high_value
         FROM UNNEST($3::int2[], $4::int8[]) AS b (level, bucket)
         JOIN metric_rollups r ON r.run_id = $1 AND r.name = $2
                              AND r.level = b.level AND r.bucket = b.bucket",
        scope.run_id,
        name,
        &levels,
        &ids
    )
    .fetch_all(pool)
    .await?;
    let mut total = 0;
    let mut points = Vec::with_capacity(rows.len() * 4 + raw.len());
    for r in rows {
        total += r.n;
        for (step, value) in [
            (r.first_step, r.first_value),
            (r.last_step, r.last_value),
            (r.low_step, r.low_value),
            (r.high_step, r.high_value),
        ] {
            points.push(Point { step, value });
        }
    }
    if !raw.is_empty() {
        let ends = sqlx::query_as!(
            Point,
            "SELECT step, value FROM metrics WHERE run_id = $1 AND name = $2 AND step = ANY($3)",
            scope.run_id,
            name,
            &raw
        )
        .fetch_all(pool)
        .await?;
        total += i64::try_from(ends.len()).unwrap_or(i64::MAX);
        points.extend(ends);
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

/// Every series of the scoped run reduced for a chart of `buckets` columns, with the time of
/// each point: what a run page draws. A series of more than `4 * buckets` points is read as its
/// rollup rows of the finest level with at most `buckets` buckets over its range
/// ([`rollups::level_for`]), each row giving its M4 points; a shorter one as its points, which
/// are no more rows and keep every point. So a page reads at most `4 * buckets` rows a series
/// and aggregates nothing, however long the run. Ordered by name then step, without duplicate
/// steps.
///
/// `series` is what [`names`] returned for the run (the caller usually has it already, to tell
/// whether it drew the same series before).
pub async fn overview(
    pool: &PgPool,
    scope: &RunScope,
    series: &[SeriesInfo],
    buckets: i64,
) -> Result<Vec<TimedPoint>, DbError> {
    let buckets = buckets.max(1);
    let (mut short, mut long, mut levels) = (Vec::new(), Vec::new(), Vec::new());
    for s in series {
        if s.points <= buckets.saturating_mul(4) {
            short.push(s.name.clone());
        } else {
            levels.push(rollups::level_for(s.first_step, s.last_step, buckets));
            long.push(s.name.clone());
        }
    }
    let mut points = Vec::new();
    if !short.is_empty() {
        points = sqlx::query_as!(
            TimedPoint,
            "SELECT name, step, value, elapsed_s FROM metrics
             WHERE run_id = $1 AND name = ANY($2) ORDER BY name, step",
            scope.run_id,
            &short
        )
        .fetch_all(pool)
        .await?;
    }
    if long.is_empty() {
        return Ok(points);
    }
    let rows = sqlx::query!(
        "SELECT r.name, r.n, r.first_step, r.first_value, r.first_elapsed,
                r.last_step, r.last_value, r.last_elapsed, r.low_step, r.low_value, r.low_elapsed,
                r.high_step, r.high_value, r.high_elapsed
         FROM UNNEST($2::text[], $3::int2[]) AS s (name, level)
         JOIN metric_rollups r ON r.run_id = $1 AND r.name = s.name AND r.level = s.level",
        scope.run_id,
        &long,
        &levels
    )
    .fetch_all(pool)
    .await?;
    points.reserve(rows.len() * 4);
    for r in rows {
        let agg = rollups::Agg {
            n: r.n,
            first: timed(r.first_step, r.first_value, r.first_elapsed),
            last: timed(r.last_step, r.last_value, r.last_elapsed),
            low: timed(r.low_step, r.low_value, r.low_elapsed),
            high: timed(r.high_step, r.high_value, r.high_elapsed),
        };
        for p in agg.points() {
            points.push(TimedPoint {
                name: r.name.clone(),
                step: p.step,
                value: p.value,
                elapsed_s: p.elapsed_s,
            });
        }
    }
    // One order for both reads (sorting here is cheaper than in the database, which would
    // sort the rows of every bucket before sending them).
    points.sort_by(|a, b| a.name.cmp(&b.name).then(a.step.cmp(&b.step)));
    Ok(points)
}

fn timed(step: i64, value: f64, elapsed_s: f64) -> rollups::TimedValue {
    rollups::TimedValue {
        step,
        value,
        elapsed_s,
    }
}

/// The newest value of each of `names` for each of `run_ids` that belongs to the scoped team, as
/// `(run_id, name, value)`: one query for a whole page of the runs list (its columns), where
/// there was one per run and metric.
pub async fn latest(
    pool: &PgPool,
    team: &TeamScope,
    run_ids: &[i64],
    names: &[&str],
) -> Result<Vec<(i64, String, f64)>, DbError> {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let rows = sqlx::query!(
        r#"SELECT s.run_id, s.name, s.last_value AS "last_value!" FROM metric_series s
           JOIN runs r ON r.id = s.run_id
           JOIN projects p ON p.id = r.project_id
           WHERE p.team_id = $1 AND s.run_id = ANY($2) AND s.name = ANY($3)
             AND s.last_value IS NOT NULL
           ORDER BY s.run_id, s.name"#,
        team.team_id(),
        run_ids,
        &names
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.run_id, r.name, r.last_value))
        .collect())
}

/// One series of a run totalled over its steps ([`outcome_totals`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunSeriesTotal {
    pub run_id: i64,
    pub name: String,
    pub sum: f64,
    pub max: f64,
    pub steps: i64,
}

/// For each of `run_ids` in team `team_id`: the sum, maximum and step count of the series that
/// say whether a run produced anything usable (`accepted`, `rejected`, `rejections/*`,
/// `win_rate/*`), one query for a whole page of the runs list.
pub async fn outcome_totals(
    pool: &PgPool,
    team_id: i64,
    run_ids: &[i64],
) -> Result<Vec<RunSeriesTotal>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT m.run_id, m.name, sum(m.value) AS "sum!", max(m.value) AS "max!",
                  count(*) AS "steps!"
           FROM metrics m
           JOIN runs r ON r.id = m.run_id
           JOIN projects p ON p.id = r.project_id
           WHERE p.team_id = $1 AND m.run_id = ANY($2)
             AND (m.name IN ('accepted', 'rejected') OR m.name LIKE 'rejections/%'
                  OR m.name LIKE 'win_rate/%')
           GROUP BY m.run_id, m.name
           ORDER BY m.run_id, m.name"#,
        team_id,
        run_ids
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| RunSeriesTotal {
            run_id: r.run_id,
            name: r.name,
            sum: r.sum,
            max: r.max,
            steps: r.steps,
        })
        .collect())
}

/// The newest value of each of `names` that the scoped run has logged, as `(name, value)`.
pub async fn latest_of(
    pool: &PgPool,
    scope: &RunScope,
    names: &[&str],
) -> Result<Vec<(String, f64)>, DbError> {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let rows = sqlx::query!(
        r#"SELECT name, last_value AS "last_value!" FROM metric_series
           WHERE run_id = $1 AND name = ANY($2) AND last_value IS NOT NULL ORDER BY name"#,
        scope.run_id,
        &names
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.name, r.last_value)).collect())
}
