//! Environments of a run: the filtered, paged list (filters, sort, keyset cursor, page size
//! checked once) and one environment with its plays, parent and review marks, each in the API's
//! shape ([`dto::EnvRecord`], [`dto::EnvRecordDetail`]) and the pages' shape
//! ([`dto::EnvironmentSummary`], [`dto::EnvironmentDetail`]). Members and share links read
//! through the same functions; the caller resolved the scope. Editors mark environments
//! ([`mark`]).

use super::{editor_scope, limit};
use crate::service::{Caller, Ctx};
use crate::service::{ServiceError, ServiceResult};
use serde::Deserialize;
use spade::pool::VerdictFilter;
use spade_app::dto;
use spade_db::environments::{
    self, EnvCursor, EnvDetail, EnvFilter, EnvSort, EnvSummary, Play, ReviewFilter,
};
use spade_db::reviews::{self, Review};
use spade_db::types::{EnvStatus, Verdict};
use spade_db::{DbError, Pool, RunScope};
use std::collections::HashMap;

/// Plays shown with one environment, by the API and the environment page alike.
pub const SAMPLE_PLAYS: i64 = 16;

/// The list's query, as the API's query string and the environment browser's form give it.
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

/// The `verdict` query parameter, checked (422 naming it for anything else).
pub fn parse_verdict(v: Option<&str>) -> ServiceResult<Option<VerdictFilter>> {
    v.filter(|v| !v.is_empty())
        .map(|v| {
            VerdictFilter::parse(v).ok_or_else(|| {
                ServiceError::invalid(
                    "verdict",
                    format!("expected good, broken, reward_hackable or unreviewed, got {v:?}"),
                )
            })
        })
        .transpose()
}

/// A `status` given as text (the dashboard's form), read as the API's query reads it.
pub fn parse_status(s: &str) -> ServiceResult<EnvStatus> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
        ServiceError::invalid(
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

/// The checks every environment filter shares (the list and the pool export): a step range in
/// order, finite regret bounds.
pub fn check_ranges(
    step_min: Option<i64>,
    step_max: Option<i64>,
    regret_min: Option<f64>,
    regret_max: Option<f64>,
) -> ServiceResult<()> {
    if let (Some(a), Some(b)) = (step_min, step_max)
        && a > b
    {
        return Err(ServiceError::invalid(
            "step_min",
            format!("must not exceed step_max ({a} > {b})"),
        ));
    }
    for (field, v) in [("regret_min", regret_min), ("regret_max", regret_max)] {
        if v.is_some_and(|x| !x.is_finite()) {
            return Err(ServiceError::invalid(field, "must be a finite number"));
        }
    }
    Ok(())
}

/// One page of the run's environments (rows); `next_cursor` is absent on the last page.
pub async fn page(
    db: &Pool,
    scope: &RunScope,
    q: EnvQuery,
) -> ServiceResult<dto::Page<EnvSummary>> {
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
        sort: EnvSort::from_param(q.sort.as_deref())
            .map_err(|m| ServiceError::invalid("sort", m))?,
        // One more than asked: a next page is offered only when there is one.
        limit: limit + 1,
        ..EnvFilter::default()
    };
    if let Some(c) = q.cursor.as_deref() {
        let c = EnvCursor::parse(filter.sort, c).ok_or(ServiceError::invalid(
            "cursor",
            "expected the next_cursor of a previous page in the same sort order",
        ))?;
        filter.set_cursor(c);
    }
    let mut items = environments::list(db, scope, &filter).await?;
    let more = items.len() as i64 > limit;
    items.truncate(usize::try_from(limit).unwrap_or(0));
    let next_cursor = more
        .then(|| items.last().map(|e| filter.cursor_after(e)))
        .flatten();
    Ok(dto::Page { items, next_cursor })
}

/// A page as the API lists it.
pub async fn records(
    db: &Pool,
    scope: &RunScope,
    q: EnvQuery,
) -> ServiceResult<dto::Page<dto::EnvRecord>> {
    let p = page(db, scope, q).await?;
    Ok(dto::Page {
        items: p.items.iter().map(record).collect(),
        next_cursor: p.next_cursor,
    })
}

/// A page as the environment browser shows it, with each row's review verdicts (one query for
/// the page).
pub async fn summaries(
    db: &Pool,
    scope: &RunScope,
    q: EnvQuery,
) -> ServiceResult<dto::Page<dto::EnvironmentSummary>> {
    let p = page(db, scope, q).await?;
    let ids: Vec<i64> = p.items.iter().map(|e| e.id).collect();
    let mut verdicts: HashMap<i64, Vec<String>> = HashMap::new();
    for (env, r) in reviews::for_envs(db, scope, &ids).await? {
        verdicts
            .entry(env)
            .or_default()
            .push(r.verdict.as_str().to_owned());
    }
    Ok(dto::Page {
        items: p
            .items
            .iter()
            .map(|e| {
                let verdicts = verdicts.remove(&e.id).unwrap_or_default();
                dto::EnvironmentSummary::of(&record(e), scope.run_id(), verdicts)
            })
            .collect(),
        next_cursor: p.next_cursor,
    })
}

