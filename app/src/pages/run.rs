//! The run page: status, progress, cancel/resume (POST forms), configuration, log tail and the
//! training curves. Once hydrated, `crate::live` keeps status, progress and log current from the
//! server-sent events of the run.

use super::benchmarks::BenchmarksSection;
use super::{ProgressBar, StatusBadge, flatten_config, fmt_time};
use crate::charts::{ChartControls, ChartSettings, LineChart, SavedViews, Series};
use crate::dto::{BenchmarksDto, ChartViewRecord, MetricSeries, RunDetail, RunStatus};
use crate::live::{self, LiveRun};
use leptos::prelude::*;

/// Charts of the run page: (title, y label, metric names). A metric named `win_rate/<skill>`
/// joins the per-skill chart; metrics in no group get a chart of their own.
const GROUPS: [(&str, &str, &[&str]); 7] = [
    (
        "Reward and regret",
        "value",
        &[
            "regret_mean",
            "r_hint",
            "r_no_hint",
            "designer_reward_mean",
            "designer_reward_trained_mean",
        ],
    ),
    (
        "Difficulty",
        "share of environments",
        &[
            "learnable_share",
            "easy_share",
            "medium_share",
            "hard_share",
        ],
    ),
    (
        "Acceptance",
        "share (0-1)",
        &["acceptance_rate", "zero_std_group_pct"],
    ),
    // The series name says which kernel produced the score (`metrics.vendi_kernel`);
    // `vendi_mean` is the unnamed one of older runs (the policy's hidden states).
    (
        "Diversity",
        "Vendi score (kernel in the series name)",
        &[
            "vendi",
            "vendi_mean",
            "vendi_ngram_mean",
            "vendi_policy_mean",
            "vendi_sentence_mean",
        ],
    ),
    ("Agent", "value", &["agent_reward_mean", "loss"]),
    // The worker's device during each step (`crates/worker/src/run/system.rs`).
    (
        "System",
        "GiB of memory, % GPU utilisation",
        &["system/memory_peak_gib", "system/gpu_util_pct"],
    ),
    // A SPICE run (`run.algorithm = "spice"`): its tasks, not environments.
    (
        "SPICE tasks",
        "share (0-1)",
        &[
            "spice/pass_rate",
            "spice/variance_reward",
            "spice/mcq_share",
            "spice/invalid_rate",
        ],
    ),
];
const PER_SKILL_PREFIX: &str = "win_rate/";

/// The section a metric's chart belongs to on a page of one chart per metric (compare): the
/// run page's group titles, "Win rate per skill", or "Other metrics".
pub fn metric_section(name: &str) -> &'static str {
    if name.starts_with(PER_SKILL_PREFIX) {
        return "Win rate per skill";
    }
    GROUPS
        .iter()
        .find(|(_, _, names)| names.contains(&name))
        .map_or("Other metrics", |(title, _, _)| *title)
}

/// The sections in page order (the run page's), the catch-all last.
pub fn metric_sections() -> impl Iterator<Item = &'static str> {
    GROUPS
        .iter()
        .map(|(t, _, _)| *t)
        .chain(["Win rate per skill", "Other metrics"])
}

/// Titles of the metrics the worker reports (`spade::metrics` and the worker's step metrics),
/// for charts of one metric; others are spelled out by [`metric_title`].
const TITLES: [(&str, &str); 30] = [
    ("regret_mean", "Regret (mean)"),
    ("spice/pass_rate", "Reasoner pass rate (mean over tasks)"),
    ("spice/variance_reward", "Challenger variance reward (mean)"),
    ("spice/mcq_share", "Multiple-choice share of tasks"),
    ("spice/invalid_rate", "Invalid challenger attempts (rate)"),
    ("spice/tasks", "Valid tasks"),
    ("spice/attempts", "Challenger attempts"),
    ("challenger_samples", "Challenger samples trained"),
    ("reasoner_samples", "Reasoner samples trained"),
    ("r_hint", "Reward with hint"),
    ("r_no_hint", "Reward without hint"),
    ("designer_reward_mean", "Designer reward (mean)"),
    (
        "designer_reward_trained_mean",
        "Designer reward trained on (mean)",
    ),
    ("learnable_share", "Learnable share"),
    ("easy_share", "Easy share"),
    ("medium_share", "Medium share"),
    ("hard_share", "Hard share"),
    ("acceptance_rate", "Acceptance rate"),
    ("acceptance_rate_run", "Acceptance rate (whole run)"),
    (
        "zero_std_group_pct",
        "Groups with zero reward spread (share)",
    ),
    ("agent_reward_mean", "Agent reward (mean)"),
    ("loss", "Training loss"),
    ("accepted", "Environments accepted"),
    ("rejected", "Environments rejected"),
    ("envs", "Live environments"),
    (
        "formula_reveal_rate",
        "Hints that reveal the formula (rate)",
    ),
    ("reward_levels_mean", "Reward levels (mean)"),
    ("play_violations", "Contract violations in play"),
    ("play_env_calls", "Environment calls in play"),
    ("play_violation_rate", "Contract violations per call"),
];

