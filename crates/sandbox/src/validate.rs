//! Validation of a generated environment before it is used (spec "Validation"): every check runs
//! here in the parent on values the runner already type-checked, so nothing the environment does
//! to its own interpreter can make a check pass.
//!
//! Besides the spec's fixed seeds (probe 42 and 123; criteria, solvability and determinism 0,
//! 1, 2), every validation draws [`ValidationConfig::drawn_seeds`] more seeds from the operating
//! system's randomness, here in the parent and anew each time, so a program cannot learn them
//! beforehand; each drawn seed also gets its own probe actions ([`drawn_actions`], derived from
//! the seed). The seeds are recorded in [`Report::seeds`]; passing them back as
//! [`ValidationConfig::seeds`] replays the same validation (`spade env check --seeds`).
//!
//! Checks, in order; the first failure rejects (a failure at a drawn seed names it):
//! 1. `parse`: exactly one top-level class whose name ends in `Env` (and the source executes);
//! 2. `probe`: `reset(seed=42)`, steps with `\boxed{1}`, `\boxed{test}`, `\boxed{42}`, then
//!    `reset(seed=123)`; then, per drawn seed, `reset(seed)` and its drawn actions. Every return
//!    has the contract's types, rewards are finite and in [-10, 10], observations within the
//!    length limit;
//! 3. `not_pre_satisfied`: no win from the fixed probes; at each drawn seed, no two different
//!    drawn actions both win as the first step of a fresh episode (a game that accepts unrelated
//!    answers is won by anything); for tool use, every criterion is false at reset for seeds
//!    0, 1, 2 and every drawn seed;
//! 4. `solvable`: for seeds 0, 1, 2 and every drawn seed, stepping `\boxed{solution()}` each
//!    turn (the bare solution for tool use) wins within `max_turns`;
//! 5. `deterministic`: replaying the probes and the solution episodes gives identical
//!    trajectories;
//! 6. `fresh_runner`: per drawn seed, a new runner plays the drawn probe exactly as play does
//!    (load, one `reset`, steps, never `solution()`), and must give the same episode as the
//!    validation runner: a program that tells validation from play by the calls it sees
//!    (several resets, a `solution()` call, seed 42 first) behaves differently here;
//! 7. `limits`: every call finished within its time limit, the whole validation within its
//!    budget, the scratch directory within its bounds, the runner stayed alive.

use crate::pool::{EnvSession, Pool};
use crate::protocol::{EnvErrorKind, EnvKind, Layer, StepResult, Trajectory};
use crate::runner::SandboxError;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// spec "Validation": the structural probe's actions.
pub const PROBE_ACTIONS: [&str; 3] = ["\\boxed{1}", "\\boxed{test}", "\\boxed{42}"];
/// spec "Validation": the seed of the structural probe, and the seed it resets to afterwards.
pub const PROBE_SEEDS: [i64; 2] = [42, 123];
/// spec "Validation": the seeds of the determinism, criteria and solvability checks.
pub const CHECK_SEEDS: [i64; 3] = [0, 1, 2];
/// spec "Environment contract (games)": rewards stay in [-10, 10].
pub const REWARD_BOUND: f64 = 10.0;
/// Seeds drawn per validation by default (beyond the spec; three keeps `spade env check`
/// within twice its cost without them, see docs/benchmarks.md, "Sandbox validation time").
pub const DRAWN_SEEDS: usize = 3;
/// Drawn seeds lie in [0, 2^31), the range play draws its seeds from.
pub const SEED_RANGE: i64 = 1 << 31;

/// Validation settings.
#[derive(Debug, Clone)]
pub struct ValidationConfig {
    /// Budget for the whole validation (spec "Validation": 60 s by default).
    pub budget: Duration,
    /// Limit per call (spec: step 30 s).
    pub call_timeout: Duration,
    /// Contract to hold the source to; `None` detects it from the class.
    pub kind: Option<EnvKind>,
    /// How many seeds to draw from the operating system's randomness (when `seeds` is `None`).
    pub drawn_seeds: usize,
    /// Replay: use these seeds instead of drawing (a report's [`Report::seeds`]).
    pub seeds: Option<Vec<i64>>,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        Self {
            budget: Duration::from_secs(60),
            call_timeout: Duration::from_secs(30),
            kind: None,
            drawn_seeds: DRAWN_SEEDS,
            seeds: None,
        }
    }
}

