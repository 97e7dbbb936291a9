//! Environments of a run: filtered, paginated summaries, one environment in full with its
//! code, hint, a sample of plays and the environment it was derived from, and the whole
//! filtered set as a pool's JSONL (`spade::pool`), streamed page by page.

use super::{AppState, Page, editor_scope, limit, member_scope};
use crate::auth::AuthUser;
use crate::error::{ApiJson, ApiPath, ApiQuery, ApiResult, AppError};
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use spade::pool::{PoolEntry, PoolFilter, VerdictFilter};
use spade_db::environments::{
    self, EnvCursor, EnvDetail, EnvExport, EnvFilter, EnvSort, EnvSummary, ExportFilter, Play,
    ReviewFilter,
};
use spade_db::reviews::{self, Review};
use spade_db::types::{EnvStatus, Verdict};
use spade_db::{DbError, RunScope};

/// Plays shown with one environment, by the API and the environment page alike.
pub const SAMPLE_PLAYS: i64 = 16;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvQuery {
    pub skill: Option<String>,
    pub status: Option<EnvStatus>,
    pub step_min: Option<i64>,
    pub step_max: Option<i64>,
    pub regret_min: Option<f64>,
    pub regret_max: Option<f64>,
    /// `good`, `broken`, `reward_hackable` (some member marked it so) or `unreviewed`.
    pub verdict: Option<String>,
    /// `step` (default), `regret`, `win_rate_no_hint`, `win_rate_hint` or `designer_reward`.
    pub sort: Option<String>,
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page in the same order.
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct EnvResponse {
    #[serde(flatten)]
    pub env: EnvDetail,
    pub plays: Vec<Play>,
    /// The parent's summary, when the parent is known in this run.
    pub parent: Option<EnvSummary>,
    /// The team's review marks, oldest first.
    pub reviews: Vec<Review>,
}

/// The `verdict` query parameter, checked (422 naming it for anything else).
pub fn parse_verdict(v: Option<&str>) -> ApiResult<Option<VerdictFilter>> {
    v.filter(|v| !v.is_empty())
        .map(|v| {
            VerdictFilter::parse(v).ok_or_else(|| {
                AppError::invalid(
                    "verdict",
                    format!("expected good, broken, reward_hackable or unreviewed, got {v:?}"),
                )
            })
        })
        .transpose()
}

/// A `status` given as text (the dashboard's form), read as the API's query reads it.
pub fn parse_status(s: &str) -> ApiResult<EnvStatus> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
        AppError::invalid(
            "status",
            format!("expected accepted, rejected or broken_in_play, got {s:?}"),
        )
    })
}

/// The database's form of a review filter.
pub fn review_filter(v: VerdictFilter) -> ReviewFilter {
    match v {
        VerdictFilter::Good => ReviewFilter::Marked(Verdict::Good),
        VerdictFilter::Broken => ReviewFilter::Marked(Verdict::Broken),
        VerdictFilter::RewardHackable => ReviewFilter::Marked(Verdict::RewardHackable),
        VerdictFilter::Unreviewed => ReviewFilter::Unreviewed,
    }
}

/// The checks every environment filter shares: a step range in order, finite regret bounds.
fn check_ranges(
    step_min: Option<i64>,
    step_max: Option<i64>,
    regret_min: Option<f64>,
    regret_max: Option<f64>,
) -> ApiResult<()> {
    if let (Some(a), Some(b)) = (step_min, step_max)
        && a > b
    {
        return Err(AppError::invalid(
            "step_min",
            format!("must not exceed step_max ({a} > {b})"),
        ));
    }
    for (field, v) in [("regret_min", regret_min), ("regret_max", regret_max)] {
        if v.is_some_and(|x| !x.is_finite()) {
            return Err(AppError::invalid(field, "must be a finite number"));
        }
    }
    Ok(())
}

