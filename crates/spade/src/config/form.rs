//! The launch form's engine, pure (no HTTP, no database): the presets, the documentation of
//! every key path ([`HELP`], beside the structs it documents), how each path is edited, and a
//! submission's fields turned into a `RunConfig` or messages by key path. The dashboard's
//! `/runs/new` is HTTP glue around it (`backend/src/dashboard/launch.rs`).
//!
//! The fields are walked from `RunConfig`'s JSON, so every key of the configuration is on the
//! form; [`HELP`] gives each one its documentation (a test keeps the two in step) and the
//! order of the struct declarations. A submission becomes JSON with the types of
//! `RunConfig::default()` (a field that does not parse gets its own message), is deserialised
//! and checked with `RunConfig::validate`, and each `ConfigIssue` goes beside the field its key
//! path names: the form, the API and the worker refuse the same configurations.

use super::help::{HELP, SECTIONS};
use super::{ConfigIssue, MODEL_PRESETS, RunConfig};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Values of `curriculum.kinds` (`spade::EnvKind`).
const ENV_KINDS: [&str; 2] = ["game", "tool_use"];

/// How a configuration field is edited (the page's `spade_app::dto::FieldKind` is converted
/// from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldKind {
    /// A whole number.
    Integer,
    /// A real number.
    Number,
    /// Free text; empty means "not set" for optional paths.
    Text { optional: bool },
    /// A checkbox.
    Bool,
    /// One of these values.
    Choice(Vec<String>),
    /// Any of these values (checkboxes sharing the field's name).
    Multi(Vec<String>),
}

/// One field of the launch form, named by its key path (`designer.plateau.low`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub path: String,
    /// The last part of the path, in words.
    pub label: String,
    /// What the setting does ([`HELP`]).
    pub help: String,
    pub kind: FieldKind,
    /// The value shown: as typed, or the preset's; `true`/`false` for checkboxes,
    /// comma-separated for lists and [`FieldKind::Multi`].
    pub value: String,
    /// The chosen preset's value, shown beside the field.
    pub default: String,
    /// Validation messages about this field (empty when it is fine).
    pub errors: Vec<String>,
}

/// A section of the configuration (`[designer]`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub key: String,
    pub title: String,
    pub fields: Vec<Field>,
}

/// A configuration's values as the form shows them, by key path.
pub fn form_values(cfg: &RunConfig) -> BTreeMap<String, String> {
    leaves(&cfg.to_json())
        .iter()
        .map(|(k, v)| (k.clone(), display(v)))
        .collect()
}

