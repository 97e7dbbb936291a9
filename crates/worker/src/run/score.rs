//! Closing a window (spec, "One training step", items 7 to 9): designer rewards from all plays
//! of the window, per-skill centring, the delayed designer update with truncated importance
//! sampling, and the memory update.

use super::Loop;
use super::generate::window_key;
use crate::WorkerError;
use crate::play::{Episode, PlayFailure};
use crate::state::LiveEnv;
use spade::EnvKind;
use spade::memory::MemoryRecord;
use spade::report::Message;
use spade::reward::PlayOutcome;
use spade_policy::grpo::GrpoSample;
use spade_policy::train::{MaskedSeq, token_logprobs};
use std::collections::BTreeMap;

/// Adds played episodes to an environment's tallies.
pub fn tally(env: &mut LiveEnv, eps: &[Episode], with_hint: bool) {
    for ep in eps {
        if with_hint {
            env.hint_returns.push(ep.episode_return);
            env.hint_wins += u32::from(ep.won);
        } else {
            env.no_hint_returns.push(ep.episode_return);
            env.no_hint_wins += u32::from(ep.won);
        }
        for r in &ep.rewards {
            let t = format!("{r}");
            if !env.reward_levels.contains(&t) {
                env.reward_levels.push(t);
            }
        }
    }
}

