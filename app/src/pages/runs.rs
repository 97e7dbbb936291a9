//! The runs list: status, progress, headline metrics, filters (a GET form) and pagination
//! (GET links), so reading and paging work without JavaScript.

use super::{Pagination, ProgressBar, StatusBadge, fmt_opt, fmt_pct, fmt_time, query_string};
pub use crate::dto::RunSearch;
use crate::dto::{Page, RunStatus, RunSummary, TeamDto};
use leptos::prelude::*;

/// The runs list's query parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilters {
    /// The team whose runs are listed; `None` means the viewer's first team.
    pub team: Option<i64>,
    pub status: Option<RunStatus>,
    /// Only runs whose name contains this (ignoring case).
    pub name: Option<String>,
    /// An order of [`RUN_SORTS`]; empty = newest first.
    pub sort: String,
    /// Keyset cursor of the page (absent on the first page).
    pub cursor: Option<String>,
    /// The search beyond the name: a tag, a configuration value, a metric's latest value.
    pub search: RunSearch,
}

/// The runs list's orders (the API's `sort`) and their labels; the first is the default.
pub const RUN_SORTS: [(&str, &str); 3] = [
    ("newest", "Newest first"),
    ("oldest", "Oldest first"),
    ("name", "Name (A-Z)"),
];

