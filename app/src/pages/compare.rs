//! Compare runs: one overlay chart per metric (a series per run) and a configuration diff that
//! shows only the keys whose values differ, since two runs of a study usually differ in one or
//! two settings among a hundred.

use super::benchmarks::CompareBenchmarks;
use super::flatten_config;
use crate::charts::{ChartControls, ChartSettings, LineChart, Point, SavedViews, Series};
use crate::dto::{BenchmarksDto, ChartViewRecord, MetricSeries, RunChoice, RunDetail};
use leptos::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// Keys whose values are not the same in every configuration, with each run's value (`None`
/// where a run lacks the key).
pub fn config_diff(configs: &[&serde_json::Value]) -> Vec<(String, Vec<Option<String>>)> {
    let flat: Vec<BTreeMap<String, String>> = configs.iter().map(|c| flatten_config(c)).collect();
    let keys: BTreeSet<&String> = flat.iter().flat_map(|m| m.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let values: Vec<Option<String>> = flat.iter().map(|m| m.get(k).cloned()).collect();
            let first = &values[0];
            values
                .iter()
                .any(|v| v != first)
                .then(|| (k.clone(), values))
        })
        .collect()
}

/// Keys that only choose the seed: runs that differ in nothing else repeat one setting.
fn is_seed_key(k: &str) -> bool {
    k == "seed" || k.ends_with(".seed")
}

/// Groups runs whose configurations are equal except for the seed: member indices, groups in
/// the order of their first run.
pub fn seed_groups(configs: &[&serde_json::Value]) -> Vec<Vec<usize>> {
    let mut keys: Vec<BTreeMap<String, String>> = Vec::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, c) in configs.iter().enumerate() {
        let mut flat = flatten_config(c);
        flat.retain(|k, _| !is_seed_key(k));
        match keys.iter().position(|k| *k == flat) {
            Some(g) => groups[g].push(i),
            None => {
                keys.push(flat);
                groups.push(vec![i]);
            }
        }
    }
    groups
}

/// The label of a group of runs: its first run's name and id.
fn names_of(group: &[usize], runs: &[RunDetail]) -> String {
    group
        .first()
        .and_then(|&i| runs.get(i))
        .map(|r| format!("{} (#{})", r.summary.name, r.summary.id))
        .unwrap_or_default()
}

/// `points`' value at `step`, linear between neighbours; `None` outside its step range.
fn value_at(points: &[Point], step: f64) -> Option<f64> {
    let i = points.partition_point(|p| p.step < step);
    let next = points.get(i)?;
    if next.step == step {
        return Some(next.value);
    }
    let prev = points.get(i.checked_sub(1)?)?;
    let t = (step - prev.step) / (next.step - prev.step);
    Some(prev.value + t * (next.value - prev.value))
}

/// What the shaded band around a seed group's mean spans (`?band=` on the compare page).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Band {
    /// The lowest to the highest run.
    #[default]
    Range,
    /// The mean plus and minus one (sample) standard deviation of the runs.
    Std,
    /// The mean plus and minus one standard error (s.d. / sqrt(n)).
    Stderr,
}

impl Band {
    pub const ALL: [Band; 3] = [Band::Range, Band::Std, Band::Stderr];

    /// From `?band=`: `range`, `std` or `stderr`; anything else is the range.
    pub fn from_query(s: Option<&str>) -> Self {
        match s {
            Some("std") => Band::Std,
            Some("stderr") => Band::Stderr,
            _ => Band::Range,
        }
    }

