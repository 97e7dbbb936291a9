//! Metric rollups kept at ingest, so charts never read or aggregate raw points at request time.
//!
//! Level `L` (1..=[`LEVELS`]) cuts a series into buckets of `4^L` steps (`bucket = step >> 2L`)
//! and keeps, per bucket, the point count and the M4 reduction: the first, last, lowest and
//! highest point, each with its wall-clock time. A line drawn through those four points of every
//! bucket looks like the line through all points (not every point: in a bucket of four steps
//! the first may also be the lowest, and a middle one is then dropped). A chart of `B` columns
//! reads the finest level with at most `B` buckets, so at most `B` rows per series whatever the
//! series' length; level 10 (about a million steps a bucket) covers any run we can store. A
//! series of at most `4 * B` points is read as it is (`metrics::overview`): that is no more
//! rows than a long one's rollups, and it keeps a short run's every point.
//!
//! Ingestion adds new points to an in-memory [`Pending`] per batch and merges it into the stored
//! rows in the batch's transaction ([`Pending::flush`]): counts add, and the first/last/lowest/
//! highest of two buckets are the first/last/lowest/highest of their four candidates, so
//! merging is exact in any order. A re-logged step (a resume logs it again with a new value) can
//! lower a maximum, which no merge can undo; its buckets are recomputed instead, level 1 from
//! the bucket's four raw points and each level above from its four children, so the cost is
//! `4 * LEVELS` rows per changed step however long the series is.

use crate::DbError;
use sqlx::{Postgres, Transaction};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// Number of levels; level `L` buckets span `4^L` steps.
pub const LEVELS: i16 = 10;

/// `log2` of the fan-out: a bucket of level `L + 1` holds four of level `L`.
const FAN_BITS: u32 = 2;

/// The bucket of `step` at `level` (floor division by `4^level`, also for negative steps).
pub fn bucket_of(step: i64, level: i16) -> i64 {
    step >> (FAN_BITS * level_bits(level))
}

/// The first step of `bucket` at `level`.
pub fn bucket_start(bucket: i64, level: i16) -> i64 {
    bucket.saturating_mul(1i64 << (FAN_BITS * level_bits(level)))
}

fn level_bits(level: i16) -> u32 {
    u32::try_from(level.clamp(0, LEVELS)).unwrap_or(0)
}

/// One point with its wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimedValue {
    pub step: i64,
    pub value: f64,
    pub elapsed_s: f64,
}

/// `(value, step)` order: the lowest point is the minimum, the earliest on ties; the highest
/// the maximum, the latest on ties (what SQL's `min`/`max` over `ARRAY[value, step, ..]` pick).
fn by_value(a: &TimedValue, b: &TimedValue) -> Ordering {
    a.value.total_cmp(&b.value).then(a.step.cmp(&b.step))
}

/// One bucket: how many points it holds and its M4 points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Agg {
    pub n: i64,
    pub first: TimedValue,
    pub last: TimedValue,
    pub low: TimedValue,
    pub high: TimedValue,
}

impl Agg {
    pub fn of(p: TimedValue) -> Self {
        Agg {
            n: 1,
            first: p,
            last: p,
            low: p,
            high: p,
        }
    }

    /// `self` and `other` as one bucket.
    pub fn merge(&mut self, other: &Agg) {
        self.n += other.n;
        if other.first.step < self.first.step {
            self.first = other.first;
        }
        if other.last.step > self.last.step {
            self.last = other.last;
        }
        if by_value(&other.low, &self.low).is_lt() {
            self.low = other.low;
        }
        if by_value(&other.high, &self.high).is_gt() {
            self.high = other.high;
        }
    }

    /// The distinct points of the reduction, by step.
    pub fn points(&self) -> Vec<TimedValue> {
        let mut out = vec![self.first, self.low, self.high, self.last];
        out.sort_by_key(|p| p.step);
        out.dedup_by_key(|p| p.step);
        out
    }
}

