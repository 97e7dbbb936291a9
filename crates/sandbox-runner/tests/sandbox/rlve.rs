//! RLVE's environments in our sandbox: each one, at its controller's initial parameter and after
//! [`HARDER`] updates, generates a problem in a real runner, scores its own reference answer
//! as a win, and scores an empty `<answer></answer>` and a perturbed reference as no win.
//!
//! It prints a table of every environment that failed a check, with the reason, and the list
//! of those that keep no reference answer (only the empty answer is checked there), and fails
//! if the table has a row that is not a known, explained exception ([`KNOWN`]).

use super::RUNNER;
use spade_sandbox::{Runner, RunnerConfig, SandboxError, rlve};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The second difficulty: this many `update()`s of the parameter controller.
const HARDER: u32 = 2;
const SEED: i64 = 7;
const CALL_LIMIT: Duration = Duration::from_secs(60);
const WORKERS: usize = 2;

/// Environments that fail a check for a reason of their own, with the reason. A check that
/// fails for one of these is printed, not failed; one listed here that passes is reported too.
/// Each was read in the package's source (rlve-gym 0.0.1).
const KNOWN: &[(&str, &str)] = &[
    (
        "BinaryAlternation",
        "at difficulty 0 and this seed the string already alternates: the reference is empty, \
         so the empty answer is right",
    ),
    (
        "NewNimGame",
        "at difficulty 0 and this seed the first player wins without removing a heap: the \
         reference is the empty line the prompt asks for",
    ),
    (
        "IntegerProgramming",
        "any x that satisfies every inequality wins, and the perturbed x still does",
    ),
    (
        "KosDicing",
        "any assignment of wins that reaches the optimum wins",
    ),
    (
        "MinimumChromaticNumber_SegmentOverlap",
        "any proper colouring with the fewest colours wins",
    ),
    (
        "QuantumLockPuzzle",
        "any button sequence that reaches the target wins",
    ),
    (
        "PolyaModel",
        "a bug of the package: its scorer calls `_process` on the whole reply instead of \
         `processor`, so the `<answer>` markers are never removed and only a bare `a/b` reply \
         can win",
    ),
];

/// The default limits, as the training loop's runners have them: every check passes within the
/// default 2 GiB of address space, sympy and networkx included (measured).
fn config() -> RunnerConfig {
    RunnerConfig::new(RUNNER)
}

/// The reference answer with one character changed: the first digit moved by one (a large
/// change of a number: RLVE's ratio rewards call an answer within 1e-6 of the reference
/// right), or, without digits, the first letter moved by one, or a character appended.
fn perturb(answer: &str) -> String {
    let mut chars: Vec<char> = answer.chars().collect();
    if let Some(i) = chars.iter().position(char::is_ascii_digit) {
        let d = chars[i].to_digit(10).unwrap_or(0);
        chars[i] = char::from_digit((d + 1) % 10, 10).unwrap_or('0');
    } else if let Some(i) = chars.iter().position(char::is_ascii_alphabetic) {
        let c = chars[i];
        chars[i] = match c {
            'z' => 'a',
            'Z' => 'A',
            _ => char::from_u32(c as u32 + 1).unwrap_or('a'),
        };
    } else {
        chars.push('x');
    }
    chars.into_iter().collect()
}

#[derive(Debug)]
struct Outcome {
    id: String,
    difficulty: u32,
    result: Result<Checked, String>,
    times: StartLoad,
    secs: f64,
}

fn won(s: &spade_sandbox::protocol::StepResult) -> bool {
    s.terminated && (s.reward - 1.0).abs() < 1e-9
}

fn err(what: &str, e: SandboxError) -> String {
    let text = e.to_string();
    let last = text.lines().last().unwrap_or("").to_owned();
    format!(
        "{what}: {}",
        if last.len() > 160 {
            &last[..160]
        } else {
            &last
        }
    )
}

/// What was checked of an environment that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checked {
    /// The reference answer wins; the empty and the perturbed answers do not.
    All,
    /// No reference answer (the environment keeps none): the empty answer does not win.
    NoReference,
}

/// Seconds to start a runner and to load the adapter in it (its imports included).
type StartLoad = (f64, f64);

