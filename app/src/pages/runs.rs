//! The runs list: status, progress, headline metrics, filters (a GET form) and pagination
//! (GET links), so reading and paging work without JavaScript.

use super::{Pagination, ProgressBar, StatusBadge, fmt_opt, fmt_pct, fmt_time, query_string};
use crate::dto::{Page, RunStatus, RunSummary};
use leptos::prelude::*;

/// The runs list's query parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilters {
    pub status: Option<RunStatus>,
    /// Case-insensitive substring of the run or project name.
    pub q: String,
    /// 1-based.
    pub page: u32,
}

impl RunFilters {
    /// From query parameters; an unknown status or page number becomes a message for the user
    /// (the list then shows everything / page 1) rather than an error page.
    pub fn from_query(
        status: Option<&str>,
        q: Option<&str>,
        page: Option<&str>,
    ) -> (Self, Vec<String>) {
        let mut problems = Vec::new();
        let status = match status.filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => RunStatus::parse(s).or_else(|| {
                problems.push(format!("Unknown status \"{s}\"; showing all runs."));
                None
            }),
        };
        let page = match page.filter(|s| !s.is_empty()) {
            None => 1,
            Some(p) => match p.parse::<u32>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    problems.push(format!("Page must be a whole number from 1, got \"{p}\"."));
                    1
                }
            },
        };
        let q = q.unwrap_or_default().trim().chars().take(200).collect();
        (Self { status, q, page }, problems)
    }

    /// The URL of `page` with these filters.
    pub fn href(&self, page: u32) -> String {
        let mut pairs = vec![
            (
                "status",
                self.status
                    .map(|s| s.as_str().to_owned())
                    .unwrap_or_default(),
            ),
            ("q", self.q.clone()),
        ];
        if page > 1 {
            pairs.push(("page", page.to_string()));
        }
        format!("/runs{}", query_string(&pairs))
    }
}

/// Latest-value columns of the list: (metric name, header, shown as percentage).
pub const KEY_METRICS: [(&str, &str, bool); 3] = [
    ("learnable_share", "Learnable", true),
    ("regret_mean", "Regret", false),
    ("acceptance_rate", "Accepted", true),
];

/// The runs list page.
#[component]
pub fn RunsView(
    runs: Page<RunSummary>,
    filters: RunFilters,
    problems: Vec<String>,
) -> impl IntoView {
    let page_count = runs.page_count();
    let page = runs.page;
    let total = runs.total;
    let link_filters = filters.clone();
    let rows = runs.items.into_iter().map(run_row).collect_view();
    let empty = runs_empty_message(total, &filters);
    view! {
        <div class="page-head">
            <h1>"Runs"</h1>
            <a class="button" href="/runs/new">"New run"</a>
        </div>
        <form class="filters card" method="get" action="/runs" aria-label="Filter runs">
            <div class="field">
                <label for="runs-q">"Name"</label>
                <input id="runs-q" name="q" type="search" value=filters.q.clone() placeholder="run or project" />
            </div>
            <div class="field">
                <label for="runs-status">"Status"</label>
                <select id="runs-status" name="status">
                    <option value="" selected=filters.status.is_none()>"Any"</option>
                    {RunStatus::ALL
                        .into_iter()
                        .map(|s| view! { <option value=s.as_str() selected=filters.status == Some(s)>{s.as_str()}</option> })
                        .collect_view()}
                </select>
            </div>
            <button type="submit">"Filter"</button>
        </form>
        {problems.into_iter().map(|p| view! { <p class="notice" role="status">{p}</p> }).collect_view()}
        {match empty {
            Some(msg) => view! { <p class="empty">{msg}</p> }.into_any(),
            None => view! {
                <div class="table-scroll" tabindex="0" role="region" aria-label="Runs">
                    <table class="data runs">
                        <caption class="visually-hidden">{format!("{total} runs")}</caption>
                        <thead>
                            <tr>
                                <th scope="col">"Run"</th>
                                <th scope="col">"Status"</th>
                                <th scope="col">"Progress"</th>
                                {KEY_METRICS.iter().map(|(_, h, _)| view! { <th scope="col" class="num">{*h}</th> }).collect_view()}
                                <th scope="col">"Created"</th>
                            </tr>
                        </thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            }.into_any(),
        }}
        <Pagination page page_count href=Box::new(move |p| link_filters.href(p)) />
    }
}

fn runs_empty_message(total: u64, filters: &RunFilters) -> Option<String> {
    (total == 0).then(|| {
        if filters.status.is_some() || !filters.q.is_empty() {
            "No runs match these filters.".to_owned()
        } else {
            "No runs yet. Start one with “New run”.".to_owned()
        }
    })
}

fn run_row(r: RunSummary) -> impl IntoView {
    let metrics = KEY_METRICS
        .iter()
        .map(|(key, _, pct)| {
            let v = r.key_metrics.get(*key).copied();
            let text = if *pct { fmt_pct(v) } else { fmt_opt(v) };
            view! { <td class="num">{text}</td> }
        })
        .collect_view();
    view! {
        <tr>
            <td>
                <a class="run-name" href=format!("/runs/{}", r.id)>{r.name.clone()}</a>
                <span class="sub">{r.project.clone()}</span>
            </td>
            <td><StatusBadge status=r.status /></td>
            <td><ProgressBar step=r.step total=r.total_steps label=format!("Progress of {}", r.name) /></td>
            {metrics}
            <td class="nowrap">{fmt_time(&r.created_at)}</td>
        </tr>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_from_query_report_bad_values() {
        let (f, p) = RunFilters::from_query(Some("running"), Some(" tiny "), Some("2"));
        assert_eq!(
            f,
            RunFilters {
                status: Some(RunStatus::Running),
                q: "tiny".into(),
                page: 2
            }
        );
        assert!(p.is_empty());
        let (f, p) = RunFilters::from_query(Some("sleeping"), None, Some("0"));
        assert_eq!(
            f,
            RunFilters {
                status: None,
                q: String::new(),
                page: 1
            }
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("sleeping") && p[1].contains("\"0\""));
    }

    #[test]
    fn page_links_keep_filters() {
        let f = RunFilters {
            status: Some(RunStatus::Failed),
            q: "a b".into(),
            page: 1,
        };
        assert_eq!(f.href(1), "/runs?status=failed&q=a%20b");
        assert_eq!(f.href(3), "/runs?status=failed&q=a%20b&page=3");
        assert_eq!(RunFilters::default().href(1), "/runs");
    }
}
