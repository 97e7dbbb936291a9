//! The application shell around every page: a skip link, the top bar (product name, main
//! navigation, theme switch, user menu) and the `<main>` landmark the skip link targets.

use crate::dto::Viewer;
use crate::routes::ViewerResource;
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
        <a class="skip-link" href="#main">"Skip to content"</a>
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
            <details class="user-menu">
                <summary>
                    <span class="visually-hidden">"Account menu for "</span>
                    {u.display_name.clone()}
                </summary>
                <div class="menu" role="group" aria-label="Account">
                    <p class="menu-email">{u.email.clone()}</p>
                    <a href="/teams">"Teams"</a>
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
