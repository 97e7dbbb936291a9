//! BFCL v4 multi-turn verdicts against BFCL's own checker: for the first 20 entries of each
//! category (`SPADE_BFCL_ENTRIES=200`: all of them), the ground truth played through our environment in the sandbox scores 1, and two
//! perturbations of it (a call left out, an argument changed) get exactly the verdicts that
//! `bfcl_eval`'s `multi_turn_checker` (run from the installed wheel in the venv's Python) gives
//! the same decoded calls, entry by entry. Malformed data is refused with file, line and field.

use crate::python_json;
use spade_eval::EvalError;
use spade_eval::bfcl::{self, Category, Entry};
use spade_sandbox::{Pool, PoolConfig};

/// Entries per category: 20 (the issue's check), or `SPADE_BFCL_ENTRIES` (200 is all of them).
fn entries_per_category() -> usize {
    std::env::var("SPADE_BFCL_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(20)
}

fn bfcl_pool() -> Pool {
    let path = spade_sandbox::default_runner_path();
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p spade-sandbox-runner`",
        path.display()
    );
    let runner = bfcl::runner_config(&spade_eval::runner_config(path));
    let mut cfg = PoolConfig::new(runner);
    cfg.max_runners = 2;
    cfg.warm = 1;
    Pool::new(cfg)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Play {
    GroundTruth,
    MissingCall,
    WrongArgument,
}

/// Changes the first argument of the first call in `reply` that has one; None if no call has.
fn change_an_argument(reply: &str) -> Option<String> {
    let mut lines: Vec<String> = reply.lines().map(str::to_string).collect();
    for line in &mut lines {
        let Some(body) = line
            .strip_prefix("<tool_call>")
            .and_then(|l| l.strip_suffix("</tool_call>"))
        else {
            continue;
        };
        let mut call: serde_json::Value = serde_json::from_str(body).ok()?;
        let Some((_, value)) = call["arguments"]
            .as_object_mut()
            .and_then(|a| a.iter_mut().next())
        else {
            continue;
        };
        *value = match value.take() {
            serde_json::Value::String(s) => serde_json::Value::String(format!("{s}_x")),
            serde_json::Value::Bool(b) => serde_json::Value::Bool(!b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => (i + 1).into(),
                None => (n.as_f64().unwrap_or(0.0) + 1.5).into(),
            },
            serde_json::Value::Array(mut a) => {
                a.push("x".into());
                serde_json::Value::Array(a)
            }
            other => serde_json::json!({ "x": other }),
        };
        *line = format!("<tool_call>{call}</tool_call>");
        return Some(lines.join("\n"));
    }
    None
}

/// Plays `entry` with the environment's own ground-truth replies, perturbed once as `play`
/// says (in the first reply with calls that allows it); returns (score, decoded calls).
fn play(pool: &Pool, entry: &Entry, play: Play) -> (f64, serde_json::Value) {
    let mut session = pool
        .load(&entry.env.source, None, None)
        .unwrap_or_else(|e| panic!("{}: load: {e}", entry.id));
    session
        .reset(Some(0))
        .unwrap_or_else(|e| panic!("{}: reset: {e}", entry.id));
    let mut perturbed = play == Play::GroundTruth;
    for _ in 0..session.max_turns {
        let mut reply = session
            .solution()
            .unwrap_or_else(|e| panic!("{}: solution: {e}", entry.id));
        if !perturbed && reply.contains("<tool_call>") {
            match play {
                Play::MissingCall => {
                    let mut lines: Vec<&str> = reply.lines().collect();
                    lines.pop();
                    reply = lines.join("\n");
                    perturbed = true;
                }
                Play::WrongArgument => {
                    if let Some(r) = change_an_argument(&reply) {
                        reply = r;
                        perturbed = true;
                    }
                }
                Play::GroundTruth => {}
            }
        }
        let r = session
            .step(&reply)
            .unwrap_or_else(|e| panic!("{}: step: {e}", entry.id));
        if r.terminated || r.truncated {
            assert!(perturbed, "{}: {play:?} found nothing to perturb", entry.id);
            return (r.reward, r.info["decoded"].clone());
        }
    }
    panic!("{}: the episode did not end", entry.id);
}

/// BFCL's own verdicts for `plays` ([{category, id, decoded, model}]), from the wheel's checker.
const BFCL_CHECKER: &str = r#"
import json, os, sys
import bfcl_eval
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
data = os.path.join(os.path.dirname(bfcl_eval.__file__), "data")
def read(path):
    with open(path) as f:
        return {e["id"]: e for e in map(json.loads, filter(str.strip, f))}
cache = {}
out = []
for p in json.load(sys.stdin):
    name = "BFCL_v4_multi_turn_%s.json" % p["category"]
    if name not in cache:
        cache[name] = (read(os.path.join(data, name)), read(os.path.join(data, "possible_answer", name)))
    entries, answers = cache[name]
    # BFCL keeps backend instances in globals per (model name, entry): every play its own name.
    r = multi_turn_checker(p["decoded"], answers[p["id"]]["ground_truth"], entries[p["id"]],
                           "multi_turn_" + p["category"], p["model"])
    out.append(bool(r["valid"]))
print(json.dumps(out))
"#;

#[test]
fn verdicts_match_bfcls_checker_on_twenty_entries_of_each_category() {
    let pool = bfcl_pool();
    let per_category = entries_per_category();
    let mut plays = vec![];
    let mut ours = vec![];
    for category in Category::ALL {
        let entries = bfcl::load(&pool, category).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(entries.len(), 200, "{category:?} has 200 entries");
        for entry in entries.iter().take(per_category) {
            for (k, p) in [Play::GroundTruth, Play::MissingCall, Play::WrongArgument]
                .into_iter()
                .enumerate()
            {
                let (score, decoded) = play(&pool, entry, p);
                if p == Play::GroundTruth {
                    assert_eq!(score, 1.0, "{}: the ground truth must score 1", entry.id);
                }
                plays.push(serde_json::json!({
                    "category": category.file_name(),
                    "id": entry.id,
                    "decoded": decoded,
                    "model": format!("spade_{k}"),
                }));
                ours.push((entry.id.clone(), p, score == 1.0));
            }
        }
    }
    let theirs = python_json(BFCL_CHECKER, &serde_json::Value::Array(plays));
    let theirs: Vec<bool> = serde_json::from_value(theirs).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(theirs.len(), ours.len());
    let disagree: Vec<String> = ours
        .iter()
        .zip(&theirs)
        .filter(|((_, _, a), b)| a != *b)
        .map(|((id, p, a), b)| format!("{id} {p:?}: ours {a}, BFCL {b}"))
        .collect();
    assert!(
        disagree.is_empty(),
        "verdicts differ:\n{}",
        disagree.join("\n")
    );
    for p in [Play::MissingCall, Play::WrongArgument] {
        let zeros = ours.iter().filter(|(_, q, v)| *q == p && !v).count();
        let n = ours.iter().filter(|(_, q, _)| *q == p).count();
        eprintln!("{p:?}: {zeros} of {n} score 0, as BFCL's checker says");
        // A changed argument can leave state and results as they were (e.g. a read-only call
        // whose flag does not matter); BFCL then passes it too, as compared above.
        assert!(
            zeros >= 3 * n / 4,
            "{p:?} scored 0 only {zeros} times of {n}"
        );
    }
}

#[test]
fn malformed_data_is_refused_with_file_line_and_field() {
    let pool = bfcl_pool();
    let questions = [
        r#"{"id": "multi_turn_base_0", "question": [[{"role": "user", "content": "hi"}]], "involved_classes": ["Nope"]}"#,
        r#"{"id": "multi_turn_base_1", "question": "q", "involved_classes": ["MathAPI"]}"#,
        "not json",
    ]
    .join("\n");
    let answers = r#"{"id": "multi_turn_base_0", "ground_truth": [["os.system('ls')"]]}"#;
    let err = match bfcl::load_texts(&pool, Category::Base, &questions, answers) {
        Ok(_) => panic!("malformed BFCL data was accepted"),
        Err(e) => e,
    };
    assert!(matches!(err, EvalError::MalformedData { .. }), "{err}");
    let msg = err.to_string();
    for want in [
        "possible_answer/BFCL_v4_multi_turn_base.json:1: ground_truth[0]: \"os.system('ls')\": not a call of a plain function name",
        "BFCL_v4_multi_turn_base.json:1: involved_classes: expected some of",
        "BFCL_v4_multi_turn_base.json:2: question: expected a list of turns",
        "BFCL_v4_multi_turn_base.json:3: not JSON",
    ] {
        assert!(msg.contains(want), "missing {want:?} in:\n{msg}");
    }
}
