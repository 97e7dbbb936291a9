//! Rewards and advantages of both roles (spec, "One training step", items 6 and 7): the agent's
//! episode return and per-environment z-score advantages; the designer's delayed reward
//! (hint-based regret and the difficulty plateau, blended), its per-skill centring and loss
//! weight; and the EMA learning-potential variant of the ablations.
//!
//! The free functions use the spec's numbers; the `_with` forms take [`RewardParams`] (built by
//! `RunConfig::reward_params`) so a run configuration can move them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Regret is normalised by this and clipped to [0, 1] (spec 7: `clip(regret / 0.15, 0, 1)`).
pub const REGRET_SCALE: f64 = 0.15;
/// Weight of normalised regret in the blend (spec 7: `0.4 * regret_norm + 0.6 * plateau`).
pub const REGRET_WEIGHT: f64 = 0.4;
/// Weight of the plateau term in the blend (spec 7).
pub const PLATEAU_WEIGHT: f64 = 0.6;
/// The plateau is 1 on [0.4, 0.6] (spec 7).
pub const PLATEAU_LOW: f64 = 0.4;
pub const PLATEAU_HIGH: f64 = 0.6;
/// ... and falls linearly to 0 over this width on each side (spec 7: ramp 0.25).
pub const PLATEAU_RAMP: f64 = 0.25;
/// Designer reward of an invalid environment or a step timeout (spec 7: -0.5).
pub const INVALID_REWARD: f64 = -0.5;
/// Cap of the designer loss weight (spec 7: 50).
pub const LOSS_WEIGHT_CAP: f64 = 50.0;
/// Standard deviations below this count as zero: the group gives no signal (spec 6).
pub const ZERO_STD: f64 = 1e-8;

/// The designer reward's numbers (defaults: the spec's).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RewardParams {
    pub regret_scale: f64,
    pub regret_weight: f64,
    pub plateau_weight: f64,
    pub plateau_low: f64,
    pub plateau_high: f64,
    pub plateau_ramp: f64,
    pub invalid_reward: f64,
    pub loss_weight_cap: f64,
    /// The plateau reads the window's mean no-hint return (the reference) instead of its win
    /// rate (`designer.plateau_reads`).
    pub plateau_on_return: bool,
}

impl Default for RewardParams {
    fn default() -> Self {
        Self {
            regret_scale: REGRET_SCALE,
            regret_weight: REGRET_WEIGHT,
            plateau_weight: PLATEAU_WEIGHT,
            plateau_low: PLATEAU_LOW,
            plateau_high: PLATEAU_HIGH,
            plateau_ramp: PLATEAU_RAMP,
            invalid_reward: INVALID_REWARD,
            loss_weight_cap: LOSS_WEIGHT_CAP,
            plateau_on_return: false,
        }
    }
}

/// Agent reward (spec 6): the last reward clamped to [-1, 1] if the episode terminated, else 0
/// (truncated: out of turns). A non-finite last reward counts as 0; the sandbox already
/// rejects environments whose rewards leave [-10, 10].
pub fn episode_return(last_reward: f64, terminated: bool) -> f64 {
    if terminated && last_reward.is_finite() {
        last_reward.clamp(-1.0, 1.0)
    } else {
        0.0
    }
}

/// Advantages of one environment's group of plays.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupAdvantages {
    /// One per play, in input order; all 0 when `zero_std`.
    pub advantages: Vec<f64>,
    /// The returns did not vary (or there were fewer than two): no learning signal.
    pub zero_std: bool,
}

/// Z-score advantages within a group (spec 6): `(r - mean) / std`, with the population
/// standard deviation. A group whose returns do not vary gets all-zero advantages and
/// `zero_std` (counted by `metrics::zero_std_group_pct`).
pub fn group_advantages(returns: &[f64]) -> GroupAdvantages {
    let n = returns.len();
    let Some(m) = mean(returns) else {
        return GroupAdvantages {
            advantages: Vec::new(),
            zero_std: true,
        };
    };
    let var = returns.iter().map(|r| (r - m).powi(2)).sum::<f64>() / n as f64;
    let std = var.sqrt();
    if n < 2 || std < ZERO_STD || !std.is_finite() {
        return GroupAdvantages {
            advantages: vec![0.0; n],
            zero_std: true,
        };
    }
    GroupAdvantages {
        advantages: returns.iter().map(|r| (r - m) / std).collect(),
        zero_std: false,
    }
}