/// The configuration's keys by section (`grpo.lr` -> ("grpo", "lr")), sections in the order
/// they first appear; top-level values are the section "run configuration".
pub fn config_sections(config: &serde_json::Value) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (key, value) in flatten_config(config) {
        let (section, rest) = key
            .split_once('.')
            .map_or(("run configuration".to_owned(), key.clone()), |(a, b)| {
                (a.to_owned(), b.to_owned())
            });
        match out.iter_mut().find(|(s, _)| *s == section) {
            Some((_, rows)) => rows.push((rest, value)),
            None => out.push((section, vec![(rest, value)])),
        }
    }
    out
}

/// A key that wraps only after `_` and `.` (a `<wbr>` there), never inside a word.
fn breakable(key: &str) -> impl IntoView + use<> {
    let mut parts = Vec::new();
    let mut word = String::new();
    for c in key.chars() {
        word.push(c);
        if c == '_' || c == '.' {
            parts.push(std::mem::take(&mut word));
        }
    }
    parts.push(word);
    parts
        .into_iter()
        .map(|p| view! { {p}<wbr /> })
        .collect_view()
}

/// A human-readable title for a metric: the table above, else the name spelled out
/// (`broken_in_play_envs` -> "Broken in play envs", `win_rate/Logic` -> "Win rate: Logic").
pub fn metric_title(name: &str) -> String {
    if let Some((_, t)) = TITLES.iter().find(|(n, _)| *n == name) {
        return (*t).to_owned();
    }
    if let Some(skill) = name.strip_prefix(PER_SKILL_PREFIX) {
        return format!("Win rate: {skill}");
    }
    let (base, mean) = match name.strip_suffix("_mean") {
        Some(b) => (b, " (mean)"),
        None => (name, ""),
    };
    let words = base.replace(['_', '/'], " ").replace(" pct", " %");
    let mut chars = words.trim().chars();
    match chars.next() {
        Some(c) => format!("{}{}{mean}", c.to_uppercase(), chars.as_str()),
        None => name.to_owned(),
    }
}

/// Groups a run's metrics into charts (title, y label, series), in a stable order.
pub fn chart_groups(metrics: &[MetricSeries]) -> Vec<(String, String, Vec<Series>)> {
    let mut used = vec![false; metrics.len()];
    let mut out = Vec::new();
    for (title, y, names) in GROUPS {
        let series: Vec<Series> = metrics
            .iter()
            .enumerate()
            .filter(|(_, m)| names.contains(&m.name.as_str()))
            .map(|(i, m)| {
                used[i] = true;
                m.to_series("")
            })
            .collect();
        if !series.is_empty() {
            out.push((title.to_owned(), y.to_owned(), series));
        }
    }
    let per_skill: Vec<Series> = metrics
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let skill = m.name.strip_prefix(PER_SKILL_PREFIX)?;
            used[i] = true;
            Some(Series::line(skill, m.points.clone()))
        })
        .collect();
    if !per_skill.is_empty() {
        out.push((
            "Win rate per skill".to_owned(),
            "win rate (no hint)".to_owned(),
            per_skill,
        ));
    }
    for (i, m) in metrics.iter().enumerate() {
        if !used[i] {
            out.push((metric_title(&m.name), m.name.clone(), vec![m.to_series("")]));
        }
    }
    out
}