/// The checks, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    Parse,
    Probe,
    NotPreSatisfied,
    Solvable,
    Deterministic,
    FreshRunner,
    Limits,
}

/// Machine-readable rejection reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    SyntaxError,
    NoEnvClass,
    MultipleEnvClasses,
    LoadError,
    Exception,
    BadReturnType,
    RewardOutOfRange,
    PreSatisfied,
    CriteriaPreSatisfied,
    Unsolvable,
    Nondeterministic,
    ObservationTooLong,
    /// The scratch directory passed its total size or its number of files.
    ScratchLimit,
    Timeout,
    RunnerCrashed,
    ProtocolViolation,
    SandboxUnavailable,
}

impl Reason {
    /// The snake_case name used in reports and the database.
    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckOutcome {
    pub check: Check,
    pub passed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The first failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    pub check: Check,
    pub reason: Reason,
    pub message: String,
    /// The seed the failing episode was played with, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// The structured result of validating one source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub accepted: bool,
    pub class_name: Option<String>,
    pub kind: Option<EnvKind>,
    pub max_turns: Option<u32>,
    pub checks: Vec<CheckOutcome>,
    pub rejection: Option<Rejection>,
    /// Turns the solution needed per check seed 0, 1, 2 (for difficulty statistics).
    pub solution_turns: Vec<usize>,
    /// The drawn seeds this validation used (replay them with [`ValidationConfig::seeds`]).
    #[serde(default)]
    pub seeds: Vec<i64>,
    /// Isolation layers the runner had while validating.
    pub layers: Vec<Layer>,
    pub elapsed_ms: u64,
}

struct Failure {
    check: Check,
    reason: Reason,
    message: String,
    seed: Option<i64>,
}

impl Failure {
    fn at(mut self, seed: i64) -> Self {
        if self.seed.is_none() {
            self.seed = Some(seed);
            self.message = format!("with seed {seed}: {}", self.message);
        }
        self
    }
}

fn fail(check: Check, reason: Reason, message: impl Into<String>) -> Failure {
    Failure {
        check,
        reason,
        message: message.into(),
        seed: None,
    }
}

/// The rejection reason of a sandbox error (`loading`: whether it happened while loading the
/// source, where an exception is a [`Reason::LoadError`]).
pub fn reason_of(e: &SandboxError, loading: bool) -> Reason {
    match e {
        SandboxError::Env(env) => match env.kind {
            EnvErrorKind::Syntax => Reason::SyntaxError,
            EnvErrorKind::NoEnvClass => Reason::NoEnvClass,
            EnvErrorKind::MultipleEnvClasses => Reason::MultipleEnvClasses,
            EnvErrorKind::Exception if loading => Reason::LoadError,
            EnvErrorKind::Exception => Reason::Exception,
            EnvErrorKind::Contract => Reason::BadReturnType,
            EnvErrorKind::ObservationTooLong => Reason::ObservationTooLong,
            EnvErrorKind::BadRequest => Reason::ProtocolViolation,
        },
        SandboxError::Timeout { .. } => Reason::Timeout,
        SandboxError::Scratch { .. } => Reason::ScratchLimit,
        SandboxError::Died { .. } => Reason::RunnerCrashed,
        SandboxError::Protocol { .. } | SandboxError::Version { .. } => Reason::ProtocolViolation,
        SandboxError::Spawn { .. } | SandboxError::Isolation(_) => Reason::SandboxUnavailable,
    }
}

/// Maps a sandbox error during `check` to a rejection.
fn from_sandbox(check: Check, e: SandboxError) -> Failure {
    let reason = reason_of(&e, check == Check::Parse);
    let message = match e {
        SandboxError::Env(env) => env.message,
        other => other.to_string(),
    };
    fail(check, reason, message)
}

/// `n` distinct seeds in [0, [`SEED_RANGE`]) from the operating system's randomness, none of
/// them a fixed seed of the spec.
pub fn draw_seeds(n: usize) -> Vec<i64> {
    use rand::TryRngCore;
    let mut seeds = Vec::with_capacity(n);
    while seeds.len() < n {
        // The thread generator (itself seeded from the OS) only if the OS source fails.
        let x = rand::rngs::OsRng
            .try_next_u64()
            .unwrap_or_else(|_| rand::random());
        let s = (x >> 33) as i64;
        if !seeds.contains(&s) && !CHECK_SEEDS.contains(&s) && !PROBE_SEEDS.contains(&s) {
            seeds.push(s);
        }
    }
    seeds
}

/// SplitMix64: the drawn actions are a function of the seed, so replaying seeds replays them.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn word(state: &mut u64) -> String {
    let len = 3 + (splitmix(state) % 6) as usize;
    (0..len)
        .map(|_| char::from(b'a' + (splitmix(state) % 26) as u8))
        .collect()
}

