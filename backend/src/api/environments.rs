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
use serde::{Deserialize, Serialize};
use spade_db::environments::{
    self, EnvDetail, EnvExport, EnvFilter, EnvSummary, ExportFilter, Play,
};
use spade_db::reviews::{self, Review};
use spade_db::types::{EnvStatus, Verdict};
use spade_db::{DbError, RunScope};

/// Plays shown with one environment.
pub const SAMPLE_PLAYS: i64 = 8;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvQuery {
    pub skill: Option<String>,
    pub status: Option<EnvStatus>,
    pub step_min: Option<i64>,
    pub step_max: Option<i64>,
    pub regret_min: Option<f64>,
    pub regret_max: Option<f64>,
    pub limit: Option<i64>,
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

fn parse_cursor(c: &str) -> Option<(i64, i64)> {
    let (s, i) = c.split_once(':')?;
    Some((s.parse().ok()?, i.parse().ok()?))
}

/// The list for any scope (members and share links).
pub async fn list_in(
    state: &AppState,
    scope: &RunScope,
    q: EnvQuery,
) -> ApiResult<Page<EnvSummary>> {
    if let (Some(a), Some(b)) = (q.step_min, q.step_max)
        && a > b
    {
        return Err(AppError::invalid(
            "step_min",
            format!("must not exceed step_max ({a} > {b})"),
        ));
    }
    for (field, v) in [("regret_min", q.regret_min), ("regret_max", q.regret_max)] {
        if v.is_some_and(|x| !x.is_finite()) {
            return Err(AppError::invalid(field, "must be a finite number"));
        }
    }
    let limit = limit(q.limit)?;
    let after = q
        .cursor
        .as_deref()
        .map(|c| {
            parse_cursor(c).ok_or(AppError::invalid(
                "cursor",
                "expected the next_cursor of a previous page",
            ))
        })
        .transpose()?;
    let items = environments::list(
        &state.db,
        scope,
        &EnvFilter {
            skill: q.skill,
            status: q.status,
            step_min: q.step_min,
            step_max: q.step_max,
            regret_min: q.regret_min,
            regret_max: q.regret_max,
            after,
            limit,
        },
    )
    .await?;
    let next_cursor = (items.len() as i64 == limit)
        .then(|| items.last().map(|e| format!("{}:{}", e.step, e.id)))
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

pub async fn get(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((run_id, env_id)): ApiPath<(i64, String)>,
) -> ApiResult<Json<EnvResponse>> {
    let scope = member_scope(&state, &auth, run_id).await?;
    let env = environments::get(&state.db, &scope, &env_id).await?;
    let plays = environments::plays(&state.db, &scope, &env_id, SAMPLE_PLAYS).await?;
    let parent = match env.summary.parent_env_id.as_deref() {
        Some(p) => match environments::get(&state.db, &scope, p).await {
            Ok(d) => Some(d.summary),
            // The parent may come from a seed library rather than this run.
            Err(DbError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    let reviews = reviews::for_env(&state.db, &scope, &env_id).await?;
    Ok(Json(EnvResponse {
        env,
        plays,
        parent,
        reviews,
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

/// Filters of the JSONL export: the environment list's, and a band of the no-hint win rate.
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
    /// `true`: only the run's curated pool, environments some member marked good and none
    /// marked broken or reward-hackable.
    #[serde(default)]
    pub curated: bool,
}

/// Whether marks make an environment part of the curated pool (see [`ExportQuery::curated`]).
fn curated(marks: &[spade::pool::PoolReview]) -> bool {
    use spade::pool::Verdict as V;
    marks.iter().any(|r| r.verdict == V::Good) && marks.iter().all(|r| r.verdict == V::Good)
}

/// The pool line of one stored environment, with its code inline.
pub fn pool_entry(run_id: i64, e: EnvExport) -> spade::pool::PoolEntry {
    use spade::report::EnvStatus as S;
    spade::pool::PoolEntry {
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

/// `GET /runs/{id}/environments.jsonl`: every environment the filters keep, one pool line each
/// (`spade::pool::PoolEntry`, code inline), in (step, id) order. The body is produced page by
/// page ([`EXPORT_PAGE`] rows, keyset on (step, id)) while it is sent, so a run of any size
/// exports in the memory of one page. Access is checked when the request starts; a database
/// error mid-stream ends the body early (the client sees a truncated transfer, not a 200 that
/// looks complete).
pub async fn export_jsonl(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<ExportQuery>,
) -> ApiResult<Response> {
    let scope = member_scope(&state, &auth, run_id).await?;
    if let (Some(a), Some(b)) = (q.step_min, q.step_max)
        && a > b
    {
        return Err(AppError::invalid(
            "step_min",
            format!("must not exceed step_max ({a} > {b})"),
        ));
    }
    for (field, v) in [("regret_min", q.regret_min), ("regret_max", q.regret_max)] {
        if v.is_some_and(|x| !x.is_finite()) {
            return Err(AppError::invalid(field, "must be a finite number"));
        }
    }
    for (field, v) in [
        ("win_rate_min", q.win_rate_min),
        ("win_rate_max", q.win_rate_max),
    ] {
        if v.is_some_and(|x| !(0.0..=1.0).contains(&x)) {
            return Err(AppError::invalid(field, "must be within 0..=1"));
        }
    }
    let filter = ExportFilter {
        env: EnvFilter {
            skill: q.skill,
            status: q.status,
            step_min: q.step_min,
            step_max: q.step_max,
            regret_min: q.regret_min,
            regret_max: q.regret_max,
            after: None,
            limit: EXPORT_PAGE,
        },
        win_rate_min: q.win_rate_min,
        win_rate_max: q.win_rate_max,
    };
    let db = state.db.clone();
    let only_curated = q.curated;
    // The stream's state: the filter with the cursor of the next page; None once done.
    let pages = futures_util::stream::unfold(Some(filter), move |f| {
        let db = db.clone();
        async move {
            let mut f = f?;
            let rows = match environments::export_page(&db, &scope, &f).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(run_id, error = %e, "environment export failed mid-stream");
                    return Some((Err(std::io::Error::other(e.to_string())), None));
                }
            };
            if rows.is_empty() {
                return None;
            }
            let full = rows.len() as i64 == f.env.limit;
            f.env.after = rows.last().map(|r| (r.step, r.id));
            let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
            let mut marks = std::collections::HashMap::<i64, Vec<spade::pool::PoolReview>>::new();
            match reviews::for_envs(&db, &scope, &ids).await {
                Ok(m) => {
                    for (env, r) in m {
                        marks.entry(env).or_default().push(pool_review(r));
                    }
                }
                Err(e) => {
                    tracing::error!(run_id, error = %e, "environment export failed mid-stream");
                    return Some((Err(std::io::Error::other(e.to_string())), None));
                }
            }
            let mut chunk = Vec::with_capacity(rows.len() * 1024);
            for r in rows {
                let id = r.id;
                let mut entry = pool_entry(run_id, r);
                entry.reviews = marks.remove(&id).unwrap_or_default();
                if only_curated && !curated(&entry.reviews) {
                    continue;
                }
                // A PoolEntry of strings and numbers always serialises.
                if serde_json::to_writer(&mut chunk, &entry).is_ok() {
                    chunk.push(b'\n');
                }
            }
            Some((
                Ok::<_, std::io::Error>(Bytes::from(chunk)),
                full.then_some(f),
            ))
        }
    });
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
        Body::from_stream(pages),
    )
        .into_response())
}
