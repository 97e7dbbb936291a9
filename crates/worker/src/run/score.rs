//! Closing a window (spec, "One training step", items 7 to 9): designer rewards from the
//! window's plays (the regret from the regeneration step's plays by default, the plateau from
//! all of them), per-skill centring, the memory update, and the designer samples of the window.
//!
//! The designer samples are not trained here: like the reference (`spade/slime/spade_rollout.py`,
//! the delayed environment samples are put first in the step's batch), they join the agent
//! samples of the step in which the window closes, and the step takes one optimizer update
//! ([`super::Loop::play_and_train`]). Their advantage carries the loss weight (the reference puts
//! `env_reward_scale` on the reward, `delayed_env_rewards.py`, `_apply_centered_rewards`), and
//! their token ratios use truncated importance sampling against the log-probs stored at
//! generation.

use super::Loop;
use crate::WorkerError;
use crate::play::{Episode, PlayFailure};
use crate::state::window_key;
use crate::state::{Buffered, LiveEnv};
use spade::EnvKind;
use spade::config::{RegretTiming, RunConfig};
use spade::memory::MemoryRecord;
use spade::report::Message;
use spade::reward::{EmaLearningPotential, PlayOutcome};
use spade_policy::grpo::GrpoSample;
use spade_policy::train::{MaskedSeq, token_logprobs};
use std::collections::BTreeMap;