impl RunFilters {
    /// From query parameters; an unknown status or team becomes a message for the user (the
    /// list then ignores that filter) rather than an error page.
    pub fn from_query(
        team: Option<&str>,
        status: Option<&str>,
        name: Option<&str>,
        sort: Option<&str>,
        cursor: Option<&str>,
    ) -> (Self, Vec<String>) {
        let mut problems = Vec::new();
        let sort = super::sort_from_query(&RUN_SORTS, sort).unwrap_or_else(|s| {
            problems.push(format!(
                "Sort must be newest, oldest or name, got \"{s}\"; showing the newest first."
            ));
            String::new()
        });
        let status = match status.filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => RunStatus::parse(s).or_else(|| {
                problems.push(format!(
                    "Unknown status \"{s}\"; showing runs of every status."
                ));
                None
            }),
        };
        let team = match team.filter(|s| !s.is_empty()) {
            None => None,
            Some(t) => t.parse::<i64>().ok().or_else(|| {
                problems.push(format!(
                    "Team must be a team id, got \"{t}\"; showing your first team."
                ));
                None
            }),
        };
        let cursor = cursor.filter(|c| !c.is_empty()).map(str::to_owned);
        let name = name
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| n.chars().take(200).collect());
        (
            Self {
                team,
                status,
                name,
                sort,
                cursor,
                search: RunSearch::default(),
            },
            problems,
        )
    }

    /// The URL of the page at `cursor` with these filters.
    pub fn href(&self, cursor: Option<&str>) -> String {
        let pairs = [
            ("team", self.team.map(|t| t.to_string()).unwrap_or_default()),
            (
                "status",
                self.status
                    .map(|s| s.as_str().to_owned())
                    .unwrap_or_default(),
            ),
            ("q", self.name.clone().unwrap_or_default()),
            ("sort", self.sort.clone()),
            ("tag", self.search.tag.clone().unwrap_or_default()),
            ("config", self.search.config.clone().unwrap_or_default()),
            ("metric", self.search.metric.clone().unwrap_or_default()),
            (
                "metric_min",
                self.search.metric_min.clone().unwrap_or_default(),
            ),
            (
                "metric_max",
                self.search.metric_max.clone().unwrap_or_default(),
            ),
            ("cursor", cursor.unwrap_or_default().to_owned()),
        ];
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
    /// The viewer's teams, for the team filter.
    teams: Vec<TeamDto>,
    filters: RunFilters,
    problems: Vec<String>,
    /// The team shown (the requested one, or the viewer's first): tag links stay in it.
    #[prop(default = None)]
    team: Option<i64>,
) -> impl IntoView {
    let next = runs.next_cursor.as_deref().map(|c| filters.href(Some(c)));
    let first = filters.href(None);
    let is_first = filters.cursor.is_none();
    let empty = runs
        .items
        .is_empty()
        .then(|| runs_empty_message(is_first, &filters, teams.is_empty()));
    let rows = runs
        .items
        .into_iter()
        .map(|r| run_row(r, team))
        .collect_view();
    let team_options = teams
        .iter()
        .map(|t| {
            let selected = filters.team == Some(t.id);
            view! { <option value=t.id.to_string() selected=selected>{format!("{} ({})", t.name, t.role)}</option> }
        })
        .collect_view();
    let launch = launch_access(&teams);
    let no_teams = teams.is_empty();
    view! {
        <div class="page-head">
            <h1>"Runs"</h1>
            {(launch == LaunchAccess::Allowed).then(|| view! { <a class="button" href="/runs/new" id="new-run">"New run"</a> })}
        </div>
        {(launch == LaunchAccess::ViewerOnly).then(|| view! {
            <p class="notice" role="status" id="runs-viewer-only">
                "You are a viewer in every team you belong to: you can read runs but not launch them. "
                "Ask a team owner to make you an editor, or "
                <a href="/teams#team-new-name">"create a team of your own"</a> "."
            </p>
        })}
        {(!no_teams).then(|| view! {
        <form class="filters card" method="get" action="/runs" aria-label="Filter runs">
            <div class="field">
                <label for="runs-team">"Team"</label>
                <select id="runs-team" name="team">{team_options}</select>
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
            <div class="field">
                <label for="runs-q">"Name contains"</label>
                <input id="runs-q" name="q" type="search" maxlength="200" value=filters.name.clone().unwrap_or_default() />
            </div>
            <super::SortSelect id="runs-sort" sorts=&RUN_SORTS current=filters.sort.clone() />
            <div class="field">
                <label for="runs-tag">"Tag"</label>
                <input id="runs-tag" name="tag" type="search" maxlength="40" value=filters.search.tag.clone().unwrap_or_default() />
            </div>
            <div class="field">
                <label for="runs-config">"Config key=value"</label>
                <input id="runs-config" name="config" type="search" maxlength="200" placeholder="agent.temperature=0.6" value=filters.search.config.clone().unwrap_or_default() />
            </div>
            <div class="field">
                <label for="runs-metric">"Latest metric"</label>
                <input id="runs-metric" name="metric" type="search" maxlength="200" placeholder="learnable_share" value=filters.search.metric.clone().unwrap_or_default() />
            </div>
            <div class="field narrow">
                <label for="runs-metric-min">"at least"</label>
                <input id="runs-metric-min" name="metric_min" inputmode="decimal" size="6" value=filters.search.metric_min.clone().unwrap_or_default() />
            </div>
            <div class="field narrow">
                <label for="runs-metric-max">"at most"</label>
                <input id="runs-metric-max" name="metric_max" inputmode="decimal" size="6" value=filters.search.metric_max.clone().unwrap_or_default() />
            </div>
            <button type="submit">"Filter"</button>
        </form>
        })}
        {problems.into_iter().map(|p| view! { <p class="notice" role="status">{p}</p> }).collect_view()}
        {match empty {
            Some(msg) => view! {
                <p class="empty" id="runs-empty">
                    {msg}
                    {no_teams.then(|| view! { " " <a class="button" href="/teams#team-new-name" id="runs-create-team">"Create a team"</a> })}
                </p>
            }.into_any(),
            None => view! {
                <form method="get" action="/compare" aria-label="Compare runs">
                <div class="table-scroll" tabindex="0" role="region" aria-label="Runs">
                    <table class="data runs" id="runs-table">
                        <thead>
                            <tr>
                                <th scope="col"><span class="visually-hidden">"Compare"</span></th>
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
                <p class="table-actions"><button type="submit" class="secondary">"Compare selected runs"</button></p>
                </form>
            }.into_any(),
        }}
        <Pagination is_first first next />
    }
}

/// Whether the viewer may launch runs, from their roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchAccess {
    /// An editor or owner somewhere: the launch form lists that team's projects.
    Allowed,
    /// Only a viewer: the list says so instead of offering a form with nothing to pick.
    ViewerOnly,
    /// In no team yet: the empty list points to creating one.
    NoTeam,
}

/// Editors and owners launch runs (the API's rule); viewers only read.
pub fn launch_access(teams: &[TeamDto]) -> LaunchAccess {
    if teams.is_empty() {
        LaunchAccess::NoTeam
    } else if teams
        .iter()
        .any(|t| t.role == "owner" || t.role == "editor")
    {
        LaunchAccess::Allowed
    } else {
        LaunchAccess::ViewerOnly
    }
}

