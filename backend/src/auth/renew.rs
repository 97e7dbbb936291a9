//! Pages renew an expired browser session themselves. The access cookie lives 15 minutes; when
//! a page is asked for without a valid one but with the refresh cookie, this layer rotates the
//! refresh token as `POST /auth/refresh` would, hands the page the new access token (so it
//! renders for the signed-in person on the first load) and sets the new cookies on the answer.
//! Before this, such a page rendered "Log in to continue", its script refreshed and reloaded:
//! a flash and two loads after every pause of a quarter of an hour.
//!
//! Only page loads (GET or HEAD, outside `/api/` and static files) are renewed; the API answers
//! 401 `token_expired` as before, for clients that refresh themselves. The refresh cookie is
//! SameSite=Strict, so a request started by another site never carries it and never renews
//! anything; a rotation on a GET changes nothing but the tokens. Tabs renewing at once get the
//! grace the refresh route gives them (`users::REFRESH_RACE_GRACE_S`), and a copied token that
//! comes back revokes the session here too.

use super::{ACCESS_COOKIE, REFRESH_COOKIE, cookie, routes};
use crate::AppState;
use crate::tokens;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use spade_db::users::{self, Refresh};

/// Whether `path` is a page (or a page's server function), not the API or a static file.
fn is_page(path: &str) -> bool {
    !path.starts_with("/api/") && !path.rsplit('/').next().is_some_and(|f| f.contains('.'))
}

/// The middleware: see the module doc.
pub async fn renew_on_pages(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let renewable = matches!(*req.method(), Method::GET | Method::HEAD)
        && is_page(req.uri().path())
        && needs_renewal(&state, req.headers());
    if !renewable {
        return next.run(req).await;
    }
    let routes::ClientIp(ip) = routes::ClientIp::of(req.extensions());
    let cookies = match renew(&state, req.headers().clone(), &ip).await {
        Some(c) => c,
        // Unknown, revoked or throttled: the page renders logged out, as it did.
        None => return next.run(req).await,
    };
    if let Some(access) = cookies.iter().find_map(|c| value_of(c, ACCESS_COOKIE)) {
        replace_cookie(req.headers_mut(), ACCESS_COOKIE, &access);
    }
    let mut resp = next.run(req).await;
    for c in cookies {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    resp
}

/// A refresh cookie of the right shape, and no access token that still verifies.
fn needs_renewal(state: &AppState, headers: &axum::http::HeaderMap) -> bool {
    let has_refresh = cookie(headers, REFRESH_COOKIE)
        .is_some_and(|t| tokens::looks_like_random_token("sprt_", t));
    has_refresh
        && cookie(headers, ACCESS_COOKIE).is_none_or(|t| state.auth.signer.verify(t).is_err())
}

/// Rotates the request's refresh token; the `Set-Cookie` values of the new session cookies, or
/// `None` when the token does not renew (unknown, revoked, reused, or the client throttled).
async fn renew(
    state: &AppState,
    headers: axum::http::HeaderMap,
    ip: &str,
) -> Option<Vec<HeaderValue>> {
    state.auth.limits.refresh.take(ip).ok()?;
    let presented = cookie(&headers, REFRESH_COOKIE)?;
    let next = tokens::random_token("sprt_");
    let outcome = users::rotate_refresh(
        &state.ctx.db,
        &tokens::hash_token(presented),
        &tokens::hash_token(&next),
        routes::refresh_expiry(),
        users::REFRESH_RACE_GRACE_S,
    )
    .await;
    let (session_id, user_id, refresh) = match outcome {
        Ok(Refresh::Rotated {
            session_id,
            user_id,
        }) => (session_id, user_id, Some(next)),
        Ok(Refresh::Raced {
            session_id,
            user_id,
        }) => (session_id, user_id, None),
        Ok(Refresh::Reused {
            session_id,
            user_id,
        }) => {
            if let Err(e) = routes::reused(state, session_id, user_id).await {
                tracing::warn!(error = %e, "renewing a page's session: reuse not recorded");
            }
            return None;
        }
        Ok(Refresh::Refused) => return None,
        Err(e) => {
            tracing::warn!(error = %e, "renewing a page's session failed");
            return None;
        }
    };
    let user = users::get(&state.ctx.db, user_id).await.ok()?;
    let secure = routes::cookies_secure(state, &headers);
    let answer = routes::session_response(state, user, session_id, refresh, false, secure).ok()?;
    Some(
        answer
            .headers()
            .get_all(header::SET_COOKIE)
            .iter()
            .cloned()
            .collect(),
    )
}

/// The value a `Set-Cookie` header gives cookie `name`, if it is that cookie's.
fn value_of(set_cookie: &HeaderValue, name: &str) -> Option<String> {
    let text = set_cookie.to_str().ok()?;
    let first = text.split(';').next()?;
    let (k, v) = first.split_once('=')?;
    (k.trim() == name && !v.is_empty()).then(|| v.to_owned())
}

/// Sets cookie `name` to `value` in the request's `Cookie` header, dropping any earlier value.
fn replace_cookie(headers: &mut axum::http::HeaderMap, name: &str, value: &str) {
    let mut pairs: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|p| !p.is_empty() && p.split_once('=').is_none_or(|(k, _)| k != name))
        .map(str::to_owned)
        .collect();
    pairs.push(format!("{name}={value}"));
    if let Ok(v) = HeaderValue::from_str(&pairs.join("; ")) {
        headers.remove(header::COOKIE);
        headers.insert(header::COOKIE, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pages_are_renewed() {
        for page in [
            "/",
            "/runs",
            "/runs/4/environments",
            "/ui/teams",
            "/account",
        ] {
            assert!(is_page(page), "{page}");
        }
        for other in [
            "/api/v1/runs",
            "/api/v1/auth/refresh",
            "/pkg/spade.wasm",
            "/favicon.svg",
        ] {
            assert!(!is_page(other), "{other}");
        }
    }

    #[test]
    fn the_new_access_cookie_replaces_the_expired_one() {
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("spade_theme=dark; spade_access=old; spade_refresh=r"),
        );
        replace_cookie(&mut h, "spade_access", "new");
        assert_eq!(cookie(&h, "spade_access"), Some("new"));
        assert_eq!(cookie(&h, "spade_theme"), Some("dark"));
        assert_eq!(cookie(&h, "spade_refresh"), Some("r"));
        let set = HeaderValue::from_static("spade_access=abc.def; Path=/; Max-Age=900; HttpOnly");
        assert_eq!(value_of(&set, "spade_access").as_deref(), Some("abc.def"));
        assert_eq!(value_of(&set, "spade_refresh"), None);
    }
}
