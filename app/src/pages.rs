//! Pages of the dashboard. Each page is a component over DTOs (`crate::dto`), so it renders the
//! same whether the data came from the database on the server or from a test; routes and data
//! loading live in `crate::routes`. Shared widgets (status badge, progress bar, pagination,
//! number formatting) are here. `launch`, `teams` and `share` hold the launch form, the teams
//! page and the share section / shared-run page.

pub mod account;
pub mod auth;
pub mod benchmarks;
pub mod compare;
pub mod environments;
pub mod launch;
pub mod run;
pub mod runs;
pub mod share;
pub mod teams;

#[cfg(test)]
mod render_tests;
#[cfg(test)]
mod render_tests_forms;

use crate::dto::RunStatus;
use leptos::prelude::*;
use std::collections::BTreeMap;

/// A run's status as a coloured badge with the word in it (never colour alone).
#[component]
pub fn StatusBadge(status: RunStatus) -> impl IntoView {
    view! { <span class=format!("badge status-{}", status.as_str())>{status.as_str()}</span> }
}

/// Progress of `step` out of `total`, as a native `<progress>` (announced by screen readers)
/// with the numbers beside it.
#[component]
pub fn ProgressBar(step: u64, total: u64, #[prop(into)] label: String) -> impl IntoView {
    let pct = if total == 0 {
        0.0
    } else {
        (step as f64 / total as f64).clamp(0.0, 1.0) * 100.0
    };
    view! {
        <span class="progress">
            <progress max="100" value=format!("{pct:.1}") aria-label=label></progress>
            <span class="progress-text">{format!("{step} / {total}")}</span>
        </span>
    }
}

/// Links to the first and the next page; plain GET links, so paging works without JavaScript.
/// Lists are keyset-paged, so there is no "previous" (the first page is always one click away).
#[component]
pub fn Pagination(
    /// Whether this is the first page (no cursor in the address).
    is_first: bool,
    /// URL of the first page.
    #[prop(into)]
    first: String,
    /// URL of the next page, if there is one.
    next: Option<String>,
) -> impl IntoView {
    (!is_first || next.is_some()).then(|| {
        view! {
            <nav class="pagination" aria-label="Pages">
                {(!is_first).then(|| view! { <a href=first rel="first">"← First page"</a> })}
                {next.map(|h| view! { <a href=h rel="next">"Next page →"</a> })}
            </nav>
        }
    })
}

/// A value with three significant decimals, or a dash when absent.
pub fn fmt_opt(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => crate::charts::line::format_number(v),
        _ => "—".to_owned(),
    }
}

/// A share in [0, 1] as a percentage, or a dash.
pub fn fmt_pct(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{:.0}%", v * 100.0),
        _ => "—".to_owned(),
    }
}

/// Flattens a JSON configuration into dotted keys (`grpo.clip_low`) and display values; arrays
/// are indexed (`skills.0`). Scalars at the root get the key `(root)`.
pub fn flatten_config(v: &serde_json::Value) -> BTreeMap<String, String> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        let key = |k: &str| {
            if prefix.is_empty() {
                k.to_owned()
            } else {
                format!("{prefix}.{k}")
            }
        };
        match v {
            serde_json::Value::Object(m) if !m.is_empty() => {
                for (k, v) in m {
                    walk(&key(k), v, out);
                }
            }
            serde_json::Value::Array(a) if !a.is_empty() => {
                for (i, v) in a.iter().enumerate() {
                    walk(&key(&i.to_string()), v, out);
                }
            }
            serde_json::Value::String(s) => {
                out.insert(prefix_or_root(prefix), s.clone());
            }
            other => {
                out.insert(prefix_or_root(prefix), other.to_string());
            }
        }
    }
    fn prefix_or_root(p: &str) -> String {
        if p.is_empty() {
            "(root)".to_owned()
        } else {
            p.to_owned()
        }
    }
    let mut out = BTreeMap::new();
    walk("", v, &mut out);
    out
}

/// An RFC 3339 time as `YYYY-MM-DD HH:MM` (UTC as stored); other text is shown as it is.
pub fn fmt_time(rfc3339: &str) -> String {
    match (rfc3339.get(..10), rfc3339.get(11..16)) {
        (Some(d), Some(t)) if rfc3339.as_bytes().get(10) == Some(&b'T') => format!("{d} {t}"),
        _ => rfc3339.to_owned(),
    }
}

/// Percent-encodes a query parameter value.
pub fn encode_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A list's order from the query, among `sorts` (value, label; the first is the default):
/// `Ok("")` for none or the default (left out of links), `Ok(value)`, or `Err(value)` for one
/// the list does not have.
pub fn sort_from_query(sorts: &[(&str, &str)], v: Option<&str>) -> Result<String, String> {
    match v.filter(|s| !s.is_empty()) {
        None => Ok(String::new()),
        Some(s) if sorts.first().is_some_and(|(d, _)| *d == s) => Ok(String::new()),
        Some(s) if sorts.iter().any(|(k, _)| *k == s) => Ok(s.to_owned()),
        Some(s) => Err(s.to_owned()),
    }
}

/// The "Sort by" select of a list's filter form; `current` as [`sort_from_query`] gives it.
#[component]
pub fn SortSelect(
    id: &'static str,
    sorts: &'static [(&'static str, &'static str)],
    current: String,
) -> impl IntoView {
    let options = sorts
        .iter()
        .enumerate()
        .map(|(i, (v, label))| {
            let sel = current == *v || (current.is_empty() && i == 0);
            view! { <option value=*v selected=sel>{*label}</option> }
        })
        .collect_view();
    view! {
        <div class="field">
            <label for=id>"Sort by"</label>
            <select id=id name="sort">{options}</select>
        </div>
    }
}

/// Joins `(key, value)` pairs into `?k=v&...`, skipping empty values.
pub fn query_string(pairs: &[(&str, String)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode_query(v)))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_helpers() {
        assert_eq!(fmt_opt(None), "—");
        assert_eq!(fmt_opt(Some(f64::NAN)), "—");
        assert_eq!(fmt_pct(Some(0.334)), "33%");
        assert_eq!(fmt_time("2026-11-30T01:02:03Z"), "2026-11-30 01:02");
        assert_eq!(fmt_time("yesterday"), "yesterday");
        assert_eq!(encode_query("a b&c=é"), "a%20b%26c%3D%C3%A9");
        assert_eq!(
            query_string(&[("q", "x y".into()), ("status", String::new())]),
            "?q=x%20y"
        );
        assert_eq!(query_string(&[]), "");
    }
}