/// The list for any scope (members and share links).
pub async fn list_in(
    state: &AppState,
    scope: &RunScope,
    q: EnvQuery,
) -> ApiResult<Page<EnvSummary>> {
    check_ranges(q.step_min, q.step_max, q.regret_min, q.regret_max)?;
    let review = parse_verdict(q.verdict.as_deref())?.map(review_filter);
    let limit = limit(q.limit)?;
    let mut filter = EnvFilter {
        skill: q.skill,
        status: q.status,
        step_min: q.step_min,
        step_max: q.step_max,
        regret_min: q.regret_min,
        regret_max: q.regret_max,
        review,
        sort: EnvSort::from_param(q.sort.as_deref()).map_err(|m| AppError::invalid("sort", m))?,
        // One more than asked: a next page is offered only when there is one.
        limit: limit + 1,
        ..EnvFilter::default()
    };
    if let Some(c) = q.cursor.as_deref() {
        let c = EnvCursor::parse(filter.sort, c).ok_or(AppError::invalid(
            "cursor",
            "expected the next_cursor of a previous page in the same sort order",
        ))?;
        filter.set_cursor(c);
    }
    let mut items = environments::list(&state.db, scope, &filter).await?;
    let more = items.len() as i64 > limit;
    items.truncate(usize::try_from(limit).unwrap_or(0));
    let next_cursor = more
        .then(|| items.last().map(|e| filter.cursor_after(e)))
        .flatten();
    Ok(Page { items, next_cursor })
}

pub async fn list(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<EnvQuery>,
) -> ApiResult<Json<Page<EnvSummary>>> {
    let scope = member_scope(&state, &auth, run_id).await?;
    Ok(Json(list_in(&state, &scope, q).await?))
}

/// One environment with what its page and the API show beside it: a sample of its plays, the
/// environment it was derived from (when that is in this run) and the team's review marks.
#[derive(Debug)]
pub struct EnvWithContext {
    pub env: EnvDetail,
    pub plays: Vec<Play>,
    pub parent: Option<EnvDetail>,
    pub reviews: Vec<Review>,
}

