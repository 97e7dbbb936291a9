//! What a service call can fail with, in the service's own words: the API turns it into a JSON
//! error with a status code (`From<ServiceError> for ServiceError`), the pages into a page error
//! (`dashboard::service_err`). The service knows no HTTP; its callers each decide how a refusal
//! looks.

use spade_db::DbError;

/// A refused or failed service call.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A value the caller sent cannot be read at all (an unknown status name in a filter).
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// A field has a value that is not allowed; `message` names the field.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    /// The caller may not do this (role too low, a share link that allows less).
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// No such object, or not visible to the caller (the two look the same).
    #[error("{0} not found")]
    NotFound(String),
    /// The object exists already, or its state forbids the operation.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// The database refused or failed; the caller maps overload and outages to its own retry
    /// answers (see `ServiceError::from(DbError)`).
    #[error(transparent)]
    Db(#[from] DbError),
    /// Anything else; the cause is logged by the caller, never shown.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// Result of every service call.
pub type ServiceResult<T> = Result<T, ServiceError>;

impl ServiceError {
    /// A refusal about one field.
    pub fn invalid(field: &str, expected: impl std::fmt::Display) -> Self {
        ServiceError::Invalid {
            code: "invalid_field",
            message: format!("`{field}`: {expected}"),
        }
    }

    /// A role that may not change state.
    pub fn read_only() -> Self {
        ServiceError::Forbidden {
            code: "insufficient_role",
            message: "your role in this team is read-only (viewer); an editor or owner can do this"
                .into(),
        }
    }
}
