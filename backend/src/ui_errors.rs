//! The status of a `/ui/*` server function's error. leptos' server functions answer every error
//! 500, including the ones raised before the function runs because the request's arguments do
//! not parse (`/ui/runs?team=abc`, a missing `run_id`): those are the client's fault and get 400
//! here. Errors from inside a function already carry their status (`spade_app::data::to_sfn`:
//! 404, 403, 422, 503), which this leaves alone.

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;

/// Longest error body read to classify it (server function errors are a line of text).
const MAX_ERROR_BODY: usize = 64 << 10;

/// The kinds of server function error that mean the request's arguments were wrong (the prefix
/// of `ServerFnError`'s encoding, `Kind|message`).
const CLIENT_KINDS: [&str; 3] = ["Args|", "MissingArg|", "Deserialization|"];

/// The middleware (see the module doc).
pub async fn client_errors(req: Request, next: Next) -> Response {
    if !req.uri().path().starts_with("/ui/") {
        return next.run(req).await;
    }
    let res = next.run(req).await;
    if res.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let bytes = match http_body_util::Limited::new(body, MAX_ERROR_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            tracing::warn!(error = %e, "a server function's error body could not be read");
            return Response::from_parts(parts, Body::empty());
        }
    };
    if CLIENT_KINDS.iter().any(|k| bytes.starts_with(k.as_bytes())) {
        parts.status = StatusCode::BAD_REQUEST;
    }
    Response::from_parts(parts, Body::from(bytes))
}
