//! Closing a window (spec, "One training step", items 7 to 9): designer rewards from the
//! window's plays (the regret from the regeneration step's plays by default, the plateau from
//! all of them), and what they give: the reports, the memory records and the window's designer
//! samples ([`super::designer_batch`] centres and weighs them), returned to the step, which
//! applies them. Also the live windows' metrics after a step's plays ([`live_stats`]).

use super::Loop;
use super::designer_batch::{PendingDesigner, designer_samples};
use super::metrics::{ClosedStats, EmaSkill, LiveStats, StepObservations, mean};
use crate::WorkerError;
use crate::play::{Episode, PlayFailure};
use crate::seeds;
use crate::state::LiveEnv;
use crate::state::window_key;
use spade::EnvKind;
use spade::config::{MemoryWinRate, RegretTiming, RetireOn, RunConfig};
use spade::memory::MemoryRecord;
use spade::metrics::{ScoredEnv, StepFacts};
use spade::report::Message;
use spade::reward::{EmaLearningPotential, PlayOutcome};
use spade_sandbox::validate::Reason;
use std::collections::BTreeMap;

/// Adds played episodes (played at `step`) to an environment's tallies. A play the environment
/// broke is no outcome of its game and is left out (its group still sees it:
/// `agent.failed_plays`).
pub fn tally(env: &mut LiveEnv, eps: &[Episode], with_hint: bool, step: u64) {
    let outcomes = || eps.iter().filter(|ep| ep.failure.is_none());
    if !with_hint && outcomes().next().is_some() && env.first_no_hint_step.is_none() {
        env.first_no_hint_step = Some(step);
    }
    let first_step = !with_hint && env.first_no_hint_step == Some(step);
    for ep in outcomes() {
        if with_hint {
            env.hint_returns.push(ep.episode_return);
            env.hint_wins += u32::from(ep.won);
        } else {
            env.no_hint_returns.push(ep.episode_return);
            env.no_hint_wins += u32::from(ep.won);
            if first_step {
                env.first_step_returns.push(ep.episode_return);
                env.first_step_wins += u32::from(ep.won);
            }
        }
        for r in &ep.rewards {
            let t = format!("{r}");
            if !env.reward_levels.contains(&t) {
                env.reward_levels.push(t);
            }
        }
    }
}

/// Whether a failure in play retires its environment under `rule` (`agent.retire_on`). A
/// step past its time limit or a dead runner costs a runner every time it is played; under
/// `hang` (the reference, which blacklists hung games only) an exception or a forbidden return
/// fails its own play, and the environment is played again.
pub fn retires(rule: RetireOn, reason: Reason) -> bool {
    match rule {
        RetireOn::Violation => true,
        RetireOn::Hang => matches!(
            reason,
            Reason::Timeout
                | Reason::RunnerCrashed
                | Reason::ProtocolViolation
                | Reason::SandboxUnavailable
        ),
    }
}

/// The first failure among `eps` (played at `step`) that retires `env` under `rule`
/// ([`retires`]): it is marked broken with the failing play's seed (so it is not played again
/// and its designer reward is the invalid one), and the report of its new status is returned.
/// `None` when it was already broken or nothing retires it.
pub fn broken_in_play(
    env: &mut LiveEnv,
    eps: &[Episode],
    step: u64,
    rule: RetireOn,
) -> Option<Message> {
    if env.broken_seed.is_some() {
        return None;
    }
    let (ep, f): (&Episode, &PlayFailure) = eps.iter().find_map(|ep| {
        ep.failure
            .as_ref()
            .filter(|f| retires(rule, f.reason))
            .map(|f| (ep, f))
    })?;
    env.failed = Some(f.describe());
    env.broken_seed = Some(ep.seed);
    Some(Message::EnvironmentBroken {
        env_id: env.env_id.clone(),
        step,
        seed: ep.seed,
        reason: f.reason.as_str(),
        message: f.message.clone(),
    })
}

/// An environment's designer reward and the numbers behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    pub regret: f64,
    pub win_rate_hint: f64,
    pub win_rate_no_hint: f64,
    pub reward: f64,
}

/// Plays as the reward reads them. Wins are counted, not stored per play: the first `wins`
/// plays stand for them (the score only uses the count and the mean return).
fn outcomes(returns: &[f64], wins: u32) -> Vec<PlayOutcome> {
    returns
        .iter()
        .enumerate()
        .map(|(i, &r)| PlayOutcome {
            episode_return: r,
            won: (i as u32) < wins,
        })
        .collect()
}

