//! The designer's part of a step's batch (spec, "One training step", item 7). The samples of
//! a closing window are not trained when it closes: like the reference
//! (`spade/slime/spade_rollout.py`, the delayed environment samples are put first in the step's
//! batch), they join the agent samples of the step in which the window closes, and the step
//! takes one optimizer update ([`super::agent`]). Their advantage carries the loss weight (the
//! reference puts `env_reward_scale` on the reward, `delayed_env_rewards.py`,
//! `_apply_centered_rewards`), and their token ratios use truncated importance sampling against
//! the log-probs stored at generation.

use super::Loop;
use super::metrics::mean;
use crate::WorkerError;
use crate::state::Buffered;
use spade::EnvKind;
use spade_policy::grpo::GrpoSample;
use spade_policy::train::{MaskedSeq, token_logprobs};
use std::collections::BTreeMap;

/// One designer sample's part in the update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DesignerTarget {
    /// Index into the window's buffer.
    pub index: usize,
    /// Its designer reward `r`.
    pub reward: f64,
    /// `r` minus the mean `r` of its skill's trained samples (spec 7, no division by the s.d.);
    /// the loss weight multiplies it when the batch is assembled.
    pub advantage: f64,
}

/// Which buffered designer samples train and with what reward and centred advantage: accepted
/// attempts with their environment's reward (`invalid` when it was not scored); rejected
/// attempts yield no sample (the reference, `spade/core/orchestrator.py`: a failed attempt
/// returns no trajectory) unless `train_rejected`, which trains them at `invalid` and counts
/// them in the skill's mean.
pub fn designer_targets(
    buffer: &[Buffered],
    by_env: &BTreeMap<String, f64>,
    invalid: f64,
    train_rejected: bool,
) -> Vec<DesignerTarget> {
    let chosen: Vec<(usize, &str, f64)> = buffer
        .iter()
        .enumerate()
        .filter(|(_, b)| b.accepted || train_rejected)
        .map(|(i, b)| {
            let r = if b.accepted {
                by_env.get(&b.sample.env_id).copied().unwrap_or(invalid)
            } else {
                invalid
            };
            (i, b.sample.skill.as_str(), r)
        })
        .collect();
    let pairs: Vec<(&str, f64)> = chosen.iter().map(|&(_, s, r)| (s, r)).collect();
    let advantages = spade::reward::designer_advantages(&pairs);
    chosen
        .iter()
        .zip(advantages)
        .map(|(&(index, _, reward), advantage)| DesignerTarget {
            index,
            reward,
            advantage,
        })
        .collect()
}

/// Designer samples of a closed window, waiting for the step's batch: their advantages are
/// centred but not yet weighted (the weight needs the step's agent samples).
#[derive(Debug, Clone)]
pub struct PendingDesigner {
    pub kind: EnvKind,
    /// k of the kind (the loss weight's factor).
    pub k: u64,
    pub samples: Vec<GrpoSample>,
}

