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
pub mod dto;
pub mod layout;
pub mod pages;
pub mod theme;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    StaticSegment,
    components::{Route, Router, Routes},
    hooks::use_query_map,
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
    view! {
        <!DOCTYPE html>
        <html lang="en" data-theme=theme>
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// Root component: metadata, the app shell and routes.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let user = Signal::stored(None::<dto::UserDto>);
    view! {
        <Stylesheet id="leptos" href="/pkg/spade.css" />
        <Title text="SPADE Studio" />
        <Router>
            <layout::AppShell user>
                <Routes fallback=|| view! { <p class="notfound">"Page not found."</p> }>
                    <Route path=StaticSegment("") view=HomePage />
                    <Route path=StaticSegment("login") view=LoginPage />
                    <Route path=StaticSegment("register") view=RegisterPage />
                </Routes>
            </layout::AppShell>
        </Router>
    }
}

/// Landing page. The counter is the hydration canary that the browser test clicks: it only
/// changes if the wasm bundle loaded and attached its handler to the server-rendered button.
#[component]
fn HomePage() -> impl IntoView {
    let (clicks, set_clicks) = signal(0u32);
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
            <button id="hydration-check" class="secondary" on:click=move |_| set_clicks.update(|n| *n += 1)>
                "Clicked " <span id="click-count">{clicks}</span> " times"
            </button>
        </section>
    }
}

/// A query parameter of the current URL.
fn query(name: &'static str) -> impl Fn() -> Option<String> + Copy {
    let q = use_query_map();
    move || q.with(|m| m.get(name))
}

#[component]
fn LoginPage() -> impl IntoView {
    let (error, email, next) = (query("error"), query("email"), query("next"));
    view! {
        <Title text="Log in · SPADE Studio" />
        {move || view! {
            <pages::auth::LoginView
                error=error()
                email=email().unwrap_or_default()
                next=next().filter(|n| n.starts_with('/') && !n.starts_with("//")).unwrap_or_else(|| "/runs".into())
            />
        }}
    }
}

#[component]
fn RegisterPage() -> impl IntoView {
    let (error, email, name) = (query("error"), query("email"), query("display_name"));
    view! {
        <Title text="Register · SPADE Studio" />
        {move || view! {
            <pages::auth::RegisterView error=error() email=email().unwrap_or_default() display_name=name().unwrap_or_default() />
        }}
    }
}
