//! The SPADE Studio dashboard: Leptos components shared by the server (feature `ssr`, renders
//! HTML) and the browser (feature `hydrate`, compiled to wasm by `frontend/`, attaches event
//! handlers to that HTML). Nothing here knows HTTP routes, SQL or libtorch; data will arrive
//! through server functions whose bodies live behind `#[cfg(feature = "ssr")]`.

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    StaticSegment,
    components::{Route, Router, Routes},
};

/// Name of the wasm/JS/CSS bundle under `site/pkg/`; the server and `scripts/build-site` agree on it.
pub const OUTPUT_NAME: &str = "spade";

/// The HTML document around [`App`]; the server renders it for every page request.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// Root component: metadata and routes.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="leptos" href="/pkg/spade.css" />
        <Title text="SPADE Studio" />
        <Router>
            <header class="topbar">
                <a class="brand" href="/">"SPADE Studio"</a>
            </header>
            <main>
                <Routes fallback=|| view! { <p class="notfound">"Page not found."</p> }>
                    <Route path=StaticSegment("") view=HomePage />
                </Routes>
            </main>
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
                "Self-play training in environments the model writes itself. "
                "Runs, environments and charts arrive with the next milestones."
            </p>
            <button id="hydration-check" on:click=move |_| set_clicks.update(|n| *n += 1)>
                "Clicked " <span id="click-count">{clicks}</span> " times"
            </button>
        </section>
    }
}