/// Scores one environment (spec 7). The regret's no-hint arm follows `designer.regret_timing`:
/// the plays of its first no-hint step (matched timing, the reference's default; the window's
/// plays when the state predates that tally) or all of the window; the plateau's `w` is the
/// window's win rate either way. An environment that failed in play (a step timeout, an
/// exception) or lacks plays in either arm gets the invalid reward; with `ema` (the EMA
/// ablation, already updated with this window) the reward is `|w - mu_slow|` of its skill.
pub fn score_env(cfg: &RunConfig, env: &LiveEnv, ema: Option<&EmaLearningPotential>) -> Scored {
    let rp = cfg.reward_params();
    let hint = outcomes(&env.hint_returns, env.hint_wins);
    let window = outcomes(&env.no_hint_returns, env.no_hint_wins);
    let regret_arm = match cfg.designer.regret_timing {
        RegretTiming::Matched if !env.first_step_returns.is_empty() => {
            outcomes(&env.first_step_returns, env.first_step_wins)
        }
        RegretTiming::Matched | RegretTiming::Window => window.clone(),
    };
    let scored = spade::reward::score_environment_timed(&rp, &hint, &regret_arm, &window);
    let w = spade::reward::win_rate(&window).unwrap_or(0.0);
    let w_hint = spade::reward::win_rate(&hint).unwrap_or(0.0);
    let regret = scored.map_or(0.0, |s| s.regret);
    let reward = match (&env.failed, scored, ema) {
        // spec 7: an invalid environment or a step timeout.
        (Some(_), _, _) | (None, None, _) => rp.invalid_reward,
        (None, Some(_), Some(e)) => e.raw(&env.skill, w),
        (None, Some(s), None) => s.reward,
    };
    Scored {
        regret,
        win_rate_hint: w_hint,
        win_rate_no_hint: w,
        reward,
    }
}

/// The win rate a memory record keeps (`memory.win_rate_from`): the share of the regeneration
/// step's no-hint plays with a return above 0, as the reference records it
/// (`spade/slime/spade_rollout.py`, the memory update at regeneration), or the window's win
/// rate `window`. An environment not played at its regeneration step falls back to the window.
pub fn memory_win_rate(cfg: &RunConfig, env: &LiveEnv, window: f64) -> f64 {
    match cfg.memory.win_rate_from {
        MemoryWinRate::RegenerationStep if !env.first_step_returns.is_empty() => {
            let positive = env.first_step_returns.iter().filter(|&&r| r > 0.0).count();
            positive as f64 / env.first_step_returns.len() as f64
        }
        MemoryWinRate::RegenerationStep | MemoryWinRate::Window => window,
    }
}

/// The no-hint win rate of each skill over the window, all plays of its environments pooled
/// (environments that failed in play are left out): what the EMA learning potential folds in
/// once per skill before the window is scored (`delayed_env_rewards.py`,
/// `recompute_delayed_env_rewards`: the skill's accumulated rewards, one `update` per skill).
pub fn skill_window_win_rates(envs: &[LiveEnv]) -> BTreeMap<String, f64> {
    let mut acc: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for e in envs.iter().filter(|e| e.failed.is_none()) {
        if e.no_hint_returns.is_empty() {
            continue;
        }
        let a = acc.entry(e.skill.clone()).or_default();
        a.0 += u64::from(e.no_hint_wins);
        a.1 += e.no_hint_returns.len() as u64;
    }
    acc.into_iter()
        .map(|(k, (wins, n))| (k, wins as f64 / n as f64))
        .collect()
}

/// What closing a window gave: the reports of its scored environments, the memory records
/// they become, the designer samples for this step's update (when the designer trains) and
/// the window's metrics.
pub(super) struct ClosedWindow {
    pub messages: Vec<Message>,
    pub memory: Vec<MemoryRecord>,
    pub designer: Option<PendingDesigner>,
    pub stats: ClosedStats,
}