/// The probe actions of a drawn seed: three actions unlike each other (a small number, a word,
/// a large signed number; for tool use `<answer>done</answer>`, a call of a tool that does not
/// exist, and a small number), different from seed to seed.
pub fn drawn_actions(kind: EnvKind, seed: i64) -> Vec<String> {
    let mut st = seed as u64 ^ 0x5EED_AC71_0000_0000;
    let small = splitmix(&mut st) % 1000;
    let w = word(&mut st);
    match kind {
        EnvKind::Game => {
            let big = (splitmix(&mut st) % 2_000_000) as i64 - 1_000_000;
            vec![
                format!("\\boxed{{{small}}}"),
                format!("\\boxed{{{w}}}"),
                format!("\\boxed{{{big}}}"),
            ]
        }
        EnvKind::ToolUse => vec![
            "<answer>done</answer>".to_owned(),
            format!("<tool_call>{{\"name\": \"{w}\", \"arguments\": {{}}}}</tool_call>"),
            format!("\\boxed{{{small}}}"),
        ],
    }
}

/// Validates `source` in a fresh runner from `pool`.
pub fn validate(pool: &Pool, source: &str, cfg: &ValidationConfig) -> Report {
    let started = Instant::now();
    let seeds = cfg
        .seeds
        .clone()
        .unwrap_or_else(|| draw_seeds(cfg.drawn_seeds));
    let mut report = Report {
        accepted: false,
        class_name: None,
        kind: None,
        max_turns: None,
        checks: Vec::new(),
        rejection: None,
        solution_turns: Vec::new(),
        seeds,
        layers: Vec::new(),
        elapsed_ms: 0,
    };
    let outcome = run_checks(pool, source, cfg, started, &mut report);
    if let Err(f) = outcome {
        report.checks.push(CheckOutcome {
            check: f.check,
            passed: false,
            reason: Some(f.reason),
            message: Some(f.message.clone()),
        });
        report.rejection = Some(Rejection {
            check: f.check,
            reason: f.reason,
            message: f.message,
            seed: f.seed,
        });
    } else {
        report.accepted = true;
    }
    report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    report
}

fn passed(report: &mut Report, check: Check) {
    report.checks.push(CheckOutcome {
        check,
        passed: true,
        reason: None,
        message: None,
    });
}

/// The time left of the budget, also set as the session's call limit.
struct Budget<'a> {
    cfg: &'a ValidationConfig,
    started: Instant,
}

impl Budget<'_> {
    fn limit(&self, env: &mut EnvSession) -> Result<Duration, Failure> {
        let left = self.cfg.budget.saturating_sub(self.started.elapsed());
        if left.is_zero() {
            return Err(fail(
                Check::Limits,
                Reason::Timeout,
                format!("validation exceeded its budget of {:?}", self.cfg.budget),
            ));
        }
        let limit = left.min(self.cfg.call_timeout);
        env.set_call_timeout(limit);
        Ok(limit)
    }
}