/// The first contract violation among `eps` (played at `step`) retires `env`: it is marked
/// broken with the failing play's seed (so it is not played again and its designer reward is
/// the invalid one), and the report of its new status is returned. `None` when it was already
/// broken or nothing broke.
pub fn broken_in_play(env: &mut LiveEnv, eps: &[Episode], step: u64) -> Option<Message> {
    if env.broken_seed.is_some() {
        return None;
    }
    let (ep, f): (&Episode, &PlayFailure) = eps
        .iter()
        .find_map(|ep| ep.failure.as_ref().map(|f| (ep, f)))?;
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

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// An environment's designer reward and the numbers behind it.
#[derive(Debug, Clone, Copy)]
pub struct Scored {
    pub regret: f64,
    pub win_rate_hint: f64,
    pub win_rate_no_hint: f64,
    pub reward: f64,
}

/// Scores one environment (spec 7) from all its plays of the window. An environment that failed
/// in play (a step timeout, an exception) or lacks plays in either arm gets the invalid reward;
/// with the EMA ablation the reward is the skill's learning potential instead.
pub fn score_env(
    lp: &Loop<'_>,
    env: &LiveEnv,
    ema: Option<&mut spade::reward::EmaLearningPotential>,
) -> Scored {
    let rp = lp.cfg.reward_params();
    let outcomes = |returns: &[f64], wins: u32| -> Vec<PlayOutcome> {
        // Wins are counted, not stored per play: the first `wins` plays stand for them (the
        // score only uses the count and the mean return).
        returns
            .iter()
            .enumerate()
            .map(|(i, &r)| PlayOutcome {
                episode_return: r,
                won: (i as u32) < wins,
            })
            .collect()
    };
    let hint = outcomes(&env.hint_returns, env.hint_wins);
    let no_hint = outcomes(&env.no_hint_returns, env.no_hint_wins);
    let scored = spade::reward::score_environment(&rp, &hint, &no_hint);
    let w = spade::reward::win_rate(&no_hint).unwrap_or(0.0);
    let w_hint = spade::reward::win_rate(&hint).unwrap_or(0.0);
    let regret = spade::reward::regret(&env.hint_returns, &env.no_hint_returns).unwrap_or(0.0);
    let reward = match (&env.failed, scored, ema) {
        // spec 7: an invalid environment or a step timeout.
        (Some(_), _, _) | (None, None, _) => rp.invalid_reward,
        (None, Some(_), Some(e)) => e.reward(&env.skill, w),
        (None, Some(s), None) => s.reward,
    };
    Scored {
        regret,
        win_rate_hint: w_hint,
        win_rate_no_hint: w,
        reward,
    }
}

/// Closes the window of `kind`: scores and reports its environments, updates the memory, and
/// (when `train` and the designer trains) takes the delayed designer step.
pub(super) fn close_window(
    lp: &mut Loop<'_>,
    kind: EnvKind,
    train: bool,
    m: &mut BTreeMap<String, f64>,
) -> Result<(), WorkerError> {
    let key = window_key(kind);
    let Some(window) = lp.state.windows.get(&key).cloned() else {
        return Ok(());
    };
    if window.envs.is_empty() && window.buffer.is_empty() {
        return Ok(());
    }
    let step = lp.state.step;
    let use_ema = lp.cfg.ablation.ema_learning_potential;
    let mut by_env: BTreeMap<String, f64> = BTreeMap::new();
    let mut regrets = Vec::new();
    let mut ema = lp.state.ema.take().filter(|_| use_ema).or_else(|| {
        use_ema.then(|| {
            let g = &lp.cfg.designer.ema;
            spade::reward::EmaLearningPotential::new(g.gamma_fast, g.gamma_slow)
        })
    });
    for env in &window.envs {
        let s = score_env(lp, env, ema.as_mut());
        by_env.insert(env.env_id.clone(), s.reward);
        regrets.push(s.regret);
        lp.pending.push(Message::EnvironmentScored {
            env_id: env.env_id.clone(),
            step,
            regret: s.regret,
            win_rate_hint: s.win_rate_hint,
            win_rate_no_hint: s.win_rate_no_hint,
            designer_reward: s.reward,
            reward_levels: env.reward_levels.len() as u32,
        });
        // spec 9: the last `capacity` records, code excerpt up to `code_chars`.
        lp.state.memory.push(MemoryRecord {
            env_id: env.env_id.clone(),
            step: env.generated_step,
            skill: env.skill.clone(),
            kind: env.kind,
            code: env.code.clone(),
            win_rate: s.win_rate_no_hint,
            regret: s.regret,
        });
    }
    lp.state.ema = ema;
    if let Some(r) = mean(&regrets) {
        m.insert(format!("{}/window_regret", kind.as_str()), r);
    }
    if train && lp.cfg.trains_designer() && !window.buffer.is_empty() {
        designer_update(lp, kind, &window, &by_env, m)?;
    }
    if let Some(w) = lp.state.windows.get_mut(&key) {
        w.envs.clear();
        w.buffer.clear();
    }
    Ok(())
}

/// The delayed designer step: rewards per sample (rejected attempts get the invalid reward),
/// advantages centred per skill (no division by the s.d., spec 7), the loss weight
/// `min(n_agent_samples / n_envs * k, cap)`, and truncated importance weights against the
/// log-probs stored at generation.
fn designer_update(
    lp: &mut Loop<'_>,
    kind: EnvKind,
    window: &crate::state::Window,
    by_env: &BTreeMap<String, f64>,
    m: &mut BTreeMap<String, f64>,
) -> Result<(), WorkerError> {
    lp.phase("designer update")?;
    let invalid = lp.cfg.designer.invalid_reward;
    let rewards: Vec<f64> = window
        .buffer
        .iter()
        .map(|b| {
            if b.accepted {
                by_env.get(&b.sample.env_id).copied().unwrap_or(invalid)
            } else {
                invalid
            }
        })
        .collect();
    let pairs: Vec<(&str, f64)> = window
        .buffer
        .iter()
        .zip(&rewards)
        .map(|(b, r)| (b.sample.skill.as_str(), *r))
        .collect();
    // spec 7: r - mean of r over the same skill, no division by the s.d.
    let advantages = spade::reward::designer_advantages(&pairs);
    let k = lp.cfg.regenerate_every(kind);
    let n_envs: usize = lp.state.windows.values().map(|w| w.envs.len()).sum();
    // spec 7: loss weight = min(n_agent_samples / n_envs * k, cap) with n_agent_samples the
    // no-hint plays of a step.
    let per_env =
        spade::reward::no_hint_plays_per_env(u64::from(lp.cfg.agent.global_batch), n_envs as u64);
    let weight = spade::reward::designer_loss_weight(
        per_env * n_envs as u64,
        n_envs as u64,
        k,
        lp.cfg.designer.loss_weight_cap,
    ) as f32;
    let seqs: Vec<Vec<i64>> = window
        .buffer
        .iter()
        .map(|b| {
            let mut ids = b.sample.prompt_ids.clone();
            ids.extend_from_slice(&b.sample.tokens);
            ids
        })
        .collect();
    let mut samples = Vec::new();
    for (i, (b, adv)) in window.buffer.iter().zip(&advantages).enumerate() {
        let adv = *adv;
        if adv.abs() < 1e-12 || b.sample.tokens.is_empty() {
            continue;
        }
        // The policy's log-probs now (the ratio's reference); the sampler's at generation are
        // the behaviour policy of the truncated importance weight.
        let old = token_logprobs(
            lp.policy.model(),
            std::slice::from_ref(&seqs[i]),
            lp.trainer.config().temperature,
        )?
        .pop()
        .unwrap_or_default();
        let mut behavior = vec![0.0; b.sample.prompt_ids.len()];
        behavior.extend_from_slice(&b.sample.logprobs);
        samples.push(GrpoSample {
            seq: MaskedSeq::prompt_completion(&b.sample.prompt_ids, &b.sample.tokens),
            old_logprobs: old,
            behavior_logprobs: Some(behavior),
            advantage: adv as f32,
            weight,
        });
    }
    m.insert("designer_reward_mean".into(), mean(&rewards).unwrap_or(0.0));
    m.insert("designer_loss_weight".into(), f64::from(weight));
    m.insert("designer_samples".into(), samples.len() as f64);
    if samples.is_empty() {
        return Ok(());
    }
    let st = lp.trainer.step(&lp.policy, &samples)?;
    m.insert("designer_loss".into(), st.loss);
    m.insert("designer_tis_mean".into(), st.mean_tis);
    m.insert("designer_clip_frac".into(), st.clip_frac);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use spade_sandbox::validate::Reason;

    fn live() -> LiveEnv {
        LiveEnv {
            env_id: "e1".into(),
            skill: "s".into(),
            kind: EnvKind::Game,
            code: String::new(),
            hint: String::new(),
            generated_step: 0,
            parent_env_id: None,
            hint_returns: vec![],
            hint_wins: 0,
            no_hint_returns: vec![],
            no_hint_wins: 0,
            reward_levels: vec![],
            failed: None,
            broken_seed: None,
            reveals_solution: false,
        }
    }

    fn episode(seed: i64, failure: Option<PlayFailure>) -> Episode {
        Episode {
            seed,
            with_hint: false,
            transcript: vec![],
            episode_return: 0.0,
            won: false,
            turns: 1,
            terminated: false,
            ids: vec![],
            loss_mask: vec![],
            logprobs: vec![],
            format_errors: 0,
            rewards: vec![],
            env_calls: 2,
            failure,
        }
    }

    #[test]
    fn the_first_violation_marks_the_environment_broken_once_with_reason_and_seed() {
        let mut env = live();
        let ok = [episode(3, None), episode(4, None)];
        assert!(broken_in_play(&mut env, &ok, 1).is_none());
        assert!(env.failed.is_none() && env.broken_seed.is_none());
        let f = PlayFailure {
            reason: Reason::RewardOutOfRange,
            message: "with seed 5: reward 1000000 is outside [-10, 10]".into(),
        };
        let eps = [
            episode(4, None),
            episode(5, Some(f.clone())),
            episode(6, None),
        ];
        let msg = broken_in_play(&mut env, &eps, 2);
        assert_eq!(
            msg,
            Some(Message::EnvironmentBroken {
                env_id: "e1".into(),
                step: 2,
                seed: 5,
                reason: "reward_out_of_range".into(),
                message: f.message.clone(),
            })
        );
        assert_eq!(env.broken_seed, Some(5));
        assert_eq!(env.failed.as_deref(), Some(f.describe().as_str()));
        // Reported once: a later failure changes nothing.
        assert!(broken_in_play(&mut env, &eps, 3).is_none());
    }
}
