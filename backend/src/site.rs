//! The static site: which bundle directory the pages name, and how long browsers keep files.
//!
//! `scripts/build-site` writes the hydration bundle (JS, wasm, CSS, each with `.br` and `.gz`
//! beside it) into `site/pkg/<content hash>/` and the hash into `site/pkg/BUNDLE`. Pages name
//! that directory, so its files never change under their URL and are cached for a year
//! (`immutable`: a reload does not even revalidate them); a new build is a new URL. Every other
//! static file is `no-cache` (revalidated with `Last-Modified`, a 304 when unchanged). The
//! precompressed files are served by leptos_axum's file handler (`ServeDir` with
//! `precompressed_br`/`precompressed_gzip`), so nothing is compressed at request time.

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use std::path::Path;

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

/// Sets `Cache-Control` on static files (see the module doc); responses that set their own,
/// and API and page responses, are left alone.
pub async fn cache_headers(req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let mut res = next.run(req).await;
    if !res.status().is_success() || res.headers().contains_key(header::CACHE_CONTROL) {
        return res;
    }
    let is_file = path.rsplit('/').next().is_some_and(|f| f.contains('.'));
    if !is_file || path.starts_with("/api/") {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
