//! The stored rollups against the raw points they summarise, on a real PostgreSQL: every level's
//! rows must equal the M4 reduction of the `metrics` table computed here, after batches that
//! arrive out of order, repeat steps and re-log values that move a bucket's extremes; and the
//! readers built on them must return exactly the reference reduction of the raw points.

use super::*;
use crate::ingest;
use crate::jobs::testing;
use crate::metrics;
use crate::scope::Access;
use crate::{RunScope, TeamScope};
use sqlx::PgPool;
use std::collections::BTreeMap;

const SERIES: [&str; 2] = ["loss", "reward/mean"];

fn scope(run_id: i64) -> RunScope {
    RunScope {
        run_id,
        team_id: 0,
        access: Access::Worker,
    }
}

/// A value with spikes, so extremes are not at bucket edges.
fn value(name: &str, step: i64, round: i64) -> f64 {
    let base = ((step * 7919 + round * 104_729) % 1_000) as f64 / 100.0;
    if name == "loss" { base } else { -base }
}

async fn log(pool: &PgPool, run: i64, steps: &[i64], round: i64) -> Result<(), DbError> {
    let mut batch = ingest::begin(pool, &scope(run)).await?;
    let names: Vec<String> = SERIES.iter().map(|s| (*s).to_owned()).collect();
    for &step in steps {
        let values: Vec<f64> = SERIES.iter().map(|n| value(n, step, round)).collect();
        batch
            .metrics(step, step as f64 * 0.5 + round as f64, &names, &values)
            .await?;
    }
    batch.commit().await?;
    Ok(())
}

async fn raw(pool: &PgPool, run: i64, name: &str) -> Result<Vec<TimedValue>, DbError> {
    let rows: Vec<(i64, f64, f64)> = sqlx::query_as(
        "SELECT step, value, elapsed_s FROM metrics WHERE run_id = $1 AND name = $2 ORDER BY step",
    )
    .bind(run)
    .bind(name)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(step, value, elapsed_s)| TimedValue {
            step,
            value,
            elapsed_s,
        })
        .collect())
}

type Row = (
    i64,
    i64,
    i64,
    f64,
    f64,
    i64,
    f64,
    f64,
    i64,
    f64,
    f64,
    i64,
    f64,
    f64,
);

async fn stored(
    pool: &PgPool,
    run: i64,
    name: &str,
    level: i16,
) -> Result<BTreeMap<i64, Agg>, DbError> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT bucket, n, first_step, first_value, first_elapsed, last_step, last_value,
                last_elapsed, low_step, low_value, low_elapsed, high_step, high_value, high_elapsed
         FROM metric_rollups WHERE run_id = $1 AND name = $2 AND level = $3 ORDER BY bucket",
    )
    .bind(run)
    .bind(name)
    .bind(level)
    .fetch_all(pool)
    .await?;
    let t = |step, value, elapsed_s| TimedValue {
        step,
        value,
        elapsed_s,
    };
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.0,
                Agg {
                    n: r.1,
                    first: t(r.2, r.3, r.4),
                    last: t(r.5, r.6, r.7),
                    low: t(r.8, r.9, r.10),
                    high: t(r.11, r.12, r.13),
                },
            )
        })
        .collect())
}

async fn assert_rollups_match_raw(pool: &PgPool, run: i64, when: &str) -> Result<(), DbError> {
    for name in SERIES {
        let points = raw(pool, run, name).await?;
        for level in 1..=LEVELS {
            let want = reduce(&points, level);
            let got = stored(pool, run, name, level).await?;
            assert_eq!(got, want, "{when}: {name} level {level}");
        }
    }
    Ok(())
}

#[sqlx::test(migrator = "crate::MIGRATOR")]
async fn rollups_equal_the_reduction_of_the_raw_points_after_any_ingest_order(
    pool: PgPool,
) -> Result<(), DbError> {
    let run = testing::seed_runs(&pool, 1).await?[0];
    // Steps 0..3000 in three batches, the last one first and one out of order inside.
    let mut late: Vec<i64> = (2_000..3_000).collect();
    late.swap(10, 900);
    log(&pool, run, &late, 0).await?;
    log(&pool, run, &(0..1_000).collect::<Vec<_>>(), 0).await?;
    log(&pool, run, &(1_000..2_000).rev().collect::<Vec<_>>(), 0).await?;
    assert_rollups_match_raw(&pool, run, "three batches").await?;

    // A resume re-logs steps with new values: some buckets' maxima fall, which no merge can
    // express; and one batch both adds new steps and re-logs old ones, one step twice.
    log(&pool, run, &(1_500..1_700).collect::<Vec<_>>(), 1).await?;
    log(&pool, run, &[2_999, 3_000, 3_001, 17, 3_001, 5_000], 2).await?;
    assert_rollups_match_raw(&pool, run, "after re-logged steps").await?;
    let total: i64 = sqlx::query_scalar(
        "SELECT n FROM metric_rollups WHERE run_id = $1 AND name = 'loss' AND level = 10",
    )
    .bind(run)
    .fetch_one(&pool)
    .await?;
    assert_eq!(total, 3_003, "re-logged steps are not counted twice");

    // The migration's backfill (for series logged before rollups existed) builds the same rows.
    sqlx::query("DELETE FROM metric_rollups")
        .execute(&pool)
        .await?;
    let migration = include_str!("../../../migrations/20261205000001_metric_rollups.sql");
    let backfill = migration
        .find("INSERT INTO metric_rollups")
        .map(|at| &migration[at..])
        .expect("the migration backfills metric_rollups");
    sqlx::raw_sql(backfill).execute(&pool).await?;
    assert_rollups_match_raw(&pool, run, "backfill").await?;
    Ok(())
}

