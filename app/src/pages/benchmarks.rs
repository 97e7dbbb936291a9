//! Held-out benchmark results: on the run page, a table per suite (tasks by checkpoint, the
//! model the run started from as the "base" column), a chart of each suite's mean score over
//! checkpoints, the run's evaluation jobs, and a POST form that queues an evaluation; in the
//! compare view, one row per run (its newest evaluated checkpoint) under a base-model row.

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
    ("humaneval", "HumanEval: 164 programs run against their tests"),
    ("envs", "seed environments: win rate"),
];

/// One result cell: the score and the number of items, or nothing when not evaluated.
pub type Cell = Option<(f64, u32)>;

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
    type TaskCells<'a> = BTreeMap<&'a str, BTreeMap<u64, (f64, u32)>>;
    let mut suites: BTreeMap<&str, (BTreeSet<u64>, TaskCells<'_>)> = BTreeMap::new();
    for r in rows {
        let Some(step) = r.checkpoint_step else {
            continue;
        };
        let (steps, tasks) = suites.entry(&r.suite).or_default();
        steps.insert(step);
        tasks
            .entry(&r.task)
            .or_default()
            .insert(step, (r.score, r.n));
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

fn cell_text(cell: Cell) -> String {
    cell.map_or_else(|| "—".to_owned(), |(s, _)| format!("{s:.3}"))
}

fn cell_title(cell: Cell) -> String {
    cell.map_or_else(
        || "not evaluated".to_owned(),
        |(s, n)| format!("{s:.4} over {n} items"),
    )
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
                    c.map(|(value, _)| Point {
                        step: *step as f64,
                        time_s: 0.0,
                        value,
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
                        <td><code>{e.suite.clone()}</code></td>
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
            {form}
        </section>
    }
}

fn is_final(state: &str) -> bool {
    matches!(state, "succeeded" | "failed" | "cancelled")
}

/// The compare view's benchmark table: per suite, the aggregate score of the model the first
/// run started from ("base model", checkpoint 0) and of each run's newest evaluated checkpoint.
#[component]
pub fn CompareBenchmarks(runs: Vec<(String, BenchmarksDto)>) -> impl IntoView {
    let per_run: Vec<(String, Vec<SuiteTable>)> = runs
        .iter()
        .map(|(name, b)| (name.clone(), suite_tables(&b.rows)))
        .collect();
    let rows = compare_rows(&per_run);
    if rows.suites.is_empty() {
        return view! { <p class="empty">"None of these runs has benchmark results yet."</p> }
            .into_any();
    }
    let head = rows
        .suites
        .iter()
        .map(|s| view! { <th scope="col" class="num">{s.clone()}</th> })
        .collect_view();
    let body = rows
        .rows
        .into_iter()
        .map(|(label, base, cells)| {
            let cells = cells
                .into_iter()
                .map(|c| view! { <td class="num" title=cell_title(c)>{cell_text(c)}</td> })
                .collect_view();
            view! { <tr class:aggregate=base><th scope="row">{label}</th>{cells}</tr> }
        })
        .collect_view();
    view! {
        <div class="table-scroll" tabindex="0" role="region" aria-label="Benchmarks of the compared runs">
            <table class="data bench" id="compare-benchmarks">
                <caption>"Mean held-out score per suite: the base model, then each run's newest evaluated checkpoint"</caption>
                <thead><tr><th scope="col">"model"</th>{head}</tr></thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
    .into_any()
}

/// The team's benchmarks page: the compare table over the team's runs with results (each
/// run's newest evaluated checkpoint under a base-model row) and links to their run pages.
#[component]
pub fn BenchmarksPageView(
    teams: Vec<TeamDto>,
    team: Option<i64>,
    runs: Vec<(i64, String, BenchmarksDto)>,
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
                <button type="submit" class="secondary">"Show"</button>
            </form>
        }
    });
    let links = runs
        .iter()
        .map(|(id, name, _)| view! { <li><a href=format!("/runs/{id}#benchmarks")>{name.clone()}</a></li> })
        .collect_view();
    let empty = runs.is_empty();
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
                    <CompareBenchmarks runs=table />
                    <h3>"Runs"</h3>
                    <ul class="bench-runs">{links}</ul>
                </section>
            }.into_any()
        }}
    }
}

