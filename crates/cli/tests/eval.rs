//! `spade eval` end to end: a tiny model (`spade model init --preset tiny`) is evaluated on a
//! small limit of each suite kind through the real sandbox, the results are in range and carry
//! their BenchmarkResult messages, and usage errors exit 2 with a precise message. Short replies
//! and single-thread libtorch keep each test well under a minute on 2 cores.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn spade(args: &[&str]) -> Output {
    let exe = env!("CARGO_BIN_EXE_spade");
    let runner = Path::new(exe).with_file_name("spade-sandbox-runner");
    assert!(
        runner.exists(),
        "{} is missing: build the workspace (cargo build) so the runner sits next to spade",
        runner.display()
    );
    match Command::new(exe)
        .args(args)
        .env("OMP_NUM_THREADS", "1")
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run spade: {e}"),
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// A tiny checkpoint in `dir/tiny`.
fn tiny(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("tiny");
    let o = spade(&["model", "init", "--preset", "tiny", "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    out
}

/// Runs an evaluation with short replies and returns its JSON (also checks --out).
fn eval_json(dir: &Path, checkpoint: &Path, suite: &str, extra: &[&str]) -> Value {
    let out_file = dir.join("result.json");
    let mut args = vec![
        "eval",
        "--checkpoint",
        s(checkpoint),
        "--suite",
        suite,
        "--max-new-tokens",
        "8",
        "--json",
        "--items",
        "--out",
        s(&out_file),
    ];
    args.extend_from_slice(extra);
    let o = spade(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        o.stderr.is_empty(),
        "--json shows no progress bar: {}",
        text(&o)
    );
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o)));
    let written = std::fs::read(&out_file).unwrap_or_else(|e| panic!("--out: {e}"));
    assert_eq!(
        serde_json::from_slice::<Value>(&written).ok(),
        Some(v.clone())
    );
    v
}

/// Every task ran, has `n` items with scores in [0, 1], and the messages match the tasks.
fn check_in_range(v: &Value, tasks: usize, n: u64) {
    let ts = v["tasks"].as_array().cloned().unwrap_or_default();
    assert_eq!(ts.len(), tasks, "{v}");
    for t in &ts {
        assert!(t.get("error").is_none(), "task failed: {t}");
        assert_eq!(t["n"].as_u64(), Some(n), "{t}");
        let mean = t["mean"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&mean), "{t}");
        for item in t["items"].as_array().into_iter().flatten() {
            let score = item["score"].as_f64().unwrap_or(-1.0);
            assert!((0.0..=1.0).contains(&score), "{item}");
        }
    }
    let agg = v["aggregate"]["mean"].as_f64().unwrap_or(-1.0);
    assert!((0.0..=1.0).contains(&agg), "{v}");
    assert_eq!(v["aggregate"]["n"].as_u64(), Some(tasks as u64 * n));
    let msgs = v["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(msgs.len(), tasks + 1, "one per task plus the aggregate");
    for m in &msgs {
        assert_eq!(m["kind"], "benchmark_result", "{m}");
        assert_eq!(m["suite"], v["suite"], "{m}");
    }
    assert_eq!(msgs[tasks]["task"], "all");
}