/// One environment for any scope (the API and the dashboard read it the same way).
pub async fn detail_in(
    state: &AppState,
    scope: &RunScope,
    env_id: &str,
) -> ApiResult<EnvWithContext> {
    let env = environments::get(&state.db, scope, env_id).await?;
    let plays = environments::plays(&state.db, scope, env_id, SAMPLE_PLAYS).await?;
    let parent = match env.summary.parent_env_id.as_deref() {
        Some(p) => match environments::get(&state.db, scope, p).await {
            Ok(d) => Some(d),
            // The parent may come from a seed library rather than this run.
            Err(DbError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    let reviews = reviews::for_env(&state.db, scope, env_id).await?;
    Ok(EnvWithContext {
        env,
        plays,
        parent,
        reviews,
    })
}

pub async fn get(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((run_id, env_id)): ApiPath<(i64, String)>,
) -> ApiResult<Json<EnvResponse>> {
    let scope = member_scope(&state, &auth, run_id).await?;
    let d = detail_in(&state, &scope, &env_id).await?;
    Ok(Json(EnvResponse {
        env: d.env,
        plays: d.plays,
        parent: d.parent.map(|p| p.summary),
        reviews: d.reviews,
    }))
}

/// Body of `POST /runs/{id}/environments/{env_id}/review`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewBody {
    pub verdict: Verdict,
    #[serde(default)]
    pub comment: String,
}

/// Marks an environment good, broken or reward-hackable (editors and owners; a viewer gets 403,
/// someone outside the team 404). Marking again replaces the caller's mark.
pub async fn review(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((run_id, env_id)): ApiPath<(i64, String)>,
    ApiJson(body): ApiJson<ReviewBody>,
) -> ApiResult<Json<Review>> {
    let scope = editor_scope(&state, &auth, run_id).await?;
    let chars = body.comment.chars().count();
    if chars > reviews::MAX_COMMENT_CHARS {
        return Err(AppError::invalid(
            "comment",
            format!(
                "at most {} characters, got {chars}",
                reviews::MAX_COMMENT_CHARS
            ),
        ));
    }
    let r = reviews::mark(
        &state.db,
        &scope,
        auth.user.id,
        &env_id,
        body.verdict,
        &body.comment,
    )
    .await?;
    Ok(Json(r))
}

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
    pub fn checked(self) -> ApiResult<Export> {
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
                return Err(AppError::invalid(field, "must be within 0..=1"));
            }
        }
        // A pool's steps are counted from 0; a negative bound would mean something else in
        // the card than in the query.
        for (field, v) in [("step_min", self.step_min), ("step_max", self.step_max)] {
            if v.is_some_and(|x| x < 0) {
                return Err(AppError::invalid(field, "must be at least 0"));
            }
        }
        let verdict = parse_verdict(self.verdict.as_deref())?;
        let step = |v: Option<i64>| v.and_then(|x| u64::try_from(x).ok());
        let pool = PoolFilter {
            status: self.status.map(|s| match s {
                EnvStatus::Accepted => spade::report::EnvStatus::Accepted,
                EnvStatus::Rejected => spade::report::EnvStatus::Rejected,
                EnvStatus::BrokenInPlay => spade::report::EnvStatus::BrokenInPlay,
            }),
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
    use spade::report::EnvStatus as S;
    PoolEntry {
        id: e.env_id,
        kind: match e.kind {
            spade_db::types::EnvKind::Game => spade::EnvKind::Game,
            spade_db::types::EnvKind::ToolUse => spade::EnvKind::ToolUse,
        },
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
        status: match e.status {
            EnvStatus::Accepted => S::Accepted,
            EnvStatus::Rejected => S::Rejected,
            EnvStatus::BrokenInPlay => S::BrokenInPlay,
        },
        reviews: vec![],
    }
}

fn pool_review(r: Review) -> spade::pool::PoolReview {
    use spade::pool::Verdict as V;
    spade::pool::PoolReview {
        verdict: match r.verdict {
            Verdict::Good => V::Good,
            Verdict::Broken => V::Broken,
            Verdict::RewardHackable => V::RewardHackable,
        },
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
    pub fn new(state: &AppState, scope: RunScope, export: &Export) -> Self {
        Self {
            db: state.db.clone(),
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

/// `GET /runs/{id}/environments.jsonl`: every environment the filters keep, one pool line each
/// (`spade::pool::PoolEntry`, code inline), in (step, id) order. The body is produced page by
/// page ([`ExportPages`]) while it is sent, so a run of any size exports in the memory of one
/// page. Access is checked when the request starts; a database error mid-stream ends the body
/// early (the client sees a truncated transfer, not a 200 that looks complete).
pub async fn export_jsonl(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<ExportQuery>,
) -> ApiResult<Response> {
    let scope = member_scope(&state, &auth, run_id).await?;
    let export = q.checked()?;
    let pages = ExportPages::new(&state, scope, &export);
    // Fused: the compression layer polls its inner body once more after the end, which a bare
    // `unfold` answers with a panic.
    let body = futures_util::stream::unfold(Some(pages), move |pages| async move {
        let mut pages = pages?;
        match pages.next().await {
            Ok(None) => None,
            Ok(Some(entries)) => {
                let mut chunk = Vec::with_capacity(entries.len() * 1024);
                for entry in entries {
                    // A PoolEntry of strings and numbers always serialises.
                    if serde_json::to_writer(&mut chunk, &entry).is_ok() {
                        chunk.push(b'\n');
                    }
                }
                Some((Ok::<_, std::io::Error>(Bytes::from(chunk)), Some(pages)))
            }
            Err(e) => {
                tracing::error!(run_id, error = %e, "environment export failed mid-stream");
                Some((Err(std::io::Error::other(e.to_string())), None))
            }
        }
    })
    .fuse();
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "application/jsonl; charset=utf-8".to_owned(),
            ),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"run-{run_id}-environments.jsonl\""),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response())
}
