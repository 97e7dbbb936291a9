//! Held-out benchmark results: on the run page, a table per suite (tasks by checkpoint, the
//! model the run started from as the "base" column), a chart of each suite's mean score over
//! checkpoints, the run's evaluation jobs, and a POST form that queues an evaluation; in the
//! compare view and on the team's benchmarks page, the paper's table: one row per run (its
//! newest evaluated checkpoint, under a base-model row) or per checkpoint, one column per suite
//! (mean ± standard error), then the averages of the game and tool-use suite groups; CSV too.

use crate::charts::{ChartSettings, LineChart, Point, Series};
use crate::dto::{BenchmarkRow, BenchmarksDto, TeamDto};
use leptos::prelude::*;

/// The task name `spade eval` gives a suite's aggregate (mean over its tasks).
pub const AGGREGATE_TASK: &str = "all";

/// Suites the evaluation form offers by name; `qa:` and `envs:` paths go in its text field.
pub const FORM_SUITES: &[(&str, &str)] = &[
    (
        "rg-hard",
        "reasoning-gym hard: all four categories (58 datasets)",
    ),
    ("rg-algorithmic", "reasoning-gym algorithmic (30)"),
    ("rg-arithmetic", "reasoning-gym arithmetic (17)"),
    ("rg-cognition", "reasoning-gym cognition (5)"),
    ("rg-logic", "reasoning-gym logic (6)"),
    (
        "humaneval",
        "HumanEval: 164 programs run against their tests",
    ),
    (
        "bfcl-multi-turn",
        "BFCL v4 multi-turn tool use: 4 categories of 200 entries",
    ),
    ("envs", "seed environments: win rate"),
];

/// A held-out score: the mean, its standard error when known, the items behind it and the
/// samples per item (the mean is Avg@k for k > 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    pub mean: f64,
    pub stderr: Option<f64>,
    pub n: u32,
    pub samples: u32,
}

impl Score {
    pub fn of(r: &BenchmarkRow) -> Self {
        Self {
            mean: r.score,
            stderr: r.stderr,
            n: r.n,
            samples: r.samples,
        }
    }

    /// The paper's group average: the mean of the suites' means, its standard error
    /// sqrt(sum se^2) / N when every suite has one. None unless every suite has a score (an
    /// average over a different set of suites would not compare with the other rows').
    pub fn average(cells: &[Cell]) -> Cell {
        let scores: Vec<Score> = cells.iter().copied().collect::<Option<_>>()?;
        let k = scores.len();
        if k == 0 {
            return None;
        }
        let stderr = scores
            .iter()
            .map(|s| s.stderr.map(|e| e * e))
            .sum::<Option<f64>>()
            .map(|v| v.sqrt() / k as f64);
        Some(Score {
            mean: scores.iter().map(|s| s.mean).sum::<f64>() / k as f64,
            stderr,
            n: scores.iter().map(|s| s.n).sum(),
            samples: scores.iter().map(|s| s.samples).max().unwrap_or(1),
        })
    }
}

/// One result cell, or nothing when not evaluated.
pub type Cell = Option<Score>;

/// The paper's two groups of held-out suites, averaged separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuiteGroup {
    /// Reasoning, math, science and code (reasoning-gym, QA, multiple choice, code suites).
    Games,
    /// Tool use (BFCL, tau2-bench, ACEBench).
    ToolUse,
}

impl SuiteGroup {
    pub fn label(self) -> &'static str {
        match self {
            SuiteGroup::Games => "games avg",
            SuiteGroup::ToolUse => "tool use avg",
        }
    }
}

/// The group a suite is averaged in; None for environment pools (`envs`), which measure the
/// training distribution rather than a held-out benchmark of the paper.
pub fn suite_group(suite: &str) -> Option<SuiteGroup> {
    const TOOL_USE: &[&str] = &["bfcl", "tau2", "acebench"];
    if TOOL_USE.iter().any(|p| suite.starts_with(p)) {
        Some(SuiteGroup::ToolUse)
    } else if suite == "envs" || suite.starts_with("envs:") {
        None
    } else {
        Some(SuiteGroup::Games)
    }
}