    pub fn as_query(self) -> &'static str {
        match self {
            Band::Range => "range",
            Band::Std => "std",
            Band::Stderr => "stderr",
        }
    }

    /// The band in a series label: "range", "s.d." or "s.e.".
    pub fn short(self) -> &'static str {
        match self {
            Band::Range => "range",
            Band::Std => "s.d.",
            Band::Stderr => "s.e.",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Band::Range => "lowest to highest run",
            Band::Std => "mean ± 1 standard deviation",
            Band::Stderr => "mean ± 1 standard error",
        }
    }

    /// The band's edges around `mean` for the runs' `vals` (one run: no spread).
    fn edges(self, mean: f64, vals: &[f64]) -> (f64, f64) {
        let n = vals.len() as f64;
        let sd = || {
            if vals.len() < 2 {
                0.0
            } else {
                (vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
            }
        };
        match self {
            Band::Range => (
                vals.iter().copied().fold(f64::INFINITY, f64::min),
                vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ),
            Band::Std => (mean - sd(), mean + sd()),
            Band::Stderr => {
                let se = sd() / n.sqrt();
                (mean - se, mean + se)
            }
        }
    }
}

/// The mean of several runs' curves with a band (see [`Band`]), on the steps of the run that
/// reaches furthest. The runs' curves are downsampled separately, so their steps differ: the
/// others are interpolated linearly at that run's steps; a step only some runs reach averages
/// those (see [`coverage`] for saying so).
pub fn mean_and_spread(name: String, members: &[&[Point]], band: Band) -> Series {
    // The run that reaches furthest, the densest of those, the first of equals.
    let Some(grid) = members.iter().copied().reduce(|best, m| {
        let key = |p: &[Point]| (last_step(p), p.len());
        let (a, b) = (key(best), key(m));
        if b.0 > a.0 || (b.0 == a.0 && b.1 > a.1) {
            m
        } else {
            best
        }
    }) else {
        return Series::line(name, Vec::new());
    };
    let mut points = Vec::with_capacity(grid.len());
    let mut edges = Vec::with_capacity(grid.len());
    for p in grid.iter() {
        let vals: Vec<f64> = members
            .iter()
            .filter_map(|m| value_at(m, p.step))
            .filter(|v| v.is_finite())
            .collect();
        if vals.is_empty() {
            continue;
        }
        let mean = vals.iter().sum::<f64>() / vals.len() as f64;
        points.push(Point { value: mean, ..*p });
        edges.push(band.edges(mean, &vals));
    }
    Series {
        name,
        points,
        band: edges,
    }
}

fn last_step(points: &[Point]) -> f64 {
    points.last().map_or(f64::NEG_INFINITY, |p| p.step)
}

/// Where a seed group's runs stop covering each other: after the step (0-based) where the
/// shortest run ends, the mean covers `remaining` of `total` runs. None when all end together.
#[derive(Debug, Clone, PartialEq)]
pub struct Cut {
    pub step: f64,
    pub remaining: usize,
    pub total: usize,
}

/// The [`Cut`] of runs whose last steps are `ends`.
pub fn coverage(ends: &[f64]) -> Option<Cut> {
    let lo = ends.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ends.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (ends.len() > 1 && lo.is_finite() && lo < hi).then(|| Cut {
        step: lo,
        remaining: ends.iter().filter(|&&e| e > lo).count(),
        total: ends.len(),
    })
}

