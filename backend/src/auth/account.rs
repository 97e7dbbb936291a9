//! The signed-in person's own account: display name, password and login sessions, for the API
//! (`PATCH /auth/me`, `POST /auth/password`, `GET /auth/sessions`, `DELETE /auth/sessions/{id}`)
//! and the account page's forms, which call the same functions. Only a person with a login
//! session manages an account: an API token is refused (403 `api_token`), so a leaked script
//! token cannot change the password or end its member's sessions. Changing the password needs
//! the current one (throttled like a login) and signs out every other session; a session can
//! only end sessions of its own user.

use super::{AuthUser, password, rate_limit::LoginLimiter, routes::account};
use crate::AppState;
use crate::error::{ApiJson, ApiPath, ApiResult, AppError};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use spade_app::dto::{SessionRecord, UserRecord};
use spade_db::audit;
use spade_db::users;

async fn record(state: &AppState, auth: &AuthUser, action: &str, detail: serde_json::Value) {
    let entry = audit::Entry {
        actor_id: Some(auth.user.id),
        team_id: None,
        action,
        target: format!("user:{}", auth.user.id),
        detail,
    };
    if let Err(e) = audit::record(&state.ctx.db, &entry).await {
        tracing::warn!(error = %e, action, "account: audit entry not written");
    }
}

/// Sets the caller's display name (1 to 100 characters after trimming).
pub async fn rename(state: &AppState, auth: &AuthUser, name: &str) -> Result<UserRecord, AppError> {
    auth.person_session("change an account's name; sign in to manage your account")?;
    let name = name.trim();
    let n = name.chars().count();
    if !(1..=100).contains(&n) || name.chars().any(char::is_control) {
        return Err(AppError::invalid(
            "display_name",
            format!("must have 1 to 100 characters and no line breaks, got {n}"),
        ));
    }
    let user = users::set_display_name(&state.ctx.db, auth.user.id, name).await?;
    record(state, auth, "user.rename", serde_json::json!({})).await;
    Ok(account(&user))
}

/// Changes the caller's password: `current` must be right (a wrong one spends a login attempt
/// of this email and client), `new` follows the registration rules and differs from `current`.
/// Every other session of the account ends; this one stays. Returns how many ended.
pub async fn change_password(
    state: &AppState,
    auth: &AuthUser,
    ip: &str,
    current: String,
    new: String,
) -> Result<u64, AppError> {
    let session = auth.person_session("change a password; sign in to manage your account")?;
    password::check_policy(&new).map_err(|_| {
        AppError::invalid(
            "new_password",
            format!(
                "must have {} to {} characters",
                password::MIN_LEN,
                password::MAX_LEN
            ),
        )
    })?;
    if new == current {
        return Err(AppError::invalid(
            "new_password",
            "must differ from the current password",
        ));
    }
    let limiter: &LoginLimiter = &state.auth.limits.login;
    let email = auth.user.email.to_lowercase();
    limiter
        .attempt(ip, &email)
        .map_err(|retry_after_s| AppError::RateLimited { retry_after_s })?;
    let checked = async {
        let stored = users::credentials(&state.ctx.db, &email)
            .await?
            .map(|c| c.password_hash);
        let ok = password::verify(current, stored.clone()).await?;
        Ok::<_, AppError>((ok, stored))
    }
    .await;
    let (ok, stored) = match checked {
        Ok(v) => v,
        Err(e) => {
            limiter.abandoned(ip, &email);
            return Err(e);
        }
    };
    let (true, Some(stored)) = (ok, stored) else {
        return Err(AppError::Forbidden {
            code: "wrong_password",
            message: "`current_password` is not your current password".into(),
        });
    };
    limiter.succeeded(ip, &email);
    let hash = password::hash(new).await?;
    let ended = users::set_password(&state.ctx.db, auth.user.id, &stored, &hash, session)
        .await?
        .ok_or(AppError::Conflict {
            code: "password_changed",
            message: "the password was changed by another request just now; reload and try again"
                .into(),
        })?;
    // Event streams of the ended sessions close now, not when they next check.
    state.ctx.events.access_changed();
    record(
        state,
        auth,
        "user.password",
        serde_json::json!({ "sessions_ended": ended }),
    )
    .await;
    Ok(ended)
}

/// The caller's live sessions, most recently active first, the current one marked.
pub async fn sessions(state: &AppState, auth: &AuthUser) -> Result<Vec<SessionRecord>, AppError> {
    let current = auth.person_session("list login sessions; sign in to manage your account")?;
    let time =
        |t: &chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    Ok(users::sessions_of(&state.ctx.db, auth.user.id)
        .await?
        .into_iter()
        .map(|s| SessionRecord {
            id: s.id,
            created_at: time(&s.created_at),
            last_active_at: time(&s.last_active_at),
            expires_at: time(&s.expires_at),
            user_agent: s.user_agent,
            current: s.id == current,
        })
        .collect())
}

/// Ends session `id` of the caller (any of their own, this one included: that is logging out
/// here); another user's session, or one already ended, is 404.
pub async fn end_session(state: &AppState, auth: &AuthUser, id: i64) -> Result<(), AppError> {
    auth.person_session("end login sessions; sign in to manage your account")?;
    if !users::revoke_session(&state.ctx.db, id, auth.user.id).await? {
        return Err(AppError::NotFound("session".into()));
    }
    state.ctx.events.access_changed();
    record(
        state,
        auth,
        "session.end",
        serde_json::json!({ "session": id }),
    )
    .await;
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameRequest {
    pub display_name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordRequest {
    pub current_password: String,
    pub new_password: String,
}

/// `PATCH /api/v1/auth/me`.
pub async fn patch_me(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiJson(req): ApiJson<RenameRequest>,
) -> ApiResult<Json<UserRecord>> {
    Ok(Json(rename(&state, &auth, &req.display_name).await?))
}

/// `POST /api/v1/auth/password`: `{"sessions_ended": N}`.
pub async fn post_password(
    State(state): State<AppState>,
    super::routes::ClientIp(ip): super::routes::ClientIp,
    auth: AuthUser,
    ApiJson(req): ApiJson<PasswordRequest>,
) -> ApiResult<Json<serde_json::Value>> {
    let ended = change_password(&state, &auth, &ip, req.current_password, req.new_password).await?;
    Ok(Json(serde_json::json!({ "sessions_ended": ended })))
}

/// `GET /api/v1/auth/sessions`.
pub async fn get_sessions(
    State(state): State<AppState>,
    auth: AuthUser,
) -> ApiResult<Json<Vec<SessionRecord>>> {
    Ok(Json(sessions(&state, &auth).await?))
}

/// `DELETE /api/v1/auth/sessions/{session_id}`.
pub async fn delete_session(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    end_session(&state, &auth, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
