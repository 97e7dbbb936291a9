//! Startup: the whole application as one router (API, ingestion, pages, server functions,
//! static files) with its layers in order, and the probes that answer outside the API's
//! authentication (`/healthz`, `/readyz`, `/api/v1/health`, `/api/v1/openapi.json`). The
//! state every handler reads is in the crate root ([`crate::AppState`]); this module imports
//! the handlers, so no handler imports it.

use crate::{
    AppState, REQUEST_TIMEOUT, api, auth, dashboard, error, guard, openapi, security, site,
    ui_errors,
};
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, StatusCode};
use axum::{Json, Router, extract::State, response::IntoResponse, routing::get};
use leptos_axum::{AxumRouteListing, LeptosRoutes, generate_route_list};
use serde::Serialize;
use spade_app::{App, shell};
use std::sync::{Arc, OnceLock};
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::{timeout::TimeoutLayer, trace::TraceLayer};

/// The whole application as a router, so tests can drive it without a port.
pub fn app(state: AppState) -> Router {
    let routes = route_list();
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
            {
                let data = data.clone();
                move || {
                    security::capture_nonce();
                    leptos::prelude::provide_context(data.clone());
                }
            },
            {
                let options = state.leptos.clone();
                move || shell(options.clone())
            },
        )
        // The "page not found" page is the app too: with the data source, its top bar shows
        // the signed-in viewer's menu (without it, it offered "Log in / Register" to them).
        .fallback(leptos_axum::file_and_error_handler_with_context::<AppState, _>(
            move || {
                security::capture_nonce();
                leptos::prelude::provide_context(data.clone());
            },
            shell,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::renew::renew_on_pages,
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

/// The pages' routes, found once per process.
///
/// Finding them renders the app while leptos_server suppresses resource loading with a
/// process-wide flag, and a resource first polled meanwhile, by a page another router of the
/// same process is serving, waits forever (leptos-rs/leptos#4773): the API tests, which build a
/// router per test in one process, saw the compare page stall for the 30 s limit. One server
/// builds one router, but nothing then depends on that.
fn route_list() -> Vec<AxumRouteListing> {
    static ROUTES: OnceLock<Vec<AxumRouteListing>> = OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(App)).clone()
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
    let status = match spade_db::status(&state.ctx.db).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "readiness: database unavailable");
            return not_ready("the database does not answer".into());
        }
    };
    match spade_db::pending_migrations(&state.ctx.db).await {
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
    let (code, database) = match spade_db::status(&state.ctx.db).await {
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
