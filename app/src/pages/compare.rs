//! Compare runs: one overlay chart per metric (a series per run) and a configuration diff that
//! shows only the keys whose values differ, since two runs of a study usually differ in one or
//! two settings among a hundred.

use super::benchmarks::CompareBenchmarks;
use crate::charts::{ChartControls, ChartSettings, LineChart, Point, Series};
use crate::dto::{BenchmarksDto, MetricSeries, RunDetail};
use leptos::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

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

/// The mean of several runs' curves with their spread (lowest to highest) as a band, on the
/// steps of the first run. The runs' curves are downsampled separately, so their steps differ:
/// the others are interpolated linearly at the first run's steps; a step only some runs reach
/// averages those.
pub fn mean_and_spread(name: String, members: &[&[Point]]) -> Series {
    let Some(first) = members.first() else {
        return Series::line(name, Vec::new());
    };
    let mut points = Vec::with_capacity(first.len());
    let mut band = Vec::with_capacity(first.len());
    for p in first.iter() {
        let vals: Vec<f64> = members
            .iter()
            .filter_map(|m| value_at(m, p.step))
            .filter(|v| v.is_finite())
            .collect();
        if vals.is_empty() {
            continue;
        }
        let mean = vals.iter().sum::<f64>() / vals.len() as f64;
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        points.push(Point { value: mean, ..*p });
        band.push((lo, hi));
    }
    Series { name, points, band }
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
) -> impl IntoView {
    if runs.len() < 2 {
        return view! {
            <h1>"Compare runs"</h1>
            <p class="empty">"Pick two or more runs: tick them in the runs list and choose “Compare selected runs”."</p>
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
    let charts = metric_names
        .into_iter()
        .map(|name| {
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
        })
        .collect_view();
    let head = names
        .iter()
        .map(|n| view! { <th scope="col">{n.clone()}</th> })
        .collect_view();
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
                                "{} and {} more seed{} (mean, range)",
                                names_of(g, &runs),
                                g.len() - 1,
                                if g.len() > 2 { "s" } else { "" }
                            )
                        } else {
                            names_of(g, &runs)
                        };
                        (!members.is_empty()).then(|| mean_and_spread(label, &members))
                    })
                    .collect();
                view! { <LineChart title=super::run::metric_title(name) y_label=name.to_owned() series settings /> }
            })
            .collect_view();
        view! {
            <section aria-labelledby="seeds-h">
                <h2 id="seeds-h">"Mean and spread over seeds"</h2>
                <p class="sub">
                    "Runs whose configurations differ only in the seed are one setting: its mean "
                    "curve, shaded from the lowest to the highest run."
                </p>
                <div class="chart-grid" id="seed-charts">{charts}</div>
            </section>
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
            <ChartControls settings />
            <div class="chart-grid">{charts}</div>
        </section>
        {seeds_view}
        <section class="card" aria-labelledby="cmp-bench-h">
            <h2 id="cmp-bench-h">"Benchmarks"</h2>
            <CompareBenchmarks runs=benchmarks />
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
        let s = mean_and_spread("x".into(), &[&a, &b, &c]);
        let means: Vec<(f64, f64)> = s.points.iter().map(|p| (p.step, p.value)).collect();
        assert_eq!(means, [(0.0, 1.0), (2.0, 7.0 / 3.0), (4.0, 5.0)]);
        assert_eq!(s.band, [(0.0, 2.0), (1.0, 4.0), (4.0, 6.0)]);
        assert_eq!(value_at(&a, -1.0), None);
        assert_eq!(value_at(&a, 3.0), Some(3.0));
        assert!(mean_and_spread("none".into(), &[]).points.is_empty());
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
