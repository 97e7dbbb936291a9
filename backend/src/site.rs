//! The static site: which bundle directory the pages name, and how long browsers keep files.
//!
//! `scripts/build-site` writes the hydration bundle (JS, wasm, CSS, each with `.br` and `.gz`
//! beside it) into `site/pkg/<content hash>/` and the hash into `site/pkg/BUNDLE`. Pages name
//! that directory, so its files never change under their URL and are cached for a year
//! (`immutable`: a reload does not even revalidate them); a new build is a new URL. Every other
//! static file is `no-cache` (revalidated with `Last-Modified`, a 304 when unchanged). The
//! precompressed files are served by leptos_axum's file handler (`ServeDir` with
//! `precompressed_br`/`precompressed_gzip`), so nothing is compressed at request time.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use std::path::Path;
use std::time::Duration;
use tower_http::timeout::TimeoutBody;

/// The file `scripts/build-site` writes the bundle's hash into, under `site/pkg/`.
pub const BUNDLE_FILE: &str = "BUNDLE";

/// `pkg/<hash>` when `site_root/pkg/BUNDLE` names an existing bundle directory, else `pkg`
/// (an older build, or none: pages still render, the warning at start-up says why).
pub fn pkg_dir(site_root: &Path) -> String {
    let pkg = site_root.join("pkg");
    match std::fs::read_to_string(pkg.join(BUNDLE_FILE)) {
        Ok(text) => {
            let hash = text.trim();
            if is_bundle_hash(hash) && pkg.join(hash).is_dir() {
                format!("pkg/{hash}")
            } else {
                "pkg".into()
            }
        }
        Err(_) => "pkg".into(),
    }
}

/// The hashes `scripts/build-site` makes: 16 lowercase hex digits.
fn is_bundle_hash(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `path` is a static file of the site (its last segment has a dot) rather than a page,
/// a server function or an API route; the API's own files (`openapi.json`, CSV exports) are API
/// answers.
pub fn is_static_file(path: &str) -> bool {
    !path.starts_with("/api/")
        && !path.starts_with("/ui/")
        && path.rsplit('/').next().is_some_and(|f| f.contains('.'))
}

/// Sets `Cache-Control` on static files (see the module doc); responses that set their own,
/// and API and page responses, are left alone.
pub async fn cache_headers(req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let mut res = next.run(req).await;
    if !res.status().is_success() || res.headers().contains_key(header::CACHE_CONTROL) {
        return res;
    }
    if !is_static_file(&path) {
        return res;
    }
    let versioned = path
        .strip_prefix("/pkg/")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(dir, _)| is_bundle_hash(dir));
    let value = if versioned {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static(value));
    res
}

/// How long a page's body may go without sending anything before the server ends it.
pub const PAGE_STALL_LIMIT: Duration = crate::REQUEST_TIMEOUT;