fn runs_empty_message(is_first: bool, filters: &RunFilters, no_teams: bool) -> String {
    if no_teams {
        "You are not in a team yet: runs belong to teams. Create one (you become its owner), or ask a team owner to add you.".to_owned()
    } else if !is_first {
        "No more runs.".to_owned()
    } else if filters.status.is_some() || filters.name.is_some() || !filters.search.is_empty() {
        "No runs match these filters.".to_owned()
    } else {
        "No runs in this team yet.".to_owned()
    }
}

fn run_row(r: RunSummary, team: Option<i64>) -> impl IntoView {
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
            <td class="pick">
                <input type="checkbox" name="run" value=r.id.to_string() id=format!("pick-{}", r.id) />
                <label for=format!("pick-{}", r.id) class="visually-hidden">{format!("Compare {}", r.name)}</label>
            </td>
            <td>
                <a class="run-name" href=format!("/runs/{}", r.id)>{r.name.clone()}</a>
                <span class="sub">{r.project.clone()}</span>
                <TagList tags=r.tags.clone() team />
            </td>
            <td>
                <StatusBadge status=r.status />
                {r.warning.clone().map(|w| view! {
                    <span class="run-warning" title=w.detail.clone()>"⚠ " {w.label}</span>
                })}
                {r.waiting.clone().map(|w| view! { <span class="run-waiting">{w}</span> })}
            </td>
            <td><ProgressBar step=r.step total=r.total_steps label=format!("Progress of {}", r.name) /></td>
            {metrics}
            <td class="nowrap">{fmt_time(&r.created_at)}</td>
        </tr>
    }
}

/// A run's tags, each a link to the runs it shares the tag with.
#[component]
pub fn TagList(
    tags: Vec<String>,
    /// The run's team: a tag's link searches that team's runs (the runs list otherwise shows
    /// the viewer's first team).
    #[prop(default = None)]
    team: Option<i64>,
) -> impl IntoView {
    (!tags.is_empty()).then(|| {
        let items = tags
            .into_iter()
            .map(|t| {
                let team = team.map(|id| id.to_string()).unwrap_or_default();
                let href = format!(
                    "/runs{}",
                    query_string(&[("team", team), ("tag", t.clone())])
                );
                view! { <li><a class="tag" href=href>{t}</a></li> }
            })
            .collect_view();
        view! { <ul class="tags" aria-label="Tags">{items}</ul> }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_from_query_report_bad_values() {
        let (f, p) = RunFilters::from_query(
            Some("3"),
            Some("running"),
            Some(" demo "),
            Some("name"),
            Some("41"),
        );
        assert_eq!(
            f,
            RunFilters {
                team: Some(3),
                status: Some(RunStatus::Running),
                name: Some("demo".into()),
                sort: "name".into(),
                cursor: Some("41".into()),
                search: RunSearch::default(),
            }
        );
        assert!(p.is_empty());
        assert_eq!(f.href(None), "/runs?team=3&status=running&q=demo&sort=name");
        let (f, p) = RunFilters::from_query(
            Some("x"),
            Some("sleeping"),
            Some("  "),
            Some("newest"),
            Some(""),
        );
        assert_eq!(f, RunFilters::default(), "newest is the default, left out");
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("sleeping") && p[1].contains("\"x\""));
        let (f, p) = RunFilters::from_query(None, None, None, Some("size"), None);
        assert_eq!(f.sort, "");
        assert!(
            p[0].starts_with("Sort must be newest, oldest or name"),
            "{p:?}"
        );
    }

    #[test]
    fn only_editors_and_owners_are_offered_the_launch_form() {
        let team = |role: &str| TeamDto {
            id: 1,
            name: "lab".into(),
            role: role.into(),
        };
        assert_eq!(launch_access(&[]), LaunchAccess::NoTeam);
        assert_eq!(launch_access(&[team("viewer")]), LaunchAccess::ViewerOnly);
        assert_eq!(
            launch_access(&[team("viewer"), team("editor")]),
            LaunchAccess::Allowed
        );
        assert_eq!(launch_access(&[team("owner")]), LaunchAccess::Allowed);
    }

    #[test]
    fn page_links_keep_filters() {
        let f = RunFilters {
            team: Some(2),
            status: Some(RunStatus::Failed),
            name: Some("a b".into()),
            sort: String::new(),
            cursor: None,
            search: RunSearch::default(),
        };
        assert_eq!(f.href(None), "/runs?team=2&status=failed&q=a%20b");
        assert_eq!(
            f.href(Some("17")),
            "/runs?team=2&status=failed&q=a%20b&cursor=17"
        );
        assert_eq!(RunFilters::default().href(None), "/runs");
    }
}