fn check_one(id: &str, difficulty: u32, times: &mut StartLoad) -> Result<Checked, String> {
    let t = Instant::now();
    let mut r = Runner::start(&config()).map_err(|e| err("start", e))?;
    times.0 = t.elapsed().as_secs_f64();
    let t = Instant::now();
    r.load(
        &rlve::source(id, difficulty),
        Some(rlve::KIND),
        Some(1),
        CALL_LIMIT,
    )
    .map_err(|e| err("load", e))?;
    times.1 = t.elapsed().as_secs_f64();
    let first = r
        .reset(Some(SEED), CALL_LIMIT)
        .map_err(|e| err("reset", e))?;
    if first.info.get("has_reference") != Some(&serde_json::Value::Bool(true)) {
        // A construction problem: only a wrong answer can be checked without solving it.
        let s = r
            .step("<answer></answer>", CALL_LIMIT)
            .map_err(|e| err("step(empty)", e))?;
        return if won(&s) {
            Err("the empty answer wins".into())
        } else {
            Ok(Checked::NoReference)
        };
    }
    let solution = r.solution(CALL_LIMIT).map_err(|e| err("solution", e))?;
    let reference = solution
        .strip_prefix("<answer>")
        .and_then(|s| s.strip_suffix("</answer>"))
        .ok_or_else(|| format!("solution() is not in answer markers: {solution:.80}"))?
        .to_owned();
    let s = r
        .step(&solution, CALL_LIMIT)
        .map_err(|e| err("step(reference)", e))?;
    if !won(&s) {
        return Err(format!(
            "the reference answer does not win (reward {}, info {}): {reference:.60}",
            s.reward, s.info
        ));
    }
    for (name, wrong) in [
        ("empty", "<answer></answer>".to_owned()),
        (
            "perturbed",
            format!("<answer>{}</answer>", perturb(&reference)),
        ),
    ] {
        // Same seed, so the same problem as the reference answer's.
        r.reset(Some(SEED), CALL_LIMIT)
            .map_err(|e| err("reset", e))?;
        let s = r
            .step(&wrong, CALL_LIMIT)
            .map_err(|e| err("step(wrong)", e))?;
        if won(&s) {
            return Err(format!("the {name} answer wins: {wrong:.80}"));
        }
    }
    Ok(Checked::All)
}