/// Closes the window of `kind`: scores its environments, updates the EMA learning potential
/// (its variant), takes the window's designer samples and empties the window. `None` when
/// there was no window or nothing in it.
pub(super) fn close_window(
    lp: &mut Loop<'_>,
    kind: EnvKind,
) -> Result<Option<ClosedWindow>, WorkerError> {
    let key = window_key(kind);
    let Some(window) = lp.state.windows.get(&key).cloned() else {
        return Ok(None);
    };
    if window.envs.is_empty() && window.buffer.is_empty() {
        return Ok(None);
    }
    let step = lp.state.step;
    let cfg = lp.cfg;
    let mut stats = ClosedStats::default();
    if cfg.ablation.ema_learning_potential {
        // learning_potential.py / delayed_env_rewards.py: one update per skill with the
        // window's win rate, before any environment is scored.
        let g = &cfg.designer.ema;
        let ema = lp
            .state
            .ema
            .get_or_insert_with(|| EmaLearningPotential::new(g.gamma_fast, g.gamma_slow));
        for (skill, w) in skill_window_win_rates(&window.envs) {
            let potential = ema.update(&skill, w);
            let (mu_fast, mu_slow) = ema.per_skill.get(&skill).copied().unwrap_or_default();
            stats.ema.insert(
                skill,
                EmaSkill {
                    mu_fast,
                    mu_slow,
                    potential,
                },
            );
        }
    }
    let ema = lp
        .state
        .ema
        .as_ref()
        .filter(|_| cfg.ablation.ema_learning_potential);
    let mut by_env: BTreeMap<String, f64> = BTreeMap::new();
    let mut regrets = Vec::new();
    let mut messages = Vec::new();
    let mut memory = Vec::new();
    for env in &window.envs {
        let s = score_env(cfg, env, ema);
        by_env.insert(env.env_id.clone(), s.reward);
        regrets.push(s.regret);
        messages.push(Message::EnvironmentScored {
            env_id: env.env_id.clone(),
            step,
            regret: s.regret,
            win_rate_hint: s.win_rate_hint,
            win_rate_no_hint: s.win_rate_no_hint,
            designer_reward: s.reward,
            reward_levels: env.reward_levels.len() as u32,
        });
        // spec 9: the last `capacity` records, code excerpt up to `code_chars`.
        memory.push(MemoryRecord {
            env_id: env.env_id.clone(),
            step: env.generated_step,
            skill: env.skill.clone(),
            kind: env.kind,
            code: env.code.clone(),
            win_rate: memory_win_rate(cfg, env, s.win_rate_no_hint),
            regret: s.regret,
        });
    }
    if let Some(r) = mean(&regrets) {
        stats.window_regret.insert(kind, r);
    }
    let mut designer = None;
    if cfg.trains_designer() && !window.buffer.is_empty() {
        let (samples, trained_mean) = designer_samples(lp, &window.buffer, &by_env)?;
        stats.designer_reward_trained_mean = trained_mean;
        if !samples.is_empty() {
            designer = Some(PendingDesigner {
                kind,
                k: cfg.regenerate_every(kind),
                samples,
            });
        }
    }
    if let Some(w) = lp.state.windows.get_mut(&key) {
        w.envs.clear();
        w.buffer.clear();
    }
    Ok(Some(ClosedWindow {
        messages,
        memory,
        designer,
        stats,
    }))
}

/// The live windows' metrics after the step's plays: the spec's list from `spade::metrics`
/// and the worker's extras of the module doc (SPADE and fixed-env runs; SPICE has no windows).
pub(super) fn live_stats(lp: &Loop<'_>, obs: StepObservations) -> LiveStats {
    let envs: Vec<&crate::state::LiveEnv> =
        lp.state.windows.values().flat_map(|w| &w.envs).collect();
    let scored: Vec<ScoredEnv> = envs
        .iter()
        .filter(|e| !e.no_hint_returns.is_empty())
        .map(|e| {
            let ema = lp
                .state
                .ema
                .as_ref()
                .filter(|_| lp.cfg.ablation.ema_learning_potential);
            let s = score_env(lp.cfg, e, ema);
            let mean = |x: &[f64]| {
                if x.is_empty() {
                    0.0
                } else {
                    x.iter().sum::<f64>() / x.len() as f64
                }
            };
            ScoredEnv {
                skill: e.skill.clone(),
                win_rate_no_hint: s.win_rate_no_hint,
                regret: s.regret,
                mean_return_hint: mean(&e.hint_returns),
                mean_return_no_hint: mean(&e.no_hint_returns),
                designer_reward: s.reward,
                reward_levels: e.reward_levels.len() as u32,
            }
        })
        .collect();
    let kernel = lp.cfg.metrics.vendi_kernel;
    let vectors: Vec<Vec<f64>> = lp
        .state
        .embeddings
        .iter()
        .filter(|e| e.kernel == kernel)
        .map(|e| e.vector.iter().map(|&x| f64::from(x)).collect())
        .collect();
    let c = &lp.cfg.metrics;
    let mut rng = spade::seeded_rng(lp.cfg.run.seed, &[seeds::tag::VENDI, lp.state.step]);
    let (env_calls, violations) = (obs.env_calls, obs.violations);
    let facts = StepFacts {
        scored,
        zero_std: obs.zero_std,
        all_zero: obs.all_zero,
        all_positive: obs.all_positive,
        acceptance: obs.acceptance,
        formula_reveals: obs.formula_reveals,
        vendi: spade::metrics::vendi::windowed_vendi(
            &vectors,
            c.vendi_subsample,
            c.vendi_draws,
            &mut rng,
        ),
        vendi_kernel: kernel.as_str(),
    };
    let st = &lp.state;
    LiveStats {
        spec: spade::metrics::step_metrics(&facts, c),
        env_calls,
        violations,
        broken_in_play_envs: envs.iter().filter(|e| e.broken_seed.is_some()).count(),
        envs: envs.len(),
        distinct_accepted_run: (st.accepted_total > 0).then_some(st.accepted_code.len()),
        acceptance_rate_run: (st.attempts_total > 0)
            .then(|| st.accepted_total as f64 / st.attempts_total as f64),
        failed_env_share: (!envs.is_empty())
            .then(|| envs.iter().filter(|e| e.failed.is_some()).count() as f64 / envs.len() as f64),
    }
}

#[cfg(test)]
#[path = "score_tests.rs"]
mod tests;
