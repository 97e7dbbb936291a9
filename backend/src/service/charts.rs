//! The run pages' chart cache: drawing a run's charts downsamples every series, which a page
//! refresh would otherwise repeat while nothing changed. Keyed by the series' revisions, so a
//! new point is always drawn.

use spade_app::dto;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The charts last drawn for each of the most recently viewed runs, with the series revisions
/// they were drawn from ([`super::metrics::charts`]). Bounded: past [`ChartCache::RUNS`] runs
/// the one viewed longest ago is dropped.
#[derive(Debug, Default)]
pub struct ChartCache {
    inner: Mutex<ChartCacheInner>,
}

#[derive(Debug, Default)]
struct ChartCacheInner {
    clock: u64,
    runs: HashMap<i64, CachedCharts>,
}

#[derive(Debug)]
struct CachedCharts {
    used: u64,
    fingerprint: Vec<(String, i64)>,
    series: Arc<Vec<dto::MetricSeries>>,
}

impl ChartCache {
    /// Runs whose charts are kept (each a few hundred KB at most).
    pub const RUNS: usize = 64;

    fn lock(&self) -> std::sync::MutexGuard<'_, ChartCacheInner> {
        // Every update leaves the map whole, so a poisoned lock is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The charts of `run` if they were drawn from exactly these series revisions.
    pub fn get(
        &self,
        run: i64,
        fingerprint: &[(String, i64)],
    ) -> Option<Arc<Vec<dto::MetricSeries>>> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let hit = inner
            .runs
            .get_mut(&run)
            .filter(|c| c.fingerprint == fingerprint)?;
        hit.used = now;
        Some(Arc::clone(&hit.series))
    }

    pub fn put(
        &self,
        run: i64,
        fingerprint: Vec<(String, i64)>,
        series: Arc<Vec<dto::MetricSeries>>,
    ) {
        let mut inner = self.lock();
        inner.clock += 1;
        let used = inner.clock;
        if inner.runs.len() >= Self::RUNS
            && !inner.runs.contains_key(&run)
            && let Some(oldest) = inner
                .runs
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(id, _)| *id)
        {
            inner.runs.remove(&oldest);
        }
        inner.runs.insert(
            run,
            CachedCharts {
                used,
                fingerprint,
                series,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charts(name: &str) -> Arc<Vec<dto::MetricSeries>> {
        Arc::new(vec![dto::MetricSeries {
            name: name.into(),
            points: Vec::new(),
        }])
    }

    #[test]
    fn a_changed_revision_misses_and_the_least_recently_viewed_run_goes_first() {
        let c = ChartCache::default();
        let fp = |r: i64| vec![("loss".to_owned(), r)];
        c.put(1, fp(3), charts("a"));
        assert!(c.get(1, &fp(3)).is_some());
        assert!(c.get(1, &fp(4)).is_none(), "a new revision is drawn again");
        assert!(
            c.get(2, &fp(3)).is_none(),
            "another run's charts are not this run's"
        );
        for run in 2..=ChartCache::RUNS as i64 {
            c.put(run, fp(0), charts("b"));
        }
        // Run 1 is viewed again, so run 2 is now the one viewed longest ago.
        assert!(c.get(1, &fp(3)).is_some());
        c.put(1_000, fp(0), charts("c"));
        assert!(c.get(2, &fp(0)).is_none());
        assert!(c.get(1, &fp(3)).is_some());
        assert!(c.get(1_000, &fp(0)).is_some());
    }
}