/// Adds played episodes (played at `step`) to an environment's tallies.
pub fn tally(env: &mut LiveEnv, eps: &[Episode], with_hint: bool, step: u64) {
    if !with_hint && !eps.is_empty() && env.first_no_hint_step.is_none() {
        env.first_no_hint_step = Some(step);
    }
    let first_step = !with_hint && env.first_no_hint_step == Some(step);
    for ep in eps {
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

/// Closes the window of `kind`: scores and reports its environments, updates the memory, and
/// (when the designer trains) queues its designer samples for this step's update.
pub(super) fn close_window(
    lp: &mut Loop<'_>,
    kind: EnvKind,
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
    let cfg = lp.cfg;
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
            let (fast, slow) = ema.per_skill.get(&skill).copied().unwrap_or_default();
            m.insert(format!("ema/{skill}/mu_fast"), fast);
            m.insert(format!("ema/{skill}/mu_slow"), slow);
            m.insert(format!("ema/{skill}/potential"), potential);
        }
    }
    let ema = lp
        .state
        .ema
        .as_ref()
        .filter(|_| cfg.ablation.ema_learning_potential);
    let mut by_env: BTreeMap<String, f64> = BTreeMap::new();
    let mut regrets = Vec::new();
    let mut records = Vec::new();
    for env in &window.envs {
        let s = score_env(cfg, env, ema);
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
        records.push(MemoryRecord {
            env_id: env.env_id.clone(),
            step: env.generated_step,
            skill: env.skill.clone(),
            kind: env.kind,
            code: env.code.clone(),
            win_rate: s.win_rate_no_hint,
            regret: s.regret,
        });
    }
    for r in records {
        lp.state.memory.push(r);
    }
    if let Some(r) = mean(&regrets) {
        m.insert(format!("{}/window_regret", kind.as_str()), r);
    }
    if cfg.trains_designer() && !window.buffer.is_empty() {
        let samples = designer_samples(lp, &window.buffer, &by_env, m)?;
        if !samples.is_empty() {
            lp.designer_pending.push(PendingDesigner {
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
    Ok(())
}

/// The window's designer samples: rewards and per-skill centred advantages
/// ([`designer_targets`]), and the policy's log-probs now as the ratio's reference (the policy
/// does not move before this step's update), with the sampler's log-probs at generation as the
/// behaviour policy of the truncated importance weight.
fn designer_samples(
    lp: &mut Loop<'_>,
    buffer: &[Buffered],
    by_env: &BTreeMap<String, f64>,
    m: &mut BTreeMap<String, f64>,
) -> Result<Vec<GrpoSample>, WorkerError> {
    lp.phase("designer samples")?;
    let d = &lp.cfg.designer;
    let targets = designer_targets(buffer, by_env, d.invalid_reward, d.train_rejected);
    let rewards: Vec<f64> = targets.iter().map(|t| t.reward).collect();
    // Not `designer_reward_mean`: that name is the live window's (`spade::metrics`).
    if let Some(r) = mean(&rewards) {
        m.insert("designer_reward_trained_mean".into(), r);
    }
    let mut samples = Vec::new();
    for t in &targets {
        let Some(b) = buffer.get(t.index) else {
            continue;
        };
        if t.advantage.abs() < 1e-12 || b.sample.tokens.is_empty() {
            continue;
        }
        let mut ids = b.sample.prompt_ids.clone();
        ids.extend_from_slice(&b.sample.tokens);
        let old = token_logprobs(
            lp.policy.model(),
            std::slice::from_ref(&ids),
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
            advantage: t.advantage as f32,
            weight: 1.0,
        });
    }
    Ok(samples)
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

#[cfg(test)]
mod tests {
    use super::*;
    use spade_sandbox::validate::Reason;

    fn live() -> LiveEnv {
        crate::run::generate::fixed_env("e1".into(), "s".into(), EnvKind::Game, String::new())
    }

    /// A review's retirement of a live environment: reported broken (reason
    /// `retired_by_review`, the reviewer's words), never played again, and scored with the
    /// invalid reward although its plays would have earned more; a name that is not live or
    /// already retired changes nothing.
    #[test]
    fn a_retired_environment_reports_broken_and_earns_the_invalid_reward() {
        let cfg = RunConfig::default();
        let env = played_window();
        let before = score_env(&cfg, &env, None).reward;
        assert!(before > cfg.designer.invalid_reward, "{before}");
        let mut windows = std::collections::BTreeMap::from([(
            "game".to_string(),
            crate::state::Window {
                started_step: 4,
                envs: vec![env],
                buffer: vec![],
                round: 0,
            },
        )]);
        let retire = |id: &str| spade::report::Retire {
            env_id: id.into(),
            verdict: "reward_hackable".into(),
            message: "marked reward_hackable by ada: any box wins".into(),
        };
        let msgs = crate::run::retire_live(&mut windows, vec![retire("e1"), retire("e9")], 6);
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        match &msgs[0] {
            Message::EnvironmentBroken {
                env_id,
                step,
                reason,
                message,
                ..
            } => {
                assert_eq!(
                    (env_id.as_str(), *step, reason.as_str()),
                    ("e1", 6, "retired_by_review")
                );
                assert!(message.contains("any box wins"));
            }
            other => panic!("{other:?}"),
        }
        let env = &windows["game"].envs[0];
        assert_eq!(
            env.broken_seed,
            Some(crate::run::RETIRED_SEED),
            "not played again"
        );
        assert_eq!(
            score_env(&cfg, env, None).reward,
            cfg.designer.invalid_reward
        );
        assert!(crate::run::retire_live(&mut windows, vec![retire("e1")], 7).is_empty());
    }

    fn episode(seed: i64, failure: Option<PlayFailure>) -> Episode {
        Episode {
            turns: 1,
            env_calls: 2,
            failure,
            ..Episode::new(seed, false)
        }
    }

    fn ep(ret: f64) -> Episode {
        Episode {
            episode_return: ret,
            won: ret >= 1.0,
            ..episode(0, None)
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// An environment generated at step 4 (k = 4): hint plays won 2 of 4 (mean 0.5); the no-hint
    /// plays of step 4 lost both, those of steps 5 to 7 won all six.
    fn played_window() -> LiveEnv {
        let mut env = LiveEnv {
            generated_step: 4,
            ..live()
        };
        tally(&mut env, &[ep(1.0), ep(1.0), ep(0.0), ep(0.0)], true, 4);
        tally(&mut env, &[ep(0.0), ep(0.0)], false, 4);
        for step in 5..8 {
            tally(&mut env, &[ep(1.0), ep(1.0)], false, step);
        }
        env
    }

    #[test]
    fn matched_timing_regret_uses_the_regeneration_steps_plays() {
        let env = played_window();
        assert_eq!(env.first_no_hint_step, Some(4));
        assert_eq!(env.first_step_returns, vec![0.0, 0.0]);
        assert_eq!((env.no_hint_returns.len(), env.no_hint_wins), (8, 6));
        // delayed_env_rewards.py (blend): regret = R_hint - R_no_hint at offset 0 = 0.5 - 0 =
        // 0.5 -> norm 1; w over the window = 6/8 = 0.75 -> plateau 1 - 0.15/0.25 = 0.4;
        // r = 0.4 * 1 + 0.6 * 0.4 = 0.64.
        let cfg = RunConfig::default();
        let s = score_env(&cfg, &env, None);
        assert!(close(s.regret, 0.5), "{s:?}");
        assert!(close(s.win_rate_no_hint, 0.75));
        assert!(close(s.reward, 0.64), "{s:?}");
        // The window variant (the earlier behaviour): regret 0.5 - 0.75 = -0.25 -> norm 0;
        // r = 0.6 * 0.4 = 0.24.
        let mut window = RunConfig::default();
        window.designer.regret_timing = RegretTiming::Window;
        let s = score_env(&window, &env, None);
        assert!(close(s.regret, -0.25));
        assert!(close(s.reward, 0.24), "{s:?}");
        // A failure in play is invalid whatever the plays.
        let broken = LiveEnv {
            failed: Some("timeout".into()),
            ..env
        };
        assert_eq!(score_env(&cfg, &broken, None).reward, -0.5);
    }

    #[test]
    fn the_ema_variant_scores_against_the_skills_updated_average() {
        // Two environments of skill "s": 6 of 8 and 2 of 8 no-hint wins -> the skill's window
        // win rate is 8 / 16 = 0.5; a failed environment of the skill is left out.
        let a = played_window();
        let mut b = LiveEnv {
            env_id: "e2".into(),
            ..live()
        };
        tally(&mut b, &[ep(1.0), ep(1.0), ep(0.0), ep(0.0)], true, 4);
        tally(&mut b, &[ep(1.0), ep(1.0)], false, 4);
        tally(&mut b, &vec![ep(0.0); 6], false, 5);
        let mut c = played_window();
        c.failed = Some("timeout".into());
        let rates = skill_window_win_rates(&[a.clone(), b.clone(), c]);
        assert_eq!(rates.len(), 1);
        assert!(close(rates["s"], 0.5));
        let mut ema = EmaLearningPotential::new(0.98, 0.85);
        ema.update("s", rates["s"]);
        let mut cfg = RunConfig::default();
        cfg.ablation.ema_learning_potential = true;
        // |0.75 - 0.5| and |0.25 - 0.5|.
        assert!(close(score_env(&cfg, &a, Some(&ema)).reward, 0.25));
        assert!(close(score_env(&cfg, &b, Some(&ema)).reward, 0.25));
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
