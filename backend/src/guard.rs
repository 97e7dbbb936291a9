//! Checks every request makes before any handler sees it: bodies are bounded, and text carries
//! no U+0000.
//!
//! **NUL.** PostgreSQL `text` cannot hold U+0000; a string with one used to reach a query and
//! fail it with a 500 (in filters, names, emails, share tokens, metric names, ingestion...). The
//! one rule, applied here for every route instead of in each handler: a request whose path,
//! query, JSON body or form body holds U+0000 (raw, `%00` or `\u0000`) is refused with 422
//! naming the field. Ingestion is no exception; the worker replaces NUL in the program and model
//! output it reports where the report is made (`spade::report::storable`), so no batch of a
//! correct worker is ever refused and none is half-stored.
//!
//! **Size.** A body over its route's limit is refused with 413 before it is read: the worker
//! routes (ingestion, evaluation results) allow [`crate::INGEST_BODY_LIMIT`], every other route
//! (API, HTML forms, server functions) [`crate::API_BODY_LIMIT`].

use crate::error::AppError;
use crate::{API_BODY_LIMIT, INGEST_BODY_LIMIT};
use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The middleware (see the module doc).
pub async fn check_request(req: Request, next: Next) -> Response {
    match checked(req).await {
        Ok(req) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

fn nul_error(field: &str) -> AppError {
    AppError::invalid(field, "U+0000 (NUL) is not allowed in text")
}

async fn checked(req: Request) -> Result<Request, AppError> {
    let uri = req.uri();
    // A URI cannot carry a raw NUL; only its percent-encoding.
    if uri.path().to_ascii_lowercase().contains("%00") {
        return Err(nul_error("path"));
    }
    if let Some(q) = uri.query()
        && let Some(name) = nul_in_form(q.as_bytes())
    {
        return Err(nul_error(&format!("query parameter {name}")));
    }
    let limit = body_limit(uri.path());
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(AppError::TooLarge { limit });
    }
    let kind = body_kind(&req);
    if kind == BodyKind::Other && declared.is_none_or(|n| n == 0) && !has_body(&req) {
        return Ok(req);
    }
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| AppError::TooLarge { limit })?;
    let field = match kind {
        BodyKind::Json => nul_in_json(&bytes),
        BodyKind::Form => nul_in_form(&bytes).map(|n| format!("form field {n}")),
        BodyKind::Other => None,
    };
    if let Some(f) = field {
        return Err(nul_error(&f));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The worker routes (tag `ingest` in `api::endpoints`: reports and evaluation results) take
/// large batches; everything else is small.
fn body_limit(path: &str) -> usize {
    let evaluation_results = path
        .strip_prefix("/api/v1/evaluations/")
        .is_some_and(|rest| rest.ends_with("/results"));
    if path.starts_with("/api/v1/ingest/") || evaluation_results {
        INGEST_BODY_LIMIT
    } else {
        API_BODY_LIMIT
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    Json,
    Form,
    Other,
}

fn body_kind(req: &Request) -> BodyKind {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if ct.starts_with("application/json") || ct.contains("+json") {
        BodyKind::Json
    } else if ct.starts_with("application/x-www-form-urlencoded") {
        BodyKind::Form
    } else {
        BodyKind::Other
    }
}

/// Methods that may carry a body (a GET with a body is read too: nothing is exempt from limits).
fn has_body(req: &Request) -> bool {
    req.headers().contains_key(header::TRANSFER_ENCODING)
        || !matches!(
            *req.method(),
            axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
        )
}

/// The name of the first form (or query) field whose name or value decodes to text with a NUL.
fn nul_in_form(encoded: &[u8]) -> Option<String> {
    form_urlencoded::parse(encoded)
        .find(|(k, v)| k.contains('\0') || v.contains('\0'))
        .map(|(k, _)| format!("`{}`", k.replace('\0', "\\0")))
}

/// The path of the first JSON string (key or value) with a NUL, e.g. `envelopes[3].message.text`.
/// JSON can only spell NUL as the escape `\u0000`, so bodies without one are passed at the cost
/// of a byte scan; only a body with one is parsed here.
fn nul_in_json(body: &[u8]) -> Option<String> {
    if !has_escaped_nul(body) {
        return None;
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => nul_path(&v, String::new()).map(|p| if p.is_empty() { "body".into() } else { p }),
        // Unparseable: the handler's decoder says what is wrong with it.
        Err(_) => None,
    }
}

/// Whether `\u0000` occurs as an escape (preceded by an even number of backslashes).
fn has_escaped_nul(body: &[u8]) -> bool {
    let pat = b"\\u0000";
    body.windows(pat.len()).enumerate().any(|(i, w)| {
        w.eq_ignore_ascii_case(pat)
            && body[..i].iter().rev().take_while(|b| **b == b'\\').count() % 2 == 0
    })
}

fn nul_path(v: &Value, at: String) -> Option<String> {
    match v {
        Value::String(s) if s.contains('\0') => Some(at),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, x)| nul_path(x, format!("{at}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(k, x)| {
            let here = if at.is_empty() {
                k.replace('\0', "\\0")
            } else {
                format!("{at}.{}", k.replace('\0', "\\0"))
            };
            if k.contains('\0') {
                Some(here)
            } else {
                nul_path(x, here)
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_found_where_it_is_and_nowhere_else() {
        let body = br#"{"envelopes":[{"a":"x"},{"message":{"text":"ab\u0000c"}}]}"#;
        assert_eq!(
            nul_in_json(body).as_deref(),
            Some("envelopes[1].message.text")
        );
        // An escaped backslash followed by the letters u0000 is text, not a NUL.
        assert_eq!(nul_in_json(br#"{"code":"print('\\u0000')"}"#), None);
        assert_eq!(
            nul_in_json(br#"{"code":"\\\u0000"}"#).as_deref(),
            Some("code")
        );
        assert_eq!(nul_in_json(br#"{"k\u0000":1}"#).as_deref(), Some("k\\0"));
        assert_eq!(nul_in_json(br#""\u0000""#).as_deref(), Some("body"));
        assert_eq!(nul_in_form(b"a=1&name=x%00y").as_deref(), Some("`name`"));
        assert_eq!(nul_in_form(b"a=1&name=x%2500y"), None);
        assert_eq!(body_limit("/api/v1/ingest/3"), INGEST_BODY_LIMIT);
        assert_eq!(
            body_limit("/api/v1/evaluations/9/results"),
            INGEST_BODY_LIMIT
        );
        assert_eq!(body_limit("/api/v1/runs/3/evaluations"), API_BODY_LIMIT);
        assert_eq!(body_limit("/ui/theme"), API_BODY_LIMIT);
    }
}