#[sqlx::test(migrator = "crate::MIGRATOR")]
async fn readers_return_the_reference_reduction_of_the_raw_points(
    pool: PgPool,
) -> Result<(), DbError> {
    let run = testing::seed_runs(&pool, 1).await?[0];
    for chunk in (0..20_000).collect::<Vec<i64>>().chunks(2_500) {
        log(&pool, run, chunk, 0).await?;
    }
    log(&pool, run, &[4_000, 12_345], 3).await?;
    let s = scope(run);
    let points = raw(&pool, run, "loss").await?;

    // A ranged read: whole buckets in the middle, finer blocks and raw steps at the ends.
    for (lo, hi, buckets) in [
        (0, 19_999, 100),
        (1_234, 17_777, 50),
        (5, 9, 100),
        (-3, 3, 4),
    ] {
        let (got, total) = metrics::series_reduced(&pool, &s, "loss", lo, hi, buckets).await?;
        let mut want: Vec<(i64, f64)> = Vec::new();
        let mut want_total = 0;
        for (level, bucket) in cover(lo, hi, level_for(lo, hi, buckets)) {
            let inside: Vec<TimedValue> = points
                .iter()
                .copied()
                .filter(|p| {
                    let b = if level == 0 {
                        p.step
                    } else {
                        bucket_of(p.step, level)
                    };
                    b == bucket
                })
                .collect();
            want_total += inside.len() as i64;
            let lvl = level.max(1);
            for a in reduce(&inside, lvl).values() {
                want.extend(a.points().iter().map(|p| (p.step, p.value)));
            }
        }
        want.sort_by_key(|p| p.0);
        want.dedup_by_key(|p| p.0);
        let got: Vec<(i64, f64)> = got.iter().map(|p| (p.step, p.value)).collect();
        assert_eq!(got, want, "range {lo}..={hi} in {buckets} buckets");
        assert_eq!(total, want_total, "points counted in {lo}..={hi}");
        assert!(
            got.iter().all(|p| (lo..=hi).contains(&p.0)),
            "nothing outside the range"
        );
        assert!(got.len() <= 4 * (buckets as usize + 6 * LEVELS as usize));
    }

    // The run page's read: each series at its level, every bucket's M4 points with their times.
    let overview = metrics::overview(&pool, &s, &metrics::names(&pool, &s).await?, 600).await?;
    for name in SERIES {
        let points = raw(&pool, run, name).await?;
        let level = level_for(0, 19_999, 600);
        let want: Vec<TimedValue> = reduce(&points, level)
            .values()
            .flat_map(Agg::points)
            .collect();
        let got: Vec<TimedValue> = overview
            .iter()
            .filter(|p| p.name == name)
            .map(|p| TimedValue {
                step: p.step,
                value: p.value,
                elapsed_s: p.elapsed_s,
            })
            .collect();
        assert_eq!(got, want, "{name} at level {level}");
        assert!(got.len() <= 4 * 600);
    }

    // A chart wide enough for every point draws the points themselves.
    let wide = metrics::overview(&pool, &s, &metrics::names(&pool, &s).await?, 10_000).await?;
    let loss: Vec<TimedValue> = wide
        .iter()
        .filter(|p| p.name == "loss")
        .map(|p| TimedValue {
            step: p.step,
            value: p.value,
            elapsed_s: p.elapsed_s,
        })
        .collect();
    assert_eq!(loss, raw(&pool, run, "loss").await?);

    // The runs list's columns: the value of each series' newest step, re-logged or not.
    let team: i64 = sqlx::query_scalar(
        "SELECT p.team_id FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1",
    )
    .bind(run)
    .fetch_one(&pool)
    .await?;
    let before = metrics::names(&pool, &s).await?;
    log(&pool, run, &[19_999], 4).await?;
    let after = metrics::names(&pool, &s).await?;
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (a.points, a.last_step),
            (b.points, b.last_step),
            "a re-logged step adds no point"
        );
        assert!(
            a.revision > b.revision,
            "but it changes the series' revision"
        );
    }
    let team = TeamScope {
        team_id: team,
        user_id: 0,
        role: crate::Role::Viewer,
    };
    let latest = metrics::latest(&pool, &team, &[run], &SERIES).await?;
    let want: Vec<(i64, String, f64)> = SERIES
        .iter()
        .map(|n| (run, (*n).to_owned(), value(n, 19_999, 4)))
        .collect();
    let mut got = latest.clone();
    got.sort_by(|a, b| a.1.cmp(&b.1));
    let mut want_sorted = want.clone();
    want_sorted.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(got, want_sorted);
    // Another team's scope sees none of the run's values.
    let other = TeamScope {
        team_id: team.team_id + 1_000,
        ..team
    };
    assert!(
        metrics::latest(&pool, &other, &[run], &SERIES)
            .await?
            .is_empty()
    );
    Ok(())
}
