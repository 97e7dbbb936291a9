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
pub mod paths;
pub mod scheduling;
pub mod security;
pub mod serve;
pub mod service;
pub mod site;
pub mod spool;
pub mod ui_errors;

use axum::extract::DefaultBodyLimit;
use axum::http::{Request, StatusCode};
use axum::{Json, Router, extract::State, response::IntoResponse, routing::get};
use leptos::prelude::LeptosOptions;
use leptos_axum::{LeptosRoutes, generate_route_list};
use serde::Serialize;
use spade_app::{App, shell};
use std::sync::Arc;

pub use spade_app::OUTPUT_NAME;
use std::time::Duration;
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::{timeout::TimeoutLayer, trace::TraceLayer};

/// Largest request body of the API, except ingestion.
pub const API_BODY_LIMIT: usize = 1 << 20;
/// Largest ingestion batch body (500 envelopes that may carry environment code and transcripts).
pub const INGEST_BODY_LIMIT: usize = 32 << 20;
/// A request that has not produced a response by then gets 408 (SSE streams are not affected:
/// their response starts at once).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Shared state of every handler.
#[derive(Clone, Debug)]
pub struct AppState {
    pub leptos: LeptosOptions,
    pub db: spade_db::Pool,
    pub auth: Arc<auth::AuthState>,
    pub events: events::EventHub,
    /// Where job output is read from (`GET /runs/{id}/logs`); `None` in tests without one.
    pub scheduler: Option<Arc<config::SchedulerSettings>>,
    /// The server's address as people reach it (`--public-url`, else `http://<listen address>`):
    /// share links are built from it, never from a request's `Host` header. `None` (tests):
    /// links are site-relative.
    pub public_url: Option<String>,
    /// Where run configurations may point on this machine (see `paths`); none by default.
    pub paths: Arc<paths::PathRoots>,
    /// The run pages' charts as last drawn, reused while a run's series are unchanged.
    pub charts: Arc<dashboard::ChartCache>,
}

impl AppState {
    pub fn new(leptos: LeptosOptions, db: spade_db::Pool, auth: auth::AuthState) -> Self {
        Self {
            leptos,
            db,
            auth: Arc::new(auth),
            events: events::EventHub::default(),
            scheduler: None,
            public_url: None,
            paths: Arc::default(),
            charts: Arc::default(),
        }
    }

    /// Allows run configurations to name paths inside these roots.
    pub fn with_paths(mut self, roots: paths::PathRoots) -> Self {
        self.paths = Arc::new(roots);
        self
    }

    /// Sets the address share links and origin checks use (see [`AppState::public_url`]).
    pub fn with_public_url(mut self, url: impl Into<String>) -> Self {
        self.public_url = Some(url.into().trim_end_matches('/').to_owned());
        self
    }

    /// Serves job output through the executors these settings describe.
    pub fn with_scheduler(mut self, settings: config::SchedulerSettings) -> Self {
        self.scheduler = Some(Arc::new(settings));
        self
    }
}

impl axum::extract::FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}

