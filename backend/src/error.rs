//! The one error type of every handler. Each variant documents its HTTP status; the body is
//! always `{"status": 404, "code": "not_found", "message": "run not found"}`. Internal errors are
//! opaque to the client (code `internal`) and logged here with their whole cause chain.

use crate::service::ServiceError;
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use spade_db::DbError;

/// An API error.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// 400: the request is malformed (unparseable JSON, query or path).
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// 422: a field has a value that is not allowed; `message` names the field.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    /// 401: no credentials, or credentials that are invalid, expired or revoked.
    #[error("{message}")]
    Unauthenticated {
        code: &'static str,
        message: &'static str,
    },
    /// 403: authenticated, but not allowed (role too low, missing CSRF token, closed registration).
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// 404: no such object, or not visible to the caller (the two look the same).
    #[error("{0} not found")]
    NotFound(String),
    /// 409: the object exists already, or its state forbids the operation.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// 413: the body is larger than the route allows.
    #[error("the request body is larger than this route allows ({limit} bytes)")]
    TooLarge { limit: usize },
    /// 429: too many attempts; retry after this many seconds (sent as `Retry-After`).
    #[error("too many attempts; retry in {retry_after_s} s")]
    RateLimited { retry_after_s: u64 },
    /// 503: the database had no free connection in time (overload); retry shortly
    /// (`Retry-After: 1`).
    #[error("the service is busy; retry shortly")]
    Busy,
    /// 503: the database cannot be reached (down, restarting, refusing connections); retry
    /// shortly (`Retry-After: 5`). The cause is logged, never sent.
    #[error("the database is unavailable; retry shortly")]
    Unavailable,
    /// 500: anything else. The client sees only "internal error"; the cause is logged.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl AppError {
    /// A 422 about one field.
    pub fn invalid(field: &str, expected: impl std::fmt::Display) -> Self {
        AppError::Invalid {
            code: "invalid_field",
            message: format!("`{field}`: {expected}"),
        }
    }

    /// A 403 for a role that may not change state.
    pub fn read_only() -> Self {
        AppError::Forbidden {
            code: "insufficient_role",
            message: "your role in this team is read-only (viewer); an editor or owner can do this"
                .into(),
        }
    }

    /// A 401 with a stable code.
    pub fn unauthenticated(code: &'static str, message: &'static str) -> Self {
        AppError::Unauthenticated { code, message }
    }

    fn status(&self) -> StatusCode {
        match self {
            AppError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            AppError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            AppError::Unauthenticated { .. } => StatusCode::UNAUTHORIZED,
            AppError::Forbidden { .. } => StatusCode::FORBIDDEN,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::Conflict { .. } => StatusCode::CONFLICT,
            AppError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            AppError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            AppError::Busy | AppError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            AppError::BadRequest { code, .. }
            | AppError::Invalid { code, .. }
            | AppError::Unauthenticated { code, .. }
            | AppError::Forbidden { code, .. }
            | AppError::Conflict { code, .. } => code,
            AppError::NotFound(_) => "not_found",
            AppError::TooLarge { .. } => "body_too_large",
            AppError::RateLimited { .. } => "rate_limited",
            AppError::Busy => "busy",
            AppError::Unavailable => "database_unavailable",
            AppError::Internal(_) => "internal",
        }
    }
}

/// The JSON body of every error.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        if let AppError::Internal(e) = &self {
            // `{:#}` prints anyhow's whole chain: "while X: because Y: because Z".
            tracing::error!(error = format!("{e:#}"), "internal error");
        }
        let status = self.status();
        let body = ErrorBody {
            status: status.as_u16(),
            code: self.code(),
            message: self.to_string(),
        };
        let mut resp = (status, Json(body)).into_response();
        let retry_after = match self {
            AppError::RateLimited { retry_after_s } => Some(retry_after_s),
            AppError::Busy => Some(1),
            AppError::Unavailable => Some(5),
            _ => None,
        };
        if let Some(s) = retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

impl From<DbError> for AppError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::NotFound(what) => AppError::NotFound(what.to_owned()),
            DbError::ReadOnly => AppError::read_only(),
            DbError::Conflict(what) => AppError::Conflict {
                code: "already_exists",
                message: format!("{what} already exists"),
            },
            e @ DbError::State { .. } => AppError::Conflict {
                code: "invalid_state",
                message: e.to_string(),
            },
            e if e.is_pool_timeout() => {
                tracing::warn!("no database connection free in time: answering 503");
                AppError::Busy
            }
            e if e.is_unavailable() => {
                tracing::error!(error = %e, "the database is unavailable: answering 503");
                AppError::Unavailable
            }
            e => AppError::Internal(anyhow::Error::new(e)),
        }
    }
}

/// The API's answer to a service refusal: the same code and message, with its status.
impl From<ServiceError> for AppError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::BadRequest { code, message } => AppError::BadRequest { code, message },
            ServiceError::Invalid { code, message } => AppError::Invalid { code, message },
            ServiceError::Forbidden { code, message } => AppError::Forbidden { code, message },
            ServiceError::NotFound(what) => AppError::NotFound(what),
            ServiceError::Conflict { code, message } => AppError::Conflict { code, message },
            ServiceError::Db(e) => e.into(),
            ServiceError::Internal(e) => AppError::Internal(e),
        }
    }
}

impl From<JsonRejection> for AppError {
    fn from(r: JsonRejection) -> Self {
        match r {
            // serde's message names the field path and what it expected.
            JsonRejection::JsonDataError(e) => AppError::Invalid {
                code: "invalid_body",
                message: e.body_text(),
            },
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                AppError::BadRequest {
                    code: "body_too_large",
                    message: e.body_text(),
                }
            }
            other => AppError::BadRequest {
                code: "invalid_body",
                message: other.body_text(),
            },
        }
    }
}

impl From<PathRejection> for AppError {
    fn from(r: PathRejection) -> Self {
        AppError::BadRequest {
            code: "invalid_path",
            message: r.body_text(),
        }
    }
}

/// `Json<T>` whose rejections are [`AppError`]s.
#[derive(Debug, axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(AppError))]
pub struct ApiJson<T>(pub T);

/// The query string as `T`; a value that does not parse is a 400 naming its parameter
/// (`status`: unknown variant ...), which axum's `Query` leaves out.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S>
    for ApiQuery<T>
{
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, AppError> {
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(ApiQuery)
            .map_err(|e| {
                let path = e.path().to_string();
                let message = if path == "." || path.is_empty() {
                    format!("query string: {}", e.inner())
                } else {
                    format!("`{path}`: {}", e.inner())
                };
                AppError::BadRequest {
                    code: "invalid_query",
                    message,
                }
            })
    }
}

/// `Path<T>` whose rejections are [`AppError`]s.
#[derive(Debug, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(AppError))]
pub struct ApiPath<T>(pub T);

/// Result of every handler.
pub type ApiResult<T> = Result<T, AppError>;