/// The window's designer samples: rewards and per-skill centred advantages
/// ([`designer_targets`]), and the policy's log-probs now as the ratio's reference (the policy
/// does not move before this step's update), with the sampler's log-probs at generation as the
/// behaviour policy of the truncated importance weight.
/// Also returns the mean reward of the samples that train.
pub(super) fn designer_samples(
    lp: &mut Loop<'_>,
    buffer: &[Buffered],
    by_env: &BTreeMap<String, f64>,
) -> Result<(Vec<GrpoSample>, Option<f64>), WorkerError> {
    lp.phase("designer samples")?;
    let d = &lp.cfg.designer;
    let targets = designer_targets(buffer, by_env, d.invalid_reward, d.train_rejected);
    let rewards: Vec<f64> = targets.iter().map(|t| t.reward).collect();
    // The reference trains every designer sample, zero-advantage ones included.
    let keep_zero = lp.cfg.grpo.counts_zero_advantage();
    let mut samples = Vec::new();
    for t in &targets {
        let Some(b) = buffer.get(t.index) else {
            continue;
        };
        let zero = t.advantage.abs() < 1e-12;
        if (zero && !keep_zero) || b.sample.tokens.is_empty() {
            continue;
        }
        let mut behavior = vec![0.0; b.sample.prompt_ids.len()];
        behavior.extend_from_slice(&b.sample.logprobs);
        // A zero-advantage sample's ratio never reaches the loss: no forward pass for it.
        let old = if zero {
            behavior.clone()
        } else {
            let mut ids = b.sample.prompt_ids.clone();
            ids.extend_from_slice(&b.sample.tokens);
            token_logprobs(
                lp.policy.model(),
                std::slice::from_ref(&ids),
                lp.trainer.config().temperature,
            )?
            .pop()
            .unwrap_or_default()
        };
        let advantage = if zero { 0.0 } else { t.advantage as f32 };
        samples.push(GrpoSample {
            seq: MaskedSeq::prompt_completion(&b.sample.prompt_ids, &b.sample.tokens),
            old_logprobs: old,
            behavior_logprobs: Some(behavior),
            advantage,
            weight: 1.0,
        });
    }
    Ok((samples, mean(&rewards)))
}

/// The designer samples of the closed windows, weighted for the step's batch: each group's
/// advantages times `min(n_agent / n_designer * k, cap)` (spec 7; `rewards.py`,
/// `compute_env_reward_scale`), `n_agent` the no-hint plays of the step on environments of the
/// group's kind. Returns the samples and the weight of each group, by kind.
pub fn weigh_designer(
    pending: Vec<PendingDesigner>,
    agent_plays: &BTreeMap<EnvKind, u64>,
    cap: f64,
) -> (Vec<GrpoSample>, BTreeMap<EnvKind, f64>) {
    let mut out = Vec::new();
    let mut weights = BTreeMap::new();
    for g in pending {
        let n_agent = agent_plays.get(&g.kind).copied().unwrap_or(0);
        let w = spade::reward::designer_loss_weight(n_agent, g.samples.len() as u64, g.k, cap);
        weights.insert(g.kind, w);
        out.extend(g.samples.into_iter().map(|mut s| {
            s.advantage *= w as f32;
            s
        }));
    }
    (out, weights)
}