/// A task and its cells, one per column.
pub type TaskRow = (String, Vec<Cell>);

/// One suite's scores: `steps` are the columns (checkpoint steps, ascending), each row a task
/// with one cell per step: `(score, n)` of the newest result, or nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteTable {
    pub suite: String,
    pub steps: Vec<u64>,
    pub rows: Vec<TaskRow>,
}

/// Pivots a run's results into one table per suite. The aggregate task comes first; later rows
/// for the same (suite, task, step) replace earlier ones (the input is ordered by id within a
/// cell, so the newest evaluation wins). Results without a checkpoint step are left out: they
/// cannot be placed on the checkpoint axis.
pub fn suite_tables(rows: &[BenchmarkRow]) -> Vec<SuiteTable> {
    use std::collections::{BTreeMap, BTreeSet};
    type TaskCells<'a> = BTreeMap<&'a str, BTreeMap<u64, Score>>;
    let mut suites: BTreeMap<&str, (BTreeSet<u64>, TaskCells<'_>)> = BTreeMap::new();
    for r in rows {
        let Some(step) = r.checkpoint_step else {
            continue;
        };
        let (steps, tasks) = suites.entry(&r.suite).or_default();
        steps.insert(step);
        tasks.entry(&r.task).or_default().insert(step, Score::of(r));
    }
    suites
        .into_iter()
        .map(|(suite, (steps, tasks))| {
            let steps: Vec<u64> = steps.into_iter().collect();
            let mut rows: Vec<TaskRow> = tasks
                .into_iter()
                .map(|(task, cells)| {
                    let row = steps.iter().map(|s| cells.get(s).copied()).collect();
                    (task.to_owned(), row)
                })
                .collect();
            // Stable: the aggregate first, tasks alphabetical after it.
            rows.sort_by_key(|(task, _)| task != AGGREGATE_TASK);
            SuiteTable {
                suite: suite.to_owned(),
                steps,
                rows,
            }
        })
        .collect()
}

/// A column heading for a checkpoint step.
pub fn step_label(step: u64) -> String {
    if step == 0 {
        "base".to_owned()
    } else {
        format!("step {step}")
    }
}

/// `0.512 ± 0.031` (mean ± standard error), `0.512` without a standard error, `—` for none.
pub fn cell_text(cell: Cell) -> String {
    match cell {
        None => "—".to_owned(),
        Some(Score {
            mean,
            stderr: Some(se),
            ..
        }) => format!("{mean:.3} ± {se:.3}"),
        Some(s) => format!("{:.3}", s.mean),
    }
}

fn cell_title(cell: Cell) -> String {
    match cell {
        None => "not evaluated".to_owned(),
        Some(s) => {
            let se = s
                .stderr
                .map_or_else(String::new, |e| format!(" ± {e:.4} (standard error)"));
            let avg = if s.samples > 1 {
                format!(", Avg@{}", s.samples)
            } else {
                String::new()
            };
            format!("{:.4}{se} over {} items{avg}", s.mean, s.n)
        }
    }
}

/// Each suite's aggregate over checkpoints, one curve per suite.
fn aggregate_series(tables: &[SuiteTable]) -> Vec<Series> {
    tables
        .iter()
        .filter_map(|t| {
            let (_, cells) = t.rows.iter().find(|(task, _)| task == AGGREGATE_TASK)?;
            let points: Vec<Point> = t
                .steps
                .iter()
                .zip(cells)
                .filter_map(|(step, c)| {
                    c.map(|s| Point {
                        step: *step as f64,
                        time_s: 0.0,
                        value: s.mean,
                    })
                })
                .collect();
            (!points.is_empty()).then(|| Series::line(t.suite.clone(), points))
        })
        .collect()
}

/// The run page's benchmark section.
#[component]
pub fn BenchmarksSection(run_id: i64, data: BenchmarksDto, csrf: String) -> impl IntoView {
    let tables = suite_tables(&data.rows);
    let series = aggregate_series(&tables);
    // More than one checkpoint makes a curve; a single point reads better in the table.
    let chart = series.iter().any(|s| s.points.len() > 1).then(|| {
        let settings = ChartSettings::from_query(None, None, None);
        view! {
            <div class="chart-grid">
                <LineChart
                    title="Held-out score by checkpoint"
                    y_label="mean score (suite aggregate)"
                    series=Signal::derive(move || series.clone())
                    settings
                    step_offset=0.0
                />
            </div>
        }
    });
    let empty = tables.is_empty();
    let table_views = tables
        .into_iter()
        .map(|t| {
            let head = t
                .steps
                .iter()
                .map(|s| view! { <th scope="col" class="num">{step_label(*s)}</th> })
                .collect_view();
            let body = t
                .rows
                .into_iter()
                .map(|(task, cells)| {
                    let agg = task == AGGREGATE_TASK;
                    let cells = cells
                        .into_iter()
                        .map(|c| view! { <td class="num" title=cell_title(c)>{cell_text(c)}</td> })
                        .collect_view();
                    let name = if agg {
                        "mean of tasks".to_owned()
                    } else {
                        task
                    };
                    view! { <tr class:aggregate=agg><th scope="row">{name}</th>{cells}</tr> }
                })
                .collect_view();
            let caption = format!("{}: score per task and checkpoint", t.suite);
            let label = caption.clone();
            view! {
                <div class="table-scroll" tabindex="0" role="region" aria-label=label>
                    <table class="data bench">
                        <caption>{caption}</caption>
                        <thead><tr><th scope="col">"task"</th>{head}</tr></thead>
                        <tbody>{body}</tbody>
                    </table>
                </div>
            }
        })
        .collect_view();
    let running = data.evaluations.iter().any(|e| !is_final(&e.state));
    let evals = (!data.evaluations.is_empty()).then(|| {
        let rows = data
            .evaluations
            .iter()
            .map(|e| {
                view! {
                    <tr>
                        <td>{step_label(e.checkpoint_step)}</td>
                        <td><code>{e.suite.clone()}</code>{(e.samples > 1).then(|| format!(" ×{} at T={}", e.samples, e.temperature))}</td>
                        <td>{e.trigger.clone()}</td>
                        <td><span class=format!("badge job-{}", e.state)>{e.state.clone()}</span></td>
                        <td>{e.message.clone().unwrap_or_default()}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <details class="evaluations" open={running}>
                <summary>{format!("Evaluation jobs ({})", data.evaluations.len())}</summary>
                <table class="data">
                    <thead><tr>
                        <th scope="col">"checkpoint"</th><th scope="col">"suite"</th>
                        <th scope="col">"trigger"</th><th scope="col">"state"</th>
                        <th scope="col">"message"</th>
                    </tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </details>
        }
    });
    // Every member may download a checkpoint's files (a zip of its directory).
    let downloads = (!data.checkpoints.is_empty()).then(|| {
        let mut steps = data.checkpoints.clone();
        steps.sort_unstable();
        let links = steps
            .into_iter()
            .map(|step| {
                view! {
                    <li>
                        <a
                            href=format!("/api/v1/runs/{run_id}/checkpoints/{step}/download")
                            download=format!("run-{run_id}-step-{step}.zip")
                        >
                            {format!("step {step}")}
                        </a>
                    </li>
                }
            })
            .collect_view();
        view! {
            <div class="checkpoint-downloads" id="checkpoint-downloads">
                <h3>"Checkpoints"</h3>
                <p class="help">"Each one's files as a zip (step 0 is the model the run started from)."</p>
                <ul class="inline-list">{links}</ul>
            </div>
        }
    });
    let form = (data.can_evaluate && !data.checkpoints.is_empty()).then(|| {
        let newest = data.checkpoints.iter().max().copied().unwrap_or(0);
        let options = data
            .checkpoints
            .iter()
            .rev()
            .map(|s| {
                let label = if *s == 0 {
                    "base model (step 0)".to_owned()
                } else {
                    format!("step {s}")
                };
                view! { <option value=s.to_string() selected={*s == newest}>{label}</option> }
            })
            .collect_view();
        let suites = FORM_SUITES
            .iter()
            .map(|(v, label)| view! { <option value=*v>{format!("{v} — {label}")}</option> })
            .collect_view();
        view! {
            <form class="eval-form" method="post" action=format!("/runs/{run_id}/evaluate")>
                <input type="hidden" name="csrf" value=csrf />
                <label for="eval-checkpoint">"Checkpoint"</label>
                <select id="eval-checkpoint" name="checkpoint_step">{options}</select>
                <label for="eval-suite">"Suite"</label>
                <select id="eval-suite" name="suite">
                    {suites}
                    <option value="custom">"other: qa:, mc:, code: PATH.jsonl or envs:DIR (below)"</option>
                </select>
                <label for="eval-custom">"Other suite"</label>
                <input id="eval-custom" name="custom_suite" type="text" placeholder="qa:/data/aime.jsonl" />
                <label for="eval-limit">"Items per task"</label>
                <input id="eval-limit" name="limit" type="number" min="1" placeholder="run default" />
                <label for="eval-samples">"Samples per question"</label>
                <input id="eval-samples" name="samples" type="number" min="1" max="1024" placeholder="1 (Avg@k, pass@k above 1)" />
                <label for="eval-temperature">"Temperature"</label>
                <input id="eval-temperature" name="temperature" type="number" min="0" max="10" step="0.05" placeholder="0 (greedy)" />
                <button type="submit">"Evaluate"</button>
            </form>
        }
    });
    view! {
        <section class="card" id="benchmarks" aria-labelledby="bench-h">
            <h2 id="bench-h">"Benchmarks"</h2>
            {empty.then(|| view! {
                <p class="empty">
                    "No held-out results yet. Evaluations run as jobs on the run's executor; "
                    "the run configuration's eval.every_steps queues them as checkpoints arrive."
                </p>
            })}
            {chart}
            {table_views}
            {evals}
            {downloads}
            {form}
        </section>
    }
}

fn is_final(state: &str) -> bool {
    matches!(state, "succeeded" | "failed" | "cancelled")
}

/// Which rows the paper's table has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowsBy {
    /// A base-model row, then each run's newest evaluated checkpoint.
    #[default]
    Newest,
    /// Every evaluated checkpoint of every run, the run's base model first.
    Checkpoint,
}

impl RowsBy {
    /// From the `rows` query parameter (`checkpoints`; anything else is the default).
    pub fn from_query(v: Option<&str>) -> Self {
        match v {
            Some("checkpoints") => RowsBy::Checkpoint,
            _ => RowsBy::Newest,
        }
    }

    pub fn query(self) -> &'static str {
        match self {
            RowsBy::Newest => "newest",
            RowsBy::Checkpoint => "checkpoints",
        }
    }
}

/// The compare view's and the benchmarks page's table (see [`paper_table`]).
#[component]
pub fn CompareBenchmarks(
    runs: Vec<(String, BenchmarksDto)>,
    #[prop(optional)] rows_by: RowsBy,
    /// Where the same table downloads as CSV.
    #[prop(optional)]
    csv_href: Option<String>,
) -> impl IntoView {
    let per_run: Vec<(String, Vec<SuiteTable>)> = runs
        .iter()
        .map(|(name, b)| (name.clone(), suite_tables(&b.rows)))
        .collect();
    let table = paper_table(&per_run, rows_by);
    if table.suites.is_empty() {
        return view! { <p class="empty">"None of these runs has benchmark results yet."</p> }
            .into_any();
    }
    let head = table
        .columns()
        .into_iter()
        .map(|c| view! { <th scope="col" class="num">{c}</th> })
        .collect_view();
    let body = table
        .rows
        .into_iter()
        .map(|r| {
            let split = table.suites.len();
            let cells = r
                .cells
                .into_iter()
                .enumerate()
                .map(|(i, c)| view! { <td class="num" class:group-avg={i >= split} title=cell_title(c)>{cell_text(c)}</td> })
                .collect_view();
            view! { <tr class:aggregate=r.base><th scope="row">{r.label}</th>{cells}</tr> }
        })
        .collect_view();
    let caption = match rows_by {
        RowsBy::Newest => {
            "Mean held-out score ± standard error per suite: the base model, then each run's \
             newest evaluated checkpoint"
        }
        RowsBy::Checkpoint => {
            "Mean held-out score ± standard error per suite at every evaluated checkpoint"
        }
    };
    let csv = csv_href.map(|href| {
        view! { <p class="table-actions"><a href=href download="benchmarks.csv">"Download CSV"</a></p> }
    });
    view! {
        <div class="table-scroll" tabindex="0" role="region" aria-label="Benchmarks of the compared runs">
            <table class="data bench" id="compare-benchmarks">
                <caption>{caption}</caption>
                <thead><tr><th scope="col">"model"</th>{head}</tr></thead>
                <tbody>{body}</tbody>
            </table>
        </div>
        <p class="hint">
            "Group averages follow the paper: the games average is the mean over the reasoning, "
            "math, science and code suites (reasoning-gym, qa:, mc:, humaneval, code:), the tool-use "
            "average over the tool-use suites; a row missing a suite of the group has no average. "
            "Environment pools (envs) are in neither."
        </p>
        {csv}
    }
    .into_any()
}

/// The team's benchmarks page: the paper's table over the team's runs with results and links
/// to their run pages.
#[component]
pub fn BenchmarksPageView(
    teams: Vec<TeamDto>,
    team: Option<i64>,
    runs: Vec<(i64, String, BenchmarksDto)>,
    #[prop(optional)] rows_by: RowsBy,
) -> impl IntoView {
    let team_picker = (teams.len() > 1).then(|| {
        let options = teams
            .iter()
            .map(|t| view! { <option value=t.id.to_string() selected={Some(t.id) == team}>{t.name.clone()}</option> })
            .collect_view();
        view! {
            <form method="get" class="filters" aria-label="Team">
                <label for="bench-team">"Team"</label>
                <select id="bench-team" name="team">{options}</select>
                <input type="hidden" name="rows" value=rows_by.query() />
                <button type="submit" class="secondary">"Show"</button>
            </form>
        }
    });
    let links = runs
        .iter()
        .map(|(id, name, _)| view! { <li><a href=format!("/runs/{id}#benchmarks")>{name.clone()}</a></li> })
        .collect_view();
    let empty = runs.is_empty();
    let ids: Vec<String> = runs.iter().map(|(id, _, _)| id.to_string()).collect();
    let csv_href = format!(
        "/api/v1/benchmarks.csv?runs={}&rows={}",
        ids.join(","),
        rows_by.query()
    );
    let team_q = team.map_or_else(String::new, |t| format!("&team={t}"));
    let toggle = |by: RowsBy, text: &'static str| {
        let href = format!("/benchmarks?rows={}{team_q}", by.query());
        if by == rows_by {
            view! { <strong aria-current="true">{text}</strong> }.into_any()
        } else {
            view! { <a href=href>{text}</a> }.into_any()
        }
    };
    let toggles = view! {
        <p class="filters" aria-label="Rows">
            "Rows: " {toggle(RowsBy::Newest, "newest checkpoint per run")} " · "
            {toggle(RowsBy::Checkpoint, "every evaluated checkpoint")}
        </p>
    };
    let table: Vec<(String, BenchmarksDto)> = runs
        .into_iter()
        .map(|(id, name, b)| (format!("{name} (#{id})"), b))
        .collect();
    view! {
        <h1>"Benchmarks"</h1>
        <p class="sub">
            "Held-out scores (suite means) of the team's runs. Evaluate a checkpoint from its run "
            "page, or set eval.every_steps in a run's configuration to evaluate as it trains."
        </p>
        {team_picker}
        {if empty {
            view! { <p class="empty">"No run of this team has benchmark results yet."</p> }.into_any()
        } else {
            view! {
                <section class="card" aria-labelledby="team-bench-h">
                    <h2 id="team-bench-h">"Suite means by run"</h2>
                    {toggles}
                    <CompareBenchmarks runs=table rows_by csv_href=csv_href />
                    <h3>"Runs"</h3>
                    <ul class="bench-runs">{links}</ul>
                </section>
            }.into_any()
        }}
    }
}

