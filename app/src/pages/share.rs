//! Sharing a run: the run page's "Share" section (editors and owners create read-only links and
//! revoke them, through POST forms) and the page a link opens (`/share/TOKEN`): status,
//! progress, curves and environments of the run, for someone who is not logged in, with no
//! action of any kind.

use super::run::chart_groups;
use super::{ProgressBar, StatusBadge, fmt_opt, fmt_pct, fmt_time};
use crate::charts::{ChartControls, ChartSettings, LineChart};
use crate::dto::{EnvStatus, EnvironmentSummary, MetricSeries, RunDetail, ShareDto, SharesDto};
use leptos::prelude::*;

/// The path a share token opens.
pub fn share_path(token: &str) -> String {
    format!("/share/{token}")
}

/// Copies the new link: selects its field and asks the browser to copy the selection (works
/// on plain-HTTP hosts too, where `navigator.clipboard` is absent), then says so beside the
/// button. Without a script the field is still selectable by hand.
fn copy_share_url(ev: leptos::ev::MouseEvent, copied: RwSignal<Option<bool>>) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        ev.prevent_default();
        let doc = document();
        let ok = doc
            .get_element_by_id("share-url")
            .and_then(|e| e.dyn_into::<web_sys::HtmlInputElement>().ok())
            .map(|input| {
                input.select();
                doc.dyn_ref::<web_sys::HtmlDocument>()
                    .and_then(|d| d.exec_command("copy").ok())
                    .unwrap_or(false)
            })
            .unwrap_or(false);
        copied.set(Some(ok));
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (ev, copied);
}

/// "expires 2026-12-09 10:00", "expired 2026-12-09 10:00" or "never".
fn expiry_text(l: &ShareDto) -> String {
    match (&l.expires_at, l.expired) {
        (Some(at), true) => format!("expired {}", fmt_time(at)),
        (Some(at), false) => format!("expires {}", fmt_time(at)),
        (None, _) => "never".to_owned(),
    }
}

