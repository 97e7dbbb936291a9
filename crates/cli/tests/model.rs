//! `spade model init | forward | generate`: a checkpoint made from a seed is reproducible across
//! processes, forward prints JSON logits, generate samples text, and bad input exits 2 with a
//! message that says what is wrong.

use std::path::Path;
use std::process::{Command, Output};

fn spade(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(args)
        .env("OMP_NUM_THREADS", "1")
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run spade: {e}"),
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn init(dir: &Path, seed: &str) {
    init_with(dir, seed, &[]);
}

fn init_with(dir: &Path, seed: &str, extra: &[&str]) {
    let mut args = vec![
        "model",
        "init",
        "--preset",
        "tiny",
        "--out",
        path(dir),
        "--seed",
        seed,
    ];
    args.extend_from_slice(extra);
    let out = spade(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("training a byte-level BPE tokenizer") && err.contains("wrote"),
        "{err}"
    );
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

fn logits(dir: &Path, ids: &str) -> Vec<f64> {
    let out = spade(&[
        "model",
        "forward",
        "--checkpoint",
        path(dir),
        "--ids",
        ids,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not a JSON array of floats: {e}"))
}

#[test]
fn init_is_reproducible_from_its_seed_and_forward_prints_json_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    init(&a, "5");
    init(&b, "5");
    init(&c, "6");
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        let read = |d: &Path| std::fs::read(d.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(
            read(&a) == read(&b),
            "{f} differs between two inits with seed 5"
        );
    }
    let la = logits(&a, "1,2,3");
    let vocab = serde_json::from_slice::<serde_json::Value>(
        &std::fs::read(a.join("config.json")).unwrap_or_default(),
    )
    .ok()
    .and_then(|c| c["vocab_size"].as_u64());
    assert_eq!(Some(la.len() as u64), vocab);
    assert_ne!(la, logits(&c, "1,2,3"), "seeds 5 and 6 gave the same model");
    assert_ne!(la, logits(&a, "1,2,4"), "logits ignore the input");
}

#[test]
fn generate_prints_text_and_is_deterministic_per_seed() {
    let tmp = tempfile::tempdir().unwrap();
    init(tmp.path(), "1");
    let run = |seed: &str| {
        let out = spade(&[
            "model",
            "generate",
            "--checkpoint",
            path(tmp.path()),
            "--prompt",
            "class Guess",
            "--max-new-tokens",
            "12",
            "--temperature",
            "1.0",
            "--seed",
            seed,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = run("1");
    assert!(!first.trim().is_empty());
    assert_eq!(first, run("1"));
    assert_ne!(first, run("2"));
    let chat = spade(&[
        "model",
        "generate",
        "--checkpoint",
        path(tmp.path()),
        "--prompt",
        "hi",
        "--role",
        "agent",
        "--max-new-tokens",
        "4",
    ]);
    assert_eq!(chat.status.code(), Some(0), "{}", stderr(&chat));
}

#[test]
fn bad_input_exits_2_with_a_precise_message() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "model",
                "forward",
                "--checkpoint",
                path(&missing),
                "--ids",
                "1",
            ],
            "config.json",
        ),
        (
            vec!["model", "init", "--preset", "huge", "--out", path(&missing)],
            "unknown preset `huge`",
        ),
    ];
    for (args, want) in cases {
        let out = spade(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
    init(tmp.path(), "0");
    let dir = path(tmp.path());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["model", "forward", "--checkpoint", dir, "--ids", "1,x"],
            "`x` is not a token id",
        ),
        (
            vec!["model", "forward", "--checkpoint", dir, "--ids", "1,999999"],
            "token id 999999 outside the vocabulary",
        ),
        (
            vec![
                "model",
                "generate",
                "--checkpoint",
                dir,
                "--prompt",
                "a",
                "--temperature=-1",
            ],
            "--temperature must be >= 0",
        ),
        (
            vec!["model", "init", "--out", dir],
            "already holds a checkpoint",
        ),
    ];
    for (args, want) in cases {
        let out = spade(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
    // A config naming an architecture the policy does not implement.
    let cfg = tmp.path().join("config.json");
    let text = std::fs::read_to_string(&cfg)
        .unwrap_or_default()
        .replace("\"qwen3\"", "\"mistral\"")
        .replace("Qwen3ForCausalLM", "MistralForCausalLM");
    std::fs::write(&cfg, text).unwrap();
    let out = spade(&["model", "forward", "--checkpoint", dir, "--ids", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unsupported architecture"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_memory_plan_says_which_cards_hold_a_shape_on_how_many_ranks() {
    let o = spade(&[
        "model",
        "plan",
        "--shape",
        "qwen3-4b",
        "--ranks",
        "1",
        "--ranks",
        "8",
        "--markdown",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("| qwen3-4b"))
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    // One 80 GB card cannot hold the 4B recipe (84.3 GiB before the cache); a rank of eight,
    // with an eighth of the optimizer state, can, and with ZeRO-3 (an eighth of the gradients
    // and one layer whole at a time during the update, whole weights only for the rollouts)
    // in less than half of it: its update's 21.99 GiB is the larger of its two phases.
    assert!(
        rows[0].contains("| 1 | - | 84.26 GiB | does not fit"),
        "{}",
        rows[0]
    );
    assert!(
        rows[1].contains("| 8 | 2 | 46.85 GiB | fits"),
        "{}",
        rows[1]
    );
    assert!(
        rows[2].contains("| 8 | 3 | 21.99 GiB | fits"),
        "{}",
        rows[2]
    );
    let bad = spade(&["model", "plan", "--gpu", "H100"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("expected NAME=MIB"),
        "{}",
        stderr(&bad)
    );
    let bad = spade(&["model", "plan", "--zero-stage", "1"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("--zero-stage 1: 2 or 3"),
        "{}",
        stderr(&bad)
    );
}

/// `spade model bench --ranks 2` runs two Gloo ranks of the same step and says where each
/// rank's collective time went: ZeRO-3's layer broadcasts and reduces (started beside the
/// compute and waited for), ZeRO-2's reduce-scatter and all-gather.
#[test]
fn the_ranks_bench_reports_each_ranks_time_in_each_collective() {
    for (stage, ops) in [
        ("3", &["all_gather", "broadcast", "reduce", "sum"][..]),
        ("2", &["all_gather", "reduce_scatter", "sum"][..]),
    ] {
        let o = spade(&[
            "model",
            "bench",
            "--shape",
            "tiny",
            "--tokens",
            "64",
            "--seq-len",
            "17",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--ranks",
            "2",
            "--zero-stage",
            stage,
            "--json",
        ]);
        assert!(o.status.success(), "ZeRO-{stage}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        let v: serde_json::Value = out
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("ZeRO-{stage}: no JSON in {out}"));
        let run = &v["ranks_run"];
        let by_op = run["rank_collective_by_op_s"]
            .as_array()
            .unwrap_or_else(|| panic!("ZeRO-{stage}: {v}"));
        assert_eq!(by_op.len(), 2, "{v}");
        for (rank, r) in by_op.iter().enumerate() {
            let names: Vec<&str> = r
                .as_object()
                .map(|m| m.keys().map(String::as_str).collect())
                .unwrap_or_default();
            assert_eq!(names, ops, "ZeRO-{stage}, rank {rank}: {v}");
            let total: f64 = r
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, s)| s.as_f64())
                .sum();
            let reported = run["rank_collective_s"][rank].as_f64().unwrap_or(-1.0);
            assert!(
                total > 0.0 && (total - reported).abs() < 1e-6,
                "ZeRO-{stage}, rank {rank}: {total} against {reported}"
            );
        }
        assert!(v["per_rank_ratio"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    }
}

#[test]
fn the_seed_envs_bench_refuses_to_time_plays_that_all_failed() {
    let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/../../envs/seed");
    let out = Command::new(env!("CARGO_BIN_EXE_spade"))
        .args([
            "model",
            "bench-rollout",
            "--path",
            "seed-envs",
            "--seeds",
            seeds,
            "--envs",
            "2",
            "--plays",
            "2",
        ])
        .env("OMP_NUM_THREADS", "1")
        .env("SPADE_SANDBOX_RUNNER", "/nonexistent/spade-sandbox-runner")
        .output()
        .unwrap_or_else(|e| panic!("cannot run spade: {e}"));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("all 4 plays failed, so there is nothing to time")
            && err.contains("cannot start the sandbox runner"),
        "{err}"
    );
    // The decode window is bounded.
    let out = spade(&["model", "bench-rollout", "--decode-window", "65"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--decode-window"), "{}", stderr(&out));
}

/// `--bf16` writes the same model in half the bytes, says so in config.json, and loads back
/// with logits within bfloat16's rounding of the float32 checkpoint's.
#[test]
fn init_in_bf16_halves_the_weights_and_loads_back_close_to_float32() {
    let tmp = tempfile::tempdir().unwrap();
    let (f32_dir, bf16_dir) = (tmp.path().join("f32"), tmp.path().join("bf16"));
    init(&f32_dir, "5");
    init_with(&bf16_dir, "5", &["--bf16"]);
    let size = |d: &Path| {
        std::fs::metadata(d.join("model.safetensors"))
            .unwrap()
            .len()
    };
    let (full, half) = (size(&f32_dir), size(&bf16_dir));
    // The safetensors header is the same size for both; the data halves.
    assert!(
        half * 2 > full && half * 2 < full + 64 * 1024,
        "float32 {full} bytes, bfloat16 {half} bytes"
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bf16_dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["torch_dtype"], "bfloat16");
    let (a, b) = (logits(&f32_dir, "1,2,3"), logits(&bf16_dir, "1,2,3"));
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(0f64, |m, x| m.max(x.abs()));
    let worst = a
        .iter()
        .zip(&b)
        .fold(0f64, |m, (x, y)| m.max((x - y).abs()));
    assert!(
        worst > 0.0 && worst < 0.05 * scale.max(1.0),
        "largest logit difference {worst} (largest logit {scale})"
    );
}
