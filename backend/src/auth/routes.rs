//! `/api/v1/auth/*`: register, login, refresh, logout, me.

use super::{
    ACCESS_COOKIE, ACCESS_TTL, AuthUser, CSRF_COOKIE, CSRF_HEADER, REFRESH_COOKIE, REFRESH_TTL,
    cookie, jwt, password,
};
use crate::AppState;
use crate::error::{ApiJson, ApiResult, AppError};
use crate::tokens;
use axum::Json;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use spade_db::audit;
use spade_db::users::{self, Refresh, User};
use std::convert::Infallible;
use std::net::SocketAddr;

/// The client's IP as the socket saw it ("unknown" when served without connect info, e.g. in
/// tests that call the router directly).
#[derive(Debug, Clone)]
pub struct ClientIp(pub String);

impl ClientIp {
    /// The client's IP from a request's extensions.
    pub fn of(extensions: &axum::http::Extensions) -> Self {
        ClientIp(
            extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip().to_string())
                .unwrap_or_else(|| "unknown".into()),
        )
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ClientIp {
    type Rejection = Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(ClientIp::of(&parts.extensions))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub email: String,
    pub display_name: String,
    pub password: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub email: String,
    pub password: String,
    /// `true` for scripts and other API clients: tokens come in the body, no cookies are set.
    #[serde(default)]
    pub api_client: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefreshRequest {
    /// API clients send the refresh token here; browsers send the cookie instead.
    pub refresh_token: Option<String>,
}

/// Reply of login and refresh.
#[derive(Debug, Serialize)]
pub struct SessionReply {
    pub user: User,
    /// Seconds until the access token expires.
    pub expires_in: u64,
    /// Echo in `X-CSRF-Token` on cookie-authenticated changes.
    pub csrf_token: String,
    /// Only for API clients.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    /// Only for API clients.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
}

/// `POST /api/v1/auth/register`: the first user becomes admin; afterwards registration is
/// open or closed by configuration.
pub async fn register(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    ApiJson(req): ApiJson<RegisterRequest>,
) -> ApiResult<Response> {
    state
        .auth
        .limits
        .register
        .take(&ip)
        .map_err(|retry_after_s| AppError::RateLimited { retry_after_s })?;
    let email = crate::service::normalize_email(&req.email)?;
    let name = req.display_name.trim();
    if !(1..=100).contains(&name.chars().count()) {
        return Err(AppError::invalid(
            "display_name",
            "must have 1 to 100 characters",
        ));
    }
    password::check_policy(&req.password)?;
    let hash = password::hash(req.password).await?;
    let user = users::register(&state.ctx.db, &email, name, &hash, state.auth.registration)
        .await?
        .ok_or(AppError::Forbidden {
            code: "registration_closed",
            message: "registration is closed on this server; ask an administrator".into(),
        })?;
    audit::record(
        &state.ctx.db,
        &audit::Entry {
            actor_id: Some(user.id),
            team_id: None,
            action: "user.register",
            target: format!("user:{}", user.id),
            detail: serde_json::json!({ "admin": user.is_admin }),
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(account(&user))).into_response())
}

/// `POST /api/v1/auth/login`: rate-limited per client IP and email, and per email.
pub async fn login(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LoginRequest>,
) -> ApiResult<Response> {
    let email = req.email.trim().to_lowercase();
    state
        .auth
        .limits
        .login
        .attempt(&ip, &email)
        .map_err(|retry_after_s| AppError::RateLimited { retry_after_s })?;
    // Only a wrong password spends the attempt: one that fails because the database is down
    // (or anything else on the server's side) gives its slot back, so an outage does not lock
    // people out once it is over.
    let checked = async {
        let creds = users::credentials(&state.ctx.db, &email).await?;
        let stored = creds.as_ref().map(|c| c.password_hash.clone());
        Ok::<_, AppError>((password::verify(req.password, stored).await?, creds))
    }
    .await;
    let (verified, creds) = match checked {
        Ok(v) => v,
        Err(e) => {
            state.auth.limits.login.abandoned(&ip, &email);
            return Err(e);
        }
    };
    if !verified {
        return Err(AppError::unauthenticated(
            "invalid_credentials",
            "wrong email or password",
        ));
    }
    let Some(creds) = creds else {
        return Err(AppError::Internal(anyhow::anyhow!(
            "verified without an account"
        )));
    };
    state.auth.limits.login.succeeded(&ip, &email);
    let refresh = tokens::random_token("sprt_");
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let session_id = users::create_session(
        &state.ctx.db,
        creds.user.id,
        &tokens::hash_token(&refresh),
        refresh_expiry(),
        user_agent,
    )
    .await?;
    audit::record(
        &state.ctx.db,
        &audit::Entry {
            actor_id: Some(creds.user.id),
            team_id: None,
            action: "user.login",
            target: format!("session:{session_id}"),
            detail: serde_json::json!({ "ip": ip }),
        },
    )
    .await?;
    let secure = cookies_secure(&state, &headers);
    session_response(
        &state,
        creds.user,
        session_id,
        Some(refresh),
        req.api_client,
        secure,
    )
}

/// `POST /api/v1/auth/refresh`: rotates the refresh token and issues a new access token.
/// Browsers send the refresh cookie plus `X-CSRF-Token`; API clients send the token in the body.
pub async fn refresh(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    state
        .auth
        .limits
        .refresh
        .take(&ip)
        .map_err(|retry_after_s| AppError::RateLimited { retry_after_s })?;
    // The body is optional (browsers send none), so it is parsed here rather than extracted.
    let req: RefreshRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RefreshRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| AppError::Invalid {
            code: "invalid_body",
            message: format!("refresh request: {e}"),
        })?
    };
    let from_body = req.refresh_token;
    let api_client = from_body.is_some();
    let presented =
        match from_body {
            Some(t) => t,
            None => cookie(&headers, REFRESH_COOKIE).map(str::to_owned).ok_or(
                AppError::unauthenticated(
                    "missing_token",
                    "no refresh token (spade_refresh cookie or `refresh_token` in the body)",
                ),
            )?,
        };
    let presented_hash = tokens::hash_token(&presented);
    let refused = || {
        AppError::unauthenticated(
            "invalid_refresh_token",
            "the refresh token is unknown, rotated, revoked or expired; log in again",
        )
    };
    if !api_client {
        let (sid, _) =
            users::session_by_refresh(&state.ctx.db, &presented_hash, users::REFRESH_RACE_GRACE_S)
                .await?
                .ok_or_else(refused)?;
        let csrf = headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !state.auth.signer.csrf_matches(sid, csrf) {
            return Err(AppError::Forbidden {
                code: "csrf",
                message: "refreshing with the cookie needs the X-CSRF-Token header".into(),
            });
        }
    }
    let next = tokens::random_token("sprt_");
    match users::rotate_refresh(
        &state.ctx.db,
        &presented_hash,
        &tokens::hash_token(&next),
        refresh_expiry(),
        if api_client {
            0.0
        } else {
            users::REFRESH_RACE_GRACE_S
        },
    )
    .await?
    {
        Refresh::Rotated {
            session_id,
            user_id,
        } => {
            let user = users::get(&state.ctx.db, user_id).await?;
            let secure = cookies_secure(&state, &headers);
            session_response(&state, user, session_id, Some(next), api_client, secure)
        }
        Refresh::Raced {
            session_id,
            user_id,
        } => {
            // Another tab of this browser rotated the token a moment ago and the browser keeps
            // its new cookie: this one gets an access token only.
            let user = users::get(&state.ctx.db, user_id).await?;
            let secure = cookies_secure(&state, &headers);
            session_response(&state, user, session_id, None, api_client, secure)
        }
        Refresh::Reused {
            session_id,
            user_id,
        } => {
            reused(&state, session_id, user_id).await?;
            Err(refused())
        }
        Refresh::Refused => Err(refused()),
    }
}

