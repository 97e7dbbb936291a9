//! The step's metrics (spec, "Metrics to log each step"), computed by `spade::metrics` from the
//! facts the loop gathered: the live environments with their window tallies so far (learnable
//! share, easy/medium/hard, regret and both arm means, per-skill win rates, reward levels), this
//! step's play groups (zero-std share), this step's designer attempts (acceptance, rejection
//! reasons, formula reveals), and the Vendi score of the window's environments on the policy's
//! own embeddings. Worker extras: `envs`, `acceptance_rate_run`, `failed_env_share`, and the
//! checks during play: `play_env_calls` (reset and step returns checked this step),
//! `play_violations` (plays that broke the contract) and `play_violation_rate` (violations per
//! checked call), `broken_in_play_envs` (live environments retired for a violation).

use super::Loop;
use super::score::score_env;
use crate::{WorkerError, seeds};
use spade::metrics::{self, ScoredEnv, StepFacts};
use std::collections::BTreeMap;

/// What the step itself observed (the rest comes from the state).
#[derive(Debug, Default)]
pub struct StepObservations {
    pub zero_std: Vec<bool>,
    pub acceptance: metrics::Acceptance,
    pub formula_reveals: Vec<bool>,
    /// Reset and step returns checked against the contract this step (hint and no-hint plays).
    pub env_calls: u64,
    /// Plays of this step that broke the contract.
    pub violations: u64,
}

impl StepObservations {
    /// Counts the checked calls and the violations of played episodes.
    pub fn note_plays(&mut self, eps: &[crate::play::Episode]) {
        for ep in eps {
            self.env_calls += u64::from(ep.env_calls);
            self.violations += u64::from(ep.failure.is_some());
        }
    }
}

pub(super) fn step_metrics(
    lp: &Loop<'_>,
    obs: StepObservations,
    m: &mut BTreeMap<String, f64>,
) -> Result<(), WorkerError> {
    let envs: Vec<&crate::state::LiveEnv> =
        lp.state.windows.values().flat_map(|w| &w.envs).collect();
    let scored: Vec<ScoredEnv> = envs
        .iter()
        .filter(|e| !e.no_hint_returns.is_empty())
        .map(|e| {
            let s = score_env(lp, e, None);
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
    let vectors: Vec<Vec<f64>> = lp
        .state
        .embeddings
        .iter()
        .map(|e| e.vector.iter().map(|&x| f64::from(x)).collect())
        .collect();
    m.insert("play_env_calls".into(), obs.env_calls as f64);
    m.insert("play_violations".into(), obs.violations as f64);
    if obs.env_calls > 0 {
        m.insert(
            "play_violation_rate".into(),
            obs.violations as f64 / obs.env_calls as f64,
        );
    }
    m.insert(
        "broken_in_play_envs".into(),
        envs.iter().filter(|e| e.broken_seed.is_some()).count() as f64,
    );
    let c = &lp.cfg.metrics;
    let mut rng = spade::seeded_rng(lp.cfg.run.seed, &[seeds::tag::VENDI, lp.state.step]);
    let facts = StepFacts {
        scored,
        zero_std: obs.zero_std,
        acceptance: obs.acceptance,
        formula_reveals: obs.formula_reveals,
        vendi: metrics::vendi::windowed_vendi(&vectors, c.vendi_subsample, c.vendi_draws, &mut rng),
    };
    m.extend(metrics::step_metrics(&facts, c));
    m.insert("envs".into(), envs.len() as f64);
    if lp.state.attempts_total > 0 {
        m.insert(
            "acceptance_rate_run".into(),
            lp.state.accepted_total as f64 / lp.state.attempts_total as f64,
        );
    }
    if !envs.is_empty() {
        m.insert(
            "failed_env_share".into(),
            envs.iter().filter(|e| e.failed.is_some()).count() as f64 / envs.len() as f64,
        );
    }
    Ok(())
}
