//! Environments of a run: filtered, paginated summaries, one environment in full with its
//! code, hint, a sample of plays and the environment it was derived from, and the whole
//! filtered set as a pool's JSONL (`spade::pool`), streamed page by page.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiJson, ApiPath, ApiQuery, ApiResult};
use crate::service::export::{ExportPages, ExportQuery};
use crate::service::member_scope;
use crate::service::{self, environments::EnvQuery};
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use futures_util::StreamExt;
use serde::Deserialize;
use spade_app::dto::{EnvRecord, EnvRecordDetail, Page, ReviewDto};
use spade_db::types::Verdict;

pub async fn list(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<EnvQuery>,
) -> ApiResult<Json<Page<EnvRecord>>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(
        service::environments::records(&state.ctx.db, &scope, q).await?,
    ))
}

pub async fn get(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((run_id, env_id)): ApiPath<(i64, String)>,
) -> ApiResult<Json<EnvRecordDetail>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    Ok(Json(
        service::environments::record_detail(&state.ctx.db, &scope, &env_id).await?,
    ))
}

/// Body of `POST /runs/{id}/environments/{env_id}/review`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewBody {
    pub verdict: Verdict,
    #[serde(default)]
    pub comment: String,
}

/// Marks an environment (see [`service::environments::mark`]).
pub async fn review(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((run_id, env_id)): ApiPath<(i64, String)>,
    ApiJson(body): ApiJson<ReviewBody>,
) -> ApiResult<Json<ReviewDto>> {
    let r = service::environments::mark(
        &state.ctx,
        &auth.caller(),
        run_id,
        &env_id,
        body.verdict,
        &body.comment,
    )
    .await?;
    Ok(Json(r))
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
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    let export = q.checked()?;
    let pages = ExportPages::new(&state.ctx, scope, &export);
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
    Ok(super::attachment(
        "application/jsonl; charset=utf-8",
        &format!("run-{run_id}-environments.jsonl"),
        Body::from_stream(body),
    ))
}