/// A rotated refresh token came back: it was copied. The session is revoked (done by the
/// query); its open pages and streams end too, and the audit log says so.
pub(crate) async fn reused(state: &AppState, session_id: i64, user_id: i64) -> ApiResult<()> {
    state.ctx.events.access_changed();
    audit::record(
        &state.ctx.db,
        &audit::Entry {
            actor_id: Some(user_id),
            team_id: None,
            action: "session.refresh_reuse",
            target: format!("session:{session_id}"),
            detail: serde_json::json!({}),
        },
    )
    .await?;
    tracing::warn!(session_id, user_id, "refresh token reuse: session revoked");
    Ok(())
}

/// `POST /api/v1/auth/logout`: revokes the session (its access and refresh tokens stop working
/// now) and clears the cookies.
pub async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    auth: AuthUser,
) -> ApiResult<Response> {
    let secure = cookies_secure(&state, &headers);
    let session_id = auth.person_session(
        "log out: it has no session; revoke it on the teams page or with \
         DELETE /api/v1/teams/{team_id}/tokens/{token_id}",
    )?;
    users::revoke_session(&state.ctx.db, session_id, auth.user.id).await?;
    state.ctx.events.access_changed();
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    for (name, path) in [
        (ACCESS_COOKIE, "/"),
        (REFRESH_COOKIE, "/"),
        (REFRESH_COOKIE, LEGACY_REFRESH_PATH),
        (CSRF_COOKIE, "/"),
    ] {
        h.append(
            header::SET_COOKIE,
            set_cookie(name, "", 0, path, name != CSRF_COOKIE, "Lax", secure)?,
        );
    }
    Ok(resp)
}

