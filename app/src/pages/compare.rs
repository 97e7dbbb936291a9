//! Compare runs: one overlay chart per metric (a series per run) and a configuration diff that
//! shows only the keys whose values differ, since two runs of a study usually differ in one or
//! two settings among a hundred.

use super::benchmarks::CompareBenchmarks;
use crate::charts::{ChartControls, ChartSettings, LineChart, Series};
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
                    ms.iter().find(|m| m.name == name).map(|m| Series {
                        name: run.clone(),
                        points: m.points.clone(),
                    })
                })
                .collect();
            view! { <LineChart title=name.to_owned() y_label=name.to_owned() series settings /> }
        })
        .collect_view();
    let head = names
        .iter()
        .map(|n| view! { <th scope="col">{n.clone()}</th> })
        .collect_view();
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
