//! One policy of security headers for every response the server sends: pages, API answers,
//! CSV and zip downloads, static files, errors and the share page.
//!
//! - `Content-Security-Policy`: a page gets `spade_app::page_policy` with the script nonce its
//!   render used (markup injected into a page cannot run script). The shell sends it through
//!   leptos' response options, and this middleware also captures the nonce while the page
//!   renders ([`PageNonce`], [`capture_nonce`]) and sets the policy itself on an HTML answer
//!   that arrives without one: a run page under load once did, the header set in the shell
//!   lost somewhere between leptos' options and the response. Every answer that is not HTML gets
//!   [`STRICT_POLICY`], which lets a JSON, CSV or file answer opened in a tab run nothing.
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
use std::sync::{Arc, OnceLock};

/// The script nonce of the page a request renders, filled in by [`capture_nonce`] as leptos
/// starts rendering, read by [`headers`] when the answer comes back.
#[derive(Debug, Clone, Default)]
pub struct PageNonce(Arc<OnceLock<String>>);

/// Records this render's nonce in its request's [`PageNonce`]; called in the context leptos
/// sets up before it renders a page (after its own nonce is in place).
pub fn capture_nonce() {
    use leptos::prelude::use_context;
    if let (Some(parts), Some(nonce)) = (
        use_context::<axum::http::request::Parts>(),
        leptos::nonce::use_nonce(),
    ) && let Some(slot) = parts.extensions.get::<PageNonce>()
    {
        let _ = slot.0.set(nonce.to_string());
    }
}

/// The policy of every response that is not a page.
pub const STRICT_POLICY: &str =
    "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The middleware (see the module doc).
pub async fn headers(mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let static_file = crate::site::is_static_file(&path);
    let nonce = PageNonce::default();
    req.extensions_mut().insert(nonce.clone());
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
            match nonce
                .0
                .get()
                .map(|n| HeaderValue::from_str(&spade_app::page_policy(n)))
            {
                Some(Ok(policy)) => {
                    h.insert(header::CONTENT_SECURITY_POLICY, policy);
                }
                // No render of ours (a handler's own HTML): no nonce to allow, and the strict
                // policy would block the page's own scripts and styles. Logged, to be found.
                _ => tracing::warn!(path = %path, "an HTML answer without its page policy"),
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    async fn csp(handler_fills_nonce: bool) -> Option<String> {
        let page = move |req: Request| async move {
            if handler_fills_nonce && let Some(slot) = req.extensions().get::<PageNonce>() {
                // What `capture_nonce` does while leptos renders.
                let _ = slot.0.set("n0nce".into());
            }
            (
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                "<p>page</p>",
            )
        };
        let app = axum::Router::new()
            .route("/page", get(page))
            .layer(axum::middleware::from_fn(headers));
        let req = Request::builder().uri("/page").body(Body::empty()).ok()?;
        let res = app.oneshot(req).await.ok()?;
        res.headers()
            .get(header::CONTENT_SECURITY_POLICY)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// A page whose own header got lost still gets the policy of the nonce it rendered with;
    /// HTML that no render of ours made gets none (the strict one would kill it), and is logged.
    #[tokio::test]
    async fn an_html_answer_without_its_header_gets_the_policy_of_its_render() {
        assert_eq!(
            csp(true).await,
            Some(spade_app::page_policy("n0nce")),
            "the captured nonce's policy"
        );
        assert_eq!(csp(false).await, None);
    }
}