/// The M4 reduction of `points` into the buckets of `level`, by bucket (the reference the
/// stored rollups must equal).
pub fn reduce(points: &[TimedValue], level: i16) -> BTreeMap<i64, Agg> {
    let mut out: BTreeMap<i64, Agg> = BTreeMap::new();
    for p in points {
        out.entry(bucket_of(p.step, level))
            .and_modify(|a| a.merge(&Agg::of(*p)))
            .or_insert_with(|| Agg::of(*p));
    }
    out
}

/// The finest level whose buckets over `first..=last` number at most `max_buckets` (the top
/// level when none does).
pub fn level_for(first: i64, last: i64, max_buckets: i64) -> i16 {
    (1..=LEVELS)
        .find(|&l| {
            bucket_of(last, l)
                .saturating_sub(bucket_of(first, l))
                .saturating_add(1)
                <= max_buckets.max(1)
        })
        .unwrap_or(LEVELS)
}

/// A block of a step range's cover: `(level, bucket)`, level 0 being one raw step.
pub type Block = (i16, i64);

/// The aligned blocks that cover `lo..=hi` exactly, none coarser than `top`: whole buckets of
/// `top` in the middle and, at each ragged end, at most three blocks of each finer level (raw
/// steps at level 0). Ordered by step. Empty when `lo > hi`.
pub fn cover(lo: i64, hi: i64, top: i16) -> Vec<Block> {
    let mut out = Vec::new();
    let mut at = lo;
    // Greedy from the left: the largest aligned block that starts at `at` and ends by `hi`.
    while at <= hi {
        let mut level = 0i16;
        while level < top {
            let next = level + 1;
            let b = bucket_of(at, next);
            let (start, end) = (bucket_start(b, next), bucket_start(b + 1, next) - 1);
            if start != at || end > hi {
                break;
            }
            level = next;
        }
        let b = bucket_of(at, level);
        out.push((level, b));
        at = bucket_start(b + 1, level);
    }
    out
}

/// New points and changed steps of one ingest batch, per series.
#[derive(Debug, Default)]
pub struct Pending {
    adds: BTreeMap<(String, i16, i64), Agg>,
    changed: BTreeSet<(String, i64)>,
}

impl Pending {
    /// A point stored for the first time.
    pub fn add(&mut self, name: &str, p: TimedValue) {
        for level in 1..=LEVELS {
            let key = (name.to_owned(), level, bucket_of(p.step, level));
            self.adds
                .entry(key)
                .and_modify(|a| a.merge(&Agg::of(p)))
                .or_insert_with(|| Agg::of(p));
        }
    }

    /// A stored point whose value was replaced.
    pub fn changed(&mut self, name: &str, step: i64) {
        self.changed.insert((name.to_owned(), step));
    }

    /// Merges the batch into the stored rollups of `run_id`, then recomputes the buckets of
    /// changed steps bottom-up.
    pub async fn flush(
        self,
        tx: &mut Transaction<'static, Postgres>,
        run_id: i64,
    ) -> Result<(), DbError> {
        if !self.adds.is_empty() {
            merge(tx, run_id, &self.adds).await?;
        }
        if !self.changed.is_empty() {
            for level in 1..=LEVELS {
                let buckets: BTreeSet<(&str, i64)> = self
                    .changed
                    .iter()
                    .map(|(name, step)| (name.as_str(), bucket_of(*step, level)))
                    .collect();
                recompute(tx, run_id, level, &buckets).await?;
            }
        }
        Ok(())
    }
}

/// Column arrays of rollup rows, for one `UNNEST`.
#[derive(Default)]
struct Columns {
    name: Vec<String>,
    level: Vec<i16>,
    bucket: Vec<i64>,
    n: Vec<i64>,
    steps: [Vec<i64>; 4],
    values: [Vec<f64>; 4],
    elapsed: [Vec<f64>; 4],
}

