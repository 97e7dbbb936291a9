//! Light and dark themes. Colours are CSS custom properties (`style/main.css`); the choice is
//! a cookie that the server reads, so the first paint already has the right theme (no flash).
//! Without a cookie the page follows the system setting (`prefers-color-scheme`).
//!
//! The toggle is a POST form (a server function), so it works without JavaScript; once
//! hydrated, a click switches the `data-theme` attribute at once and the same server function
//! stores the cookie in the background.

use leptos::prelude::*;

/// Name of the cookie that holds `light` or `dark`.
pub const THEME_COOKIE: &str = "spade_theme";

/// A theme the user chose explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Theme {
    Light,
    Dark,
}

impl Theme {
    pub fn as_str(self) -> &'static str {
        match self {
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "light" => Some(Theme::Light),
            "dark" => Some(Theme::Dark),
            _ => None,
        }
    }

    /// The theme in a `Cookie:` header value, if one is set and valid.
    pub fn from_cookie_header(header: &str) -> Option<Self> {
        header
            .split(';')
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == THEME_COOKIE)
            .and_then(|(_, v)| Self::parse(v.trim()))
    }
}

/// The theme of the request being rendered (server only; the browser never re-renders `<html>`).
#[cfg(feature = "ssr")]
pub fn request_theme() -> Option<Theme> {
    let parts = use_context::<http::request::Parts>()?;
    parts
        .headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(Theme::from_cookie_header)
}

/// Stores the theme cookie (one year, readable by the page's script, same-site).
#[server(prefix = "/ui", endpoint = "theme")]
pub async fn set_theme(theme: String) -> Result<(), ServerFnError> {
    let Some(theme) = Theme::parse(&theme) else {
        return Err(ServerFnError::Args(format!(
            "theme must be \"light\" or \"dark\", got {theme:?}"
        )));
    };
    let cookie = format!(
        "{THEME_COOKIE}={}; Path=/; Max-Age=31536000; SameSite=Lax",
        theme.as_str()
    );
    // Only the server build has a response to set it on; the unit tests compile this body
    // without the app's `ssr` feature (they render with leptos' ssr mode but never call it).
    #[cfg(feature = "ssr")]
    if let (Some(response), Ok(v)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        http::HeaderValue::from_str(&cookie),
    ) {
        response.append_header(http::header::SET_COOKIE, v);
    }
    #[cfg(not(feature = "ssr"))]
    let _ = cookie;
    Ok(())
}

/// The theme switch: two submit buttons, of which the stylesheet shows the one that leads away
/// from the theme in effect (cookie or system setting), so it is right before any script runs.
#[component]
pub fn ThemeToggle() -> impl IntoView {
    let action = ServerAction::<SetTheme>::new();
    let theme_url = <SetTheme as leptos::server_fn::ServerFn>::url();
    let switch = move |ev: leptos::ev::MouseEvent, theme: Theme| {
        ev.prevent_default();
        if let Some(root) = document().document_element() {
            let _ = root.set_attribute("data-theme", theme.as_str());
        }
        action.dispatch(SetTheme {
            theme: theme.as_str().to_owned(),
        });
    };
    view! {
        <form class="theme-toggle" method="post" action=theme_url>
            <button
                type="submit"
                name="theme"
                value="dark"
                class="theme-to-dark ghost"
                on:click=move |ev| switch(ev, Theme::Dark)
            >
                <span aria-hidden="true">"☾ "</span>
                "Dark theme"
            </button>
            <button
                type="submit"
                name="theme"
                value="light"
                class="theme-to-light ghost"
                on:click=move |ev| switch(ev, Theme::Light)
            >
                <span aria-hidden="true">"☀ "</span>
                "Light theme"
            </button>
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_header_parsing() {
        assert_eq!(
            Theme::from_cookie_header("spade_theme=dark"),
            Some(Theme::Dark)
        );
        assert_eq!(
            Theme::from_cookie_header("a=1; spade_theme=light; b=2"),
            Some(Theme::Light)
        );
        assert_eq!(Theme::from_cookie_header("spade_theme=purple"), None);
        assert_eq!(Theme::from_cookie_header("xspade_theme=dark"), None);
        assert_eq!(Theme::from_cookie_header(""), None);
    }
}
