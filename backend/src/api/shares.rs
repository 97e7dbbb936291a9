//! Read-only share links: members with the editor role create and revoke them; anyone holding
//! a live link reads the run, its environments and its metrics without logging in. A revoked or
//! unknown link is a 404.

use super::{AppState, Page, editor_scope, member_scope};
use crate::auth::{AuthUser, tokens};
use crate::error::{ApiJson, ApiPath, ApiQuery, ApiResult, AppError};
use crate::service::environments::{self, EnvQuery};
use crate::service::metrics::SeriesQuery;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use spade_app::dto::{CreatedShare, EnvRecord, RunRecord, SeriesRecord, ShareRecord};
use spade_db::runs;
use spade_db::shares::{self, NewShare};
use spade_db::{RunScope, audit};

/// The body of `POST /runs/{id}/shares`; `{}` makes an unlabelled link that lives until revoked.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CreateShareRequest {
    /// What the link is for (at most [`LABEL_MAX_CHARS`] characters, no control characters).
    pub label: String,
    /// Days until the link stops working, 1 to [`MAX_EXPIRY_DAYS`]; absent = until revoked.
    pub expires_in_days: Option<i32>,
}

pub const LABEL_MAX_CHARS: usize = 100;
pub const MAX_EXPIRY_DAYS: i32 = 365;

impl CreateShareRequest {
    /// The request as the database takes it, or an error naming the field at fault.
    fn checked(&self) -> Result<NewShare<'_>, AppError> {
        let label = self.label.trim();
        if label.chars().count() > LABEL_MAX_CHARS {
            return Err(AppError::invalid(
                "label",
                format!(
                    "at most {LABEL_MAX_CHARS} characters, got {}",
                    label.chars().count()
                ),
            ));
        }
        if label.chars().any(char::is_control) {
            return Err(AppError::invalid(
                "label",
                "no control characters (line breaks, tabs)",
            ));
        }
        if let Some(d) = self.expires_in_days
            && !(1..=MAX_EXPIRY_DAYS).contains(&d)
        {
            return Err(AppError::invalid(
                "expires_in_days",
                format!("expected 1 to {MAX_EXPIRY_DAYS} days, or no value for no expiry, got {d}"),
            ));
        }
        Ok(NewShare {
            label,
            expires_in_days: self.expires_in_days,
        })
    }
}

pub async fn create(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
    ApiJson(req): ApiJson<CreateShareRequest>,
) -> ApiResult<(StatusCode, Json<CreatedShare>)> {
    let scope = editor_scope(&state, &auth, run_id).await?;
    let new = req.checked()?;
    let token = tokens::random_token("sps_");
    let link = shares::create(
        &state.db,
        &scope,
        auth.user.id,
        &tokens::hash_token(&token),
        &new,
    )
    .await?;
    audit::record(
        &state.db,
        &audit::Entry {
            actor_id: Some(auth.user.id),
            team_id: Some(scope.team_id()),
            action: "share.create",
            target: format!("share:{}", link.id),
            detail: serde_json::json!({
                "run_id": run_id,
                "label": link.label,
                "expires_at": link.expires_at,
            }),
        },
    )
    .await?;
    let path = format!("/api/v1/shared/{token}");
    Ok((
        StatusCode::CREATED,
        Json(CreatedShare {
            link: crate::service::artifacts::share(&link),
            token,
            path,
        }),
    ))
}

pub async fn list(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<Vec<ShareRecord>>> {
    let scope = member_scope(&state, &auth, run_id).await?;
    Ok(Json(
        crate::service::artifacts::share_links(&state.db, &scope).await?,
    ))
}

pub async fn revoke(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath((run_id, share_id)): ApiPath<(i64, i64)>,
) -> ApiResult<Json<ShareRecord>> {
    let scope = editor_scope(&state, &auth, run_id).await?;
    let link = shares::revoke(&state.db, &scope, share_id).await?;
    audit::record(
        &state.db,
        &audit::Entry {
            actor_id: Some(auth.user.id),
            team_id: Some(scope.team_id()),
            action: "share.revoke",
            target: format!("share:{share_id}"),
            detail: serde_json::json!({ "run_id": run_id }),
        },
    )
    .await?;
    Ok(Json(crate::service::artifacts::share(&link)))
}

async fn shared_scope(state: &AppState, token: &str) -> ApiResult<RunScope> {
    Ok(RunScope::for_share_link(&state.db, &tokens::hash_token(token)).await?)
}

pub async fn shared_run(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
) -> ApiResult<Json<RunRecord>> {
    let scope = shared_scope(&state, &token).await?;
    Ok(Json(crate::service::runs::record(
        &runs::get(&state.db, &scope).await?,
    )))
}

pub async fn shared_environments(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
    ApiQuery(q): ApiQuery<EnvQuery>,
) -> ApiResult<Json<Page<EnvRecord>>> {
    let scope = shared_scope(&state, &token).await?;
    Ok(Json(environments::records(&state.db, &scope, q).await?))
}

pub async fn shared_series(
    State(state): State<AppState>,
    ApiPath((token, name)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<SeriesQuery>,
) -> ApiResult<Json<SeriesRecord>> {
    let scope = shared_scope(&state, &token).await?;
    Ok(Json(
        crate::service::metrics::series(&state.db, &scope, name, q).await?,
    ))
}
