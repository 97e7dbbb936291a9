//! Environments of a run: filtered, paginated summaries, and one environment in full with its
//! code, hint, a sample of plays and the environment it was derived from.

use super::{AppState, Page, limit, member_scope};
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiQuery, ApiResult, AppError};
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use spade_db::environments::{self, EnvDetail, EnvFilter, EnvSummary, Play};
use spade_db::types::EnvStatus;
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
    Ok(Json(EnvResponse { env, plays, parent }))
}