/// The run page.
#[component]
pub fn RunView(
    run: RunDetail,
    metrics: Vec<MetricSeries>,
    /// Held-out results and evaluations of the run's checkpoints.
    #[prop(default = BenchmarksDto::default())]
    benchmarks: BenchmarksDto,
    settings: ChartSettings,
    /// The viewer's CSRF token, carried by the cancel, resume and evaluate forms.
    csrf: String,
    /// The viewer's saved chart views (`None`: not offered).
    #[prop(default = None)]
    views: Option<Vec<ChartViewRecord>>,
) -> impl IntoView {
    let s = run.summary.clone();
    let id = s.id;
    let saved = views.map(|v| SavedViews {
        links: v
            .iter()
            .map(|v| {
                (
                    v.name.clone(),
                    format!("/runs/{id}{}", super::query_string(&v.query_pairs())),
                )
            })
            .collect(),
        csrf: csrf.clone(),
        back: format!("/runs/{id}"),
    });
    let live = LiveRun::new(&run, metrics);
    // Effects run only in the browser: the server renders the state at request time.
    Effect::new(move |_| live::subscribe(id, live));
    let can_control = run.can_control;
    let queue = run.queue.clone();
    let bench_csrf = csrf.clone();
    let details = view! {
        <RunDetails
            run_id=id
            team_id=run.team_id
            name=s.name.clone()
            tags=s.tags.clone()
            notes=run.notes.clone()
            can_edit=can_control
            csrf=csrf.clone()
        />
    };
    let controls = move || {
        let status = live.status.get();
        let csrf = csrf.clone();
        can_control.then(|| {
            view! {
                <div class="actions">
                    // Cancelling stops the worker mid-run, so it asks first: a disclosure (no
                    // script needed) whose panel holds the form that really cancels.
                    {status.is_active().then(|| view! {
                        <ConfirmAction
                            id="cancel-run"
                            label="Cancel run"
                            group="Confirm cancelling"
                            question="Stop this run? Its worker is stopped; the steps it finished and their checkpoints stay, and Resume continues from the last one."
                            action=format!("/runs/{id}/cancel")
                            confirm="Yes, cancel the run"
                            csrf=csrf.clone()
                        />
                    })}
                    {status.is_resumable().then(|| view! {
                        <form method="post" action=format!("/runs/{id}/resume")>
                            <input type="hidden" name="csrf" value=csrf.clone() />
                            <button type="submit">"Resume"</button>
                        </form>
                    })}
                    <a class="button secondary" id="clone-run" href=format!("/runs/new?from={id}")>"Run again with changes"</a>
                    // A run with a live job cannot be deleted (its worker would write to a
                    // run that is gone): cancel first, as the API says.
                    {(!status.is_active()).then(|| view! {
                        <ConfirmAction
                            id="delete-run"
                            label="Delete run"
                            group="Confirm deleting"
                            question="Delete this run for good? Its metrics, environments, plays, evaluations and share links go with it."
                            action=format!("/runs/{id}/delete")
                            confirm="Yes, delete the run"
                            csrf=csrf.clone()
                        />
                    })}
                </div>
            }
        })
    };
    // One group per section, as the launch form has them; keys break only between words.
    let config_rows = config_sections(&run.config)
        .into_iter()
        .map(|(section, rows)| {
            let rows = rows
                .into_iter()
                .map(|(k, v)| view! { <tr><th scope="row"><code>{breakable(&k)}</code></th><td><code>{v}</code></td></tr> })
                .collect_view();
            view! {
                <tbody>
                    <tr class="kv-section"><th colspan="2" scope="colgroup">{section}</th></tr>
                    {rows}
                </tbody>
            }
        })
        .collect_view();
    // Newest at the bottom. Once hydrated, the panel follows new lines (scrolled to its end
    // while "Follow" is on) and can be searched; the server renders every line, unfiltered.
    let follow = RwSignal::new(true);
    let log_find = RwSignal::new(String::new());
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    Effect::new(move |_| {
        live.log.track();
        log_find.track();
        if follow.get() {
            scroll_to_end("run-log");
        }
    });
    let log = move || {
        live.log.with(|lines| {
            log_find.with(|find| {
                if lines.is_empty() {
                    return "No log lines yet.".to_owned();
                }
                let shown: String = lines
                    .iter()
                    .filter(|l| log_line_matches(&l.line, find))
                    .map(|l| format!("{:5} {}\n", l.level, l.line))
                    .collect();
                if shown.is_empty() {
                    format!(
                        "No line of the last {} contains “{}”.",
                        lines.len(),
                        find.trim()
                    )
                } else {
                    shown
                }
            })
        })
    };
    let log_tools = move || {
        hydrated.get().then(|| {
            view! {
                <div class="log-tools">
                    <label class="check">
                        <input
                            id="log-follow"
                            type="checkbox"
                            prop:checked=move || follow.get()
                            on:change=move |ev| follow.set(event_target_checked(&ev))
                        />
                        "Follow"
                    </label>
                    <label for="log-find">"Search the log"</label>
                    <input
                        id="log-find"
                        type="search"
                        placeholder="line contains…"
                        prop:value=move || log_find.get()
                        on:input=move |ev| log_find.set(event_target_value(&ev))
                    />
                </div>
            }
        })
    };
    // The chart list follows the live metrics: a run opened before its first step gets its
    // charts when the first metrics arrive, without a reload. Keyed by title, so a chart is
    // created once and then only its series change.
    let groups = Memo::new(move |_| {
        live.metrics.with(|m| {
            chart_groups(m)
                .into_iter()
                .map(|(title, y, _)| (title, y))
                .collect::<Vec<_>>()
        })
    });
    let charts = view! {
        <For
            each=move || groups.get()
            key=|(title, _)| title.clone()
            children=move |(title, y)| {
                let key = title.clone();
                let series = Signal::derive(move || {
                    live.metrics.with(|m| {
                        chart_groups(m)
                            .into_iter()
                            .find(|g| g.0 == key)
                            .map(|g| g.2)
                            .unwrap_or_default()
                    })
                });
                view! { <LineChart title y_label=y series settings /> }
            }
        />
    };
    let no_charts = move || groups.with(Vec::is_empty);
    view! {
        <nav class="crumbs" aria-label="Breadcrumb"><a href="/runs">"Runs"</a> " / " <span>{s.project.clone()}</span></nav>
        <div class="page-head">
            <h1>{s.name.clone()}</h1>
            <span id="run-status">{move || view! { <StatusBadge status=live.status.get() /> }}</span>
            {controls}
        </div>
        // The status is what the worker reported; a run can finish and still have produced
        // nothing, which this says beside it rather than changing the status.
        {s.warning.clone().map(|w| view! {
            <p class="notice run-warning" role="status" id="run-warning">
                <strong>{format!("Nothing usable: {}. ", w.label)}</strong>
                {w.detail}
            </p>
        })}
        <section class="card run-overview" aria-label="Overview">
            <dl class="facts">
                <div><dt>"Progress"</dt><dd id="run-progress">{move || view! { <ProgressBar step=live.step.get() total=live.total.get() label="Training progress" /> }}</dd></div>
                <div><dt>"Phase"</dt><dd id="run-phase">{move || phase_text(live.status.get(), live.phase.get())}</dd></div>
                <div><dt>"Executor"</dt><dd>{run.executor.clone()}</dd></div>
                <div><dt>"Seed"</dt><dd>{run.seed}</dd></div>
                <div><dt>"Code"</dt><dd><code>{run.code_version.clone()}</code></dd></div>
                <div><dt>"Created"</dt><dd>{fmt_time(&s.created_at)}</dd></div>
            </dl>
            {run.message.clone().map(|m| view! { <p class="run-message" role="status">{m}</p> })}
            // What a queued run waits for; gone once it starts (the status is live).
            {move || {
                (live.status.get() == RunStatus::Queued)
                    .then(|| queue.clone())
                    .flatten()
                    .map(|q| view! { <p class="run-queue" id="run-queue" role="status">{q}</p> })
            }}
            <p><a href=format!("/runs/{id}/environments")>"Browse environments →"</a></p>
        </section>
        {details}
        <section aria-labelledby="charts-h">
            <h2 id="charts-h">"Training curves"</h2>
            <ChartControls settings saved=saved />
            <p class="table-actions">
                <a href=format!("/api/v1/runs/{id}/metrics.csv") download=format!("run-{id}-metrics.csv")>
                    "Download all metrics (CSV)"
                </a>
            </p>
            {move || no_charts().then(|| view! { <p class="empty">"No metrics reported yet."</p> })}
            <div class="chart-grid">{charts}</div>
        </section>
        <div class="two-col">
            <section class="card" aria-labelledby="log-h">
                <h2 id="log-h">"Log"</h2>
                <p class="table-actions">
                    <a id="log-download" href=format!("/api/v1/runs/{id}/log.txt") download=format!("run-{id}.log")>"Download the log"</a>
                </p>
                {log_tools}
                <pre id="run-log" class="log" tabindex="0" aria-label="Log tail" aria-live="polite">{log}</pre>
            </section>
            <section class="card" aria-labelledby="config-h">
                <h2 id="config-h">"Configuration"</h2>
                <div class="table-scroll" tabindex="0" role="region" aria-label="Configuration">
                    <table class="data kv config">{config_rows}</table>
                </div>
            </section>
        </div>
        <BenchmarksSection run_id=id data=benchmarks csrf=bench_csrf />
    }
}