/// `GET /api/v1/auth/me`: the caller.
pub async fn me(auth: AuthUser) -> Json<spade_app::dto::UserRecord> {
    Json(account(&auth.user))
}

/// An account as the API returns it.
pub fn account(u: &User) -> spade_app::dto::UserRecord {
    spade_app::dto::UserRecord {
        id: u.id,
        email: u.email.clone(),
        display_name: u.display_name.clone(),
        is_admin: u.is_admin,
        // What chrono's own serializer writes, as the API's other times.
        created_at: u
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
    }
}

/// Where the refresh cookie lived until pages renewed sessions themselves (`auth::renew`).
const LEGACY_REFRESH_PATH: &str = "/api/v1/auth";

pub(crate) fn refresh_expiry() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
        + chrono::Duration::from_std(REFRESH_TTL).unwrap_or_else(|_| chrono::Duration::days(30))
}

/// Whether cookies get `Secure`: the server is configured so (`--secure-cookies`), its public
/// URL is HTTPS, or the request came through a TLS-terminating proxy that says so
/// (`X-Forwarded-Proto: https`). A client that claims HTTPS over plain HTTP only keeps its own
/// cookies from coming back, so the header needs no trust.
pub(crate) fn cookies_secure(state: &AppState, headers: &HeaderMap) -> bool {
    state.auth.secure_cookies
        || state
            .public_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"))
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"))
}

/// The answer of a login or refresh: a new access token, and the refresh token when there is a
/// new one (`None`: a tab that lost a refresh race keeps the winner's cookie).
pub(crate) fn session_response(
    state: &AppState,
    user: User,
    session_id: i64,
    refresh: Option<String>,
    api_client: bool,
    secure: bool,
) -> ApiResult<Response> {
    let now = chrono::Utc::now().timestamp();
    let ttl = ACCESS_TTL.as_secs();
    let access = state
        .auth
        .signer
        .sign(&jwt::Claims {
            sub: user.id.to_string(),
            sid: session_id,
            iat: now,
            exp: now + i64::try_from(ttl).unwrap_or(900),
        })
        .map_err(|e| {
            AppError::Internal(anyhow::Error::new(e).context("signing an access token"))
        })?;
    let csrf = state.auth.signer.csrf_token(session_id);
    let reply = SessionReply {
        user,
        expires_in: ttl,
        csrf_token: csrf.clone(),
        access_token: api_client.then(|| access.clone()),
        refresh_token: refresh.clone().filter(|_| api_client),
    };
    let mut resp = Json(reply).into_response();
    if !api_client {
        let h = resp.headers_mut();
        h.append(
            header::SET_COOKIE,
            set_cookie(ACCESS_COOKIE, &access, ttl, "/", true, "Lax", secure)?,
        );
        if let Some(refresh) = &refresh {
            // A browser from before the cookie moved to `/` holds one at the old path, which it
            // would send first to the refresh route: it goes.
            for (value, max_age, path) in [
                (refresh.as_str(), REFRESH_TTL.as_secs(), "/"),
                ("", 0, LEGACY_REFRESH_PATH),
            ] {
                h.append(
                    header::SET_COOKIE,
                    set_cookie(REFRESH_COOKIE, value, max_age, path, true, "Strict", secure)?,
                );
            }
        }
        h.append(
            header::SET_COOKIE,
            set_cookie(
                CSRF_COOKIE,
                &csrf,
                REFRESH_TTL.as_secs(),
                "/",
                false,
                "Lax",
                secure,
            )?,
        );
    }
    Ok(resp)
}

pub(crate) fn set_cookie(
    name: &str,
    value: &str,
    max_age: u64,
    path: &str,
    http_only: bool,
    same_site: &str,
    secure: bool,
) -> ApiResult<HeaderValue> {
    let mut c = format!("{name}={value}; Path={path}; Max-Age={max_age}; SameSite={same_site}");
    if http_only {
        c.push_str("; HttpOnly");
    }
    if secure {
        c.push_str("; Secure");
    }
    HeaderValue::from_str(&c).map_err(|e| AppError::Internal(e.into()))
}
