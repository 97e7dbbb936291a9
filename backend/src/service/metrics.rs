//! Metrics of a run: the names it logged, one series over a step range for the API, and every
//! series drawn for the run page's charts. Both read the rollups ingestion keeps (see
//! `spade_db::rollups`) above a few points per requested point, never every stored point.

use super::downsample::lttb;
use crate::service::{Ctx, ServiceError, ServiceResult};
use serde::Deserialize;
use spade_app::charts::Point;
use spade_app::dto;
use spade_db::metrics::{self, SeriesInfo};
use spade_db::{Pool, RunScope};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Points returned when the request does not say, and the most it may ask for.
pub const DEFAULT_POINTS: usize = 1_000;
pub const MAX_POINTS: usize = 20_000;
/// Points per chart series on the run page (LTTB keeps the shape; a 640 px chart shows no
/// more).
pub const POINTS_PER_SERIES: usize = 600;

/// One series' range and size, as the API's query gives them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeriesQuery {
    /// At most this many points (LTTB keeps the first, the last and the shape between).
    pub points: Option<usize>,
    pub step_min: Option<i64>,
    pub step_max: Option<i64>,
}

/// The metrics the run has logged.
pub async fn names(db: &Pool, scope: &RunScope) -> ServiceResult<Vec<dto::SeriesSummary>> {
    Ok(metrics::names(db, scope)
        .await?
        .into_iter()
        .map(|s: SeriesInfo| dto::SeriesSummary {
            name: s.name,
            points: s.points,
            first_step: s.first_step,
            last_step: s.last_step,
            revision: s.revision,
        })
        .collect())
}

/// One series for any scope (members and share links).
pub async fn series(
    db: &Pool,
    scope: &RunScope,
    name: String,
    q: SeriesQuery,
) -> ServiceResult<dto::SeriesRecord> {
    let n = q.points.unwrap_or(DEFAULT_POINTS);
    if !(2..=MAX_POINTS).contains(&n) {
        return Err(ServiceError::invalid(
            "points",
            format!("must be 2 to {MAX_POINTS}, got {n}"),
        ));
    }
    let info = metrics::info(db, scope, &name)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("metric `{name}`")))?;
    let lo = q.step_min.unwrap_or(info.first_step).max(info.first_step);
    let hi = q.step_max.unwrap_or(info.last_step).min(info.last_step);
    if lo > hi {
        return Ok(dto::SeriesRecord {
            name,
            total_points: 0,
            points: Vec::new(),
        });
    }
    // Reading every point of a long series per request is the cost that matters (a 100k-point
    // series took ~400 ms in the API bench); above 4 points per requested point the database
    // first reduces each of `n` step buckets to its first, last, lowest and highest point.
    let n_i64 = i64::try_from(n).unwrap_or(i64::MAX);
    let (all, total_points) = if (hi - lo).saturating_add(1) > n_i64.saturating_mul(4) {
        let (pts, total) = metrics::series_reduced(db, scope, &name, lo, hi, n_i64).await?;
        (pts, usize::try_from(total).unwrap_or(usize::MAX))
    } else {
        let pts = metrics::series(db, scope, &name, Some(lo), Some(hi)).await?;
        let len = pts.len();
        (pts, len)
    };
    let points = lttb(&all, n, |p| (p.step as f64, p.value))
        .into_iter()
        .map(|p| dto::MetricPoint {
            step: p.step,
            value: p.value,
        })
        .collect();
    Ok(dto::SeriesRecord {
        name,
        total_points,
        points,
    })
}

/// Every metric of a run, each downsampled for a chart. The series' summaries say whether the
/// charts drawn for this run before still hold (a finished run, or a live one between two
/// steps): then its rollups are not read again. Everyone who may see the run sees the same
/// curves.
pub async fn charts(ctx: &Ctx, scope: &RunScope) -> ServiceResult<Arc<Vec<dto::MetricSeries>>> {
    let series = metrics::names(&ctx.db, scope).await?;
    let fingerprint: Vec<(String, i64)> = series
        .iter()
        .map(|s| (s.name.clone(), s.revision))
        .collect();
    if let Some(hit) = ctx.charts.get(scope.run_id(), &fingerprint) {
        return Ok(hit);
    }
    // Each series' rollups at the level that fits POINTS_PER_SERIES buckets, then LTTB:
    // reading every point made the run page take seconds on a run with a million points.
    let buckets = i64::try_from(POINTS_PER_SERIES).unwrap_or(600);
    let rows = metrics::overview(&ctx.db, scope, &series, buckets).await?;
    let mut by_name: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for row in rows {
        by_name.entry(row.name).or_default().push(Point {
            step: row.step as f64,
            time_s: row.elapsed_s,
            value: row.value,
        });
    }
    let drawn: Arc<Vec<dto::MetricSeries>> = Arc::new(
        by_name
            .into_iter()
            .map(|(name, points)| dto::MetricSeries {
                name,
                points: lttb(&points, POINTS_PER_SERIES, |p| (p.step, p.value)),
            })
            .collect(),
    );
    ctx.charts
        .put(scope.run_id(), fingerprint, Arc::clone(&drawn));
    Ok(drawn)
}

/// Every point of the named metrics of run `scope` (all metrics when `names` is empty), in
/// (name, step) order: the CSV exports' rows.
pub async fn export(
    db: &Pool,
    scope: &RunScope,
    names: &[String],
) -> ServiceResult<Vec<metrics::ExportRow>> {
    Ok(metrics::export(db, scope, names).await?)
}
