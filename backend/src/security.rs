//! One policy of security headers for every response the server sends: pages, API answers,
//! CSV and zip downloads, static files, errors and the share page.
//!
//! - `Content-Security-Policy`: a page sets its own (`spade_app::page_policy`, with the request's
//!   script nonce: markup injected into a page cannot run script); every answer that is not
//!   HTML gets [`STRICT_POLICY`], which lets a JSON, CSV or file answer opened in a tab run
//!   nothing.
//! - `X-Frame-Options: DENY` (and `frame-ancestors 'none'` in both policies): no other site can
//!   frame a page and trick a click onto Cancel, Revoke or Remove member.
//! - `X-Content-Type-Options: nosniff`: a file is never read as another type (a CSV as HTML).
//! - `Referrer-Policy: same-origin`: the share page carries its token in its URL, so no
//!   referrer leaves for another site; same-origin requests keep it (and their `Origin`, which
//!   the CSRF check reads; `no-referrer` would make a form's `Origin` "null").
//! - `Cache-Control: no-store` on pages and API answers that set nothing else (they carry
//!   personal data and tokens); static files keep what `site::cache_headers` gave them.

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

/// The policy of every response that is not a page.
pub const STRICT_POLICY: &str =
    "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The middleware (see the module doc).
pub async fn headers(req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let static_file = crate::site::is_static_file(&path);
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    let html = h
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/html"));
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        if html {
            // A page renders its own nonce policy in `spade_app::shell`. An HTML answer without
            // one is left without a policy rather than given the strict one, which would block
            // the page's own scripts and styles: in the browser tests under load, a run page was
            // once answered without its header (cause not found yet), and the strict policy
            // left it dead. Logged, so that it can be found.
            tracing::warn!(path = %path, "an HTML answer without its page policy");
        } else {
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(STRICT_POLICY),
            );
        }
    }
    if !static_file {
        h.entry(header::CACHE_CONTROL)
            .or_insert(HeaderValue::from_static("no-store"));
    }
    res
}