/// Rows of the compare table: `(label, is_base_row, one cell per suite)`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareRows {
    pub suites: Vec<String>,
    pub rows: Vec<(String, bool, Vec<Cell>)>,
}

/// Builds the compare rows: the base row takes, per suite, the first run that evaluated its
/// checkpoint 0 (runs compared side by side usually share their starting model); each run's row
/// takes its newest evaluated checkpoint per suite.
pub fn compare_rows(per_run: &[(String, Vec<SuiteTable>)]) -> CompareRows {
    let mut suites: Vec<String> = per_run
        .iter()
        .flat_map(|(_, ts)| ts.iter().map(|t| t.suite.clone()))
        .collect();
    suites.sort();
    suites.dedup();
    let aggregate_at = |t: &SuiteTable, pick: &dyn Fn(&[u64]) -> Option<usize>| {
        let (_, cells) = t.rows.iter().find(|(task, _)| task == AGGREGATE_TASK)?;
        let idx = pick(&t.steps)?;
        cells.get(idx).copied().flatten().map(|c| (t.steps[idx], c))
    };
    let base: Vec<Cell> = suites
        .iter()
        .map(|s| {
            per_run.iter().find_map(|(_, ts)| {
                let t = ts.iter().find(|t| &t.suite == s)?;
                aggregate_at(t, &|steps| steps.iter().position(|&x| x == 0)).map(|(_, c)| c)
            })
        })
        .collect();
    let mut rows = Vec::new();
    if base.iter().any(Option::is_some) {
        rows.push(("base model (step 0)".to_owned(), true, base));
    }
    for (name, ts) in per_run {
        let mut newest = 0;
        let cells: Vec<Cell> = suites
            .iter()
            .map(|s| {
                let t = ts.iter().find(|t| &t.suite == s)?;
                let (step, c) = aggregate_at(t, &|steps| steps.iter().rposition(|&x| x > 0))?;
                newest = newest.max(step);
                Some(c)
            })
            .collect();
        let label = if newest > 0 {
            format!("{name} (step {newest})")
        } else {
            name.clone()
        };
        rows.push((label, false, cells));
    }
    CompareRows { suites, rows }
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
        }
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
        assert_eq!(logic.rows[1].1, [Some((0.0, 4)), Some((0.75, 4))]);
        assert_eq!(logic.rows[2].1, [None, Some((1.0, 4))]);
        assert_eq!(step_label(0), "base");
        assert_eq!(step_label(6), "step 6");
    }

    #[test]
    fn compare_rows_put_the_base_model_first_and_each_runs_newest_checkpoint_after() {
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
        let c = compare_rows(&[("a".into(), a), ("b".into(), b)]);
        assert_eq!(c.suites, ["rg-hard", "rg-logic"]);
        assert_eq!(c.rows.len(), 3);
        assert_eq!(
            c.rows[0],
            (
                "base model (step 0)".into(),
                true,
                vec![None, Some((0.1, 4))]
            )
        );
        assert_eq!(
            c.rows[1],
            ("a (step 6)".into(), false, vec![None, Some((0.4, 4))])
        );
        assert_eq!(
            c.rows[2],
            (
                "b (step 3)".into(),
                false,
                vec![Some((0.05, 4)), Some((0.3, 4))]
            )
        );
        // No results at all: no rows but the runs' own (empty) ones, and no suites.
        let empty = compare_rows(&[("a".into(), vec![])]);
        assert!(empty.suites.is_empty());
    }
}