/// A drawn seed with its actions and what the validation runner saw for them.
struct Drawn {
    seed: i64,
    actions: Vec<String>,
    probe: Vec<StepResult>,
}

fn run_checks(
    pool: &Pool,
    source: &str,
    cfg: &ValidationConfig,
    started: Instant,
    report: &mut Report,
) -> Result<(), Failure> {
    let mut env = pool
        .load(source, cfg.kind, None)
        .map_err(|e| from_sandbox(Check::Parse, e))?;
    report.class_name = Some(env.class_name.clone());
    report.kind = Some(env.kind);
    report.max_turns = Some(env.max_turns);
    report.layers = env.layers().to_vec();
    passed(report, Check::Parse);
    let budget = Budget { cfg, started };
    let kind = env.kind;

    budget.limit(&mut env)?;
    let probed = probe(&mut env).map_err(|e| from_sandbox(Check::Probe, e).at(PROBE_SEEDS[0]))?;
    check_steps(&probed, Check::Probe).map_err(|f| f.at(PROBE_SEEDS[0]))?;
    let mut drawn = Vec::new();
    for &seed in &report.seeds {
        budget.limit(&mut env)?;
        let actions = drawn_actions(kind, seed);
        let steps = play_actions(&mut env, seed, &actions)
            .map_err(|e| from_sandbox(Check::Probe, e).at(seed))?;
        check_steps(&steps, Check::Probe).map_err(|f| f.at(seed))?;
        drawn.push(Drawn {
            seed,
            actions,
            probe: steps,
        });
    }
    passed(report, Check::Probe);

    if let Some(i) = probed.iter().position(is_win) {
        return Err(fail(
            Check::NotPreSatisfied,
            Reason::PreSatisfied,
            format!(
                "the trivial probe action {} wins the game",
                PROBE_ACTIONS.get(i).unwrap_or(&"?")
            ),
        )
        .at(PROBE_SEEDS[0]));
    }
    for d in &drawn {
        let mut winners = Vec::new();
        for action in &d.actions {
            budget.limit(&mut env)?;
            let first = play_actions(&mut env, d.seed, std::slice::from_ref(action))
                .map_err(|e| from_sandbox(Check::NotPreSatisfied, e).at(d.seed))?;
            if first.first().is_some_and(is_win) {
                winners.push(action.as_str());
            }
        }
        if winners.len() >= 2 {
            return Err(fail(
                Check::NotPreSatisfied,
                Reason::PreSatisfied,
                format!(
                    "unrelated first answers all win the game: {}",
                    winners.join(", ")
                ),
            )
            .at(d.seed));
        }
    }
    if kind == EnvKind::ToolUse {
        for seed in CHECK_SEEDS.into_iter().chain(report.seeds.iter().copied()) {
            budget.limit(&mut env)?;
            env.reset(Some(seed))
                .map_err(|e| from_sandbox(Check::NotPreSatisfied, e).at(seed))?;
            let done = env
                .criteria()
                .map_err(|e| from_sandbox(Check::NotPreSatisfied, e).at(seed))?;
            if done.iter().any(|d| *d) {
                return Err(fail(
                    Check::NotPreSatisfied,
                    Reason::CriteriaPreSatisfied,
                    format!("criteria are already met at reset: {done:?}"),
                )
                .at(seed));
            }
        }
    }
    passed(report, Check::NotPreSatisfied);

    let mut episodes = Vec::new();
    for seed in CHECK_SEEDS.into_iter().chain(report.seeds.iter().copied()) {
        let limit = budget.limit(&mut env)?;
        let t = solve(&mut env, seed, limit).map_err(|f| f.at(seed))?;
        if CHECK_SEEDS.contains(&seed) {
            report.solution_turns.push(t.turns.len());
        }
        episodes.push((seed, t));
    }
    passed(report, Check::Solvable);

    budget.limit(&mut env)?;
    let again =
        probe(&mut env).map_err(|e| from_sandbox(Check::Deterministic, e).at(PROBE_SEEDS[0]))?;
    if again != probed {
        return Err(fail(
            Check::Deterministic,
            Reason::Nondeterministic,
            format!(
                "the probe episode differs on replay: {}",
                first_difference(&probed, &again)
            ),
        )
        .at(PROBE_SEEDS[0]));
    }
    for d in &drawn {
        budget.limit(&mut env)?;
        let again = play_actions(&mut env, d.seed, &d.actions)
            .map_err(|e| from_sandbox(Check::Deterministic, e).at(d.seed))?;
        if again != d.probe {
            return Err(fail(
                Check::Deterministic,
                Reason::Nondeterministic,
                format!(
                    "the drawn probe episode differs on replay: {}",
                    first_difference(&d.probe, &again)
                ),
            )
            .at(d.seed));
        }
    }
    for (seed, first) in &episodes {
        let limit = budget.limit(&mut env)?;
        let replay = env
            .play_solution(*seed, limit)
            .map_err(|e| from_sandbox(Check::Deterministic, e).at(*seed))?;
        if &replay != first {
            return Err(fail(
                Check::Deterministic,
                Reason::Nondeterministic,
                format!(
                    "the solution episode differs on replay: {}",
                    trajectory_difference(first, &replay)
                ),
            )
            .at(*seed));
        }
    }
    passed(report, Check::Deterministic);
    if !env.runner_mut().is_alive() {
        return Err(fail(
            Check::Limits,
            Reason::RunnerCrashed,
            "the runner exited during validation",
        ));
    }
    // The validation runner's slot is needed for the fresh ones.
    drop(env);

    for d in &drawn {
        let mut fresh = pool
            .load(source, Some(kind), None)
            .map_err(|e| from_sandbox(Check::FreshRunner, e).at(d.seed))?;
        budget.limit(&mut fresh)?;
        let steps = play_actions(&mut fresh, d.seed, &d.actions)
            .map_err(|e| from_sandbox(Check::FreshRunner, e).at(d.seed))?;
        check_steps(&steps, Check::FreshRunner).map_err(|f| f.at(d.seed))?;
        if steps != d.probe {
            return Err(fail(
                Check::FreshRunner,
                Reason::Nondeterministic,
                format!(
                    "a fresh runner playing the drawn probe the way play does saw another \
                     episode than the validation runner: {}",
                    first_difference(&d.probe, &steps)
                ),
            )
            .at(d.seed));
        }
    }
    passed(report, Check::FreshRunner);

    let left = cfg.budget.saturating_sub(started.elapsed());
    if left.is_zero() {
        return Err(fail(
            Check::Limits,
            Reason::Timeout,
            format!("validation exceeded its budget of {:?}", cfg.budget),
        ));
    }
    passed(report, Check::Limits);
    Ok(())
}