fn run() {
    let ids = {
        let mut r = Runner::start(&config()).expect("runner starts");
        rlve::identifiers(&mut r, CALL_LIMIT).expect("rlve-gym is installed in the venv")
    };
    assert_eq!(ids.len(), 400, "rlve-gym 0.0.1 has 400 environments");
    let jobs: Vec<(String, u32)> = ids
        .iter()
        .flat_map(|id| [(id.clone(), 0), (id.clone(), HARDER)])
        .collect();
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                while let Some((id, difficulty)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let t = Instant::now();
                    let mut times = (0.0, 0.0);
                    let result = check_one(id, *difficulty, &mut times);
                    let o = Outcome {
                        id: id.clone(),
                        difficulty: *difficulty,
                        result,
                        times,
                        secs: t.elapsed().as_secs_f64(),
                    };
                    outcomes.lock().unwrap_or_else(|p| p.into_inner()).push(o);
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap_or_else(|p| p.into_inner());
    outcomes.sort_by(|a, b| (&a.id, a.difficulty).cmp(&(&b.id, b.difficulty)));
    let slowest = outcomes
        .iter()
        .max_by(|a, b| a.secs.total_cmp(&b.secs))
        .map(|o| format!("{} at {} ({:.1} s)", o.id, o.difficulty, o.secs))
        .unwrap_or_default();
    println!(
        "{} checks of {} environments in {:.1} s with {WORKERS} workers; slowest {slowest}",
        jobs.len(),
        jobs.len() / 2,
        started.elapsed().as_secs_f64()
    );
    let median = |f: fn(&Outcome) -> f64| {
        let mut v: Vec<f64> = outcomes.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    println!(
        "median runner start {:.3} s, median adapter load (imports included) {:.3} s",
        median(|o| o.times.0),
        median(|o| o.times.1)
    );
    let mut unexplained = Vec::new();
    let mut no_reference = Vec::new();
    println!("| environment | difficulty | failure | known reason |");
    for o in &outcomes {
        let known = KNOWN.iter().find(|(k, _)| *k == o.id).map(|(_, why)| *why);
        match (&o.result, known) {
            (Ok(Checked::NoReference), _) => {
                no_reference.push(format!("{}@{}", o.id, o.difficulty));
            }
            (Err(f), _) => {
                println!(
                    "| {} | {} | {f} | {} |",
                    o.id,
                    o.difficulty,
                    known.unwrap_or("-")
                );
                if known.is_none() {
                    unexplained.push(o);
                }
            }
            (Ok(Checked::All), Some(_)) => println!(
                "| {} | {} | passes now | listed in KNOWN |",
                o.id, o.difficulty
            ),
            (Ok(Checked::All), None) => {}
        }
    }
    println!(
        "{} checks had no reference answer (only the empty answer checked): {}",
        no_reference.len(),
        no_reference.join(" ")
    );
    assert!(
        unexplained.is_empty(),
        "{} unexplained failures: {unexplained:#?}",
        unexplained.len()
    );
}

// 800 checks took 78 to 140 s (7 runs) with 2 workers on 2 shared cores, under the few minutes a test of
// this binary may take, so all of them run by default.
#[test]
fn rlve_every_environment_at_two_difficulties() {
    run();
}

#[test]
fn the_perturbed_answer_differs_from_the_reference() {
    assert_eq!(perturb("5 0 1 3 2 4"), "6 0 1 3 2 4");
    assert_eq!(perturb("91"), "01");
    assert_eq!(perturb("abc"), "bbc");
    assert_eq!(perturb(""), "x");
}

#[test]
fn the_adapter_runs_without_torch_and_without_importing_every_environment() {
    let mut r = Runner::start(&config()).expect("runner starts");
    let code = format!(
        "{}\nenv = RlveEnv()\nenv.reset(3)\nimport sys\nSEEN = json.dumps([\
         getattr(sys.modules['torch'], '__file__', None), \
         sorted(m for m in sys.modules if m.startswith('Gym.environments.'))])\n",
        rlve::source("AdditionTable", 1)
    );
    let text = r.exec(&code, "SEEN", CALL_LIMIT).expect("the adapter runs");
    let seen: (Option<String>, Vec<String>) = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        seen.0, None,
        "torch is the stand-in module, not a file on disk"
    );
    assert_eq!(
        seen.1,
        [
            "Gym.environments.addition_table",
            "Gym.environments.addition_table.environment"
        ]
    );
}

/// The training loop's marker mode: the worker steps a game with `\boxed{X}`, and the game
/// contract's `solution()` is the bare answer the runner boxes.
#[test]
fn in_boxed_mode_the_boxed_reference_wins_and_an_unboxed_reply_does_not() {
    for id in ["AdditionTable", "Differentiate", "MinimumSpanningTree"] {
        let mut r = Runner::start(&config()).expect("runner starts");
        let source = rlve::source_with(id, 1, rlve::Markers::Boxed);
        r.load(&source, Some(rlve::KIND), None, CALL_LIMIT)
            .expect("loads");
        let first = r.reset(Some(SEED), CALL_LIMIT).expect("resets");
        assert!(first.obs.contains("\\boxed{}"), "{id}: {:.200}", first.obs);
        assert!(!first.obs.contains("<answer>"), "{id}: one answer format");
        let reference = r.solution(CALL_LIMIT).expect("solution");
        let t = r.play_solution(SEED, 1, CALL_LIMIT).expect("plays");
        assert!(
            t.turns.last().is_some_and(|x| won(&x.result)),
            "{id}: {t:?}"
        );
        r.reset(Some(SEED), CALL_LIMIT).expect("resets");
        let s = r.step(&reference, CALL_LIMIT).expect("steps");
        assert!(!won(&s), "{id}: an unboxed reply is no answer");
    }
}

/// The boxed mode over a tenth of the environments (every 10th by name, after two updates):
/// where there is a reference, the runner's own solution episode (`\boxed{solution()}`) wins;
/// everywhere, an empty box does not win.
#[test]
fn in_boxed_mode_a_tenth_of_the_environments_win_with_their_boxed_reference() {
    let ids = {
        let mut r = Runner::start(&config()).expect("runner starts");
        rlve::identifiers(&mut r, CALL_LIMIT).expect("rlve-gym is installed in the venv")
    };
    let mut failures = Vec::new();
    for id in ids.iter().step_by(10) {
        let known = KNOWN.iter().any(|(k, _)| k == id);
        let check = || -> Result<(), String> {
            let mut r = Runner::start(&config()).map_err(|e| err("start", e))?;
            let source = rlve::source_with(id, HARDER, rlve::Markers::Boxed);
            r.load(&source, Some(rlve::KIND), None, CALL_LIMIT)
                .map_err(|e| err("load", e))?;
            let t = r
                .play_solution(SEED, 1, CALL_LIMIT)
                .map_err(|e| err("play_solution", e))?;
            let has_reference = t.reset.info.get("has_reference") == Some(&true.into());
            let won_it = t.turns.last().is_some_and(|x| won(&x.result));
            if has_reference && !won_it && !known {
                return Err(format!("the boxed reference does not win: {:?}", t.turns));
            }
            r.reset(Some(SEED), CALL_LIMIT)
                .map_err(|e| err("reset", e))?;
            let s = r
                .step("\\boxed{}", CALL_LIMIT)
                .map_err(|e| err("step", e))?;
            if won(&s) && !known {
                return Err("an empty box wins".into());
            }
            Ok(())
        };
        if let Err(e) = check() {
            failures.push(format!("{id}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