#[test]
fn reasoning_gym_evaluation_completes_for_a_tiny_model() {
    let dir = tempdir();
    let ckpt = tiny(dir.path());
    let v = eval_json(
        dir.path(),
        &ckpt,
        "rg-logic",
        &["--limit", "2", "--seed", "3"],
    );
    check_in_range(&v, 6, 2);
    assert_eq!(v["suite"], "rg-logic");
    let names: Vec<&str> = v["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["task"].as_str())
        .collect();
    assert!(names.contains(&"logic/knights_knaves"), "{names:?}");
}

#[test]
fn qa_evaluation_completes_and_groups_tasks() {
    let dir = tempdir();
    let ckpt = tiny(dir.path());
    let qa = dir.path().join("set.jsonl");
    std::fs::write(
        &qa,
        "{\"question\": \"What is 1/2 + 0?\", \"answer\": \"\\\\frac{1}{2}\"}\n\n\
         {\"question\": \"What is 6*7?\", \"answer\": 42}\n\
         {\"question\": \"2+2?\", \"answer\": \"4\", \"task\": \"easy\"}\n\
         {\"question\": \"3+3?\", \"answer\": \"6\", \"task\": \"easy\"}\n",
    )
    .unwrap();
    let v = eval_json(dir.path(), &ckpt, &format!("qa:{}", s(&qa)), &[]);
    check_in_range(&v, 2, 2);
    assert_eq!(v["tasks"][0]["task"], "set");
    assert_eq!(v["tasks"][1]["task"], "easy");
}

/// The orders the options of every (question, sample) were shown in.
fn details(v: &Value) -> Vec<String> {
    v["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["items"].as_array().cloned().unwrap_or_default())
        .map(|i| i["detail"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn multiple_choice_samples_k_times_with_recorded_orders_and_pass_at_k() {
    let dir = tempdir();
    let ckpt = tiny(dir.path());
    let mc = dir.path().join("gpqa.jsonl");
    std::fs::write(
        &mc,
        "{\"question\": \"Which is a noble gas?\", \"options\": [\"neon\", \"iron\", \"sodium\", \"carbon\"], \"answer\": \"neon\"}\n\
         {\"question\": \"2+2?\", \"options\": [\"3\", \"4\", \"5\"], \"answer\": \"B\"}\n",
    )
    .unwrap();
    let suite = format!("mc:{}", s(&mc));
    let args = ["--samples", "3", "--temperature", "0.8", "--seed", "5"];
    let v = eval_json(dir.path(), &ckpt, &suite, &args);
    check_in_range(&v, 1, 2);
    let t = &v["tasks"][0];
    assert_eq!(
        (t["task"].as_str(), t["samples"].as_u64()),
        (Some("gpqa"), Some(3))
    );
    assert_eq!(t["items"].as_array().map(Vec::len), Some(6), "{t}");
    let ks: Vec<u64> = t["pass_at_k"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["k"].as_u64())
        .collect();
    assert_eq!(ks, vec![1, 2, 3], "{t}");
    // The order each sample saw is recorded, names the gold letter, and the seed fixes it.
    let first = details(&v);
    for d in &first {
        assert!(d.starts_with("order ") && d.contains(", gold "), "{d}");
    }
    let orders: std::collections::HashSet<&String> = first.iter().collect();
    assert!(orders.len() > 1, "samples saw different orders: {first:?}");
    assert_eq!(details(&eval_json(dir.path(), &ckpt, &suite, &args)), first);
    assert_eq!(v["settings"]["samples"], 3);
}

#[test]
fn code_suites_run_the_models_programs_in_the_sandbox() {
    let dir = tempdir();
    let ckpt = tiny(dir.path());
    let v = eval_json(dir.path(), &ckpt, "humaneval", &["--limit", "2"]);
    check_in_range(&v, 1, 2);
    assert_eq!(v["tasks"][0]["task"], "humaneval");
    // 8 tokens of an untrained model are not a program that passes HumanEval's checks; each
    // failure says why.
    assert_eq!(v["tasks"][0]["mean"].as_f64(), Some(0.0), "{v}");
    for d in details(&v) {
        assert!(!d.is_empty(), "a failed program says why");
    }
    let lcb = dir.path().join("lcb.jsonl");
    std::fs::write(
        &lcb,
        "{\"question\": \"Print the sum of two integers.\", \"tests\": [{\"input\": \"1 2\\n\", \"output\": \"3\\n\"}]}\n",
    )
    .unwrap();
    let v = eval_json(dir.path(), &ckpt, &format!("code:{}", s(&lcb)), &[]);
    check_in_range(&v, 1, 1);
    assert_eq!(v["tasks"][0]["task"], "lcb");
}

const ALWAYS_WIN: &str = r#"
class AlwaysWinEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns
    def reset(self, seed=None):
        return "Say anything.", {}
    def step(self, action):
        return "You win.", 1.0, True, False, {}
    def solution(self):
        return "1"
    def close(self):
        pass
"#;

const NEVER_WIN: &str = r#"
class NeverWinEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns
        self.turn = 0
    def reset(self, seed=None):
        self.turn = 0
        return "Nothing you say wins.", {}
    def step(self, action):
        self.turn += 1
        return "No.", 0.0, False, self.turn >= self.max_turns, {}
    def solution(self):
        return "1"
    def close(self):
        pass
"#;

#[test]
fn environment_evaluation_counts_wins_through_the_sandbox() {
    let dir = tempdir();
    let ckpt = tiny(dir.path());
    let pool = dir.path().join("pool");
    std::fs::create_dir_all(pool.join("games")).unwrap();
    let seed_env = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../envs/seed/games/optimization/coin_change.py");
    std::fs::copy(&seed_env, pool.join("games/coin_change.py")).unwrap();
    std::fs::write(pool.join("always_win.py"), ALWAYS_WIN).unwrap();
    std::fs::write(pool.join("never_win.py"), NEVER_WIN).unwrap();
    let suite = format!("envs:{}", s(&pool));
    let v = eval_json(
        dir.path(),
        &ckpt,
        &suite,
        &[
            "--episodes",
            "2",
            "--max-turns",
            "2",
            "--temperature",
            "0.6",
        ],
    );
    check_in_range(&v, 3, 2);
    let score = |name: &str| {
        v["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["task"] == name)
            .and_then(|t| t["mean"].as_f64())
    };
    assert_eq!(score("always_win"), Some(1.0), "{v}");
    assert_eq!(score("never_win"), Some(0.0), "{v}");
    assert!(score("games/coin_change").is_some(), "{v}");
}

#[test]
fn usage_errors_exit_2_before_the_model_loads() {
    let dir = tempdir();
    let missing = dir.path().join("nope");
    let o = spade(&["eval", "--checkpoint", s(&missing), "--suite", "rg-logic"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no such directory"), "{}", text(&o));

    let o = spade(&["eval", "--checkpoint", s(dir.path()), "--suite", "rg-logic"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no config.json"), "{}", text(&o));

    let o = spade(&["eval", "--checkpoint", s(dir.path()), "--suite", "gsm8k"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("unknown suite `gsm8k`") && text(&o).contains("rg-hard"),
        "{}",
        text(&o)
    );

    // A checkpoint that exists, so the QA file is what fails.
    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    let qa = dir.path().join("bad.jsonl");
    std::fs::write(
        &qa,
        "{\"question\": \"q\", \"answer\": \"1\"}\n{\"question\": \"q2\"}\n",
    )
    .unwrap();
    let suite = format!("qa:{}", s(&qa));
    let o = spade(&["eval", "--checkpoint", s(dir.path()), "--suite", &suite]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("bad.jsonl:2: missing field `answer`"),
        "{}",
        text(&o)
    );

    let mc = dir.path().join("mc.jsonl");
    std::fs::write(
        &mc,
        "{\"question\": \"q\", \"options\": [\"a\", \"b\"], \"answer\": \"C\"}\n",
    )
    .unwrap();
    let suite = format!("mc:{}", s(&mc));
    let o = spade(&["eval", "--checkpoint", s(dir.path()), "--suite", &suite]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("mc.jsonl:1: field `answer` must be a letter A-B"),
        "{}",
        text(&o)
    );
    let code = dir.path().join("code.jsonl");
    std::fs::write(&code, "{\"question\": \"q\", \"tests\": []}\n").unwrap();
    let suite = format!("code:{}", s(&code));
    let o = spade(&["eval", "--checkpoint", s(dir.path()), "--suite", &suite]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("code.jsonl:1: field `tests` is empty"),
        "{}",
        text(&o)
    );

    // k samples of a greedy reply are one reply k times: refused, with the fix.
    let o = spade(&[
        "eval",
        "--checkpoint",
        s(dir.path()),
        "--suite",
        "rg-logic",
        "--samples",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--samples 4 at --temperature 0"),
        "{}",
        text(&o)
    );
}
