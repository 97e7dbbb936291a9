//! Authentication: who is calling, and through which channel.
//!
//! - Browsers log in and receive three cookies: the access token (`spade_access`, HttpOnly,
//!   SameSite=Lax, [`ACCESS_TTL`]), the refresh token (`spade_refresh`, HttpOnly,
//!   SameSite=Strict; pages renew an expired access token with it, see [`renew`]) and the CSRF token (`spade_csrf`, readable by the page
//!   script). A cookie-authenticated request that changes state (any method but GET, HEAD,
//!   OPTIONS) must echo the CSRF token in `X-CSRF-Token`; the token is an HMAC of the session id,
//!   so it cannot be forged or planted from another session.
//! - API clients send `Authorization: Bearer <access token>` and are exempt from CSRF (a browser
//!   never attaches that header on its own).
//! - Every access token names its session; each request checks that the session is live, so
//!   logout ends the session's access tokens at once, not when they expire.
//! - Scripts send `Authorization: Bearer spt_…`, an API token a member made on the teams page
//!   (`service::api_tokens`): it acts as that member inside one team, with at most its role,
//!   and is looked up on every request, so revoking it (or the member leaving) refuses it at once.
//! - Workers use per-run tokens (see `ingest`), share links their own tokens (see `api::shares`).

pub mod account;
pub mod jwt;
pub mod origin;
pub mod password;
pub mod rate_limit;
pub mod renew;
pub mod routes;
pub mod secret;

use crate::AppState;
use crate::error::AppError;
use axum::extract::FromRequestParts;
use axum::http::{HeaderMap, Method, header, request::Parts};
use jwt::{Signer, TokenError};
use spade_db::api_tokens;
use spade_db::users::{self, Registration, User};
use std::time::Duration;

/// Lifetime of an access token.
pub const ACCESS_TTL: Duration = Duration::from_secs(15 * 60);
/// Lifetime of a refresh token (each refresh rotates it and restarts this clock).
pub const REFRESH_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

pub const ACCESS_COOKIE: &str = "spade_access";
pub const REFRESH_COOKIE: &str = "spade_refresh";
pub const CSRF_COOKIE: &str = "spade_csrf";
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Auth settings and state shared by handlers.
#[derive(Debug)]
pub struct AuthState {
    pub signer: Signer,
    pub registration: Registration,
    /// Adds `Secure` to cookies (set when served over HTTPS).
    pub secure_cookies: bool,
    /// Throttles of login, registration and refresh.
    pub limits: rate_limit::Limits,
}

impl AuthState {
    pub fn new(
        secret: secret::JwtSecret,
        registration: Registration,
        secure_cookies: bool,
    ) -> Self {
        Self {
            signer: Signer::new(secret),
            registration,
            secure_cookies,
            limits: rate_limit::Limits::default(),
        }
    }
}

/// How a request authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Bearer,
    Cookie,
}

/// What the caller authenticated with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// A login session (access token in a cookie or a bearer header).
    Session(i64),
    /// An API token: its member, inside its team only, at most its role (`api_tokens`).
    ApiToken { id: i64, limit: spade_db::Limit },
}

/// The authenticated caller. Extracting it enforces the session (or API token) check and, for
/// cookie-based state changes, the CSRF check.
#[derive(Debug, Clone)]
pub struct AuthUser {
    pub user: User,
    pub credential: Credential,
    pub via: Via,
}

impl AuthUser {
    /// The login session, or `None` for an API token.
    pub fn session_id(&self) -> Option<i64> {
        match self.credential {
            Credential::Session(id) => Some(id),
            Credential::ApiToken { .. } => None,
        }
    }

    /// The login session of a person, or the refusal an API token gets for `what` (what it
    /// cannot do, and why).
    pub fn person_session(&self, what: &str) -> Result<i64, AppError> {
        self.session_id().ok_or_else(|| AppError::Forbidden {
            code: "api_token",
            message: format!("an API token cannot {what}"),
        })
    }