/// One solution episode at `seed`, which must win within `max_turns`.
fn solve(env: &mut EnvSession, seed: i64, limit: Duration) -> Result<Trajectory, Failure> {
    let t = env
        .play_solution(seed, limit)
        .map_err(|e| from_sandbox(Check::Solvable, e))?;
    if let Some(e) = &t.error {
        return Err(from_sandbox(Check::Solvable, SandboxError::Env(e.clone())));
    }
    let steps: Vec<StepResult> = t.turns.iter().map(|x| x.result.clone()).collect();
    check_steps(&steps, Check::Solvable)?;
    if !t.turns.last().is_some_and(|x| is_win(&x.result)) {
        let last = t.turns.last().map_or_else(
            || "no step".to_owned(),
            |x| {
                format!(
                    "last step: reward {}, terminated {}, truncated {}",
                    x.result.reward, x.result.terminated, x.result.truncated
                )
            },
        );
        return Err(fail(
            Check::Solvable,
            Reason::Unsolvable,
            format!(
                "stepping solution() for {} turns did not win ({last})",
                t.turns.len()
            ),
        ));
    }
    Ok(t)
}

/// The structural probe: returns the three probe steps (fewer if the episode ended).
fn probe(env: &mut EnvSession) -> Result<Vec<StepResult>, SandboxError> {
    let steps = play_actions(env, PROBE_SEEDS[0], &PROBE_ACTIONS.map(str::to_owned))?;
    env.reset(Some(PROBE_SEEDS[1]))?;
    Ok(steps)
}