/// Ends a page whose body stops moving (state: the stall limit, `PAGE_STALL_LIMIT` in the app).
///
/// `TimeoutLayer` bounds the time to a response's head only. A streamed page sends its head and
/// shell at once and each `<Suspense>` chunk when its data arrives, so a render that never
/// resolves (a leptos race, seen in CI as a page that never ended; one cause, leptos#4773, is
/// avoided in `startup::route_list`) would hold the connection and the browser's spinner
/// forever. An HTML body that produces nothing for the limit is ended with an error, which
/// aborts the connection (the browser reports a failed load) and is logged with the path. Other bodies are left alone: the live event streams send
/// keep-alives of their own and the pool download may legitimately take long.
pub async fn end_stalled_pages(
    axum::extract::State(limit): axum::extract::State<Duration>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    let res = next.run(req).await;
    let is_html = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if !is_html {
        return res;
    }
    let (parts, body) = res.into_parts();
    let body = TimeoutBody::new(limit, body).map_err(move |e| {
        tracing::error!(path = %path, limit_s = limit.as_secs_f64(), error = %e, "a page's body stalled; ended it");
        e
    });
    Response::from_parts(parts, Body::new(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_files_are_api_answers_and_site_files_are_static() {
        assert!(is_static_file("/pkg/0123456789abcdef/spade.js"));
        assert!(is_static_file("/favicon.svg"));
        assert!(!is_static_file("/api/v1/openapi.json"));
        assert!(!is_static_file("/api/v1/runs/3/metrics.csv"));
        assert!(!is_static_file("/ui/run"));
        assert!(!is_static_file("/runs/3"));
        assert!(!is_static_file("/share/abc"));
    }

    #[test]
    fn the_bundle_directory_is_used_only_when_it_exists() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        assert_eq!(pkg_dir(dir.path()), "pkg", "no pkg at all");
        std::fs::create_dir_all(dir.path().join("pkg"))?;
        std::fs::write(dir.path().join("pkg/BUNDLE"), "0123456789abcdef\n")?;
        assert_eq!(pkg_dir(dir.path()), "pkg", "named but missing");
        std::fs::create_dir_all(dir.path().join("pkg/0123456789abcdef"))?;
        assert_eq!(pkg_dir(dir.path()), "pkg/0123456789abcdef");
        std::fs::write(dir.path().join("pkg/BUNDLE"), "../../etc\n")?;
        assert_eq!(pkg_dir(dir.path()), "pkg", "not a hash");
        Ok(())
    }

    /// A router whose pages stall after their first chunk, behind the stall limit.
    fn stalling_app(limit: Duration) -> axum::Router {
        use axum::routing::get;
        use futures_util::StreamExt;
        let stalls = |content_type: &'static str| {
            move || async move {
                let first = futures_util::stream::once(async {
                    Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"<html><body>shell"))
                });
                (
                    [(header::CONTENT_TYPE, content_type)],
                    Body::from_stream(first.chain(futures_util::stream::pending())),
                )
            }
        };
        axum::Router::new()
            .route("/stalls", get(stalls("text/html; charset=utf-8")))
            .route("/events", get(stalls("text/event-stream")))
            .route(
                "/whole",
                get(|| async { axum::response::Html("<html><body>done</body></html>") }),
            )
            .layer(axum::middleware::from_fn_with_state(
                limit,
                end_stalled_pages,
            ))
    }

    async fn open(app: &axum::Router, path: &str) -> Body {
        use tower::ServiceExt;
        let req = Request::builder().uri(path).body(Body::empty());
        match app.clone().oneshot(req.unwrap_or_default()).await {
            Ok(res) => res.into_body(),
            Err(never) => match never {},
        }
    }

    /// The attack: a page whose render never finishes must not hold the connection forever.
    #[tokio::test]
    async fn a_page_that_stops_sending_is_ended_and_other_streams_are_not() {
        let limit = Duration::from_millis(200);
        let app = stalling_app(limit);
        let t0 = std::time::Instant::now();

        let mut page = open(&app, "/stalls").await;
        let first = page
            .frame()
            .await
            .and_then(|f| f.ok())
            .and_then(|f| f.into_data().ok());
        assert_eq!(
            first.as_deref(),
            Some(&b"<html><body>shell"[..]),
            "the shell arrives"
        );
        let next = tokio::time::timeout(Duration::from_secs(10), page.frame()).await;
        assert!(
            matches!(next, Ok(Some(Err(_)))),
            "a stalled page ends with an error once the limit passes"
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

        let whole = open(&app, "/whole")
            .await
            .collect()
            .await
            .map(|b| b.to_bytes());
        assert_eq!(
            whole.ok().as_deref(),
            Some(&b"<html><body>done</body></html>"[..])
        );

        // An event stream that is quiet for several limits stays open.
        let mut events = open(&app, "/events").await;
        assert!(matches!(events.frame().await, Some(Ok(_))));
        let quiet = tokio::time::timeout(limit * 4, events.frame()).await;
        assert!(quiet.is_err(), "the event stream was ended: {quiet:?}");
    }
}