/// One environment with what is shown beside it: a sample of its plays, the environment it
/// was derived from (when that is in this run) and the team's review marks.
#[derive(Debug)]
pub struct EnvWithContext {
    pub env: EnvDetail,
    pub plays: Vec<Play>,
    pub parent: Option<EnvDetail>,
    pub reviews: Vec<Review>,
}

/// One environment, read the same way for every caller.
pub async fn detail(db: &Pool, scope: &RunScope, env_id: &str) -> ServiceResult<EnvWithContext> {
    let env = environments::get(db, scope, env_id).await?;
    let plays = environments::plays(db, scope, env_id, SAMPLE_PLAYS).await?;
    let parent = match env.summary.parent_env_id.as_deref() {
        Some(p) => match environments::get(db, scope, p).await {
            Ok(d) => Some(d),
            // The parent may come from a seed library rather than this run.
            Err(DbError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    let reviews = reviews::for_env(db, scope, env_id).await?;
    Ok(EnvWithContext {
        env,
        plays,
        parent,
        reviews,
    })
}

/// One environment as the API returns it.
pub async fn record_detail(
    db: &Pool,
    scope: &RunScope,
    env_id: &str,
) -> ServiceResult<dto::EnvRecordDetail> {
    Ok(record_with_parent_code(detail(db, scope, env_id).await?).0)
}

/// One environment as its page shows it (`run_name`: the run's, for the heading): a view of
/// the API's record.
pub async fn page_detail(
    db: &Pool,
    scope: &RunScope,
    env_id: &str,
    run_name: String,
) -> ServiceResult<dto::EnvironmentDetail> {
    let (record, parent_code) = record_with_parent_code(detail(db, scope, env_id).await?);
    Ok(dto::EnvironmentDetail::of(
        record,
        scope.run_id(),
        run_name,
        parent_code,
        scope.can_edit(),
    ))
}

/// The API's record of an environment, and its parent's code, which the record leaves out and
/// the page diffs against.
fn record_with_parent_code(d: EnvWithContext) -> (dto::EnvRecordDetail, Option<String>) {
    let e = d.env;
    let (parent, parent_code) = match d.parent {
        Some(p) => (Some(record(&p.summary)), Some(p.code)),
        None => (None, None),
    };
    let record = dto::EnvRecordDetail {
        summary: record(&e.summary),
        rejection_message: e.rejection_message,
        code: e.code,
        hint: e.hint,
        attempts: e.attempts,
        created_at: time(&e.created_at),
        plays: d
            .plays
            .into_iter()
            .map(|p| dto::PlayRecord {
                id: p.id,
                env_id: p.env_id,
                step: p.step,
                with_hint: p.with_hint,
                episode_return: p.episode_return,
                won: p.won,
                turns: p.turns,
                transcript: p.transcript,
            })
            .collect(),
        parent,
        reviews: d.reviews.into_iter().map(review_record).collect(),
    };
    (record, parent_code)
}

/// The API's times: what chrono's own serializer writes (the fraction of a second the database
/// keeps), so they read as before the API served DTOs. Pages show whole seconds.
const AUTO_SI: chrono::SecondsFormat = chrono::SecondsFormat::AutoSi;

fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(AUTO_SI, true)
}

/// A review mark as the API returns it.
pub fn review_record(r: Review) -> dto::ReviewDto {
    dto::ReviewDto {
        reviewer: r.reviewer,
        verdict: r.verdict.as_str().to_owned(),
        comment: r.comment,
        updated_at: time(&r.updated_at),
    }
}

/// The API's view of a stored environment's summary.
pub fn record(e: &EnvSummary) -> dto::EnvRecord {
    dto::EnvRecord {
        id: e.id,
        env_id: e.env_id.clone(),
        step: e.step,
        skill: e.skill.clone(),
        kind: e.kind,
        status: e.status,
        rejection_reason: e.rejection_reason.clone(),
        parent_env_id: e.parent_env_id.clone(),
        regret: e.regret,
        win_rate_hint: e.win_rate_hint,
        win_rate_no_hint: e.win_rate_no_hint,
        designer_reward: e.designer_reward,
        reward_levels: e.reward_levels,
        title: e.title.clone(),
        code_skill: e.code_skill.clone(),
    }
}

/// Marks environment `env_id` of run `run_id` good, broken or reward-hackable (editors and
/// owners; a viewer gets 403, someone outside the team 404). Marking again replaces the
/// caller's mark.
pub async fn mark(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
    env_id: &str,
    verdict: Verdict,
    comment: &str,
) -> ServiceResult<dto::ReviewDto> {
    let scope = editor_scope(ctx, caller, run_id).await?;
    let chars = comment.chars().count();
    if chars > reviews::MAX_COMMENT_CHARS {
        return Err(ServiceError::invalid(
            "comment",
            format!(
                "at most {} characters, got {chars}",
                reviews::MAX_COMMENT_CHARS
            ),
        ));
    }
    let r = reviews::mark(&ctx.db, &scope, caller.user_id, env_id, verdict, comment).await?;
    Ok(review_record(r))
}
