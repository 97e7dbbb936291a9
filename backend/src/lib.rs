//! `spade-server`: the web service. It alone knows HTTP routes (and, later, JWT): it renders the
//! Leptos dashboard, serves the hydration bundle and static files from the site directory, and
//! answers the REST API under `/api/v1`. All SQL goes through `spade-db`.

pub mod config;
pub mod scheduling;

use axum::{Json, Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use leptos::prelude::LeptosOptions;
use leptos_axum::{LeptosRoutes, generate_route_list};
use serde::Serialize;
use spade_app::{App, shell};

pub use spade_app::OUTPUT_NAME;
use std::time::Duration;
use tower_http::{timeout::TimeoutLayer, trace::TraceLayer};

/// Shared state of every handler.
#[derive(Clone, Debug)]
pub struct AppState {
    pub leptos: LeptosOptions,
    pub db: spade_db::Pool,
}

impl axum::extract::FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}

/// The whole application as a router, so tests can drive it without a port.
pub fn app(state: AppState) -> Router {
    let routes = generate_route_list(App);
    let api = Router::new().route("/health", get(health));
    Router::new()
        .nest("/api/v1", api)
        .leptos_routes(&state, routes, {
            let options = state.leptos.clone();
            move || shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(shell))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(30),
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
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
