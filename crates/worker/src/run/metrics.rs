//! The step's metrics (spec, "Metrics to log each step"), computed by `spade::metrics` from the
//! facts the loop gathered: the live environments with their window tallies so far (learnable
//! share, easy/medium/hard, regret and both arm means, per-skill win rates, reward levels), this
//! step's play groups (zero-std share), this step's designer attempts (acceptance, rejection
//! reasons, formula reveals), and the Vendi score of the window's environments with the kernel
//! of `metrics.vendi_kernel` (n-gram counts by default), named in its metrics. Worker extras:
//! `envs`, `acceptance_rate_run`, `distinct_accepted_run` (distinct programs accepted so far), `failed_env_share`, and the checks during play: `play_env_calls` (reset and step returns checked this step),
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

/// Adds the live-window metrics to the step's, keeping what the step already reported under
/// the same name (a closing window's numbers are not overwritten by the live window's).
pub fn merge_live(m: &mut BTreeMap<String, f64>, live: BTreeMap<String, f64>) {
    for (k, v) in live {
        m.entry(k).or_insert(v);
    }
}

/// The finite values of `m`, and the names of the others (NaN or infinite: a diverged loss),
/// which a report cannot carry (see `Loop::end_step`).
pub fn finite_only(m: &BTreeMap<String, f64>) -> (BTreeMap<String, f64>, Vec<String>) {
    let mut kept = BTreeMap::new();
    let mut skipped = Vec::new();
    for (k, v) in m {
        if v.is_finite() {
            kept.insert(k.clone(), *v);
        } else {
            skipped.push(k.clone());
        }
    }
    (kept, skipped)
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
        vendi_kernel: kernel.as_str(),
    };
    merge_live(m, metrics::step_metrics(&facts, c));
    m.insert("envs".into(), envs.len() as f64);
    if lp.state.accepted_total > 0 {
        m.insert(
            "distinct_accepted_run".into(),
            lp.state.accepted_code.len() as f64,
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The attack: a loss that diverges to NaN. Serialized into the report it becomes `null`,
    /// which the service refuses, so the run failed; it is left out and named instead, and the
    /// step's metrics still round-trip through JSON.
    #[test]
    fn a_non_finite_metric_is_left_out_not_sent() -> Result<(), serde_json::Error> {
        let m = BTreeMap::from([
            ("loss".to_string(), f64::NAN),
            ("grad_norm".to_string(), f64::INFINITY),
            ("reward_mean".to_string(), 0.5),
        ]);
        let (kept, skipped) = finite_only(&m);
        assert_eq!(kept, BTreeMap::from([("reward_mean".to_string(), 0.5)]));
        assert_eq!(skipped, ["grad_norm", "loss"]);
        let msg = spade::report::Message::Metrics {
            step: 3,
            elapsed_s: 1.0,
            values: kept,
        };
        let back: spade::report::Message = serde_json::from_str(&serde_json::to_string(&msg)?)?;
        assert_eq!(back, msg);
        Ok(())
    }

    #[test]
    fn the_live_window_never_overwrites_what_the_step_reported() {
        // A closing window reported its trained designer rewards (mean 0.25 of 0.5 and 0.0);
        // the live window's blend of the new environments (0.8) comes after.
        let mut m = BTreeMap::from([
            ("designer_reward_trained_mean".to_string(), 0.25),
            ("regret_mean".to_string(), 0.1),
        ]);
        let live = BTreeMap::from([
            ("designer_reward_mean".to_string(), 0.8),
            ("regret_mean".to_string(), 0.4),
        ]);
        merge_live(&mut m, live);
        assert_eq!(m["designer_reward_trained_mean"], 0.25);
        assert_eq!(m["designer_reward_mean"], 0.8);
        assert_eq!(m["regret_mean"], 0.1, "the step's own value stays");
    }
}