/// A button that asks first: a disclosure (no script needed) whose panel holds the POST form
/// that really acts. `{id}-confirm` is the confirming button's id.
#[component]
fn ConfirmAction(
    id: &'static str,
    label: &'static str,
    /// The panel's accessible name.
    group: &'static str,
    question: &'static str,
    action: String,
    confirm: &'static str,
    csrf: String,
) -> impl IntoView {
    view! {
        <details class="confirm" id=id on:keydown=crate::layout::close_on_escape>
            <summary class="button danger">{label}</summary>
            <div class="confirm-panel" role="group" aria-label=group>
                <p>{question}</p>
                <form method="post" action=action>
                    <input type="hidden" name="csrf" value=csrf />
                    <button type="submit" class="danger" id=format!("{id}-confirm")>{confirm}</button>
                </form>
            </div>
        </details>
    }
}

/// A run's tags and notes, and for editors the form that renames it and sets them (a plain
/// POST form: `/runs/{id}/details`).
#[component]
fn RunDetails(
    run_id: i64,
    /// The run's team (0: not known), for the tag links.
    team_id: i64,
    name: String,
    tags: Vec<String>,
    notes: String,
    can_edit: bool,
    csrf: String,
) -> impl IntoView {
    let tag_text = tags.join(", ");
    let empty = tags.is_empty() && notes.trim().is_empty();
    let notes_view = (!notes.trim().is_empty())
        .then(|| view! { <p class="run-notes" id="run-notes">{notes.clone()}</p> });
    let form = can_edit.then(|| {
        view! {
            <details class="edit-details" id="edit-run">
                <summary>"Edit name, tags and notes"</summary>
                <form method="post" action=format!("/runs/{run_id}/details") class="stack">
                    <input type="hidden" name="csrf" value=csrf />
                    <div class="field">
                        <label for="run-edit-name">"Name"</label>
                        <input id="run-edit-name" name="name" required maxlength="200" value=name />
                    </div>
                    <div class="field">
                        <label for="run-edit-tags">"Tags"</label>
                        <input id="run-edit-tags" name="tags" maxlength="900" value=tag_text aria-describedby="run-edit-tags-help" />
                        <p class="help" id="run-edit-tags-help">"Comma-separated; up to 20 of 1-40 letters, digits, spaces and -_.:/+"</p>
                    </div>
                    <div class="field">
                        <label for="run-edit-notes">"Notes"</label>
                        <textarea id="run-edit-notes" name="notes" rows="4" maxlength="10000">{notes}</textarea>
                    </div>
                    <button type="submit" id="run-edit-save">"Save"</button>
                </form>
            </details>
        }
    });
    (!empty || can_edit).then(|| {
        view! {
            <section class="card run-details" aria-labelledby="details-h">
                <h2 id="details-h">"Tags and notes"</h2>
                <super::runs::TagList tags team=(team_id > 0).then_some(team_id) />
                {notes_view}
                {(empty).then(|| view! { <p class="empty">"No tags or notes yet."</p> })}
                {form}
            </section>
        }
    })
}

