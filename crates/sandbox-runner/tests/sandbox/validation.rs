//! Validation end to end: the seed library is accepted, and each broken fixture is rejected
//! with the reason its file name states.

use super::{pool_with, python_files, workspace_root};
use spade_sandbox::validate::{Check, Reason, ValidationConfig};
use spade_sandbox::{EnvKind, Pool, validate};
use std::path::Path;
use std::time::Duration;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn quick() -> ValidationConfig {
    ValidationConfig {
        budget: Duration::from_secs(30),
        call_timeout: Duration::from_secs(3),
        kind: None,
    }
}

#[test]
fn a_good_game_is_accepted_with_every_check_passed() {
    let pool = pool_with(1, 0, Duration::from_secs(20));
    let r = validate(
        &pool,
        &read(&fixtures().join("good/guess_number.py")),
        &quick(),
    );
    assert!(r.accepted, "{r:#?}");
    assert_eq!(r.class_name.as_deref(), Some("GuessNumberEnv"));
    assert_eq!(r.kind, Some(EnvKind::Game));
    assert_eq!(r.max_turns, Some(12));
    let checks: Vec<Check> = r.checks.iter().map(|c| c.check).collect();
    assert_eq!(
        checks,
        [
            Check::Parse,
            Check::Probe,
            Check::NotPreSatisfied,
            Check::Solvable,
            Check::Deterministic,
            Check::Limits
        ]
    );
    assert_eq!(r.solution_turns.len(), 3);
    assert!(
        r.solution_turns.iter().all(|t| (1..=7).contains(t)),
        "binary search needs at most 7 guesses: {:?}",
        r.solution_turns
    );
}

#[test]
fn each_broken_fixture_is_rejected_for_the_reason_it_is_named_after() {
    let pool = pool_with(2, 1, Duration::from_secs(20));
    let mut failures = Vec::new();
    for path in python_files(&fixtures().join("bad")) {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let want: Reason = match stem.as_str() {
            // Tampering with builtins changes nothing: the str reward is still caught.
            "tampered_builtins" | "bad_flag_type" => Reason::BadReturnType,
            other => match serde_json::from_value(serde_json::Value::String(other.to_owned())) {
                Ok(r) => r,
                Err(_) => panic!("fixture {stem} is not named after a Reason"),
            },
        };
        let r = validate(&pool, &read(&path), &quick());
        let got = r.rejection.as_ref().map(|x| x.reason);
        if r.accepted || got != Some(want) {
            failures.push(format!(
                "{stem}: want {want:?}, got {got:?} ({:?})",
                r.rejection
            ));
        }
        if let Some(rej) = &r.rejection {
            assert!(
                !rej.message.trim().is_empty(),
                "{stem}: rejection without a message"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(pool.live() <= 2);
}

#[test]
fn enormous_non_utf8_and_empty_sources_are_rejections_not_crashes() {
    let pool = pool_with(1, 0, Duration::from_secs(20));
    for (source, want) in [
        (String::new(), Reason::NoEnvClass),
        ("\u{0}".to_owned(), Reason::SyntaxError),
        (
            format!("x = 1\n{}", "# padding\n".repeat(400_000)),
            Reason::NoEnvClass,
        ),
        (
            "class AEnv: pass\nclass BEnv: pass\n".to_owned(),
            Reason::MultipleEnvClasses,
        ),
        (
            "class AEnv:\n    def __init__(self):\n        raise ValueError('nope')\n".to_owned(),
            Reason::LoadError,
        ),
        (
            "class AEnv:\n    def reset(self, seed=None):\n        return 'obs'\n".to_owned(),
            Reason::BadReturnType,
        ),
    ] {
        let r = validate(&pool, &source, &quick());
        assert_eq!(r.rejection.as_ref().map(|x| x.reason), Some(want), "{r:#?}");
    }
}

/// The seed library (envs/seed) is the warm-start corpus and the fixed-env pool: all of it
/// must pass validation.
#[test]
fn every_seed_environment_is_accepted() {
    let dir = workspace_root().join("envs/seed");
    let files = python_files(&dir);
    assert!(
        files.len() >= 30,
        "expected at least 30 seed environments in {}, found {}",
        dir.display(),
        files.len()
    );
    let pool: Pool = pool_with(2, 2, Duration::from_secs(20));
    let cfg = ValidationConfig::default();
    let mut rejected = Vec::new();
    let (mut games, mut tools) = (0, 0);
    for f in &files {
        let r = validate(&pool, &read(f), &cfg);
        match (r.accepted, r.kind) {
            (true, Some(EnvKind::Game)) => games += 1,
            (true, Some(EnvKind::ToolUse)) => tools += 1,
            _ => rejected.push(format!("{}: {:?}", f.display(), r.rejection)),
        }
    }
    assert!(rejected.is_empty(), "{}", rejected.join("\n"));
    assert!(
        games >= 24 && tools >= 6,
        "{games} games, {tools} tool-use environments"
    );
}

/// The Gymnasium adapter (envs/python/spade_gym.py) passes gymnasium's own env_checker for
/// every seed environment, and the checker does catch a broken one.
#[test]
fn the_gymnasium_adapter_passes_check_env() {
    let root = workspace_root();
    let python = root.join(".deps/venv/bin/python3");
    let run = |args: &[std::path::PathBuf]| {
        std::process::Command::new(&python)
            .arg(root.join("envs/check_gym.py"))
            .args(args)
            .env("OPENBLAS_NUM_THREADS", "1")
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {}: {e} (scripts/setup makes the venv)",
                    python.display()
                )
            })
    };
    let out = run(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("30 passed, 0 failed")
            || text
                .lines()
                .last()
                .is_some_and(|l| l.ends_with(" passed, 0 failed")),
        "{text}"
    );
    let bad = run(&[fixtures().join("bad/observation_too_long.py")]);
    assert_eq!(
        bad.status.code(),
        Some(1),
        "check_env accepted a 38,000-character observation"
    );
}