/// Adds a run of any of the viewer's teams to the comparison (a GET form that keeps the runs
/// shown), and removes one (a link without it): no address editing, across teams and projects.
#[component]
fn ComparePicker(shown: Vec<(i64, String)>, choices: Vec<RunChoice>) -> impl IntoView {
    let ids: Vec<i64> = shown.iter().map(|(id, _)| *id).collect();
    let href_without = |drop: i64| {
        let rest: Vec<String> = ids
            .iter()
            .filter(|id| **id != drop)
            .map(|id| format!("run={id}"))
            .collect();
        format!("/compare?{}", rest.join("&"))
    };
    let current = shown
        .iter()
        .map(|(id, name)| {
            view! {
                <li>
                    {format!("{name} (#{id}) ")}
                    <a href=href_without(*id) aria-label=format!("Remove {name} from the comparison")>"remove"</a>
                </li>
            }
        })
        .collect_view();
    // One group per team and project, in the order the runs came (team by team, newest first).
    let mut groups: Vec<(String, Vec<&RunChoice>)> = Vec::new();
    for c in choices.iter().filter(|c| !ids.contains(&c.id)) {
        let label = format!("{} / {}", c.team, c.project);
        match groups.iter_mut().find(|(l, _)| *l == label) {
            Some((_, list)) => list.push(c),
            None => groups.push((label, vec![c])),
        }
    }
    let nothing_to_add = groups.is_empty();
    let options = groups
        .into_iter()
        .map(|(label, list)| {
            let opts = list
                .into_iter()
                .map(|c| {
                    view! { <option value=c.id.to_string()>{format!("{} (#{}, {})", c.name, c.id, c.status.as_str())}</option> }
                })
                .collect_view();
            view! { <optgroup label=label>{opts}</optgroup> }
        })
        .collect_view();
    let hidden = ids
        .iter()
        .map(|id| view! { <input type="hidden" name="run" value=id.to_string() /> })
        .collect_view();
    view! {
        <section class="card compare-picker" aria-label="Runs compared">
            {(!shown.is_empty()).then(|| view! { <ul class="inline-list" id="compare-runs">{current}</ul> })}
            {if nothing_to_add {
                view! { <p class="help" id="compare-none">"No other runs in your teams to add."</p> }.into_any()
            } else {
                view! {
                    <form method="get" action="/compare" class="inline-form">
                        {hidden}
                        <label for="compare-add">"Add a run"</label>
                        <select id="compare-add" name="run">{options}</select>
                        <button type="submit" id="compare-add-submit">"Add"</button>
                    </form>
                }.into_any()
            }}
        </section>
    }
}