impl Columns {
    fn push(&mut self, name: &str, level: i16, bucket: i64, a: &Agg) {
        self.name.push(name.to_owned());
        self.level.push(level);
        self.bucket.push(bucket);
        self.n.push(a.n);
        for (i, p) in [a.first, a.last, a.low, a.high].into_iter().enumerate() {
            self.steps[i].push(p.step);
            self.values[i].push(p.value);
            self.elapsed[i].push(p.elapsed_s);
        }
    }
}

async fn merge(
    tx: &mut Transaction<'static, Postgres>,
    run_id: i64,
    adds: &BTreeMap<(String, i16, i64), Agg>,
) -> Result<(), DbError> {
    let mut c = Columns::default();
    for ((name, level, bucket), a) in adds {
        c.push(name, *level, *bucket, a);
    }
    let [fs, ls, los, his] = &c.steps;
    let [fv, lv, lov, hiv] = &c.values;
    let [fe, le, loe, hie] = &c.elapsed;
    // Row comparisons give the `(value, step)` order of `by_value`; the keys of one statement
    // are distinct (a map's keys), as ON CONFLICT DO UPDATE requires.
    sqlx::query!(
        "INSERT INTO metric_rollups AS r
             (run_id, name, level, bucket, n,
              first_step, first_value, first_elapsed, last_step, last_value, last_elapsed,
              low_step, low_value, low_elapsed, high_step, high_value, high_elapsed)
         SELECT $1, * FROM UNNEST($2::text[], $3::int2[], $4::int8[], $5::int8[],
                                  $6::int8[], $7::float8[], $8::float8[],
                                  $9::int8[], $10::float8[], $11::float8[],
                                  $12::int8[], $13::float8[], $14::float8[],
                                  $15::int8[], $16::float8[], $17::float8[])
         ON CONFLICT (run_id, name, level, bucket) DO UPDATE SET
             n = r.n + EXCLUDED.n,
             first_step = CASE WHEN EXCLUDED.first_step < r.first_step
                               THEN EXCLUDED.first_step ELSE r.first_step END,
             first_value = CASE WHEN EXCLUDED.first_step < r.first_step
                                THEN EXCLUDED.first_value ELSE r.first_value END,
             first_elapsed = CASE WHEN EXCLUDED.first_step < r.first_step
                                  THEN EXCLUDED.first_elapsed ELSE r.first_elapsed END,
             last_step = CASE WHEN EXCLUDED.last_step > r.last_step
                              THEN EXCLUDED.last_step ELSE r.last_step END,
             last_value = CASE WHEN EXCLUDED.last_step > r.last_step
                               THEN EXCLUDED.last_value ELSE r.last_value END,
             last_elapsed = CASE WHEN EXCLUDED.last_step > r.last_step
                                 THEN EXCLUDED.last_elapsed ELSE r.last_elapsed END,
             low_step = CASE WHEN (EXCLUDED.low_value, EXCLUDED.low_step) < (r.low_value, r.low_step)
                             THEN EXCLUDED.low_step ELSE r.low_step END,
             low_value = CASE WHEN (EXCLUDED.low_value, EXCLUDED.low_step) < (r.low_value, r.low_step)
                              THEN EXCLUDED.low_value ELSE r.low_value END,
             low_elapsed = CASE WHEN (EXCLUDED.low_value, EXCLUDED.low_step) < (r.low_value, r.low_step)
                                THEN EXCLUDED.low_elapsed ELSE r.low_elapsed END,
             high_step = CASE WHEN (EXCLUDED.high_value, EXCLUDED.high_step) > (r.high_value, r.high_step)
                              THEN EXCLUDED.high_step ELSE r.high_step END,
             high_value = CASE WHEN (EXCLUDED.high_value, EXCLUDED.high_step) > (r.high_value, r.high_step)
                               THEN EXCLUDED.high_value ELSE r.high_value END,
             high_elapsed = CASE WHEN (EXCLUDED.high_value, EXCLUDED.high_step) > (r.high_value, r.high_step)
                                 THEN EXCLUDED.high_elapsed ELSE r.high_elapsed END",
        run_id,
        &c.name,
        &c.level,
        &c.bucket,
        &c.n,
        fs,
        fv,
        fe,
        ls,
        lv,
        le,
        los,
        lov,
        loe,
        his,
        hiv,
        hie,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Rebuilds the named buckets of `level`: level 1 from the raw points, higher levels from their
/// four children (already rebuilt, as levels go up in order).
async fn recompute(
    tx: &mut Transaction<'static, Postgres>,
    run_id: i64,
    level: i16,
    buckets: &BTreeSet<(&str, i64)>,
) -> Result<(), DbError> {
    let names: Vec<String> = buckets.iter().map(|(n, _)| (*n).to_owned()).collect();
    let ids: Vec<i64> = buckets.iter().map(|(_, b)| *b).collect();
    if level == 1 {
        // The step range keeps the primary key's index in use (a shift on `step` would not).
        sqlx::query!(
            "INSERT INTO metric_rollups
             SELECT $1, name, 1, bucket, n,
                    first[1]::bigint, first[2], first[3], last[1]::bigint, last[2], last[3],
                    low[2]::bigint, low[1], low[3], high[2]::bigint, high[1], high[3]
             FROM (SELECT d.name, d.bucket, count(*) AS n,
                          min(ARRAY[m.step::float8, m.value, m.elapsed_s]) AS first,
                          max(ARRAY[m.step::float8, m.value, m.elapsed_s]) AS last,
                          min(ARRAY[m.value, m.step::float8, m.elapsed_s]) AS low,
                          max(ARRAY[m.value, m.step::float8, m.elapsed_s]) AS high
                   FROM UNNEST($2::text[], $3::int8[]) AS d (name, bucket)
                   JOIN metrics m ON m.run_id = $1 AND m.name = d.name
                                 AND m.step BETWEEN d.bucket * 4 AND d.bucket * 4 + 3
                   GROUP BY d.name, d.bucket) AS agg
             ON CONFLICT (run_id, name, level, bucket) DO UPDATE SET
                 n = EXCLUDED.n,
                 first_step = EXCLUDED.first_step, first_value = EXCLUDED.first_value,
                 first_elapsed = EXCLUDED.first_elapsed,
                 last_step = EXCLUDED.last_step, last_value = EXCLUDED.last_value,
                 last_elapsed = EXCLUDED.last_elapsed,
                 low_step = EXCLUDED.low_step, low_value = EXCLUDED.low_value,
                 low_elapsed = EXCLUDED.low_elapsed,
                 high_step = EXCLUDED.high_step, high_value = EXCLUDED.high_value,
                 high_elapsed = EXCLUDED.high_elapsed",
            run_id,
            &names,
            &ids
        )
        .execute(&mut **tx)
        .await?;
    } else {
        sqlx::query!(
            "INSERT INTO metric_rollups
             SELECT $1, name, $4::int2, bucket, n,
                    first[1]::bigint, first[2], first[3], last[1]::bigint, last[2], last[3],
                    low[2]::bigint, low[1], low[3], high[2]::bigint, high[1], high[3]
             FROM (SELECT d.name, d.bucket, sum(c.n)::bigint AS n,
                          min(ARRAY[c.first_step::float8, c.first_value, c.first_elapsed]) AS first,
                          max(ARRAY[c.last_step::float8, c.last_value, c.last_elapsed]) AS last,
                          min(ARRAY[c.low_value, c.low_step::float8, c.low_elapsed]) AS low,
                          max(ARRAY[c.high_value, c.high_step::float8, c.high_elapsed]) AS high
                   FROM UNNEST($2::text[], $3::int8[]) AS d (name, bucket)
                   JOIN metric_rollups c ON c.run_id = $1 AND c.name = d.name
                                        AND c.level = $4::int2 - 1
                                        AND c.bucket BETWEEN d.bucket * 4 AND d.bucket * 4 + 3
                   GROUP BY d.name, d.bucket) AS agg
             ON CONFLICT (run_id, name, level, bucket) DO UPDATE SET
                 n = EXCLUDED.n,
                 first_step = EXCLUDED.first_step, first_value = EXCLUDED.first_value,
                 first_elapsed = EXCLUDED.first_elapsed,
                 last_step = EXCLUDED.last_step, last_value = EXCLUDED.last_value,
                 last_elapsed = EXCLUDED.last_elapsed,
                 low_step = EXCLUDED.low_step, low_value = EXCLUDED.low_value,
                 low_elapsed = EXCLUDED.low_elapsed,
                 high_step = EXCLUDED.high_step, high_value = EXCLUDED.high_value,
                 high_elapsed = EXCLUDED.high_elapsed",
            run_id,
            &names,
            &ids,
            level
        )
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(step: i64, value: f64) -> TimedValue {
        TimedValue {
            step,
            value,
            elapsed_s: step as f64 / 10.0,
        }
    }

    #[test]
    fn merging_buckets_in_any_order_equals_reducing_all_points() {
        let pts: Vec<TimedValue> = (0..1000).map(|s| p(s, ((s * 7919) % 101) as f64)).collect();
        for level in 1..=4 {
            let whole = reduce(&pts, level);
            // Halves merged, the later half first.
            let (a, b) = pts.split_at(613);
            let mut merged = reduce(b, level);
            for (k, v) in reduce(a, level) {
                merged.entry(k).and_modify(|m| m.merge(&v)).or_insert(v);
            }
            assert_eq!(merged, whole, "level {level}");
        }
        // Ties: the lowest is the earliest, the highest the latest.
        let flat = reduce(&[p(4, 1.0), p(5, 1.0), p(6, 1.0)], 1);
        assert_eq!((flat[&1].low.step, flat[&1].high.step), (4, 6));
        assert_eq!(flat[&1].n, 3);
    }

    #[test]
    fn buckets_floor_negative_steps_and_levels_fit_the_width() {
        assert_eq!(bucket_of(-1, 1), -1);
        assert_eq!(bucket_of(3, 1), 0);
        assert_eq!(bucket_of(4, 1), 1);
        assert_eq!(bucket_start(-1, 1), -4);
        assert_eq!(level_for(0, 599, 600), 1);
        assert_eq!(level_for(0, 2_399, 600), 1);
        assert_eq!(level_for(0, 2_400, 600), 2);
        assert_eq!(level_for(0, 999_999, 600), 6);
        assert_eq!(level_for(0, i64::MAX / 2, 600), LEVELS);
    }

    #[test]
    fn a_cover_is_exact_aligned_and_small() {
        for (lo, hi, top) in [
            (0, 0, 3),
            (5, 4, 3),
            (1, 1_000, 3),
            (-37, 4_099, 4),
            (17, 17 + 65_536, 6),
        ] {
            let blocks = cover(lo, hi, top);
            if lo > hi {
                assert!(blocks.is_empty());
                continue;
            }
            let mut at = lo;
            for &(level, b) in &blocks {
                assert!(level <= top);
                assert_eq!(bucket_start(b, level), at, "blocks are contiguous from lo");
                at = bucket_start(b + 1, level);
            }
            assert_eq!(at, hi + 1, "the blocks end at hi");
            let whole = (bucket_of(hi, top) - bucket_of(lo, top) + 1) as usize;
            assert!(
                blocks.len() <= whole + 6 * top as usize,
                "{} blocks for {lo}..={hi}",
                blocks.len()
            );
        }
    }
}

#[cfg(test)]
#[path = "rollups_tests.rs"]
mod db_tests;