/// `reset(seed)`, then `actions` in turn until the episode ends.
fn play_actions(
    env: &mut EnvSession,
    seed: i64,
    actions: &[String],
) -> Result<Vec<StepResult>, SandboxError> {
    env.reset(Some(seed))?;
    let mut steps = Vec::new();
    for action in actions {
        let s = env.step(action)?;
        let done = s.terminated || s.truncated;
        steps.push(s);
        if done {
            break;
        }
    }
    Ok(steps)
}

fn is_win(s: &StepResult) -> bool {
    s.terminated && (s.reward - 1.0).abs() < 1e-9
}

/// Why a step breaks the contract beyond what the runner checks (it checks types and the
/// observation length): a reward that is not finite or not in [-10, 10].
pub fn step_violation(s: &StepResult) -> Option<String> {
    (!s.reward.is_finite() || s.reward.abs() > REWARD_BOUND)
        .then(|| format!("reward {} is outside [-10, 10]", s.reward))
}

fn check_steps(steps: &[StepResult], check: Check) -> Result<(), Failure> {
    for s in steps {
        if let Some(m) = step_violation(s) {
            return Err(fail(check, Reason::RewardOutOfRange, m));
        }
    }
    Ok(())
}

fn first_difference(a: &[StepResult], b: &[StepResult]) -> String {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            return format!("step {} gave {x:?} then {y:?}", i + 1);
        }
    }
    format!("{} steps, then {}", a.len(), b.len())
}

fn trajectory_difference(a: &Trajectory, b: &Trajectory) -> String {
    if a.reset != b.reset {
        return "the reset observation differs".into();
    }
    let (sa, sb): (Vec<StepResult>, Vec<StepResult>) = (
        a.turns.iter().map(|t| t.result.clone()).collect(),
        b.turns.iter().map(|t| t.result.clone()).collect(),
    );
    first_difference(&sa, &sb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_seeds_are_distinct_in_range_and_differ_between_draws() {
        let a = draw_seeds(8);
        let b = draw_seeds(8);
        assert_eq!(a.len(), 8);
        assert!(a.iter().all(|s| (0..SEED_RANGE).contains(s)), "{a:?}");
        let mut d = a.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), 8, "{a:?}");
        assert_ne!(a, b, "two validations drew the same seeds");
    }

    #[test]
    fn drawn_actions_follow_the_seed_and_vary_between_seeds() {
        assert_eq!(
            drawn_actions(EnvKind::Game, 7),
            drawn_actions(EnvKind::Game, 7)
        );
        assert_ne!(
            drawn_actions(EnvKind::Game, 7),
            drawn_actions(EnvKind::Game, 8)
        );
        for a in drawn_actions(EnvKind::Game, 123_456) {
            assert!(a.starts_with("\\boxed{") && a.ends_with('}'), "{a}");
            assert!(!PROBE_ACTIONS.contains(&a.as_str()) || a == "\\boxed{1}");
        }
        let tool = drawn_actions(EnvKind::ToolUse, 5);
        assert_eq!(tool[0], "<answer>done</answer>");
        assert!(
            tool[1].starts_with("<tool_call>{\"name\": \""),
            "{}",
            tool[1]
        );
    }

    #[test]
    fn out_of_range_and_non_finite_rewards_are_violations() {
        let s = |reward| StepResult {
            obs: String::new(),
            reward,
            terminated: false,
            truncated: false,
            info: serde_json::json!({}),
        };
        assert!(step_violation(&s(1.0)).is_none());
        assert!(step_violation(&s(-10.0)).is_none());
        assert!(step_violation(&s(10.5)).is_some());
        assert!(step_violation(&s(f64::NAN)).is_some());
        assert!(step_violation(&s(f64::NEG_INFINITY)).is_some());
    }
}