/// The run page's sharing section.
#[component]
pub fn ShareSection(run_id: i64, shares: SharesDto, csrf: String) -> impl IntoView {
    // A link created just now (`SharesDto::new_token`): shown once, only its hash is stored.
    let new_url = shares
        .new_token
        .as_deref()
        .map(|t| format!("{}{}", shares.origin, share_path(t)));
    let copied = RwSignal::new(None::<bool>);
    let has_links = !shares.links.is_empty();
    let rows = shares
        .links
        .into_iter()
        .map(|l| {
            let revoked = l.revoked_at.clone();
            let csrf = csrf.clone();
            let expiry = expiry_text(&l);
            let name = if l.label.is_empty() {
                format!("the link created {}", fmt_time(&l.created_at))
            } else {
                format!("the link \"{}\"", l.label)
            };
            let status = match (revoked, l.expired) {
                (Some(at), _) => view! { <span class="badge status-cancelled">{format!("revoked {}", fmt_time(&at))}</span> }.into_any(),
                (None, true) => view! { <span class="badge status-cancelled">"expired"</span> }.into_any(),
                (None, false) => view! { <span class="badge status-succeeded">"active"</span> }.into_any(),
            };
            let live = l.revoked_at.is_none() && !l.expired;
            view! {
                <tr>
                    <td>{if l.label.is_empty() { view! { <span class="muted">"—"</span> }.into_any() } else { view! { <span class="share-label">{l.label.clone()}</span> }.into_any() }}</td>
                    <td class="nowrap">{fmt_time(&l.created_at)}</td>
                    <td class="nowrap share-expiry">{expiry}</td>
                    <td>{status}</td>
                    <td>{live.then(|| view! {
                        <form method="post" action=format!("/runs/{run_id}/shares/{}/revoke", l.id)>
                            <input type="hidden" name="csrf" value=csrf />
                            <button type="submit" class="danger" aria-label=format!("Revoke {name}")>"Revoke"</button>
                        </form>
                    })}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section class="card share" id="sharing" aria-labelledby="share-h">
            <h2 id="share-h">"Share"</h2>
            <p class="help">
                "A share link shows this run (status, curves, environments) read-only to anyone who has it, "
                "without logging in. Revoke it, or give it an expiry, to end that."
            </p>
            {new_url.map(|url| view! {
                <div class="notice share-new" role="status">
                    <label for="share-url">"New link: copy it now, it is shown only once"</label>
                    <div class="share-url-row">
                        <input id="share-url" type="text" readonly value=url.clone() />
                        <button type="button" id="share-copy" class="secondary" on:click=move |ev| copy_share_url(ev, copied)>"Copy"</button>
                        <a href=url target="_blank" rel="noopener">"Open"</a>
                    </div>
                    <p class="help" id="share-copied" aria-live="polite">{move || match copied.get() {
                        Some(true) => "Copied to the clipboard.",
                        Some(false) => "The browser refused to copy: select the link and copy it by hand.",
                        None => "",
                    }}</p>
                </div>
            })}
            <form method="post" action=format!("/runs/{run_id}/shares") class="share-create">
                <input type="hidden" name="csrf" value=csrf.clone() />
                <label>"Label "
                    <input type="text" name="label" id="share-label" maxlength="100" placeholder="for whom or what (optional)" />
                </label>
                <label>"Expires "
                    <select name="expires_in_days" id="share-expiry">
                        <option value="" selected>"never (until revoked)"</option>
                        <option value="1">"in 1 day"</option>
                        <option value="7">"in 7 days"</option>
                        <option value="30">"in 30 days"</option>
                        <option value="90">"in 90 days"</option>
                    </select>
                </label>
                <button type="submit" id="share-create" class="secondary">"Create share link"</button>
            </form>
            {has_links.then(|| view! {
                <table class="data shares">
                    <thead><tr>
                        <th scope="col">"Label"</th><th scope="col">"Created"</th>
                        <th scope="col">"Expires"</th><th scope="col">"Status"</th>
                        <th scope="col"><span class="visually-hidden">"Revoke"</span></th>
                    </tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            })}
        </section>
    }
}

/// The page of a shared run.
#[component]
pub fn SharedRunView(
    /// The link's token, for the pool download.
    token: String,
    run: RunDetail,
    metrics: Vec<MetricSeries>,
    environments: Vec<EnvironmentSummary>,
    settings: ChartSettings,
) -> impl IntoView {
    let s = run.summary.clone();
    let charts = chart_groups(&metrics)
        .into_iter()
        .map(|(title, y, series)| {
            view! { <LineChart title y_label=y series=Signal::stored(series) settings /> }
        })
        .collect_view();
    let no_charts = metrics.is_empty();
    let env_rows = environments
        .iter()
        .map(|e| {
            let (class, status) = match (e.status, e.rejection_reason.as_deref()) {
                (EnvStatus::Accepted, _) => ("badge env-accepted", "accepted".to_owned()),
                (EnvStatus::Rejected, Some(r)) => ("badge env-rejected", format!("rejected: {r}")),
                (EnvStatus::Rejected, None) => ("badge env-rejected", "rejected".to_owned()),
                (EnvStatus::BrokenInPlay, r) => (
                    "badge env-broken_in_play",
                    format!("broken in play: {}", r.unwrap_or("?")),
                ),
            };
            view! {
                <tr>
                    <td>{(!e.title.is_empty()).then(|| view! { <span class="env-title">{e.title.clone()}</span> <br /> })}<code class="env-id">{e.env_id.clone()}</code></td>
                    <td class="num">{e.step + 1}</td>
                    <td>{e.skill.clone()}</td>
                    <td><span class=class>{status}</span></td>
                    <td class="num">{fmt_opt(e.regret)}</td>
                    <td class="num">{fmt_pct(e.win_rate_hint)}</td>
                    <td class="num">{fmt_pct(e.win_rate_no_hint)}</td>
                </tr>
            }
        })
        .collect_view();
    let no_envs = environments.is_empty();
    view! {
        <p class="notice" role="note" id="shared-note">"A read-only view of a run, shared by its team."</p>
        <div class="page-head">
            <h1>{s.name.clone()}</h1>
            <span id="run-status"><StatusBadge status=s.status /></span>
        </div>
        <section class="card run-overview" aria-label="Overview">
            <dl class="facts">
                {(!s.project.is_empty()).then(|| view! { <div><dt>"Project"</dt><dd>{s.project.clone()}</dd></div> })}
                <div><dt>"Progress"</dt><dd id="run-progress"><ProgressBar step=s.step total=s.total_steps label="Training progress" /></dd></div>
                <div><dt>"Phase"</dt><dd>{run.phase.clone().unwrap_or_else(|| "—".into())}</dd></div>
                <div><dt>"Seed"</dt><dd>{run.seed}</dd></div>
                <div><dt>"Created"</dt><dd>{fmt_time(&s.created_at)}</dd></div>
            </dl>
            {run.message.clone().map(|m| view! { <p class="run-message" role="status">{m}</p> })}
        </section>
        <section aria-labelledby="charts-h">
            <h2 id="charts-h">"Training curves"</h2>
            <ChartControls settings />
            {no_charts.then(|| view! { <p class="empty">"No metrics reported yet."</p> })}
            <div class="chart-grid">{charts}</div>
        </section>
        <section class="card" aria-labelledby="envs-h">
            <h2 id="envs-h">"Environments"</h2>
            {(!no_envs).then(|| view! {
                <p><a class="button secondary" id="shared-pool-zip" href=format!("/api/v1/shared/{token}/pool.zip") download="pool.zip">"Download pool"</a></p>
            })}
            {if no_envs {
                view! { <p class="empty">"No environments yet."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll" tabindex="0" role="region" aria-label="Environments">
                        <table class="data envs" id="shared-envs">
                            <thead><tr>
                                <th scope="col">"Environment"</th><th scope="col" class="num">"Step"</th><th scope="col">"Skill"</th>
                                <th scope="col">"Status"</th><th scope="col" class="num">"Regret"</th>
                                <th scope="col" class="num">"Win rate, hint"</th><th scope="col" class="num">"Win rate, no hint"</th>
                            </tr></thead>
                            <tbody>{env_rows}</tbody>
                        </table>
                    </div>
                }.into_any()
            }}
        </section>
    }
}
