//! Keeps a browser's session alive (hydrate only). Access cookies live 15 minutes; the refresh
//! cookie 30 days. A hydrated page refreshes the session every [`REFRESH_EVERY`] while it is
//! open, and a page the server rendered without a session although the browser may hold a
//! refresh cookie refreshes once and reloads, so people stay logged in as they would expect.
//!
//! The server renews an expired session itself when a page is loaded with the refresh cookie
//! (the backend's `auth::renew`), so the resume below is for what it could not renew.
//!
//! The refresh is `POST /api/v1/auth/refresh` with the refresh cookie (HttpOnly,
//! SameSite=Strict) and the CSRF token from the readable `spade_csrf` cookie in
//! `X-CSRF-Token`, exactly what the API asks of a browser.

use std::time::Duration;

/// Well inside the access token's 15 minutes.
pub const REFRESH_EVERY: Duration = Duration::from_secs(10 * 60);

/// Starts the periodic refresh (once per page load).
#[cfg(feature = "hydrate")]
pub fn keep_alive() {
    leptos::prelude::set_interval(
        || {
            leptos::task::spawn_local(async {
                // A failed refresh leaves the page as it is; the next navigation will ask to
                // log in if the session is really gone.
                let _ = refresh().await;
            });
        },
        REFRESH_EVERY,
    );
}

/// On a page rendered without a session: refresh once and, if that worked, reload. A reload
/// that still finds no session (cookies blocked, say) must not loop, so a resume is tried at
/// most once a minute per tab (`sessionStorage`).
#[cfg(feature = "hydrate")]
pub fn resume_or_stay() {
    const KEY: &str = "spade_resumed_at";
    let Some(window) = web_sys::window() else {
        return;
    };
    let now = js_now_ms();
    let storage = window.session_storage().ok().flatten();
    let last = storage
        .as_ref()
        .and_then(|s| s.get_item(KEY).ok().flatten())
        .and_then(|v| v.parse::<f64>().ok());
    if last.is_some_and(|t| now - t < 60_000.0) {
        return;
    }
    if let Some(s) = &storage {
        let _ = s.set_item(KEY, &now.to_string());
    }
    leptos::task::spawn_local(async move {
        if refresh().await == Ok(true) {
            let _ = window.location().reload();
        }
    });
}

#[cfg(feature = "hydrate")]
fn js_now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.time_origin() + p.now())
}

/// The `spade_csrf` cookie's value, if the browser has one.
#[cfg(feature = "hydrate")]
fn csrf_cookie() -> Option<String> {
    use wasm_bindgen::JsCast;
    let doc = web_sys::window()?
        .document()?
        .dyn_into::<web_sys::HtmlDocument>()
        .ok()?;
    csrf_from_cookies(&doc.cookie().ok()?)
}

/// Whether the session was refreshed (`Ok(false)`: no CSRF cookie, or the server said no).
#[cfg(feature = "hydrate")]
async fn refresh() -> Result<bool, wasm_bindgen::JsValue> {
    use wasm_bindgen::JsCast;
    let Some(csrf) = csrf_cookie() else {
        return Ok(false);
    };
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_credentials(web_sys::RequestCredentials::SameOrigin);
    let headers = web_sys::Headers::new()?;
    headers.set("X-CSRF-Token", &csrf)?;
    init.set_headers(&headers);
    let req = web_sys::Request::new_with_str_and_init("/api/v1/auth/refresh", &init)?;
    let window = web_sys::window().ok_or_else(|| wasm_bindgen::JsValue::from_str("no window"))?;
    let resp = wasm_bindgen_futures::JsFuture::from(window.fetch_with_request(&req)).await?;
    let resp: web_sys::Response = resp.dyn_into()?;
    Ok(resp.ok())
}

/// The value of `spade_csrf` in a `document.cookie` string.
pub fn csrf_from_cookies(cookies: &str) -> Option<String> {
    cookies
        .split(';')
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == "spade_csrf")
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csrf_cookie_is_found_among_others() {
        assert_eq!(
            csrf_from_cookies("spade_theme=dark; spade_csrf=abc.def; x=1").as_deref(),
            Some("abc.def")
        );
        assert_eq!(csrf_from_cookies("spade_csrfx=1; spade_csrf="), None);
        assert_eq!(csrf_from_cookies(""), None);
    }
}