/// `mean(hint returns) - mean(no-hint returns)`; `None` when either arm has no plays.
pub fn regret(hint_returns: &[f64], no_hint_returns: &[f64]) -> Option<f64> {
    Some(mean(hint_returns)? - mean(no_hint_returns)?)
}

/// `clip(regret / 0.15, 0, 1)`.
pub fn regret_norm(regret: f64) -> f64 {
    regret_norm_with(&RewardParams::default(), regret)
}

/// `clip(regret / scale, 0, 1)`.
pub fn regret_norm_with(p: &RewardParams, regret: f64) -> f64 {
    (regret / p.regret_scale).clamp(0.0, 1.0)
}

/// 1 for a no-hint win rate in [0.4, 0.6], falling linearly to 0 at 0.15 and 0.85.
pub fn plateau(win_rate: f64) -> f64 {
    plateau_with(&RewardParams::default(), win_rate)
}

/// 1 on [low, high], falling linearly to 0 over `ramp` on each side.
pub fn plateau_with(p: &RewardParams, win_rate: f64) -> f64 {
    let distance = if win_rate < p.plateau_low {
        p.plateau_low - win_rate
    } else if win_rate > p.plateau_high {
        win_rate - p.plateau_high
    } else {
        0.0
    };
    (1.0 - distance / p.plateau_ramp).clamp(0.0, 1.0)
}

/// `0.4 * regret_norm + 0.6 * plateau(w)`.
pub fn designer_reward(regret: f64, no_hint_win_rate: f64) -> f64 {
    designer_reward_with(&RewardParams::default(), regret, no_hint_win_rate)
}

/// `regret_weight * regret_norm + plateau_weight * plateau(w)`.
pub fn designer_reward_with(p: &RewardParams, regret: f64, no_hint_win_rate: f64) -> f64 {
    p.regret_weight * regret_norm_with(p, regret)
        + p.plateau_weight * plateau_with(p, no_hint_win_rate)
}

/// One finished play, as the reward needs it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlayOutcome {
    pub episode_return: f64,
    pub won: bool,
}

/// An environment's delayed score over its k-step window (spec 7).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EnvScore {
    pub regret: f64,
    /// Share of hint plays won.
    pub win_rate_hint: f64,
    /// Share of no-hint plays won: `w` of the plateau.
    pub win_rate_no_hint: f64,
    pub mean_return_hint: f64,
    pub mean_return_no_hint: f64,
    /// The designer reward `r`.
    pub reward: f64,
}

/// Scores an environment from all its plays in the window (regret and plateau from the same
/// plays: the `window` regret timing); `None` when either arm is empty (the caller then treats
/// the environment as invalid: [`RewardParams::invalid_reward`]).
pub fn score_environment(
    p: &RewardParams,
    hint: &[PlayOutcome],
    no_hint: &[PlayOutcome],
) -> Option<EnvScore> {
    score_environment_timed(p, hint, no_hint, no_hint)
}

/// Scores an environment with the regret's no-hint arm and the plateau's window apart: regret =
/// mean(hint returns) - mean(`regret_no_hint` returns), the plateau's `w` = the win rate of
/// `window_no_hint` (its mean return with [`RewardParams::plateau_on_return`]). The reference's "matched timing" (`spade/core/utils/delayed_env_rewards.py`,
/// `recompute_delayed_env_rewards_blend`) passes the no-hint plays of the regeneration step as
/// `regret_no_hint` (the hint plays see the same policy) and all plays of the window as
/// `window_no_hint`. `None` when an arm is empty.
pub fn score_environment_timed(
    p: &RewardParams,
    hint: &[PlayOutcome],
    regret_no_hint: &[PlayOutcome],
    window_no_hint: &[PlayOutcome],
) -> Option<EnvScore> {
    let returns = |ps: &[PlayOutcome]| ps.iter().map(|o| o.episode_return).collect::<Vec<_>>();
    let (rh, rr, rw) = (
        returns(hint),
        returns(regret_no_hint),
        returns(window_no_hint),
    );
    let regret = regret(&rh, &rr)?;
    let win_rate_no_hint = win_rate(window_no_hint)?;
    let mean_return_no_hint = mean(&rw)?;
    let w = if p.plateau_on_return {
        mean_return_no_hint
    } else {
        win_rate_no_hint
    };
    Some(EnvScore {
        regret,
        win_rate_hint: win_rate(hint)?,
        win_rate_no_hint,
        mean_return_hint: mean(&rh)?,
        mean_return_no_hint,
        reward: designer_reward_with(p, regret, w),
    })
}

