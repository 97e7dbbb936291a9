//! The account page (`/account`): the signed-in person's display name, a password change (which
//! signs out every other session), their live login sessions, each with an End button (the one
//! in use says so: ending it logs out here), and their saved chart views with Delete. Every
//! change is a POST form the backend routes to the function the API uses (`/api/v1/auth/me`,
//! `/auth/password`, `/auth/sessions`, `/chart-views`).

use super::auth::sentence;
use crate::data::AccountData;
use crate::dto::{ChartViewRecord, SessionRecord};
use leptos::prelude::*;

/// The account page.
#[component]
pub fn AccountView(
    data: AccountData,
    /// The viewer's CSRF token, carried by every form.
    csrf: String,
    /// The message of a refused change.
    error: Option<String>,
    /// What the last change did.
    notice: Option<String>,
) -> impl IntoView {
    let u = data.user;
    let sessions = data
        .sessions
        .into_iter()
        .map(|s| session_row(s, csrf.clone()))
        .collect_view();
    let views = if data.views.is_empty() {
        view! { <p class="empty">"No saved chart views. Save one from the chart settings of a run or a comparison."</p> }.into_any()
    } else {
        view! {
            <ul class="view-list">
                {data.views.into_iter().map(|v| {
                    let what = view_summary(&v);
                    view! {
                        <li id=format!("view-{}", v.id)>
                            <span class="view-name">{v.name.clone()}</span> " " <span class="sub">{what}</span>
                            <form method="post" action=format!("/chart-views/{}/delete", v.id) class="inline-form">
                                <input type="hidden" name="csrf" value=csrf.clone() />
                                <button type="submit" class="danger" aria-label=format!("Delete the view {}", v.name)>"Delete"</button>
                            </form>
                        </li>
                    }
                }).collect_view()}
            </ul>
        }
        .into_any()
    };
    view! {
        <div class="page-head"><h1>"Account"</h1></div>
        {error.map(|e| view! { <p class="form-error" role="alert" id="account-error">{sentence(e)}</p> })}
        {notice.map(|n| view! { <p class="notice ok" role="status" id="account-notice">{n}</p> })}
        <section class="card" id="name" aria-labelledby="name-h">
            <h2 id="name-h">"Name"</h2>
            <p class="sub">{format!("Signed in as {}", u.email)}{u.is_admin.then_some(" · administrator")}</p>
            <form method="post" action="/account/name" class="filters inline-form" aria-label="Change your name">
                <input type="hidden" name="csrf" value=csrf.clone() />
                <div class="field">
                    <label for="account-name">"Display name"</label>
                    <input id="account-name" name="display_name" type="text" maxlength="100" required value=u.display_name.clone() autocomplete="name" />
                </div>
                <button type="submit" class="secondary">"Save name"</button>
            </form>
        </section>
        <section class="card" id="password" aria-labelledby="password-h">
            <h2 id="password-h">"Password"</h2>
            <form method="post" action="/account/password" class="filters inline-form" aria-label="Change your password">
                <input type="hidden" name="csrf" value=csrf.clone() />
                <input type="hidden" name="username" value=u.email.clone() autocomplete="username" />
                <div class="field">
                    <label for="account-current">"Current password"</label>
                    <input id="account-current" name="current_password" type="password" required autocomplete="current-password" />
                </div>
                <div class="field">
                    <label for="account-new">"New password"</label>
                    <input id="account-new" name="new_password" type="password" required minlength="8" maxlength="256" autocomplete="new-password" />
                </div>
                <div class="field">
                    <label for="account-confirm">"New password again"</label>
                    <input id="account-confirm" name="confirm_password" type="password" required minlength="8" maxlength="256" autocomplete="new-password" />
                </div>
                <button type="submit" class="secondary">"Change password"</button>
                <p class="help">"8 to 256 characters. Every other session of your account is signed out; this one stays. API tokens keep working: revoke them on the " <a href="/teams">"teams page"</a> "."</p>
            </form>
        </section>
        <section class="card" id="sessions" aria-labelledby="sessions-h">
            <h2 id="sessions-h">"Sessions"</h2>
            <p class="help">"Where your account is signed in. End a session you do not recognise, then change your password."</p>
            <div class="table-scroll" tabindex="0" role="region" aria-label="Sessions">
                <table class="data sessions">
                    <thead><tr>
                        <th scope="col">"Browser or client"</th>
                        <th scope="col">"Signed in"</th>
                        <th scope="col">"Last active"</th>
                        <th scope="col"><span class="visually-hidden">"End"</span></th>
                    </tr></thead>
                    <tbody>{sessions}</tbody>
                </table>
            </div>
        </section>
        <section class="card" id="views" aria-labelledby="views-h">
            <h2 id="views-h">"Saved chart views"</h2>
            {views}
        </section>
    }
}

/// "smoothing 0.60, time axis, log scale, charts matching “regret”".
fn view_summary(v: &ChartViewRecord) -> String {
    let mut parts = vec![format!("smoothing {:.2}", v.smoothing)];
    if v.x_axis == "time" {
        parts.push("time axis".into());
    }
    if v.log_y {
        parts.push("log scale".into());
    }
    if !v.find.is_empty() {
        parts.push(format!("charts matching “{}”", v.find));
    }
    parts.join(", ")
}

/// "2026-12-05 10:15 UTC" from an RFC 3339 time.
fn minute(t: &str) -> String {
    match (t.get(..10), t.get(11..16)) {
        (Some(d), Some(hm)) => format!("{d} {hm} UTC"),
        _ => t.to_owned(),
    }
}

fn session_row(s: SessionRecord, csrf: String) -> impl IntoView {
    let client = s
        .user_agent
        .clone()
        .filter(|a| !a.trim().is_empty())
        .unwrap_or_else(|| "unknown client".into());
    let label = if s.current {
        "End (log out here)"
    } else {
        "End"
    };
    view! {
        <tr id=format!("session-{}", s.id)>
            <td class="ua">{client}{s.current.then(|| view! { <span class="sub">" this session"</span> })}</td>
            <td>{minute(&s.created_at)}</td>
            <td>{minute(&s.last_active_at)}</td>
            <td>
                <form method="post" action=format!("/account/sessions/{}/end", s.id)>
                    <input type="hidden" name="csrf" value=csrf />
                    <button type="submit" class="danger" aria-label=format!("End the session from {}", minute(&s.created_at))>{label}</button>
                </form>
            </td>
        </tr>
    }
}
