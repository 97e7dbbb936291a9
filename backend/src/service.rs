//! The service layer under the JSON API and the dashboard: one module per area. A function
//! takes typed arguments, applies the area's limits and checks once, and returns the
//! `spade_app::dto` types both serve, so a page and the API cannot drift apart (they did: two
//! cursor parsers, two limits, checks on one side only). Reads take the access scope their
//! caller resolved; changes take the signed-in user and resolve the scope themselves, so the
//! role a change needs is checked in one place, and record themselves in the audit log. HTTP
//! stays with the callers: extractors and status codes in `api`, forms, redirects and page
//! errors in `dashboard`. This module uses neither: it takes a small context ([`Ctx`]: the
//! database, live events, path roots, chart cache, job settings), the user it acts for
//! ([`Caller`]) and answers [`ServiceError`], which the API and the pages each turn into their
//! own responses.

pub mod api_tokens;
pub mod artifacts;
pub mod chart_views;
pub mod charts;
pub mod downsample;
pub mod environments;
pub mod error;
pub mod export;
pub mod metrics;
pub mod pages;
pub mod paths;
pub mod runs;
pub mod shares;
pub mod teams;

pub use error::{ServiceError, ServiceResult};

use crate::config::SchedulerSettings;
use crate::events::EventHub;
use paths::PathRoots;
use spade_db::{Limit, RunScope, TeamScope, audit};
use std::sync::Arc;

/// What the service reads and writes through: everything a call needs besides its arguments.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub db: spade_db::Pool,
    /// Live updates for the run pages' event streams.
    pub events: EventHub,
    /// Where run configurations may point on this machine (see `paths`); none by default.
    pub paths: Arc<PathRoots>,
    /// The run pages' charts as last drawn, reused while a run's series are unchanged.
    pub charts: Arc<charts::ChartCache>,
    /// Where job output is read from; `None` in tests without a scheduler.
    pub scheduler: Option<Arc<SchedulerSettings>>,
}

impl Ctx {
    /// A context over `db` with no path roots, no scheduler and empty caches.
    pub fn new(db: spade_db::Pool) -> Self {
        Self {
            db,
            events: EventHub::default(),
            paths: Arc::default(),
            charts: Arc::default(),
            scheduler: None,
        }
    }
}

/// The signed-in user a change is made for (the API's and the pages' `AuthUser`, without the
/// request's credentials). A caller with an API token carries its `limit`: every scope the
/// service takes for it goes through [`Caller::team`] or [`Caller::run`], which keep it inside
/// the token's team and role, and what only a person at a browser may do (teams, invitations,
/// tokens, the account) asks [`Caller::in_person`] first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub user_id: i64,
    pub limit: Option<Limit>,
    /// The API token the request came with, named in the audit entries of its changes.
    pub token_id: Option<i64>,
}

impl Caller {
    /// A user signed in with a session: no limit beyond their memberships.
    pub fn person(user_id: i64) -> Self {
        Self {
            user_id,
            limit: None,
            token_id: None,
        }
    }

    /// `scope` as this caller may hold it (an API token: its team only, at most its role).
    pub fn team(&self, scope: TeamScope) -> ServiceResult<TeamScope> {
        Ok(scope.limited(self.limit)?)
    }

    /// `scope` as this caller may hold it (an API token: its team's runs only, at most its
    /// role).
    pub fn run(&self, scope: RunScope) -> ServiceResult<RunScope> {
        Ok(scope.limited(self.limit)?)
    }

    /// Refuses API tokens: `what` is for a person with a session.
    pub fn in_person(&self, what: &str) -> ServiceResult<()> {
        match self.limit {
            None => Ok(()),
            Some(_) => Err(ServiceError::Forbidden {
                code: "api_token",
                message: format!(
                    "an API token cannot {what}; it acts only on its own team's projects and runs"
                ),
            }),
        }
    }
}

/// The email lower-cased, if it is shaped like an address: the rule of registration, which
/// invitations share (an email that can hold an account can be invited).
pub fn normalize_email(email: &str) -> ServiceResult<String> {
    let e = email.trim().to_lowercase();
    let ok = (3..=320).contains(&e.len())
        && e.split_once('@')
            .is_some_and(|(l, d)| !l.is_empty() && !d.is_empty() && !d.contains('@'))
        && !e.chars().any(char::is_whitespace);
    if ok {
        Ok(e)
    } else {
        Err(ServiceError::invalid(
            "email",
            "expected an address like name@example.org",
        ))
    }
}

/// Largest and default page sizes.
pub const MAX_LIMIT: i64 = 500;
pub const DEFAULT_LIMIT: i64 = 50;

/// A requested page size, checked.
pub fn limit(requested: Option<i64>) -> ServiceResult<i64> {
    match requested {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(n) => Err(ServiceError::invalid(
            "limit",
            format!("must be 1 to {MAX_LIMIT}, got {n}"),
        )),
    }
}

/// The caller's access to a run (404 for runs of teams the caller is not in).
pub async fn member_scope(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
) -> Result<RunScope, ServiceError> {
    caller.run(RunScope::for_member(&ctx.db, caller.user_id, run_id).await?)
}

/// The caller's access to a run, which must allow changes (editor or owner).
pub async fn editor_scope(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
) -> Result<RunScope, ServiceError> {
    let scope = member_scope(ctx, caller, run_id).await?;
    if !scope.can_edit() {
        return Err(ServiceError::read_only());
    }
    Ok(scope)
}

/// Records a change `auth` made in team `team_id`'s audit log.
async fn audit(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    action: &str,
    target: String,
    mut detail: serde_json::Value,
) -> ServiceResult<()> {
    // A change made with an API token says which, so a leaked one's doings can be found.
    if let (Some(id), Some(map)) = (caller.token_id, detail.as_object_mut()) {
        map.insert("api_token".into(), id.into());
    }
    audit::record(
        &ctx.db,
        &audit::Entry {
            actor_id: Some(caller.user_id),
            team_id: Some(team_id),
            action,
            target,
            detail,
        },
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_normalized_or_refused_with_the_field_name() {
        assert_eq!(
            normalize_email("  Ada@Example.ORG ").ok().as_deref(),
            Some("ada@example.org")
        );
        for bad in ["", "no-at", "@x", "a@", "a b@x.org", "a@b@c"] {
            let e = normalize_email(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.starts_with("`email`"), "{bad:?}: {e}");
        }
    }
}