/// Whether a log line shows for the search `find` (case-insensitive; empty: every line).
pub fn log_line_matches(line: &str, find: &str) -> bool {
    let find = find.trim();
    find.is_empty() || line.to_lowercase().contains(&find.to_lowercase())
}

/// Scrolls the element `id` to its end (browser only; the server renders no scroll position).
#[cfg(feature = "hydrate")]
fn scroll_to_end(id: &str) {
    if let Some(el) = leptos::prelude::document().get_element_by_id(id) {
        el.set_scroll_top(el.scroll_height());
    }
}

#[cfg(not(feature = "hydrate"))]
fn scroll_to_end(_id: &str) {}

/// The overview's phase: the worker's phase while the run is active; once it has ended, the
/// phase it was in is history, not what it is doing (a cancelled run read "generate" forever).
pub fn phase_text(status: RunStatus, phase: Option<String>) -> String {
    match (status, phase) {
        (s, Some(p)) if s.is_active() => p,
        (RunStatus::Succeeded, _) => "finished".into(),
        (RunStatus::Cancelled, Some(p)) => format!("cancelled during {p}"),
        (RunStatus::Failed, Some(p)) => format!("failed during {p}"),
        (RunStatus::Cancelled, None) => "cancelled".into(),
        (RunStatus::Failed, None) => "failed".into(),
        _ => "—".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::charts::Point;

    #[test]
    fn an_ended_run_does_not_claim_the_phase_it_stopped_in() {
        let p = || Some("generate".to_string());
        assert_eq!(phase_text(RunStatus::Running, p()), "generate");
        assert_eq!(phase_text(RunStatus::Cancelling, p()), "generate");
        assert_eq!(
            phase_text(RunStatus::Cancelled, p()),
            "cancelled during generate"
        );
        assert_eq!(phase_text(RunStatus::Failed, p()), "failed during generate");
        assert_eq!(phase_text(RunStatus::Succeeded, p()), "finished");
        assert_eq!(phase_text(RunStatus::Queued, None), "—");
        assert_eq!(phase_text(RunStatus::Cancelled, None), "cancelled");
    }

    fn m(name: &str) -> MetricSeries {
        MetricSeries {
            name: name.into(),
            points: vec![Point {
                step: 1.0,
                time_s: 1.0,
                value: 0.5,
            }],
        }
    }

    #[test]
    fn the_vendi_chart_names_its_kernel_and_shares_are_fractions() {
        let g = chart_groups(&[m("vendi_ngram_mean"), m("zero_std_group_pct")]);
        let titles: Vec<&str> = g.iter().map(|(t, _, _)| t.as_str()).collect();
        assert_eq!(titles, ["Acceptance", "Diversity"]);
        assert_eq!(g[0].1, "share (0-1)");
        assert_eq!(g[1].2[0].name, "vendi_ngram_mean");
    }

    #[test]
    fn the_configuration_is_grouped_by_section() {
        let c =
            serde_json::json!({"grpo": {"lr": 1e-6, "clip_low": 0.2}, "run": {"seed": 3}, "x": 1});
        let s = config_sections(&c);
        let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["grpo", "run", "run configuration"]);
        assert_eq!(
            s[0].1,
            [
                ("clip_low".to_owned(), "0.2".to_owned()),
                ("lr".to_owned(), "1e-6".to_owned())
            ]
        );
        assert_eq!(s[2].1, [("x".to_owned(), "1".to_owned())]);
    }

    #[test]
    fn metric_titles_are_words_not_identifiers() {
        assert_eq!(metric_title("regret_mean"), "Regret (mean)");
        assert_eq!(metric_title("broken_in_play_envs"), "Broken in play envs");
        assert_eq!(metric_title("failed_env_share"), "Failed env share");
        assert_eq!(metric_title("custom_pct"), "Custom %");
        assert_eq!(metric_title("vendi_ngram_mean"), "Vendi ngram (mean)");
        assert_eq!(metric_title("win_rate/Logic"), "Win rate: Logic");
        assert_eq!(metric_title("x"), "X");
        assert_eq!(metric_title(""), "");
    }

    #[test]
    fn metrics_group_into_charts_and_leftovers_get_their_own() {
        let g = chart_groups(&[
            m("r_hint"),
            m("regret_mean"),
            m("win_rate/Optimization"),
            m("win_rate/Spatial Reasoning"),
            m("custom"),
        ]);
        let titles: Vec<&str> = g.iter().map(|(t, _, _)| t.as_str()).collect();
        assert_eq!(
            titles,
            ["Reward and regret", "Win rate per skill", "Custom"]
        );
        assert_eq!(g[0].2.len(), 2);
        let skills: Vec<&str> = g[1].2.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(skills, ["Optimization", "Spatial Reasoning"]);
    }
}
