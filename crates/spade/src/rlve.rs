//! RLVE's adaptive difficulty, per environment (Zeng et al., "RLVE: Scaling Up Reinforcement
//! Learning for Language Models with Adaptive Verifiable Environments"; the rule as the
//! authors' code runs it: `RLVEManager` in `tinker-cookbook/.../recipes/rlve/procgen_env.py`,
//! its numbers the defaults of `recipes/rlve/train.py`).
//!
//! Each environment has a current (maximum) difficulty `d`, the number of `update()`s of its
//! parameter controller. Problems are drawn at a difficulty in the sliding window
//! `max(0, d - window + 1) ..= d`. Only answers to problems at `d` itself count towards the
//! environment's accuracy; once at least `min_prompts * samples_per_prompt` of them were
//! counted, the accuracy is checked: at or above `min_accuracy` the difficulty rises by one.
//! Either way the count starts again (a check that fails waits for as many new samples).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::RangeInclusive;

/// The rule's numbers; [`Default`] is RLVE's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DifficultyParams {
    /// Every environment's difficulty at the start (RLVE `init_difficulty = 0`).
    pub initial: u32,
    /// How many difficulties up to the current one problems are drawn from (RLVE
    /// `difficulty_sliding_window_size = 4`).
    pub window: u32,
    /// Prompts answered at the current difficulty before a check (RLVE
    /// `min_prompts_before_difficulty_check = 8`).
    pub min_prompts: u32,
    /// Samples per prompt (RLVE `n_samples_per_prompt = group_size = 16`); a check needs
    /// `min_prompts * samples_per_prompt` samples.
    pub samples_per_prompt: u32,
    /// The accuracy at which the difficulty rises (RLVE `min_metric_to_increase_difficulty =
    /// 0.9`, compared with `>=`).
    pub min_accuracy: f64,
}

impl Default for DifficultyParams {
    fn default() -> Self {
        Self {
            initial: 0,
            window: 4,
            min_prompts: 8,
            samples_per_prompt: 16,
            min_accuracy: 0.9,
        }
    }
}

/// One environment's state: its difficulty and the samples counted at it since the last check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvDifficulty {
    pub difficulty: u32,
    pub correct: u32,
    pub samples: u32,
}

/// One answered problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    pub env: &'a str,
    /// The difficulty the problem was drawn at.
    pub difficulty: u32,
    /// Whether the answer reached the environment's passing threshold.
    pub correct: bool,
}

/// A check of one environment at the end of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub env: String,
    pub accuracy: f64,
    pub samples: u32,
    /// The difficulty after the check.
    pub difficulty: u32,
    pub raised: bool,
}

/// Every environment's difficulty. Serialisable, so a resumed run continues from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveDifficulty {
    pub params: DifficultyParams,
    envs: BTreeMap<String, EnvDifficulty>,
}

impl AdaptiveDifficulty {
    pub fn new<S: Into<String>>(
        params: DifficultyParams,
        envs: impl IntoIterator<Item = S>,
    ) -> Self {
        let start = EnvDifficulty {
            difficulty: params.initial,
            correct: 0,
            samples: 0,
        };
        let envs = envs.into_iter().map(|e| (e.into(), start)).collect();
        Self { params, envs }
    }

    /// The environment's current difficulty, `None` for an environment it does not track.
    pub fn difficulty(&self, env: &str) -> Option<u32> {
        self.envs.get(env).map(|e| e.difficulty)
    }

    /// Every tracked environment's difficulty, in the order of their names.
    pub fn difficulties(&self) -> impl Iterator<Item = u32> + '_ {
        self.envs.values().map(|e| e.difficulty)
    }

    pub fn state(&self, env: &str) -> Option<EnvDifficulty> {
        self.envs.get(env).copied()
    }

    /// The difficulties a problem of `env` may be drawn at (RLVE draws one uniformly).
    pub fn window(&self, env: &str) -> Option<RangeInclusive<u32>> {
        let d = self.difficulty(env)?;
        let low = (d + 1).saturating_sub(self.params.window.max(1));
        Some(low..=d)
    }

    /// Counts a batch's samples, then checks every environment that has enough of them; returns
    /// the checks made. Samples of environments it does not track, or below the current
    /// difficulty, are not counted (as in RLVE); one above it is impossible there and ignored.
    pub fn update<'a>(&mut self, samples: impl IntoIterator<Item = Sample<'a>>) -> Vec<Check> {
        for s in samples {
            let Some(e) = self.envs.get_mut(s.env) else {
                continue;
            };
            if s.difficulty != e.difficulty {
                continue;
            }
            e.samples += 1;
            e.correct += u32::from(s.correct);
        }
        let needed = self
            .params
            .min_prompts
            .saturating_mul(self.params.samples_per_prompt)
            .max(1);
        let mut checks = Vec::new();
        for (name, e) in &mut self.envs {
            if e.samples < needed {
                continue;
            }
            let accuracy = f64::from(e.correct) / f64::from(e.samples);
            let raised = accuracy >= self.params.min_accuracy;
            if raised {
                e.difficulty += 1;
            }
            checks.push(Check {
                env: name.clone(),
                accuracy,
                samples: e.samples,
                difficulty: e.difficulty,
                raised,
            });
            e.correct = 0;
            e.samples = 0;
        }
        checks
    }
}

#[cfg(test)]
#[path = "rlve_tests.rs"]
mod tests;
