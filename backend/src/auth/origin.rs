//! Where a browser request comes from, for the two forms that run before there is a session to
//! carry a CSRF token (`/login`, `/register`). Without this check a page on another site can post
//! the attacker's credentials to `/login` and so log the victim's browser into the attacker's
//! account ("login CSRF"). Browsers tell the origin of a form POST in `Origin` (always sent on
//! POST by current browsers) and `Sec-Fetch-Site`; older ones at least send `Referer`. A request
//! naming another origin in any of them is refused; a request naming none (curl, scripts) is let
//! through, since only a browser can be tricked into posting and browsers name the origin.

use axum::http::{HeaderMap, header};

/// `scheme://host[:port]` of a URL, lower-cased; `None` when it has no host.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split(['/', '?', '#']).next()?;
    if host.is_empty() {
        return None;
    }
    Some(format!(
        "{}://{}",
        scheme.to_ascii_lowercase(),
        host.to_ascii_lowercase()
    ))
}

/// Whether `origin` (`scheme://host[:port]`) is this server: the configured public URL, or the
/// host the request was sent to (a victim's browser sends our host in `Host` and the attacker's
/// page in `Origin`, so a cross-site post never matches).
fn is_ours(origin: &str, headers: &HeaderMap, public_url: Option<&str>) -> bool {
    if public_url.and_then(origin_of).as_deref() == Some(origin) {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    origin
        .split_once("://")
        .is_some_and(|(scheme, h)| matches!(scheme, "http" | "https") && h == host)
}

/// Whether a form POST may be taken as coming from this site's own pages (see the module doc).
pub fn from_our_pages(headers: &HeaderMap, public_url: Option<&str>) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    if let Some(origin) = text(header::ORIGIN.as_str()) {
        // "null": a sandboxed frame, a data: URL or a redirect chain across origins.
        return origin_of(origin).is_some_and(|o| is_ours(&o, headers, public_url));
    }
    if let Some(referer) = text(header::REFERER.as_str()) {
        return origin_of(referer).is_some_and(|o| is_ours(&o, headers, public_url));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn posts_from_other_sites_are_foreign_and_our_own_are_not() {
        let host = ("host", "127.0.0.1:3000");
        let ours = [
            vec![host, ("origin", "http://127.0.0.1:3000")],
            vec![
                host,
                ("origin", "http://127.0.0.1:3000"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![host, ("referer", "http://127.0.0.1:3000/login?next=/runs")],
            vec![host],
            vec![host, ("origin", "https://studio.example")],
        ];
        for h in ours {
            assert!(
                from_our_pages(&headers(&h), Some("https://studio.example/")),
                "{h:?}"
            );
        }
        let foreign = [
            vec![host, ("origin", "http://evil.example")],
            vec![host, ("origin", "null")],
            vec![host, ("origin", "http://127.0.0.1:3001")],
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![
                host,
                ("sec-fetch-site", "same-site"),
                ("origin", "http://127.0.0.1:3000"),
            ],
            vec![host, ("referer", "http://evil.example/page")],
            vec![("origin", "http://127.0.0.1:3000")],
        ];
        for h in foreign {
            assert!(!from_our_pages(&headers(&h), None), "{h:?}");
        }
    }
}