/// The compare page for the runs in `runs`, with `metrics[i]` belonging to `runs[i]`.
#[component]
pub fn CompareView(
    runs: Vec<RunDetail>,
    metrics: Vec<Vec<MetricSeries>>,
    /// Each run's held-out results, labelled as in the rest of the page.
    #[prop(default = Vec::new())]
    benchmarks: Vec<(String, BenchmarksDto)>,
    settings: ChartSettings,
    /// What the seed groups' bands span.
    #[prop(default = Band::Range)]
    band: Band,
    /// Runs of every team of the viewer, for the picker.
    #[prop(default = Vec::new())]
    choices: Vec<RunChoice>,
    /// The viewer's saved chart views and CSRF token (`None`: not offered).
    #[prop(default = None)]
    views: Option<(Vec<ChartViewRecord>, String)>,
) -> impl IntoView {
    let shown: Vec<(i64, String)> = runs
        .iter()
        .map(|r| (r.summary.id, r.summary.name.clone()))
        .collect();
    let picker = view! { <ComparePicker shown choices /> };
    if runs.len() < 2 {
        return view! {
            <h1>"Compare runs"</h1>
            {picker}
            <p class="empty">"Pick two or more runs: add them above, from any of your teams, or tick them in the runs list and choose “Compare selected runs”."</p>
        }
        .into_any();
    }
    let names: Vec<String> = runs
        .iter()
        .map(|r| format!("{} (#{})", r.summary.name, r.summary.id))
        .collect();
    let configs: Vec<&serde_json::Value> = runs.iter().map(|r| &r.config).collect();
    let diff = config_diff(&configs);
    let metric_names: BTreeSet<&str> = metrics.iter().flatten().map(|m| m.name.as_str()).collect();
    // One chart per metric, in collapsible sections (the run page's groups): with eight runs
    // and 60 metrics a flat grid is a long scroll.
    let chart_of = |name: &str| {
        let series: Vec<Series> = metrics
            .iter()
            .zip(&names)
            .filter_map(|(ms, run)| {
                ms.iter()
                    .find(|m| m.name == name)
                    .map(|m| Series::line(run.clone(), m.points.clone()))
            })
            .collect();
        view! { <LineChart title=super::run::metric_title(name) y_label=name.to_owned() series settings /> }
    };
    let charts = super::run::metric_sections()
        .filter_map(|section| {
            let in_it: Vec<&str> = metric_names
                .iter()
                .copied()
                .filter(|n| super::run::metric_section(n) == section)
                .collect();
            (!in_it.is_empty()).then(|| {
                let n = in_it.len();
                let grid = in_it.into_iter().map(&chart_of).collect_view();
                view! {
                    <details class="chart-section" open>
                        <summary><span class="chart-section-title">{section}</span> <span class="sub">{format!("{n} chart{}", if n == 1 { "" } else { "s" })}</span></summary>
                        <div class="chart-grid">{grid}</div>
                    </details>
                }
            })
        })
        .collect_view();
    let head = names
        .iter()
        .map(|n| view! { <th scope="col">{n.clone()}</th> })
        .collect_view();
    let run_ids: Vec<String> = runs.iter().map(|r| r.summary.id.to_string()).collect();
    // Runs that repeat a setting with other seeds: one mean curve per setting, shaded from the
    // lowest to the highest run.
    let groups = seed_groups(&configs);
    let seeds_view = groups.iter().any(|g| g.len() > 1).then(|| {
        let names: BTreeSet<&str> = metrics.iter().flatten().map(|m| m.name.as_str()).collect();
        let charts = names
            .into_iter()
            .map(|name| {
                let series: Vec<Series> = groups
                    .iter()
                    .filter_map(|g| {
                        let members: Vec<&[Point]> = g
                            .iter()
                            .filter_map(|&i| metrics[i].iter().find(|m| m.name == name))
                            .map(|m| m.points.as_slice())
                            .collect();
                        let label = if g.len() > 1 {
                            format!(
                                "{} and {} more seed{} (mean, {})",
                                names_of(g, &runs),
                                g.len() - 1,
                                if g.len() > 2 { "s" } else { "" },
                                band.short()
                            )
                        } else {
                            names_of(g, &runs)
                        };
                        (!members.is_empty()).then(|| mean_and_spread(label, &members, band))
                    })
                    .collect();
                view! { <LineChart title=super::run::metric_title(name) y_label=name.to_owned() series settings /> }
            })
            .collect_view();
        // Say where a setting's runs end at different steps instead of averaging silently.
        let cuts = groups
            .iter()
            .filter(|g| g.len() > 1)
            .filter_map(|g| {
                let ends: Vec<f64> = g
                    .iter()
                    .map(|&i| metrics[i].iter().map(|m| last_step(&m.points)).fold(f64::NEG_INFINITY, f64::max))
                    .collect();
                coverage(&ends).map(|c| {
                    format!(
                        "{}: the runs end at different steps; after step {} the mean covers {} of {} runs.",
                        names_of(g, &runs),
                        c.step + 1.0,
                        c.remaining,
                        c.total
                    )
                })
            })
            .map(|t| view! { <p class="note seed-cut">{t}</p> })
            .collect_view();
        let hidden = run_ids
            .iter()
            .map(|id| view! { <input type="hidden" name="run" value=id.clone() /> })
            .collect_view();
        let options = Band::ALL
            .into_iter()
            .map(|b| view! { <option value=b.as_query() selected=b == band>{b.label()}</option> })
            .collect_view();
        view! {
            <section aria-labelledby="seeds-h">
                <h2 id="seeds-h">"Mean and spread over seeds"</h2>
                <p class="sub">
                    "Runs whose configurations differ only in the seed are one setting: its mean "
                    "curve, shaded " {band.label()} "."
                </p>
                <form class="chart-controls" method="get" aria-label="Seed band">
                    {hidden}
                    // The chart settings as they are when the band is applied (they change on
                    // the page without a reload), so the band's reload keeps them.
                    <input type="hidden" name="smooth" value=move || settings.smoothing.get().to_string() />
                    <input type="hidden" name="x" value=move || settings.x_axis.get().as_query() />
                    <input type="hidden" name="log" value=move || if settings.log_y.get() { "1" } else { "0" } />
                    <label for="seed-band">"Band"</label>
                    <select id="seed-band" name="band">{options}</select>
                    <button type="submit" class="secondary">"Apply"</button>
                </form>
                {cuts}
                <div class="chart-grid" id="seed-charts">{charts}</div>
            </section>
        }
    });
    let csv_href = format!("/api/v1/compare/metrics.csv?runs={}", run_ids.join(","));
    let bench_csv = format!("/api/v1/benchmarks.csv?runs={}", run_ids.join(","));
    // Applying the chart settings must keep the runs (and the seed band) on the page.
    let mut keep: Vec<(String, String)> = run_ids
        .iter()
        .map(|id| ("run".to_owned(), id.clone()))
        .collect();
    if band != Band::Range {
        keep.push(("band".into(), band.as_query().into()));
    }
    // A saved view opens this comparison with its settings.
    let saved = views.map(|(views, csrf)| {
        let page = |extra: Vec<(&'static str, String)>| {
            let mut q: Vec<(&str, String)> =
                keep.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            q.extend(extra);
            format!("/compare{}", super::query_string(&q))
        };
        SavedViews {
            links: views
                .iter()
                .map(|v| (v.name.clone(), page(v.query_pairs())))
                .collect(),
            csrf,
            back: page(Vec::new()),
        }
    });
    let diff_empty = diff.is_empty();
    let rows = diff
        .into_iter()
        .map(|(k, vals)| {
            let cells = vals
                .into_iter()
                .map(|v| match v {
                    Some(v) => view! { <td><code>{v}</code></td> }.into_any(),
                    None => view! { <td class="missing">"(not set)"</td> }.into_any(),
                })
                .collect_view();
            view! { <tr><th scope="row"><code>{k}</code></th>{cells}</tr> }
        })
        .collect_view();
    view! {
        <h1>"Compare runs"</h1>
        <p class="sub">{names.join(" · ")}</p>
        {picker}
        <section class="card" aria-labelledby="cfg-h">
            <h2 id="cfg-h">"Configuration differences"</h2>
            {if diff_empty {
                view! { <p class="empty">"The configurations are identical."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll" tabindex="0" role="region" aria-label="Configuration differences">
                        <table class="data kv">
                            <thead><tr><th scope="col">"Key"</th>{head}</tr></thead>
                            <tbody>{rows}</tbody>
                        </table>
                    </div>
                }.into_any()
            }}
        </section>
        <section aria-labelledby="overlay-h">
            <h2 id="overlay-h">"Curves"</h2>
            <p class="sub"><a href=csv_href download>"Download these runs' metrics (CSV)"</a></p>
            <ChartControls settings keep=keep saved=saved />
            {charts}
        </section>
        {seeds_view}
        <section class="card" aria-labelledby="cmp-bench-h">
            <h2 id="cmp-bench-h">"Benchmarks"</h2>
            <CompareBenchmarks runs=benchmarks csv_href=bench_csv />
        </section>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pts(steps_values: &[(f64, f64)]) -> Vec<Point> {
        steps_values
            .iter()
            .map(|&(step, value)| Point {
                step,
                time_s: step,
                value,
            })
            .collect()
    }

    #[test]
    fn runs_differing_only_in_the_seed_form_one_group() {
        let a = json!({"run": {"seed": 0, "steps": 6}, "grpo": {"lr": 1e-4}});
        let b = json!({"run": {"seed": 1, "steps": 6}, "grpo": {"lr": 1e-4}});
        let c = json!({"run": {"seed": 0, "steps": 6}, "grpo": {"lr": 1e-3}});
        let d = json!({"run": {"seed": 2, "steps": 6}, "grpo": {"lr": 1e-4}, "seed": 9});
        assert_eq!(seed_groups(&[&a, &b, &c, &d]), vec![vec![0, 1, 3], vec![2]]);
    }

    #[test]
    fn the_mean_interpolates_other_runs_and_the_band_spans_them() {
        let a = pts(&[(0.0, 0.0), (2.0, 2.0), (4.0, 4.0)]);
        let b = pts(&[(0.0, 2.0), (4.0, 6.0)]); // 4.0 at step 2 by interpolation
        let c = pts(&[(0.0, 1.0), (2.0, 1.0)]); // ends before step 4
        let s = mean_and_spread("x".into(), &[&a, &b, &c], Band::Range);
        let means: Vec<(f64, f64)> = s.points.iter().map(|p| (p.step, p.value)).collect();
        assert_eq!(means, [(0.0, 1.0), (2.0, 7.0 / 3.0), (4.0, 5.0)]);
        assert_eq!(s.band, [(0.0, 2.0), (1.0, 4.0), (4.0, 6.0)]);
        assert_eq!(value_at(&a, -1.0), None);
        assert_eq!(value_at(&a, 3.0), Some(3.0));
        assert!(
            mean_and_spread("none".into(), &[], Band::Range)
                .points
                .is_empty()
        );
        // The shortest run first: the longer ones are not cut to its steps.
        let s = mean_and_spread("x".into(), &[&c, &a], Band::Range);
        assert_eq!(s.points.last().map(|p| (p.step, p.value)), Some((4.0, 4.0)));
        assert_eq!(
            coverage(&[2.0, 4.0, 4.0]),
            Some(Cut {
                step: 2.0,
                remaining: 2,
                total: 3
            })
        );
        assert_eq!(coverage(&[4.0, 4.0]), None);
        assert_eq!(coverage(&[4.0]), None);
    }

    #[test]
    fn bands_span_the_range_one_standard_deviation_or_one_standard_error() {
        let a = pts(&[(0.0, 1.0)]);
        let b = pts(&[(0.0, 3.0)]);
        let c = pts(&[(0.0, 5.0)]);
        let runs: [&[Point]; 3] = [&a, &b, &c];
        // Mean 3, sample s.d. 2, standard error 2 / sqrt(3).
        assert_eq!(
            mean_and_spread("r".into(), &runs, Band::Range).band,
            [(1.0, 5.0)]
        );
        assert_eq!(
            mean_and_spread("s".into(), &runs, Band::Std).band,
            [(1.0, 5.0)]
        );
        let se = 2.0 / 3f64.sqrt();
        let e = mean_and_spread("e".into(), &runs, Band::Stderr).band[0];
        assert!(
            (e.0 - (3.0 - se)).abs() < 1e-12 && (e.1 - (3.0 + se)).abs() < 1e-12,
            "{e:?}"
        );
        // One run has no spread under s.d. and s.e.
        assert_eq!(
            mean_and_spread("one".into(), &[&a], Band::Std).band,
            [(1.0, 1.0)]
        );
        for b in Band::ALL {
            assert_eq!(Band::from_query(Some(b.as_query())), b);
        }
        assert_eq!(Band::from_query(Some("bogus")), Band::Range);
    }

    #[test]
    fn flattening_names_nested_keys() {
        let f = flatten_config(
            &json!({"grpo": {"clip_low": 0.2, "kl": 0}, "skills": ["a", "b"], "name": "x", "empty": {}}),
        );
        let keys: Vec<&str> = f.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "empty",
                "grpo.clip_low",
                "grpo.kl",
                "name",
                "skills.0",
                "skills.1"
            ]
        );
        assert_eq!(f["name"], "x");
        assert_eq!(f["grpo.clip_low"], "0.2");
        assert_eq!(f["empty"], "{}");
    }

    #[test]
    fn the_diff_shows_only_keys_that_differ() {
        let a = json!({"seed": 1, "grpo": {"clip_low": 0.2, "kl": 0.0}, "memory": true});
        let b =
            json!({"seed": 2, "grpo": {"clip_low": 0.2, "kl": 0.0}, "memory": false, "extra": 5});
        let d = config_diff(&[&a, &b]);
        let keys: Vec<&str> = d.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["extra", "memory", "seed"]);
        assert_eq!(d[0].1, vec![None, Some("5".into())]);
        assert_eq!(d[2].1, vec![Some("1".into()), Some("2".into())]);
        assert!(config_diff(&[&a, &a]).is_empty());
    }
}