/// Share of plays won; `None` for no plays.
pub fn win_rate(plays: &[PlayOutcome]) -> Option<f64> {
    let wins = plays.iter().filter(|o| o.won).count();
    (!plays.is_empty()).then(|| wins as f64 / plays.len() as f64)
}

/// Designer advantages (spec 7): `r - mean of r over the same skill`, no division by std.
/// `samples` are (skill, reward) pairs; the result is in input order.
pub fn designer_advantages<S: AsRef<str>>(samples: &[(S, f64)]) -> Vec<f64> {
    let mut sums: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for (skill, r) in samples {
        let e = sums.entry(skill.as_ref()).or_default();
        e.0 += r;
        e.1 += 1;
    }
    samples
        .iter()
        .map(|(skill, r)| {
            let (sum, n) = sums.get(skill.as_ref()).copied().unwrap_or((0.0, 1));
            r - sum / n as f64
        })
        .collect()
}

/// Designer loss weight (spec 7): `min(n_agent_samples / n_designer_samples * k, cap)`; 32 for
/// the paper's games (192 / 24 * 4). The reference (`spade/core/utils/rewards.py`,
/// `compute_env_reward_scale`) counts the agent samples of the step that trains the designer
/// samples and the designer samples trained; like it, 1 when either count is 0.
pub fn designer_loss_weight(
    n_agent_samples: u64,
    n_designer_samples: u64,
    k: u64,
    cap: f64,
) -> f64 {
    if n_designer_samples == 0 || n_agent_samples == 0 {
        return 1.0;
    }
    (n_agent_samples as f64 / n_designer_samples as f64 * k as f64).min(cap)
}

/// No-hint plays per environment per step (spec 5): `ceil(global_batch / n_envs)`, 192 / 24 = 8.
pub fn no_hint_plays_per_env(global_batch: u64, n_envs: u64) -> u64 {
    if n_envs == 0 {
        0
    } else {
        global_batch.div_ceil(n_envs)
    }
}

/// Per-skill moving averages of the EMA learning-potential reward (spec, "Baselines and
/// ablations": `mu_fast` with gamma 0.98, `mu_slow` with gamma 0.85, raw = |w - mu_slow|), as the
/// reference computes them (`spade/core/learning_potential.py`, `LearningPotential.update`, and
/// `spade/core/utils/delayed_env_rewards.py`, `recompute_delayed_env_rewards` with `update_lp`):
/// gamma weighs the *new* value, `mu <- (1 - gamma) * mu + gamma * r`; a skill's first value
/// initialises both averages. When a window closes, each skill is updated once, with the win rate
/// of all its environments' no-hint plays of the window ([`Self::update`]), and only then are its
/// environments scored against the updated `mu_slow` ([`Self::raw`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EmaLearningPotential {
    pub gamma_fast: f64,
    pub gamma_slow: f64,
    /// skill -> (mu_fast, mu_slow)
    pub per_skill: BTreeMap<String, (f64, f64)>,
}

impl EmaLearningPotential {
    pub fn new(gamma_fast: f64, gamma_slow: f64) -> Self {
        Self {
            gamma_fast,
            gamma_slow,
            per_skill: BTreeMap::new(),
        }
    }

    /// Folds the window's win rate `r` of `skill` into its averages (gamma on the new value);
    /// returns the learning potential `|mu_fast - mu_slow|` after the update.
    pub fn update(&mut self, skill: &str, r: f64) -> f64 {
        let (gf, gs) = (self.gamma_fast, self.gamma_slow);
        let e = self
            .per_skill
            .entry(skill.to_string())
            .and_modify(|(fast, slow)| {
                *fast = (1.0 - gf) * *fast + gf * r;
                *slow = (1.0 - gs) * *slow + gs * r;
            })
            .or_insert((r, r));
        (e.0 - e.1).abs()
    }

    /// The skill's baseline: `mu_slow` (0 before its first update).
    pub fn baseline(&self, skill: &str) -> f64 {
        self.per_skill.get(skill).map_or(0.0, |e| e.1)
    }

    /// The raw reward of an environment of `skill` with no-hint win rate `w`: `|w - mu_slow|`.
    pub fn raw(&self, skill: &str, w: f64) -> f64 {
        (w - self.baseline(skill)).abs()
    }
}

impl From<&crate::report::PlayRecord> for PlayOutcome {
    fn from(p: &crate::report::PlayRecord) -> Self {
        Self {
            episode_return: p.episode_return,
            won: p.won,
        }
    }
}

pub(crate) fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

#[cfg(test)]
#[path = "reward_tests.rs"]
mod tests;