/// The step's batch as the reference builds it (`spade_rollout.py`): the designer samples
/// first, then the agent's; with `cap`, cut to that many samples, so the surplus agent samples
/// go. Returns the batch, how many designer samples it kept and how many samples were cut.
pub fn assemble(
    designer: Vec<GrpoSample>,
    agent: Vec<GrpoSample>,
    cap: Option<usize>,
) -> (Vec<GrpoSample>, usize, usize) {
    let mut batch = designer;
    let designer = batch.len();
    batch.extend(agent);
    let cut = match cap {
        Some(cap) if batch.len() > cap => {
            let n = batch.len() - cap;
            batch.truncate(cap);
            n
        }
        _ => 0,
    };
    let kept = designer.min(batch.len());
    (batch, kept, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(advantage: f32, n: usize) -> Vec<GrpoSample> {
        (0..n)
            .map(|_| GrpoSample {
                seq: MaskedSeq::prompt_completion(&[1], &[2]),
                old_logprobs: vec![0.0; 2],
                behavior_logprobs: None,
                advantage,
                weight: 1.0,
            })
            .collect()
    }

    /// The paper's shape: 30 designer samples beside 192 agent plays, a global batch of 192.
    /// The reference keeps every designer sample and cuts 30 agent samples; without the cap
    /// (the earlier behaviour, and the tiny demos) all 222 train.
    #[test]
    fn the_batch_puts_designer_samples_first_and_cuts_the_agent_surplus() {
        let (batch, kept, cut) = assemble(marked(2.0, 30), marked(-1.0, 192), Some(192));
        assert_eq!((batch.len(), kept, cut), (192, 30, 30));
        assert!(batch[..30].iter().all(|s| s.advantage == 2.0));
        assert!(batch[30..].iter().all(|s| s.advantage == -1.0));
        let (batch, kept, cut) = assemble(marked(2.0, 30), marked(-1.0, 192), None);
        assert_eq!((batch.len(), kept, cut), (222, 30, 0));
        // More designer samples than the cap: the batch is designer samples only.
        let (batch, kept, cut) = assemble(marked(2.0, 5), marked(-1.0, 3), Some(4));
        assert_eq!((batch.len(), kept, cut), (4, 4, 4));
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    fn buffered(env_id: &str, skill: &str, accepted: bool) -> Buffered {
        Buffered {
            sample: crate::designer::DesignerSample {
                env_id: env_id.into(),
                skill: skill.into(),
                prompt_ids: vec![1, 2],
                tokens: vec![3],
                logprobs: vec![-0.5],
            },
            accepted,
            generated_step: 0,
        }
    }

    #[test]
    fn rejected_attempts_yield_no_designer_sample() {
        let buffer = [
            buffered("a1", "A", true),
            buffered("a2", "A", false),
            buffered("a3", "A", true),
            buffered("b1", "B", true),
            buffered("b2", "B", false),
        ];
        let by_env = BTreeMap::from([
            ("a1".to_string(), 0.8),
            ("a3".to_string(), 0.2),
            ("b1".to_string(), 0.5),
        ]);
        // orchestrator.py: a failed attempt returns no trajectory. Skill A's mean is
        // (0.8 + 0.2) / 2 = 0.5 -> +0.3 and -0.3; B's only sample is centred to 0.
        let t = designer_targets(&buffer, &by_env, -0.5, false);
        let got: Vec<(usize, f64)> = t.iter().map(|t| (t.index, t.advantage)).collect();
        assert_eq!(got.len(), 3);
        for ((i, a), (wi, wa)) in got.iter().zip([(0, 0.3), (2, -0.3), (3, 0.0)]) {
            assert_eq!(*i, wi);
            assert!(close(*a, wa), "{got:?}");
        }
        // The variant (the earlier behaviour): rejected attempts at -0.5 in the centring.
        // A: (0.8 - 0.5 + 0.2) / 3 = 1/6 -> 0.8 - 1/6, -0.5 - 1/6, 0.2 - 1/6; B: 0 -> 0.5, -0.5.
        let t = designer_targets(&buffer, &by_env, -0.5, true);
        let want = [
            0.8 - 1.0 / 6.0,
            -0.5 - 1.0 / 6.0,
            0.2 - 1.0 / 6.0,
            0.5,
            -0.5,
        ];
        assert_eq!(t.len(), 5);
        for (t, w) in t.iter().zip(want) {
            assert!(close(t.advantage, w), "{t:?} != {w}");
        }
    }

    #[test]
    fn designer_samples_are_weighted_on_the_advantage_for_the_steps_batch() {
        let sample = |adv: f32| GrpoSample {
            seq: MaskedSeq::prompt_completion(&[1, 2], &[3]),
            old_logprobs: vec![0.0; 3],
            behavior_logprobs: Some(vec![0.0; 3]),
            advantage: adv,
            weight: 1.0,
        };
        let pending = vec![PendingDesigner {
            kind: EnvKind::Game,
            k: 4,
            samples: (0..24)
                .map(|i| sample(if i % 2 == 0 { 0.5 } else { -0.5 }))
                .collect(),
        }];
        // 192 no-hint plays of games this step / 24 designer samples * k 4 = 32
        // (rewards.py compute_env_reward_scale), on the advantage, loss weight 1.
        let plays = BTreeMap::from([(EnvKind::Game, 192)]);
        let (batch, weights) = weigh_designer(pending, &plays, 50.0);
        assert_eq!(weights[&EnvKind::Game], 32.0);
        assert_eq!(batch.len(), 24);
        assert_eq!(batch[0].advantage, 16.0);
        assert_eq!(batch[1].advantage, -16.0);
        assert!(batch.iter().all(|s| s.weight == 1.0));
    }
}