/// The leaves of a configuration's JSON, by key path.
pub fn leaves(v: &Value) -> BTreeMap<String, Value> {
    fn walk(v: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(v, &path, out);
                }
            }
            other => {
                out.insert(prefix.to_owned(), other.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(v, "", &mut out);
    out
}

/// The key paths in form order: [`HELP`]'s order, then any path it does not know (so a new
/// configuration key is on the form even before it is documented here).
fn ordered_paths(types: &BTreeMap<String, Value>) -> Vec<String> {
    let mut paths: Vec<String> = HELP
        .iter()
        .map(|(p, _)| (*p).to_owned())
        .filter(|p| types.contains_key(p))
        .collect();
    paths.extend(
        types
            .keys()
            .filter(|p| !HELP.iter().any(|(h, _)| h == p))
            .cloned(),
    );
    paths
}

/// How a path is edited, from its value in `RunConfig::default()` (where optional paths are
/// null).
fn kind_of(path: &str, template: &Value) -> FieldKind {
    match template {
        Value::Bool(_) => FieldKind::Bool,
        // A number of slots or "auto" (`KvCacheTokens` reads either from text).
        Value::Number(_) if path == "model.kv_cache_tokens" => FieldKind::Text { optional: false },
        Value::Number(n) if n.is_f64() => FieldKind::Number,
        Value::Number(_) => FieldKind::Integer,
        Value::Null => FieldKind::Text { optional: true },
        Value::Array(_) if path == "curriculum.kinds" => {
            FieldKind::Multi(ENV_KINDS.map(str::to_owned).to_vec())
        }
        // The named suites as checkboxes; `qa:` and `envs:` paths go through the TOML mode.
        Value::Array(_) if path == "eval.suites" => FieldKind::Multi(
            crate::suites::NAMED
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        ),
        Value::String(_) if path == "model.preset" => {
            FieldKind::Choice(MODEL_PRESETS.iter().map(|s| (*s).to_owned()).collect())
        }
        Value::String(_) if path == "designer.regret_timing" => {
            FieldKind::Choice(vec!["matched".to_owned(), "window".to_owned()])
        }
        Value::String(_) if path == "metrics.vendi_kernel" => FieldKind::Choice(vec![
            "ngram".to_owned(),
            "policy".to_owned(),
            "sentence".to_owned(),
        ]),
        Value::String(_) if path == "grpo.loss_norm" => {
            FieldKind::Choice(vec!["sample_mean".to_owned(), "token_mean".to_owned()])
        }
        Value::String(_) if path == "run.algorithm" => {
            FieldKind::Choice(vec!["spade".to_owned(), "spice".to_owned()])
        }
        Value::String(_) if path == "vllm.weight_sync" => FieldKind::Choice(vec![
            "auto".to_owned(),
            "disk".to_owned(),
            "nccl".to_owned(),
        ]),
        Value::String(_) if path == "model.rollout" => FieldKind::Choice(vec![
            "engine".to_owned(),
            "sampler".to_owned(),
            "vllm".to_owned(),
        ]),
        Value::String(_) if path == "model.warm_start" => FieldKind::Choice(vec![
            "auto".to_owned(),
            "none".to_owned(),
            "seeds".to_owned(),
            "families".to_owned(),
        ]),
        Value::String(_) if path == "agent.failed_plays" => {
            FieldKind::Choice(vec!["minus_one".to_owned(), "drop".to_owned()])
        }
        Value::String(_) if path == "agent.tool_template" => {
            FieldKind::Choice(vec!["native".to_owned(), "inline".to_owned()])
        }
        Value::String(_) if path == "agent.retire_on" => {
            FieldKind::Choice(vec!["hang".to_owned(), "violation".to_owned()])
        }
        Value::String(_) if path == "model.prompts" => {
            FieldKind::Choice(vec!["reference".to_owned(), "compact".to_owned()])
        }
        Value::String(_) if path == "designer.plateau_reads" => {
            FieldKind::Choice(vec!["mean_return".to_owned(), "win_rate".to_owned()])
        }
        Value::String(_) if path == "memory.win_rate_from" => {
            FieldKind::Choice(vec!["regeneration_step".to_owned(), "window".to_owned()])
        }
        Value::String(_) if path == "memory.match_by" => {
            FieldKind::Choice(vec!["skill".to_owned(), "kind".to_owned()])
        }
        _ => FieldKind::Text { optional: false },
    }
}

/// A JSON leaf as the form shows it.
pub fn display(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        // Rust's shortest round-trip form, without exponents (1e-6 -> 0.000001), which
        // `<input type=number>` accepts.
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        Value::Array(items) => items.iter().map(display).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

fn label_of(path: &str) -> String {
    let rest = path.split_once('.').map_or(path, |(_, r)| r);
    let words = rest
        .split(['_', '.'])
        .map(|w| match w {
            "ema" => "EMA",
            "kl" => "KL",
            "tis" => "TIS",
            "lr" => "learning rate",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut c = words.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => words,
    }
}

/// The form's sections: `values` (what is shown) by path, `preset` the preset's values, and
/// `errors` by path.
pub fn sections(
    values: &BTreeMap<String, String>,
    preset: &BTreeMap<String, Value>,
    errors: &BTreeMap<String, Vec<String>>,
) -> Vec<Section> {
    let types = leaves(&RunConfig::default().to_json());
    let mut out: Vec<Section> = Vec::new();
    for path in ordered_paths(&types) {
        let key = path.split('.').next().unwrap_or_default().to_owned();
        let field = Field {
            label: label_of(&path),
            help: HELP
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, h)| (*h).to_owned())
                .unwrap_or_default(),
            kind: kind_of(&path, &types[&path]),
            value: values.get(&path).cloned().unwrap_or_default(),
            default: preset.get(&path).map(display).unwrap_or_default(),
            errors: errors.get(&path).cloned().unwrap_or_default(),
            path,
        };
        match out.iter_mut().find(|s| s.key == key) {
            Some(s) => s.fields.push(field),
            None => out.push(Section {
                title: SECTIONS
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map_or_else(|| key.clone(), |(_, t)| (*t).to_owned()),
                key,
                fields: vec![field],
            }),
        }
    }
    out
}

/// Lists shown as one comma-separated text field: text, or whole numbers.
const LISTS: &[(&str, ListItem)] = &[
    ("vllm.urls", ListItem::Text),
    ("vllm.gpus", ListItem::Whole),
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum ListItem {
    Text,
    Whole,
}

fn list_item(path: &str) -> Option<ListItem> {
    LISTS.iter().find(|(p, _)| *p == path).map(|(_, k)| *k)
}

/// One comma-separated field as its list (empty items dropped: a trailing comma is harmless).
fn parse_list(item: ListItem, raw: &[String]) -> Result<Value, String> {
    let joined = raw.join(",");
    let items = joined.split(',').map(str::trim).filter(|u| !u.is_empty());
    match item {
        ListItem::Text => Ok(Value::Array(
            items.map(|u| Value::String(u.to_owned())).collect(),
        )),
        ListItem::Whole => items
            .map(|u| {
                u.parse::<u64>()
                    .map(Value::from)
                    .map_err(|_| format!("must be whole numbers separated by commas, got \"{u}\""))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
    }
}

/// Parses one submitted value as the type of its path; `Err` is the message for the field.
fn parse_value(kind: &FieldKind, raw: &[String]) -> Result<Value, String> {
    let one = raw.first().map(|s| s.trim()).unwrap_or_default();
    match kind {
        FieldKind::Bool => Ok(Value::Bool(raw.iter().any(|v| v == "true"))),
        FieldKind::Multi(_) => Ok(Value::Array(
            raw.iter().map(|v| Value::String(v.clone())).collect(),
        )),
        FieldKind::Integer => {
            if let Ok(u) = one.parse::<u64>() {
                Ok(Value::from(u))
            } else if let Ok(i) = one.parse::<i64>() {
                Ok(Value::from(i))
            } else {
                Err(format!("must be a whole number, got \"{one}\""))
            }
        }
        FieldKind::Number => one
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("must be a number, got \"{one}\"")),
        FieldKind::Text { optional: true } if one.is_empty() => Ok(Value::Null),
        FieldKind::Text { .. } | FieldKind::Choice(_) => Ok(Value::String(one.to_owned())),
    }
}

/// Sets `path` (dotted) in a JSON object tree.
fn insert_path(root: &mut Map<String, Value>, path: &str, v: Value) {
    match path.split_once('.') {
        None => {
            root.insert(path.to_owned(), v);
        }
        Some((head, rest)) => {
            let child = root
                .entry(head.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = child {
                insert_path(m, rest, v);
            }
        }
    }
}

/// The field a validation issue belongs to: `curriculum.kinds[1]` -> `curriculum.kinds`.
fn field_path(issue_path: &str) -> &str {
    issue_path.split('[').next().unwrap_or(issue_path)
}

/// What a submission amounts to: a configuration, or the messages by key path.
#[derive(Debug)]
pub enum Checked {
    Valid(Box<RunConfig>),
    Invalid {
        /// What the form shows again, by path.
        values: BTreeMap<String, String>,
        errors: BTreeMap<String, Vec<String>>,
        /// Messages that name no field of the form.
        general: Vec<String>,
    },
}

/// Checks the configuration fields of a submitted form (pairs in order; a checkbox group
/// repeats its name).
pub fn check_fields(pairs: &[(String, String)]) -> Checked {
    let types = leaves(&RunConfig::default().to_json());
    let mut by_path: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (k, v) in pairs {
        by_path.entry(k.as_str()).or_default().push(v.clone());
    }
    let mut root = Map::new();
    let mut values = BTreeMap::new();
    let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, template) in &types {
        let kind = kind_of(path, template);
        let raw = by_path.get(path.as_str()).cloned().unwrap_or_default();
        values.insert(
            path.clone(),
            match kind {
                FieldKind::Bool => raw.iter().any(|v| v == "true").to_string(),
                _ => raw.join(","),
            },
        );
        // Checkboxes say "off" by being absent; any other field must be on the form.
        // An empty list of text values may come as no value at all.
        if raw.is_empty()
            && !matches!(kind, FieldKind::Bool | FieldKind::Multi(_))
            && list_item(path).is_none()
        {
            errors
                .entry(path.clone())
                .or_default()
                .push("missing from the form".into());
            // The default stands in, so the other fields still get their range checks.
            insert_path(&mut root, path, template.clone());
            continue;
        }
        let parsed = if let Some(item) = list_item(path) {
            // A list is one text field, comma-separated, as it is displayed.
            parse_list(item, &raw)
        } else {
            parse_value(&kind, &raw)
        };
        match parsed {
            Ok(v) => insert_path(&mut root, path, v),
            Err(msg) => {
                errors.entry(path.clone()).or_default().push(msg);
                insert_path(&mut root, path, template.clone());
            }
        }
    }
    // Fields that did not parse hold their defaults below: every other field is still checked
    // in this same round (type and range errors came in two rounds), but no rule is reported
    // about a default the user never typed.
    let unparsed: BTreeSet<String> = errors.keys().cloned().collect();
    let cfg: RunConfig = match serde_path_to_error::deserialize(Value::Object(root)) {
        Ok(c) => c,
        Err(e) => {
            let path = e.path().to_string();
            errors
                .entry(field_path(&path).to_owned())
                .or_default()
                .push(e.inner().to_string());
            return Checked::Invalid {
                values,
                errors,
                general: Vec::new(),
            };
        }
    };
    let issues = cfg.validate();
    if issues.is_empty() && errors.is_empty() {
        return Checked::Valid(Box::new(cfg));
    }
    let mut general = Vec::new();
    for issue in issues {
        // The backticks around key paths read as noise in a form.
        let msg = issue.to_string().replace('`', "");
        let mut placed = false;
        let mut paths = vec![field_path(issue.path()).to_owned()];
        if let ConfigIssue::Conflict { other, .. } = &issue {
            paths.push(field_path(other).to_owned());
        }
        if paths.iter().any(|p| unparsed.contains(p)) {
            continue;
        }
        for p in paths {
            if types.contains_key(&p) {
                errors.entry(p).or_default().push(msg.clone());
                placed = true;
            }
        }
        if !placed {
            general.push(msg);
        }
    }
    Checked::Invalid {
        values,
        errors,
        general,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DEMO_TOML, SMOL_DEMO_TOML, preset, presets};

    fn pairs_of(cfg: &RunConfig) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (path, v) in leaves(&cfg.to_json()) {
            match v {
                Value::Bool(false) => {}
                Value::Array(items) => {
                    out.extend(items.iter().map(|i| (path.clone(), display(i))));
                }
                other => out.push((path, display(&other))),
            }
        }
        out
    }

    #[test]
    fn every_configuration_key_is_documented_and_every_documented_key_exists() {
        let paths = leaves(&RunConfig::default().to_json());
        for p in paths.keys() {
            assert!(HELP.iter().any(|(h, _)| h == p), "{p} has no help text");
        }
        for (h, _) in HELP {
            assert!(paths.contains_key(*h), "{h} is not a configuration key");
        }
    }

    #[test]
    fn the_form_offers_the_papers_games_and_tool_use_runs() {
        let g = (preset("gpu_qwen3_games").build)();
        let t = (preset("gpu_qwen3_tool_use").build)();
        assert_eq!(g.curriculum.kinds, vec![crate::EnvKind::Game]);
        assert_eq!(t.curriculum.kinds, vec![crate::EnvKind::ToolUse]);
        assert_eq!(t.curriculum.envs_per_skill, 4, "6 skills x 4 = 24");
        assert!(
            presets().iter().all(|p| p.key != "gpu_qwen3"),
            "no preset mixes the two kinds"
        );
    }

    #[test]
    fn the_serve_demo_preset_is_the_demo_file() {
        let file = RunConfig::from_toml_str(DEMO_TOML);
        assert_eq!(file.ok(), Some((preset("tiny_serve_demo").build)()));
        let smol = RunConfig::from_toml_str(SMOL_DEMO_TOML).map_err(|e| e.to_string());
        assert_eq!(smol, Ok((preset("smol_cpu_demo").build)()));
        assert_eq!(
            (preset("smol_cpu_demo").build)().model.preset,
            "smollm2-135m"
        );
    }

    #[test]
    fn every_preset_round_trips_through_the_form() {
        for p in presets() {
            let cfg = (p.build)();
            assert!(cfg.validate().is_empty(), "{} is invalid", p.key);
            match check_fields(&pairs_of(&cfg)) {
                Checked::Valid(back) => assert_eq!(*back, cfg, "{}", p.key),
                other => panic!("{}: {other:?}", p.key),
            }
        }
    }

    #[test]
    fn vllm_urls_are_one_comma_separated_field() {
        let mut pairs = pairs_of(&RunConfig::tiny_cpu_demo());
        pairs.retain(|(k, _)| k != "vllm.urls" && k != "model.rollout");
        pairs.push(("model.rollout".into(), "vllm".into()));
        pairs.push((
            "vllm.urls".into(),
            " http://10.0.0.5:8000, http://10.0.0.6:8000 ,".into(),
        ));
        match check_fields(&pairs) {
            Checked::Valid(cfg) => assert_eq!(
                cfg.vllm.urls,
                ["http://10.0.0.5:8000", "http://10.0.0.6:8000"]
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn vllm_gpus_are_one_comma_separated_field_of_whole_numbers() {
        let with = |gpus: &str| {
            let mut pairs = pairs_of(&RunConfig::tiny_cpu_demo());
            pairs.retain(|(k, _)| !k.starts_with("vllm.") && k != "model.rollout");
            pairs.extend(
                [
                    ("model.rollout", "vllm"),
                    ("vllm.start", "2"),
                    ("vllm.port", "8300"),
                    ("vllm.threads", "0"),
                    ("vllm.kv_cache_gib", "1"),
                    ("vllm.tensor_parallel", "2"),
                    ("vllm.startup_timeout_s", "600"),
                    ("vllm.request_timeout_s", "600"),
                    ("vllm.venv", ""),
                    ("vllm.weights_dir", ""),
                    ("vllm.weight_sync", "auto"),
                    ("vllm.gpus", gpus),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            );
            check_fields(&pairs)
        };
        match with(" 1, 2,3 ,4") {
            Checked::Valid(cfg) => assert_eq!(cfg.vllm.gpus, [1, 2, 3, 4]),
            other => panic!("{other:?}"),
        }
        match with("1,two") {
            Checked::Invalid { errors, .. } => {
                let msg = errors
                    .get("vllm.gpus")
                    .map(|m| m.join(" "))
                    .unwrap_or_default();
                assert!(
                    msg.contains("whole numbers") && msg.contains("two"),
                    "{errors:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Two servers of two GPUs need four devices: the rule of spade::config, beside the field.
        match with("1,2,3") {
            Checked::Invalid { errors, .. } => {
                assert!(errors.contains_key("vllm.gpus"), "{errors:?}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn issues_land_beside_their_fields() {
        let mut pairs = pairs_of(&RunConfig::tiny_cpu_demo());
        for (k, v) in &mut pairs {
            match k.as_str() {
                "designer.plateau.low" => *v = "0.9".into(),
                "grpo.lr" => *v = "fast".into(),
                _ => {}
            }
        }
        // A type error and a range error come back together, in one round (issue 20, item 7).
        let Checked::Invalid { errors, values, .. } = check_fields(&pairs) else {
            panic!("a word is not a learning rate");
        };
        assert!(errors["grpo.lr"][0].contains("must be a number"));
        let low = errors["designer.plateau.low"].join(" ");
        assert!(low.contains("designer.plateau.low"), "{low}");
        assert_eq!(values["designer.plateau.low"], "0.9", "typed values stay");
        assert_eq!(values["grpo.lr"], "fast", "what did not parse stays too");
        assert!(
            errors
                .keys()
                .all(|k| k == "grpo.lr" || k.starts_with("designer.plateau.")),
            "nothing about the default behind grpo.lr: {errors:?}"
        );
        for (k, v) in &mut pairs {
            if k == "grpo.lr" {
                *v = "0.0001".into();
            }
        }
        let Checked::Invalid { errors, .. } = check_fields(&pairs) else {
            panic!("low above high is refused");
        };
        assert!(
            errors.contains_key("designer.plateau.low") && !errors.contains_key("grpo.lr"),
            "{errors:?}"
        );
        // No kinds at all: the checkbox group's own message.
        pairs.retain(|(k, _)| k != "curriculum.kinds");
        let Checked::Invalid { errors, .. } = check_fields(&pairs) else {
            panic!("no kinds is refused");
        };
        assert!(errors.contains_key("curriculum.kinds"), "{errors:?}");
    }

    /// The temperature rule is `spade::config`'s, so the form refuses what the worker would.
    #[test]
    fn the_form_refuses_a_trained_designer_at_another_temperature() {
        let mut pairs = pairs_of(&RunConfig::tiny_cpu_demo());
        for (k, v) in &mut pairs {
            if k == "designer.temperature" {
                *v = "0.9".into();
            }
        }
        let Checked::Invalid { errors, .. } = check_fields(&pairs) else {
            panic!("different temperatures for a trained designer are refused");
        };
        let e = errors["designer.temperature"].join(" ");
        assert!(e.contains("agent.temperature"), "{e}");
        pairs.push(("ablation.frozen_designer".into(), "true".into()));
        assert!(
            matches!(check_fields(&pairs), Checked::Valid(_)),
            "a frozen designer may sample at its own temperature"
        );
    }

    #[test]
    fn numbers_show_without_exponents() {
        assert_eq!(display(&serde_json::json!(1e-6)), "0.000001");
        assert_eq!(display(&serde_json::json!(400)), "400");
        assert_eq!(
            display(&serde_json::json!(["game", "tool_use"])),
            "game,tool_use"
        );
        assert_eq!(label_of("designer.plateau.low"), "Plateau low");
        assert_eq!(label_of("designer.ema.gamma_fast"), "EMA gamma fast");
    }
}
