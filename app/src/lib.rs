//! The SPADE Studio dashboard: Leptos components shared by the server (feature `ssr`, renders
//! HTML) and the browser (feature `hydrate`, compiled to wasm by `frontend/`, attaches event
//! handlers to that HTML). Nothing here knows SQL or libtorch.
//!
//! Map: `layout` (app shell, navigation), `theme` (light/dark), `charts` (plotters SVG line
//! charts), `code` (Python highlighting, side-by-side diff), `dto` (what pages render),
//! `pages` (one component per page, over DTOs).

// Deep view types of the larger pages exceed the default limit when rendered for SSR.
#![recursion_limit = "256"]

pub mod charts;
pub mod code;
pub mod data;
pub mod dto;
pub mod layout;
pub mod live;
pub mod pages;
pub mod routes;
pub mod session;
pub mod theme;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Title, provide_meta_context};
use leptos_router::{
    ParamSegment, SsrMode, StaticSegment,
    components::{Route, Router, Routes},
};

/// Name of the wasm/JS/CSS bundle under `site/pkg/`; the server and `scripts/build-site` agree on it.
pub const OUTPUT_NAME: &str = "spade";

/// The HTML document around [`App`]; the server renders it for every page request. The theme
/// attribute comes from the request's cookie, so the first paint has the chosen theme.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    let theme = theme::request_theme().map(theme::Theme::as_str);
    #[cfg(not(feature = "ssr"))]
    let theme: Option<&'static str> = None;
    // In the shell (rendered by the server only), so the versioned bundle directory the server
    // was configured with names the stylesheet too.
    let css = format!("/{}/{OUTPUT_NAME}.css", options.site_pkg_dir);
    #[cfg(feature = "ssr")]
    send_page_policy();
    view! {
        <!DOCTYPE html>
        <html lang="en" data-theme=theme>
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <link rel="stylesheet" id="leptos" href=css />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// The Content-Security-Policy of a page whose inline scripts carry `nonce` (leptos puts the
/// request's nonce on its hydration and streaming scripts). Scripts run only from this origin or
/// with the nonce, so markup that slipped into a page cannot run script; nothing may frame a page
/// (clickjacking of the one-click buttons); forms post only here. Styles may be inline: the
/// charts and the crosshair set `style` attributes, and a style cannot run script.
pub fn page_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// Sends [`page_policy`] with this request's nonce as the page's `Content-Security-Policy`
/// header (the server sets a stricter one on every response that has none).
#[cfg(feature = "ssr")]
fn send_page_policy() {
    if let (Some(nonce), Some(opts)) = (
        leptos::nonce::use_nonce(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) && let Ok(v) = http::HeaderValue::from_str(&page_policy(&nonce))
    {
        opts.insert_header(http::header::CONTENT_SECURITY_POLICY, v);
    }
}

/// The text of `<title>` as a page is rendered. leptos_meta 0.8 writes the title into the
/// server-rendered `<head>` as it is, unescaped (`ServerMetaContext` pushes the string between
/// `<title>` and `</title>`), and titles carry names users and workers choose (a run named
/// `x</title><script>...` was markup). So every render that produces HTML escapes it; the browser
/// build sets `document.title`, which takes text, and must not.
fn title_text(text: String) -> String {
    #[cfg(not(feature = "hydrate"))]
    let text = code::python::escape_html(&text);
    text
}

/// Root component: metadata, the app shell and routes.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    // Read by the top bar only: pages load their own (see `routes::csrf_resource`).
    let viewer: data::ViewerResource = Resource::new(|| (), |_| data::load_viewer());
    // In the browser only (effects do not run on the server): keep the session alive.
    #[cfg(feature = "hydrate")]
    Effect::new(|_| session::keep_alive());
    #[cfg(feature = "hydrate")]
    Effect::new(|_| mark_hydrated());
    view! {
        // The one formatter of every page's title (see `title_text`).
        <Title formatter=title_text text="SPADE Studio" />
        <Router>
            <layout::AppShell viewer>
                <Routes fallback=|| view! {
                    <Title text="Page not found · SPADE Studio" />
                    <div class="card login-prompt" id="not-found">
                        <h1>"Page not found"</h1>
                        <p>"There is no page at this address."</p>
                        <p><a class="button" href="/runs">"Back to your runs"</a></p>
                    </div>
                }>
                    <Route path=StaticSegment("") view=HomePage />
                    <Route path=StaticSegment("login") view=routes::LoginPage />
                    <Route path=StaticSegment("register") view=routes::RegisterPage />
                    <Route path=StaticSegment("runs") view=routes::RunsPage />
                    // Whole before the response too: "run again" from a run the viewer cannot
                    // read answers 404.
                    <Route path=(StaticSegment("runs"), StaticSegment("new")) view=routes::LaunchPage ssr=SsrMode::Async />
                    // Pages of one thing render completely before the response starts, so a
                    // missing run answers 404 and the <title> names the thing (a streamed
                    // response has sent its status and <head> before the data is loaded).
                    <Route path=(StaticSegment("runs"), ParamSegment("id")) view=routes::RunPage ssr=SsrMode::Async />
                    <Route
                        path=(StaticSegment("runs"), ParamSegment("id"), StaticSegment("environments"))
                        view=routes::EnvironmentsPage
                        ssr=SsrMode::Async
                    />
                    <Route
                        path=(StaticSegment("runs"), ParamSegment("id"), StaticSegment("environments"), ParamSegment("env"))
                        view=routes::EnvironmentPage
                        ssr=SsrMode::Async
                    />
                    <Route path=StaticSegment("compare") view=routes::ComparePage />
                    <Route path=StaticSegment("benchmarks") view=routes::BenchmarksPage />
                    // Rendered whole before the response starts too: the answer that shows a
                    // new invitation's link must also clear the cookie that brought it, and a
                    // streamed response has sent its headers before the data is loaded.
                    <Route path=StaticSegment("teams") view=routes::TeamsPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("account") view=routes::AccountPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("share"), ParamSegment("token")) view=routes::SharedPage ssr=SsrMode::Async />
                </Routes>
            </layout::AppShell>
        </Router>
    }
}

/// Marks `<html data-hydrated="true">` once the browser has taken the server-rendered page
/// over (effects run only after hydration, when every event handler is attached), so browser
/// tests can tell a live page from a server-rendered one without clicking anything.
#[cfg(feature = "hydrate")]
fn mark_hydrated() {
    if let Some(root) = document().document_element() {
        let _ = root.set_attribute("data-hydrated", "true");
    }
}

/// Landing page.
#[component]
fn HomePage() -> impl IntoView {
    view! {
        <section class="hero">
            <h1>"SPADE Studio"</h1>
            <p>
                "Self-play training in environments the model writes itself: launch runs, "
                "read what the designer wrote, and compare the curves."
            </p>
            <p class="hero-links">
                <a class="button" href="/runs">"Open runs"</a>
                <a href="/compare">"Compare runs"</a>
            </p>
        </section>
    }
}