/// The whole application as a router, so tests can drive it without a port.
pub fn app(state: AppState) -> Router {
    let routes = generate_route_list(App);
    let mut api = Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi_json));
    let mut ingest = Router::new();
    for e in api::endpoints() {
        if e.tag == "ingest" {
            ingest = ingest.route(e.path, e.handler);
        } else {
            api = api.route(e.path, e.handler);
        }
    }
    // Body sizes are bounded per route by `guard`, before any handler; the ingestion routes
    // only lift the extractors' own default limit, which is below theirs.
    let api = api
        .merge(ingest.layer(DefaultBodyLimit::disable()))
        .fallback(|| async { error::AppError::NotFound("endpoint".into()) });
    // Pages and their server functions read data through the dashboard's data source.
    let data: spade_app::data::SharedData = Arc::new(dashboard::Dashboard {
        state: state.clone(),
    });
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .nest("/api/v1", api)
        .merge(dashboard::forms::routes())
        .leptos_routes_with_context(
            &state,
            routes,
            move || {
                security::capture_nonce();
                leptos::prelude::provide_context(data.clone());
            },
            {
                let options = state.leptos.clone();
                move || shell(options.clone())
            },
        )
        .fallback(leptos_axum::file_and_error_handler_with_context::<AppState, _>(
            security::capture_nonce,
            shell,
        ))
        .layer(axum::middleware::from_fn(ui_errors::client_errors))
        .layer(axum::middleware::from_fn(guard::check_request))
        .layer(axum::middleware::from_fn(site::cache_headers))
        .layer(axum::middleware::from_fn_with_state(
            site::PAGE_STALL_LIMIT,
            site::end_stalled_pages,
        ))
        .layer(CompressionLayer::new())
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        // Outside the timeout, the guard and the fallback, so their answers carry it too.
        .layer(axum::middleware::from_fn(security::headers))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
            let id = req
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-");
            tracing::info_span!("request", method = %req.method(), uri = %req.uri(), request_id = %id)
        }))
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .with_state(state)
}

async fn openapi_json() -> Json<serde_json::Value> {
    Json(openapi::document(&api::endpoints()))
}

/// `GET /healthz`: the process is up and serving (a container's liveness probe); it touches
/// nothing else, so a database outage does not get the server restarted.
async fn healthz() -> &'static str {
    "ok\n"
}

#[derive(Debug, Serialize)]
struct Ready {
    ready: bool,
    /// Why not, in a sentence (no connection strings: the cause is logged).
    reason: Option<String>,
    schema_version: Option<i64>,
}

/// `GET /readyz`: 200 once the database answers and every migration this build knows is
/// applied, else 503 with the reason (compose health checks and load balancers wait on it).
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let not_ready = |reason: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Ready {
                ready: false,
                reason: Some(reason),
                schema_version: None,
            }),
        )
    };
    let status = match spade_db::status(&state.db).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "readiness: database unavailable");
            return not_ready("the database does not answer".into());
        }
    };
    match spade_db::pending_migrations(&state.db).await {
        Ok(p) if p.is_empty() => (
            StatusCode::OK,
            Json(Ready {
                ready: true,
                reason: None,
                schema_version: status.schema_version,
            }),
        ),
        Ok(p) => {
            let list: Vec<String> = p.iter().map(ToString::to_string).collect();
            not_ready(format!(
                "{} migration(s) not applied: {}",
                p.len(),
                list.join(", ")
            ))
        }
        Err(e) => {
            tracing::error!(error = %e, "readiness: cannot read the migrations table");
            not_ready("the migrations table cannot be read".into())
        }
    }
}

#[derive(Debug, Serialize)]
struct Health {
    status: &'static str,
    version: &'static str,
    database: DatabaseHealth,
}

#[derive(Debug, Serialize)]
struct DatabaseHealth {
    ok: bool,
    server_version: Option<String>,
    schema_version: Option<i64>,
}

/// `GET /api/v1/health`: 200 when the database answers, 503 otherwise (the cause is logged, not
/// returned, so connection strings never reach a client).
async fn health(State(state): State<AppState>) -> impl IntoResponse {
    let (code, database) = match spade_db::status(&state.db).await {
        Ok(s) => (
            StatusCode::OK,
            DatabaseHealth {
                ok: true,
                server_version: Some(s.server_version),
                schema_version: s.schema_version,
            },
        ),
        Err(e) => {
            tracing::error!(error = %e, "health check: database unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                DatabaseHealth {
                    ok: false,
                    server_version: None,
                    schema_version: None,
                },
            )
        }
    };
    let status = if database.ok { "ok" } else { "degraded" };
    (
        code,
        Json(Health {
            status,
            version: env!("CARGO_PKG_VERSION"),
            database,
        }),
    )
}
