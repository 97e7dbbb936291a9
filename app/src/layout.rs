//! The application shell around every page: a skip link, the top bar (product name, main
//! navigation, theme switch, user menu) and the `<main>` landmark the skip link targets.

use crate::data::ViewerResource;
use crate::dto::Viewer;
use crate::theme::ThemeToggle;
use leptos::prelude::*;
use leptos_router::hooks::use_location;

/// Main navigation entries: (path, label).
pub const NAV: [(&str, &str); 4] = [
    ("/runs", "Runs"),
    ("/compare", "Compare"),
    ("/benchmarks", "Benchmarks"),
    ("/teams", "Teams"),
];

/// Skip link, top bar and main landmark around `children`.
#[component]
pub fn AppShell(
    /// The signed-in viewer, if any (the menu offers log in / register otherwise).
    viewer: ViewerResource,
    children: Children,
) -> impl IntoView {
    view! {
        <a class="skip-link" href="#main" on:click=skip_to_main>"Skip to content"</a>
        <header class="topbar">
            <a class="brand" href="/">
                <span class="brand-mark" aria-hidden="true">"◆"</span>
                "SPADE Studio"
            </a>
            <Nav />
            <div class="topbar-end">
                <ThemeToggle />
                <Suspense fallback=|| ()>
                    {move || Suspend::new(async move {
                        view! { <UserMenu viewer=viewer.await.ok().flatten() /> }
                    })}
                </Suspense>
            </div>
        </header>
        <main id="main" tabindex="-1">
            {children()}
        </main>
    }
}

/// Moves focus to `<main>`. Without a script the browser does that itself for `#main`; once
/// hydrated, the router takes over clicks on same-page links and focus stayed on the link.
fn skip_to_main(ev: leptos::ev::MouseEvent) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        if let Some(main) = document()
            .get_element_by_id("main")
            .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok())
        {
            ev.prevent_default();
            let _ = main.focus();
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = ev;
}

/// Esc closes the `<details>` disclosure it was pressed in and gives focus back to its summary,
/// as menus do (hydrate only: without a script the summary still opens and closes it).
pub fn close_on_escape(ev: leptos::ev::KeyboardEvent) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        if ev.key() != "Escape" {
            return;
        }
        let Some(details) = ev
            .current_target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlDetailsElement>().ok())
        else {
            return;
        };
        if !details.open() {
            return;
        }
        details.set_open(false);
        if let Some(summary) = details
            .query_selector("summary")
            .ok()
            .flatten()
            .and_then(|s| s.dyn_into::<web_sys::HtmlElement>().ok())
        {
            let _ = summary.focus();
        }
        ev.prevent_default();
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = ev;
}

/// Navigation links; the current section is marked with `aria-current="page"`.
#[component]
fn Nav() -> impl IntoView {
    let location = use_location();
    let current = move |path: &'static str| {
        let here = location.pathname.get();
        (here == path || here.starts_with(&format!("{path}/"))).then_some("page")
    };
    view! {
        <nav class="mainnav" aria-label="Main">
            <ul>
                {NAV
                    .iter()
                    .map(|&(path, label)| {
                        view! {
                            <li>
                                <a href=path aria-current=move || current(path)>
                                    {label}
                                </a>
                            </li>
                        }
                    })
                    .collect_view()}
            </ul>
        </nav>
    }
}

/// The user's name with a menu (a `<details>` disclosure: keyboard and no-JS friendly), or the
/// log in and register links.
#[component]
fn UserMenu(viewer: Option<Viewer>) -> impl IntoView {
    match viewer {
        Some(Viewer { user: u, csrf }) => view! {
            <details class="user-menu" on:keydown=close_on_escape>
                <summary>
                    <span class="visually-hidden">"Account menu for "</span>
                    {u.display_name.clone()}
                </summary>
                <div class="menu" role="group" aria-label="Account">
                    <p class="menu-email">{u.email.clone()}</p>
                    <a href="/account">"Account"</a>
                    <a href="/teams">"Teams and API tokens"</a>
                    <form method="post" action="/logout">
                        <input type="hidden" name="csrf" value=csrf />
                        <button type="submit" class="ghost">"Log out"</button>
                    </form>
                </div>
            </details>
        }
        .into_any(),
        None => view! {
            <div class="auth-links">
                <a href="/login">"Log in"</a>
                <a class="button" href="/register">"Register"</a>
            </div>
        }
        .into_any(),
    }
}
