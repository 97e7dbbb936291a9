//! Validation of a generated environment before it is used (spec "Validation"): every check runs
//! here in the parent on values the runner already type-checked, so nothing the environment does
//! to its own interpreter can make a check pass.
//!
//! Checks, in order; the first failure rejects:
//! 1. `parse`: exactly one top-level class whose name ends in `Env` (and the source executes);
//! 2. `probe`: `reset(seed=42)`, steps with `\boxed{1}`, `\boxed{test}`, `\boxed{42}`, then
//!    `reset(seed=123)`; every return has the contract's types, rewards are finite and in
//!    [-10, 10];
//! 3. `not_pre_satisfied`: no win from the probes; for tool use, every criterion is false at
//!    reset for seeds 0, 1, 2;
//! 4. `solvable`: for seeds 0, 1, 2, stepping `\boxed{solution()}` each turn (the bare solution
//!    for tool use) wins within `max_turns`;
//! 5. `deterministic`: replaying the probe and the three solution episodes gives identical
//!    trajectories;
//! 6. `limits`: every call finished within its time limit, the whole validation within its
//!    budget, observations within the length limit, the runner stayed alive.

use crate::pool::{EnvSession, Pool};
use crate::protocol::{EnvErrorKind, EnvKind, Layer, StepResult, Trajectory};
use crate::runner::SandboxError;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// spec "Validation": the structural probe's actions.
pub const PROBE_ACTIONS: [&str; 3] = ["\\boxed{1}", "\\boxed{test}", "\\boxed{42}"];
/// spec "Validation": the seeds of the determinism, criteria and solvability checks.
pub const CHECK_SEEDS: [i64; 3] = [0, 1, 2];
/// spec "Environment contract (games)": rewards stay in [-10, 10].
pub const REWARD_BOUND: f64 = 10.0;

