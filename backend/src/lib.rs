//! `spade-server`: the web service. It alone knows HTTP routes and JWT: it renders the Leptos
//! dashboard, serves the hydration bundle and static files from the site directory, answers the
//! REST API under `/api/v1` (accounts, teams, runs, environments, metrics, share links), takes
//! worker reports (`/api/v1/ingest`) and pushes live updates (SSE). All SQL goes through
//! `spade-db`.

pub mod api;
pub mod auth;
pub mod config;
pub mod dashboard;
pub mod demo;
pub mod error;
pub mod events;
pub mod guard;
pub mod openapi;
pub mod scheduling;
pub mod security;
pub mod serve;
pub mod service;
pub mod site;
pub mod spool;
pub mod startup;
pub mod tokens;
pub mod ui_errors;

use leptos::prelude::LeptosOptions;
use std::sync::Arc;
use std::time::Duration;

pub use spade_app::OUTPUT_NAME;
pub use startup::app;

/// Largest request body of the API, except ingestion.
pub const API_BODY_LIMIT: usize = 1 << 20;
/// Largest ingestion batch body (500 envelopes that may carry environment code and transcripts).
pub const INGEST_BODY_LIMIT: usize = 32 << 20;
/// A request that has not produced a response by then gets 408 (SSE streams are not affected:
/// their response starts at once).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Shared state of every handler: what the web layer alone needs (Leptos options, the auth
/// keys, the public address) beside the service's context, which is all the service sees.
#[derive(Clone, Debug)]
pub struct AppState {
    pub leptos: LeptosOptions,
    pub auth: Arc<auth::AuthState>,
    /// The server's address as people reach it (`--public-url`, else `http://<listen address>`):
    /// share links are built from it, never from a request's `Host` header. `None` (tests):
    /// links are site-relative.
    pub public_url: Option<String>,
    /// The database, live events, path roots, chart cache and job settings the service reads.
    pub ctx: service::Ctx,
}

impl AppState {
    pub fn new(leptos: LeptosOptions, db: spade_db::Pool, auth: auth::AuthState) -> Self {
        Self {
            leptos,
            auth: Arc::new(auth),
            public_url: None,
            ctx: service::Ctx::new(db),
        }
    }

    /// Allows run configurations to name paths inside these roots.
    pub fn with_paths(mut self, roots: service::paths::PathRoots) -> Self {
        self.ctx.paths = Arc::new(roots);
        self
    }

    /// Sets the address share links and origin checks use (see [`AppState::public_url`]).
    pub fn with_public_url(mut self, url: impl Into<String>) -> Self {
        self.public_url = Some(url.into().trim_end_matches('/').to_owned());
        self
    }

    /// Serves job output through the executors these settings describe.
    pub fn with_scheduler(mut self, settings: config::SchedulerSettings) -> Self {
        self.ctx.scheduler = Some(Arc::new(settings));
        self
    }
}

impl axum::extract::FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}
