//! `spade env check` / `spade env play` through the real sandbox: exit codes and output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sandbox-runner/tests/fixtures")
        .join(rel)
}

fn spade(args: &[&str]) -> Output {
    let exe = env!("CARGO_BIN_EXE_spade");
    let runner = Path::new(exe).with_file_name("spade-sandbox-runner");
    assert!(
        runner.exists(),
        "{} is missing: build the workspace (cargo build) so the runner sits next to spade",
        runner.display()
    );
    match Command::new(exe).args(args).output() {
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

#[test]
fn check_accepts_a_good_environment_with_exit_0() {
    let good = fixture("good/guess_number.py");
    let out = spade(&["env", "check", good.to_str().unwrap_or_default()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("ACCEPTED") && t.contains("GuessNumberEnv"),
        "{t}"
    );
    assert!(
        t.contains("seccomp") && t.contains("landlock"),
        "isolation layers not shown: {t}"
    );
}

#[test]
fn check_rejects_with_exit_1_and_a_machine_readable_reason() -> Result<(), serde_json::Error> {
    let bad = fixture("bad/unsolvable.py");
    let out = spade(&["env", "check", "--json", bad.to_str().unwrap_or_default()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(report["accepted"], false);
    assert_eq!(report["rejection"]["reason"], "unsolvable");
    assert_eq!(report["rejection"]["check"], "solvable");
    Ok(())
}

#[test]
fn unreadable_files_are_usage_errors_with_exit_2() {
    let out = spade(&["env", "check", "/nonexistent/env.py"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("cannot read /nonexistent/env.py"),
        "{}",
        text(&out)
    );
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("binary.py");
    std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x41]).unwrap();
    let out = spade(&["env", "check", binary.to_str().unwrap_or_default()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("not UTF-8"), "{}", text(&out));
}

#[test]
fn play_without_actions_follows_the_solution_to_a_win() -> Result<(), serde_json::Error> {
    let good = fixture("good/guess_number.py");
    let out = spade(&[
        "env",
        "play",
        "--json",
        "--seed",
        "3",
        good.to_str().unwrap_or_default(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let turns = v["turns"].as_array().cloned().unwrap_or_default();
    let last = turns.last().cloned().unwrap_or_default();
    assert_eq!(last["result"]["reward"], 1.0, "{v}");
    assert_eq!(last["result"]["terminated"], true);
    // Scripted actions are played as given.
    let out = spade(&[
        "env",
        "play",
        "--seed",
        "3",
        "--action",
        "\\boxed{50}",
        good.to_str().unwrap_or_default(),
    ]);
    assert!(text(&out).contains("50 is too"), "{}", text(&out));
    Ok(())
}

/// A rejection at a drawn seed names the seed, and `--seeds` (or `--replay REPORT.json`)
/// replays it.
#[test]
fn a_rejection_at_a_drawn_seed_replays_from_its_seeds_or_its_report() -> anyhow::Result<()> {
    let evasive = fixture("evasive/wrong_solution_elsewhere.py");
    let file = evasive.to_str().unwrap_or_default();
    let out = spade(&["env", "check", "--json", file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(report["rejection"]["reason"], "unsolvable");
    let seed = report["rejection"]["seed"].clone();
    let seeds: Vec<String> = report["seeds"]
        .as_array()
        .map(|a| a.iter().map(|s| s.to_string()).collect())
        .unwrap_or_default();
    assert_eq!(seeds.len(), 3, "{report}");
    let replay = spade(&["env", "check", "--json", "--seeds", &seeds.join(","), file]);
    let again: serde_json::Value = serde_json::from_slice(&replay.stdout)?;
    assert_eq!(again["rejection"], report["rejection"]);
    assert_eq!(again["seeds"], report["seeds"]);
    let dir = tempfile::tempdir()?;
    let saved = dir.path().join("report.json");
    std::fs::write(&saved, &out.stdout)?;
    let replay = spade(&[
        "env",
        "check",
        "--replay",
        saved.to_str().unwrap_or_default(),
        file,
    ]);
    assert_eq!(replay.status.code(), Some(1), "{}", text(&replay));
    let t = text(&replay);
    assert!(t.contains(&format!("seed: {seed}")), "{t}");
    // The spec's fixed seeds alone do not catch it.
    let fixed = spade(&["env", "check", "--drawn-seeds", "0", file]);
    assert_eq!(fixed.status.code(), Some(0), "{}", text(&fixed));
    Ok(())
}
