//! The service layer under the JSON API and the dashboard: one module per area. A function
//! takes typed arguments, applies the area's limits and checks once, and returns the
//! `spade_app::dto` types both serve, so a page and the API cannot drift apart (they did: two
//! cursor parsers, two limits, checks on one side only). Reads take the access scope their
//! caller resolved; changes take the signed-in user and resolve the scope themselves, so the
//! role a change needs is checked in one place, and record themselves in the audit log. HTTP
//! stays with the callers: extractors and status codes in `api`, forms, redirects and page
//! errors in `dashboard`. This module uses neither.

pub mod artifacts;
pub mod downsample;
pub mod environments;
pub mod metrics;
pub mod runs;
pub mod teams;

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiResult, AppError};
use spade_db::{RunScope, audit};

/// Largest and default page sizes.
pub const MAX_LIMIT: i64 = 500;
pub const DEFAULT_LIMIT: i64 = 50;

/// A requested page size, checked.
pub fn limit(requested: Option<i64>) -> Result<i64, AppError> {
    match requested {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(n) => Err(AppError::invalid(
            "limit",
            format!("must be 1 to {MAX_LIMIT}, got {n}"),
        )),
    }
}

/// The caller's access to a run (404 for runs of teams the caller is not in).
pub async fn member_scope(
    state: &AppState,
    auth: &AuthUser,
    run_id: i64,
) -> Result<RunScope, AppError> {
    Ok(RunScope::for_member(&state.db, auth.user.id, run_id).await?)
}

/// The caller's access to a run, which must allow changes (editor or owner).
pub async fn editor_scope(
    state: &AppState,
    auth: &AuthUser,
    run_id: i64,
) -> Result<RunScope, AppError> {
    let scope = member_scope(state, auth, run_id).await?;
    if !scope.can_edit() {
        return Err(AppError::read_only());
    }
    Ok(scope)
}

/// Records a change `auth` made in team `team_id`'s audit log.
async fn audit(
    state: &AppState,
    auth: &AuthUser,
    team_id: i64,
    action: &str,
    target: String,
    detail: serde_json::Value,
) -> ApiResult<()> {
    audit::record(
        &state.db,
        &audit::Entry {
            actor_id: Some(auth.user.id),
            team_id: Some(team_id),
            action,
            target,
            detail,
        },
    )
    .await?;
    Ok(())
}