    /// Whether the session (or API token) this request came with is still live (not logged
    /// out, revoked or expired since): long-lived streams ask again as they run.
    pub async fn session_is_live(&self, state: &AppState) -> bool {
        match self.credential {
            Credential::Session(sid) => matches!(
                users::session_user(&state.ctx.db, sid, self.user.id).await,
                Ok(Some(_))
            ),
            Credential::ApiToken { id, .. } => {
                matches!(api_tokens::is_live(&state.ctx.db, id).await, Ok(true))
            }
        }
    }

    /// Who the service acts for: the service sees the user and, for an API token, its limit;
    /// never the request's credentials.
    pub fn caller(&self) -> crate::service::Caller {
        let (limit, token_id) = match self.credential {
            Credential::Session(_) => (None, None),
            Credential::ApiToken { id, limit } => (Some(limit), Some(id)),
        };
        crate::service::Caller {
            user_id: self.user.id,
            limit,
            token_id,
        }
    }

    /// The caller of an API token, checked against the database now: unknown, revoked,
    /// expired, or its member gone from the team all read as one "invalid token".
    async fn from_api_token(state: &AppState, token: &str) -> Result<Self, AppError> {
        let refused = || {
            AppError::unauthenticated(
                "invalid_token",
                "the API token is unknown, revoked or expired, or its member left the team",
            )
        };
        if !crate::service::api_tokens::looks_like_token(token) {
            return Err(refused());
        }
        let holder = api_tokens::holder(&state.ctx.db, &crate::tokens::hash_token(token))
            .await?
            .ok_or_else(refused)?;
        Ok(AuthUser {
            user: holder.user,
            credential: Credential::ApiToken {
                id: holder.token_id,
                limit: spade_db::Limit {
                    team_id: holder.team_id,
                    role: holder.role,
                },
            },
            via: Via::Bearer,
        })
    }
}

/// The value of cookie `name`, if the request carries it.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The bearer token of the request: `Ok(None)` without an `Authorization` header, an error for
/// one that is not `Bearer <token>`.
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, AppError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| Some(t.trim()))
        .ok_or(AppError::unauthenticated(
            "invalid_authorization",
            "the Authorization header must be `Bearer <token>`",
        ))
}

/// Methods that change nothing and therefore need no CSRF token.
pub fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl FromRequestParts<AppState> for AuthUser {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let (token, via) = match bearer(&parts.headers)? {
            Some(t) if t.starts_with(crate::service::api_tokens::PREFIX) => {
                return Self::from_api_token(state, t).await;
            }
            Some(t) => (t, Via::Bearer),
            None => match cookie(&parts.headers, ACCESS_COOKIE) {
                Some(t) => (t, Via::Cookie),
                None => {
                    return Err(AppError::unauthenticated(
                        "missing_token",
                        "log in first: no access token (cookie or Authorization: Bearer)",
                    ));
                }
            },
        };
        let claims = state.auth.signer.verify(token).map_err(|e| match e {
            TokenError::Expired => AppError::unauthenticated(
                "token_expired",
                "the access token has expired; refresh it at /api/v1/auth/refresh",
            ),
            TokenError::Algorithm => {
                AppError::unauthenticated("invalid_token", "the access token is not an HS256 token")
            }
            TokenError::Invalid => {
                AppError::unauthenticated("invalid_token", "the access token is invalid")
            }
        })?;
        if via == Via::Cookie && !is_safe(&parts.method) {
            let presented = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !state.auth.signer.csrf_matches(claims.sid, presented) {
                return Err(AppError::Forbidden {
                    code: "csrf",
                    message: "cookie-authenticated changes need the X-CSRF-Token header \
                              (the value of the spade_csrf cookie)"
                        .into(),
                });
            }
        }
        let user_id: i64 = claims.sub.parse().map_err(|_| {
            AppError::unauthenticated("invalid_token", "the access token is invalid")
        })?;
        let user = users::session_user(&state.ctx.db, claims.sid, user_id)
            .await?
            .ok_or(AppError::unauthenticated(
                "session_revoked",
                "this session has ended (logged out or expired); log in again",
            ))?;
        Ok(AuthUser {
            user,
            credential: Credential::Session(claims.sid),
            via,
        })
    }
}
