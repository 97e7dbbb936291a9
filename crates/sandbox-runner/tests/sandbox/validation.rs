//! Validation end to end: the seed library is accepted, each broken fixture is rejected with
//! the reason its file name states, and each evasive fixture (one that behaves only where the
//! spec's fixed checks look) passes the fixed checks but is rejected at the drawn seeds, for its
//! own reason, reproducibly from the report's seeds.

use super::{pool_with, python_files, quick, workspace_root};
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
            Check::FreshRunner,
            Check::Limits
        ]
    );
    assert_eq!(
        r.seeds.len(),
        3,
        "three seeds drawn by default: {:?}",
        r.seeds
    );
    let again = validate(
        &pool,
        &read(&fixtures().join("good/guess_number.py")),
        &quick(),
    );
    assert!(again.accepted, "{again:#?}");
    assert_ne!(r.seeds, again.seeds, "two validations drew the same seeds");
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

/// Each evasive fixture, what catches it and why.
const EVASIONS: [(&str, Check, Reason); 13] = [
    (
        "wins_any_answer_elsewhere",
        Check::NotPreSatisfied,
        Reason::PreSatisfied,
    ),
    (
        "wins_unless_probe_action",
        Check::NotPreSatisfied,
        Reason::PreSatisfied,
    ),
    (
        "wrong_solution_elsewhere",
        Check::Solvable,
        Reason::Unsolvable,
    ),
    ("raises_elsewhere", Check::Probe, Reason::Exception),
    (
        "reward_out_of_range_elsewhere",
        Check::Probe,
        Reason::RewardOutOfRange,
    ),
    (
        "nondeterministic_elsewhere",
        Check::Deterministic,
        Reason::Nondeterministic,
    ),
    (
        "huge_observation_elsewhere",
        Check::Probe,
        Reason::ObservationTooLong,
    ),
    ("bad_type_elsewhere", Check::Probe, Reason::BadReturnType),
    ("hangs_elsewhere", Check::Probe, Reason::Timeout),
    ("crashes_elsewhere", Check::Probe, Reason::RunnerCrashed),
    (
        "floods_scratch_elsewhere",
        Check::Probe,
        Reason::ScratchLimit,
    ),
    (
        "plays_differently_from_validation",
        Check::FreshRunner,
        Reason::Nondeterministic,
    ),
    (
        "criteria_pre_satisfied_elsewhere",
        Check::NotPreSatisfied,
        Reason::CriteriaPreSatisfied,
    ),
];

#[test]
fn each_evasion_passes_the_fixed_checks_and_is_rejected_at_drawn_seeds_reproducibly() {
    let pool = pool_with(2, 1, Duration::from_secs(20));
    let files = python_files(&fixtures().join("evasive"));
    assert_eq!(
        files.len(),
        EVASIONS.len(),
        "one table row per evasive fixture"
    );
    let mut failures = Vec::new();
    for (name, check, reason) in EVASIONS {
        let source = read(&fixtures().join(format!("evasive/{name}.py")));
        // The spec's fixed seeds and actions alone (what validation did before) accept it.
        let fixed_only = ValidationConfig {
            drawn_seeds: 0,
            ..quick()
        };
        let r = validate(&pool, &source, &fixed_only);
        if !r.accepted {
            failures.push(format!(
                "{name}: the fixed checks already reject it: {:?}",
                r.rejection
            ));
            continue;
        }
        let r = validate(&pool, &source, &quick());
        let Some(rej) = r.rejection.clone() else {
            failures.push(format!("{name}: accepted with drawn seeds {:?}", r.seeds));
            continue;
        };
        if (rej.check, rej.reason) != (check, reason) {
            failures.push(format!("{name}: want {check:?}/{reason:?}, got {rej:?}"));
            continue;
        }
        if !rej.seed.is_some_and(|s| r.seeds.contains(&s)) {
            failures.push(format!(
                "{name}: rejected at {:?}, not a drawn seed of {:?}",
                rej.seed, r.seeds
            ));
        }
        if !rej
            .message
            .contains(&format!("seed {}", rej.seed.unwrap_or(-1)))
        {
            failures.push(format!(
                "{name}: the message does not name the seed: {}",
                rej.message
            ));
        }
        // Replaying the report's seeds reproduces the rejection.
        let replay = ValidationConfig {
            seeds: Some(r.seeds.clone()),
            ..quick()
        };
        let again = validate(&pool, &source, &replay);
        let got = again.rejection.map(|x| (x.check, x.reason, x.seed));
        if got != Some((rej.check, rej.reason, rej.seed)) || again.seeds != r.seeds {
            failures.push(format!("{name}: replay gave {got:?}, first {rej:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A rejection read back from a report's JSON replays with the seeds it names.
#[test]
fn a_rejection_replays_from_the_report_json() -> Result<(), serde_json::Error> {
    let pool = pool_with(2, 1, Duration::from_secs(20));
    let source = read(&fixtures().join("evasive/wrong_solution_elsewhere.py"));
    let first = validate(&pool, &source, &quick());
    let json = serde_json::to_string(&first)?;
    let stored: spade_sandbox::Report = serde_json::from_str(&json)?;
    let replay = ValidationConfig {
        seeds: Some(stored.seeds.clone()),
        ..quick()
    };
    let again = validate(&pool, &source, &replay);
    assert_eq!(again.rejection, first.rejection, "{again:#?}");
    assert!(first.rejection.is_some());
    Ok(())
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

/// A rejection's traceback reads as Python prints it: the innermost frames of the
/// environment's own code with their source lines, then the exception; a syntax error names
/// its line. The dashboard marks the line from these (issue 20, item 10).
#[test]
fn tracebacks_show_the_failing_line_of_the_environment_and_end_with_the_exception() {
    let pool = pool_with(1, 0, Duration::from_secs(20));
    let raising = "class AEnv:\n    def __init__(self):\n        self.table = {}\n        self.value = self.table['missing']\n";
    let r = validate(&pool, raising, &quick());
    let rej = r.rejection.as_ref().unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(rej.reason, Reason::LoadError);
    let lines: Vec<&str> = rej.message.lines().collect();
    let frame = lines
        .iter()
        .position(|l| l.contains("File \"<environment>\", line 4, in __init__"))
        .unwrap_or_else(|| panic!("no frame of line 4 in: {}", rej.message));
    assert_eq!(
        lines.get(frame + 1).map(|l| l.trim()),
        Some("self.value = self.table['missing']"),
        "{}",
        rej.message
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains("KeyError: 'missing'")),
        "{}",
        rej.message
    );
    let r = validate(&pool, "x = 1\ny = (\nclass AEnv: pass\n", &quick());
    let rej = r.rejection.as_ref().unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(rej.reason, Reason::SyntaxError);
    assert!(
        rej.message.contains("<environment>, line "),
        "{}",
        rej.message
    );
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