/// Validation settings.
#[derive(Debug, Clone)]
pub struct ValidationConfig {
    /// Budget for the whole validation (spec "Validation": 60 s by default).
    pub budget: Duration,
    /// Limit per call (spec: step 30 s).
    pub call_timeout: Duration,
    /// Contract to hold the source to; `None` detects it from the class.
    pub kind: Option<EnvKind>,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        Self {
            budget: Duration::from_secs(60),
            call_timeout: Duration::from_secs(30),
            kind: None,
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
    Timeout,
    RunnerCrashed,
    ProtocolViolation,
    SandboxUnavailable,
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
    /// Turns the solution needed per check seed (for difficulty statistics).
    pub solution_turns: Vec<usize>,
    /// Isolation layers the runner had while validating.
    pub layers: Vec<Layer>,
    pub elapsed_ms: u64,
}

struct Failure {
    check: Check,
    reason: Reason,
    message: String,
}

fn fail(check: Check, reason: Reason, message: impl Into<String>) -> Failure {
    Failure {
        check,
        reason,
        message: message.into(),
    }
}

/// Maps a sandbox error during `check` to a rejection.
fn from_sandbox(check: Check, e: SandboxError) -> Failure {
    let reason = match &e {
        SandboxError::Env(env) => match env.kind {
            EnvErrorKind::Syntax => Reason::SyntaxError,
            EnvErrorKind::NoEnvClass => Reason::NoEnvClass,
            EnvErrorKind::MultipleEnvClasses => Reason::MultipleEnvClasses,
            EnvErrorKind::Exception if check == Check::Parse => Reason::LoadError,
            EnvErrorKind::Exception => Reason::Exception,
            EnvErrorKind::Contract => Reason::BadReturnType,
            EnvErrorKind::ObservationTooLong => Reason::ObservationTooLong,
            EnvErrorKind::BadRequest => Reason::ProtocolViolation,
        },
        SandboxError::Timeout { .. } => Reason::Timeout,
        SandboxError::Died { .. } => Reason::RunnerCrashed,
        SandboxError::Protocol { .. } | SandboxError::Version { .. } => Reason::ProtocolViolation,
        SandboxError::Spawn { .. } | SandboxError::Isolation(_) => Reason::SandboxUnavailable,
    };
    let message = match e {
        SandboxError::Env(env) => env.message,
        other => other.to_string(),
    };
    Failure {
        check,
        reason,
        message,
    }
}

/// Validates `source` in a fresh runner from `pool`.
pub fn validate(pool: &Pool, source: &str, cfg: &ValidationConfig) -> Report {
    let started = Instant::now();
    let mut report = Report {
        accepted: false,
        class_name: None,
        kind: None,
        max_turns: None,
        checks: Vec::new(),
        rejection: None,
        solution_turns: Vec::new(),
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

    let budget = |env: &mut EnvSession| -> Result<Duration, Failure> {
        let left = cfg.budget.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(fail(
                Check::Limits,
                Reason::Timeout,
                format!("validation exceeded its budget of {:?}", cfg.budget),
            ));
        }
        let limit = left.min(cfg.call_timeout);
        env.set_call_timeout(limit);
        Ok(limit)
    };

    budget(&mut env)?;
    let probed = probe(&mut env).map_err(|e| from_sandbox(Check::Probe, e))?;
    check_steps(&probed, Check::Probe)?;
    passed(report, Check::Probe);

    if let Some(i) = probed.iter().position(is_win) {
        return Err(fail(
            Check::NotPreSatisfied,
            Reason::PreSatisfied,
            format!(
                "the trivial probe action {} wins the game",
                PROBE_ACTIONS.get(i).unwrap_or(&"?")
            ),
        ));
    }
    if env.kind == EnvKind::ToolUse {
        for seed in CHECK_SEEDS {
            budget(&mut env)?;
            env.reset(Some(seed))
                .map_err(|e| from_sandbox(Check::NotPreSatisfied, e))?;
            let done = env
                .criteria()
                .map_err(|e| from_sandbox(Check::NotPreSatisfied, e))?;
            if done.iter().any(|d| *d) {
                return Err(fail(
                    Check::NotPreSatisfied,
                    Reason::CriteriaPreSatisfied,
                    format!("with seed {seed}, criteria are already met at reset: {done:?}"),
                ));
            }
        }
    }
    passed(report, Check::NotPreSatisfied);

    let mut episodes = Vec::new();
    for seed in CHECK_SEEDS {
        let limit = budget(&mut env)?;
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
                    "with seed {seed}, stepping solution() for {} turns did not win ({last})",
                    t.turns.len()
                ),
            ));
        }
        report.solution_turns.push(t.turns.len());
        episodes.push((seed, t));
    }
    passed(report, Check::Solvable);

    budget(&mut env)?;
    let again = probe(&mut env).map_err(|e| from_sandbox(Check::Deterministic, e))?;
    if again != probed {
        return Err(fail(
            Check::Deterministic,
            Reason::Nondeterministic,
            format!(
                "the probe episode (seed 42) differs on replay: {}",
                first_difference(&probed, &again)
            ),
        ));
    }
    for (seed, first) in &episodes {
        let limit = budget(&mut env)?;
        let replay = env
            .play_solution(*seed, limit)
            .map_err(|e| from_sandbox(Check::Deterministic, e))?;
        if &replay != first {
            return Err(fail(
                Check::Deterministic,
                Reason::Nondeterministic,
                format!(
                    "with seed {seed}, the solution episode differs on replay: {}",
                    trajectory_difference(first, &replay)
                ),
            ));
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
    budget(&mut env)?;
    passed(report, Check::Limits);
    Ok(())
}

/// The structural probe: returns the three probe steps (fewer if the episode ended).
fn probe(env: &mut EnvSession) -> Result<Vec<StepResult>, SandboxError> {
    env.reset(Some(42))?;
    let mut steps = Vec::new();
    for action in PROBE_ACTIONS {
        let s = env.step(action)?;
        let done = s.terminated || s.truncated;
        steps.push(s);
        if done {
            break;
        }
    }
    env.reset(Some(123))?;
    Ok(steps)
}

fn is_win(s: &StepResult) -> bool {
    s.terminated && (s.reward - 1.0).abs() < 1e-9
}

fn check_steps(steps: &[StepResult], check: Check) -> Result<(), Failure> {
    for s in steps {
        if !s.reward.is_finite() || s.reward.abs() > REWARD_BOUND {
            return Err(fail(
                check,
                Reason::RewardOutOfRange,
                format!("reward {} is outside [-10, 10]", s.reward),
            ));
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
