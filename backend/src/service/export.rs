//! Pool exports (JSONL and zip): the checked filters of an export ([`ExportQuery`]) and the
//! pages of pool entries it streams ([`ExportPages`]), one database page at a time, so an
//! export of any size holds one page in memory. The API streams them as JSONL or zip.

use super::environments::{check_ranges, parse_verdict, review_filter};
use super::{Ctx, ServiceError, ServiceResult};
use serde::Deserialize;
use spade::pool::{PoolEntry, PoolFilter};
use spade_db::environments::{self, EnvExport, EnvFilter, ExportFilter};
use spade_db::reviews::{self, Review};
use spade_db::types::EnvStatus;
use spade_db::{DbError, RunScope};

/// Rows read from the database per chunk of an export: what the export holds in memory at once.
pub const EXPORT_PAGE: i64 = 500;

/// Filters of the pool exports (JSONL and zip): the environment list's, and a band of the
/// no-hint win rate.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    pub skill: Option<String>,
    pub status: Option<EnvStatus>,
    pub step_min: Option<i64>,
    pub step_max: Option<i64>,
    pub regret_min: Option<f64>,
    pub regret_max: Option<f64>,
    pub win_rate_min: Option<f64>,
    pub win_rate_max: Option<f64>,
    /// `good`, `broken`, `reward_hackable` (some member marked it so) or `unreviewed`.
    pub verdict: Option<String>,
    /// `true`: only the run's curated pool, environments some member marked good and none
    /// marked broken or reward-hackable.
    #[serde(default)]
    pub curated: bool,
}

/// An export's checked filters: what the database applies, and the same in the pool format's
/// terms (what a card says; what `spade env export` applies again on its side).
#[derive(Debug, Clone)]
pub struct Export {
    pub db: ExportFilter,
    pub pool: PoolFilter,
}

impl ExportQuery {
    /// Checks every value, naming the field of the first bad one (422).
    pub fn checked(self) -> ServiceResult<Export> {
        check_ranges(
            self.step_min,
            self.step_max,
            self.regret_min,
            self.regret_max,
        )?;
        for (field, v) in [
            ("win_rate_min", self.win_rate_min),
            ("win_rate_max", self.win_rate_max),
        ] {
            if v.is_some_and(|x| !(0.0..=1.0).contains(&x)) {
                return Err(ServiceError::invalid(field, "must be within 0..=1"));
            }
        }
        // A pool's steps are counted from 0; a negative bound would mean something else in
        // the card than in the query.
        for (field, v) in [("step_min", self.step_min), ("step_max", self.step_max)] {
            if v.is_some_and(|x| x < 0) {
                return Err(ServiceError::invalid(field, "must be at least 0"));
            }
        }
        let verdict = parse_verdict(self.verdict.as_deref())?;
        let step = |v: Option<i64>| v.and_then(|x| u64::try_from(x).ok());
        let pool = PoolFilter {
            status: self.status,
            skill: self.skill.clone(),
            win_rate_min: self.win_rate_min,
            win_rate_max: self.win_rate_max,
            regret_min: self.regret_min,
            regret_max: self.regret_max,
            step_min: step(self.step_min),
            step_max: step(self.step_max),
            without_verdicts: vec![],
            verdict,
            curated: self.curated,
        };
        let db = ExportFilter {
            env: EnvFilter {
                skill: self.skill,
                status: self.status,
                step_min: self.step_min,
                step_max: self.step_max,
                regret_min: self.regret_min,
                regret_max: self.regret_max,
                review: verdict.map(review_filter),
                limit: EXPORT_PAGE,
                ..EnvFilter::default()
            },
            win_rate_min: self.win_rate_min,
            win_rate_max: self.win_rate_max,
        };
        Ok(Export { db, pool })
    }
}

/// The pool line of one stored environment, with its code inline.
pub fn pool_entry(run_id: i64, e: EnvExport) -> PoolEntry {
    PoolEntry {
        id: e.env_id,
        kind: e.kind,
        skill: e.skill,
        code_file: None,
        code: Some(e.code),
        hint: e.hint,
        win_rate_hint: e.win_rate_hint,
        win_rate_no_hint: e.win_rate_no_hint,
        regret: e.regret,
        designer_reward: e.designer_reward,
        reward_levels: e.reward_levels.and_then(|n| u32::try_from(n).ok()),
        parent_id: e.parent_env_id,
        run: Some(run_id.to_string()),
        step: u64::try_from(e.step).ok(),
        status: e.status,
        reviews: vec![],
    }
}

fn pool_review(r: Review) -> spade::pool::PoolReview {
    spade::pool::PoolReview {
        verdict: r.verdict,
        comment: r.comment,
    }
}

/// A run's filtered environments as pool entries, one page ([`EXPORT_PAGE`] rows, keyset on
/// (step, id)) per [`ExportPages::next`]: what every export reads, so an export of any size
/// holds one page.
#[derive(Debug)]
pub struct ExportPages {
    db: spade_db::Pool,
    scope: RunScope,
    /// The filter with the cursor of the next page; `None` once the last page was read.
    filter: Option<ExportFilter>,
    curated: bool,
}

impl ExportPages {
    pub fn new(ctx: &Ctx, scope: RunScope, export: &Export) -> Self {
        Self {
            db: ctx.db.clone(),
            scope,
            filter: Some(export.db.clone()),
            curated: export.pool.curated,
        }
    }

    /// The next page's entries with the team's marks (possibly none, when the curated filter
    /// left every row of a page out); `None` after the last page.
    pub async fn next(&mut self) -> Result<Option<Vec<PoolEntry>>, DbError> {
        let Some(f) = self.filter.as_mut() else {
            return Ok(None);
        };
        let rows = environments::export_page(&self.db, &self.scope, f).await?;
        let full = rows.len() as i64 == f.env.limit;
        f.env.after = rows.last().map(|r| (r.step, r.id));
        if !full {
            self.filter = None;
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let mut marks = std::collections::HashMap::<i64, Vec<spade::pool::PoolReview>>::new();
        for (env, r) in reviews::for_envs(&self.db, &self.scope, &ids).await? {
            marks.entry(env).or_default().push(pool_review(r));
        }
        let run_id = self.scope.run_id();
        Ok(Some(
            rows.into_iter()
                .filter_map(|r| {
                    let id = r.id;
                    let mut entry = pool_entry(run_id, r);
                    entry.reviews = marks.remove(&id).unwrap_or_default();
                    (!self.curated || spade::pool::is_curated(&entry.reviews)).then_some(entry)
                })
                .collect(),
        ))
    }
}