/// One row of the paper's table.
#[derive(Debug, Clone, PartialEq)]
pub struct PaperRow {
    pub label: String,
    /// The base-model row of the newest-checkpoint layout.
    pub base: bool,
    /// The checkpoint step (None for the base-model row, which may mix runs).
    pub step: Option<u64>,
    /// One cell per suite, then one per group average.
    pub cells: Vec<Cell>,
}

/// The paper's table: suites as columns (sorted), then the group averages.
#[derive(Debug, Clone, PartialEq)]
pub struct PaperTable {
    pub suites: Vec<String>,
    /// The averaged groups that have at least two suites here, with their suites' columns.
    pub groups: Vec<(SuiteGroup, Vec<usize>)>,
    pub rows: Vec<PaperRow>,
}

impl PaperTable {
    /// Column headings after "model": the suites, then `games avg (N)` and the like.
    pub fn columns(&self) -> Vec<String> {
        let mut out = self.suites.clone();
        out.extend(
            self.groups
                .iter()
                .map(|(g, cols)| format!("{} ({})", g.label(), cols.len())),
        );
        out
    }

    /// The table as CSV: `model,step`, then each column's mean and standard error.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("model,step");
        for c in self.columns() {
            out.push(',');
            out.push_str(&csv_field(&c));
            out.push(',');
            out.push_str(&csv_field(&format!("{c} stderr")));
        }
        out.push('\n');
        for r in &self.rows {
            out.push_str(&csv_field(&r.label));
            out.push(',');
            if let Some(s) = r.step {
                out.push_str(&s.to_string());
            }
            for c in &r.cells {
                let (mean, se) = match c {
                    Some(s) => (
                        s.mean.to_string(),
                        s.stderr.map(|e| e.to_string()).unwrap_or_default(),
                    ),
                    None => (String::new(), String::new()),
                };
                out.push(',');
                out.push_str(&mean);
                out.push(',');
                out.push_str(&se);
            }
            out.push('\n');
        }
        out
    }
}

/// RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// Builds the paper's table from each run's suite tables (their aggregate rows). With
/// [`RowsBy::Newest`] the base row takes, per suite, the first run that evaluated its
/// checkpoint 0 (runs compared side by side usually share their starting model) and each run's
/// row its newest evaluated checkpoint per suite; with [`RowsBy::Checkpoint`] every run has a
/// row per evaluated checkpoint, its base model first.
pub fn paper_table(per_run: &[(String, Vec<SuiteTable>)], rows_by: RowsBy) -> PaperTable {
    let mut suites: Vec<String> = per_run
        .iter()
        .flat_map(|(_, ts)| ts.iter().map(|t| t.suite.clone()))
        .collect();
    suites.sort();
    suites.dedup();
    let groups: Vec<(SuiteGroup, Vec<usize>)> = [SuiteGroup::Games, SuiteGroup::ToolUse]
        .into_iter()
        .map(|g| {
            let cols = (0..suites.len())
                .filter(|&i| suite_group(&suites[i]) == Some(g))
                .collect::<Vec<_>>();
            (g, cols)
        })
        .filter(|(_, cols)| cols.len() >= 2)
        .collect();
    let aggregate_at = |t: &SuiteTable, step: u64| -> Cell {
        let (_, cells) = t.rows.iter().find(|(task, _)| task == AGGREGATE_TASK)?;
        let idx = t.steps.iter().position(|&x| x == step)?;
        cells.get(idx).copied().flatten()
    };
    let with_groups = |mut cells: Vec<Cell>| -> Vec<Cell> {
        let averages: Vec<Cell> = groups
            .iter()
            .map(|(_, cols)| Score::average(&cols.iter().map(|&i| cells[i]).collect::<Vec<_>>()))
            .collect();
        cells.extend(averages);
        cells
    };
    let mut rows = Vec::new();
    match rows_by {
        RowsBy::Newest => {
            let base: Vec<Cell> = suites
                .iter()
                .map(|s| {
                    per_run.iter().find_map(|(_, ts)| {
                        ts.iter()
                            .find(|t| &t.suite == s)
                            .and_then(|t| aggregate_at(t, 0))
                    })
                })
                .collect();
            if base.iter().any(Option::is_some) {
                rows.push(PaperRow {
                    label: "base model (step 0)".to_owned(),
                    base: true,
                    step: Some(0),
                    cells: with_groups(base),
                });
            }
            for (name, ts) in per_run {
                let mut newest = 0;
                let cells: Vec<Cell> = suites
                    .iter()
                    .map(|s| {
                        let t = ts.iter().find(|t| &t.suite == s)?;
                        let step = t
                            .steps
                            .iter()
                            .rev()
                            .copied()
                            .find(|&x| x > 0 && aggregate_at(t, x).is_some())?;
                        newest = newest.max(step);
                        aggregate_at(t, step)
                    })
                    .collect();
                let label = if newest > 0 {
                    format!("{name} (step {newest})")
                } else {
                    name.clone()
                };
                rows.push(PaperRow {
                    label,
                    base: false,
                    step: (newest > 0).then_some(newest),
                    cells: with_groups(cells),
                });
            }
        }
        RowsBy::Checkpoint => {
            for (name, ts) in per_run {
                let mut steps: Vec<u64> = ts.iter().flat_map(|t| t.steps.clone()).collect();
                steps.sort_unstable();
                steps.dedup();
                for step in steps {
                    let cells: Vec<Cell> = suites
                        .iter()
                        .map(|s| {
                            ts.iter()
                                .find(|t| &t.suite == s)
                                .and_then(|t| aggregate_at(t, step))
                        })
                        .collect();
                    if cells.iter().all(Option::is_none) {
                        continue;
                    }
                    rows.push(PaperRow {
                        label: format!("{name} · {}", step_label(step)),
                        base: false,
                        step: Some(step),
                        cells: with_groups(cells),
                    });
                }
            }
        }
    }
    PaperTable {
        suites,
        groups,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(run: &str, step: Option<u64>, suite: &str, task: &str, score: f64) -> BenchmarkRow {
        BenchmarkRow {
            run_id: 1,
            run_name: run.into(),
            checkpoint_step: step,
            suite: suite.into(),
            task: task.into(),
            score,
            n: 4,
            stderr: Some(0.1),
            samples: 1,
        }
    }

    fn sc(mean: f64) -> Cell {
        Some(Score {
            mean,
            stderr: Some(0.1),
            n: 4,
            samples: 1,
        })
    }

    fn means(cells: &[Cell]) -> Vec<Option<f64>> {
        cells.iter().map(|c| c.map(|s| s.mean)).collect()
    }

    #[test]
    fn results_pivot_per_suite_with_the_aggregate_first_and_the_newest_result_winning() {
        let t = suite_tables(&[
            row("a", Some(0), "rg-logic", "all", 0.1),
            row("a", Some(6), "rg-logic", "all", 0.3),
            row("a", Some(0), "rg-logic", "aiw", 0.0),
            row("a", Some(6), "rg-logic", "aiw", 0.5),
            row("a", Some(6), "rg-logic", "aiw", 0.75), // a re-run of the same cell
            row("a", Some(6), "rg-logic", "zebra", 1.0),
            row("a", None, "rg-logic", "all", 0.9), // no step: not placeable
            row("a", Some(3), "qa:x.jsonl", "all", 0.2),
        ]);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].suite, "qa:x.jsonl");
        let logic = &t[1];
        assert_eq!(logic.steps, [0, 6]);
        let names: Vec<&str> = logic.rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["all", "aiw", "zebra"]);
        assert_eq!(logic.rows[1].1, [sc(0.0), sc(0.75)]);
        assert_eq!(logic.rows[2].1, [None, sc(1.0)]);
        assert_eq!(step_label(0), "base");
        assert_eq!(step_label(6), "step 6");
        assert_eq!(cell_text(sc(0.5)), "0.500 ± 0.100");
        let no_se = Some(Score {
            stderr: None,
            ..sc(0.25).unwrap_or(Score {
                mean: 0.0,
                stderr: None,
                n: 0,
                samples: 1,
            })
        });
        assert_eq!(cell_text(no_se), "0.250");
        assert_eq!(cell_text(None), "—");
    }

    #[test]
    fn the_paper_table_has_a_base_row_then_each_runs_newest_checkpoint() {
        let a = suite_tables(&[
            row("a", Some(0), "rg-logic", "all", 0.1),
            row("a", Some(3), "rg-logic", "all", 0.2),
            row("a", Some(6), "rg-logic", "all", 0.4),
        ]);
        let b = suite_tables(&[
            row("b", Some(0), "rg-logic", "all", 0.1),
            row("b", Some(3), "rg-logic", "all", 0.3),
            row("b", Some(3), "rg-hard", "all", 0.05),
        ]);
        let c = paper_table(&[("a".into(), a), ("b".into(), b)], RowsBy::Newest);
        assert_eq!(c.suites, ["rg-hard", "rg-logic"]);
        assert_eq!(c.columns(), ["rg-hard", "rg-logic", "games avg (2)"]);
        let labels: Vec<&str> = c.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["base model (step 0)", "a (step 6)", "b (step 3)"]);
        assert!(c.rows[0].base);
        // A row without every games suite has no games average.
        assert_eq!(means(&c.rows[0].cells), [None, Some(0.1), None]);
        assert_eq!(means(&c.rows[1].cells), [None, Some(0.4), None]);
        let b_row = &c.rows[2].cells;
        assert_eq!(means(&b_row[..2]), [Some(0.05), Some(0.3)]);
        let avg = b_row[2].unwrap_or(Score {
            mean: -1.0,
            stderr: None,
            n: 0,
            samples: 0,
        });
        assert!((avg.mean - 0.175).abs() < 1e-12);
        // sqrt(0.1^2 + 0.1^2) / 2
        assert!((avg.stderr.unwrap_or(0.0) - (0.02f64).sqrt() / 2.0).abs() < 1e-12);
        assert_eq!(avg.n, 8);
        let csv = c.to_csv();
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some(
                "model,step,rg-hard,rg-hard stderr,rg-logic,rg-logic stderr,games avg (2),\
                 games avg (2) stderr"
            )
        );
        assert_eq!(lines.next(), Some("base model (step 0),0,,,0.1,0.1,,"));
        // The average's standard error is sqrt(0.02) / 2 = 0.0707106781186547...
        let b_line = lines.nth(1).unwrap_or_default();
        assert!(
            b_line.starts_with("b (step 3),3,0.05,0.1,0.3,0.1,0.175,0.070710678118654"),
            "{b_line}"
        );
        // No results at all: no suites.
        let empty = paper_table(&[("a".into(), vec![])], RowsBy::Newest);
        assert!(empty.suites.is_empty());
    }

    #[test]
    fn rows_per_checkpoint_and_groups_follow_the_paper() {
        let a = suite_tables(&[
            row("a", Some(0), "rg-logic", "all", 0.1),
            row("a", Some(0), "humaneval", "all", 0.2),
            row("a", Some(0), "bfcl-multi-turn-base", "all", 0.0),
            row("a", Some(0), "envs", "all", 0.9),
            row("a", Some(4), "rg-logic", "all", 0.3),
            row("a", Some(4), "humaneval", "all", 0.4),
        ]);
        let t = paper_table(&[("a, 1".into(), a)], RowsBy::Checkpoint);
        assert_eq!(
            t.columns(),
            [
                "bfcl-multi-turn-base",
                "envs",
                "humaneval",
                "rg-logic",
                "games avg (2)"
            ],
            "one tool-use suite is no average; envs is in neither group"
        );
        let labels: Vec<&str> = t.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["a, 1 · base", "a, 1 · step 4"]);
        let games = |r: &PaperRow| r.cells[4].map(|s| (s.mean * 1000.0).round() / 1000.0);
        assert_eq!(games(&t.rows[0]), Some(0.15));
        assert_eq!(games(&t.rows[1]), Some(0.35));
        assert!(t.to_csv().contains("\"a, 1 · base\",0,"));
        assert_eq!(suite_group("tau2-retail"), Some(SuiteGroup::ToolUse));
        assert_eq!(suite_group("mc:gpqa.jsonl"), Some(SuiteGroup::Games));
        assert_eq!(suite_group("envs:pool"), None);
        assert_eq!(RowsBy::from_query(Some("checkpoints")), RowsBy::Checkpoint);
        assert_eq!(RowsBy::from_query(Some("x")), RowsBy::Newest);
    }
}
