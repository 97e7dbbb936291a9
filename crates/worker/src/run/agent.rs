//! The agent's part of a step (spec, "One training step", items 5 and 6): the no-hint plays
//! of every live environment (or of the step's draw from a fixed pool), tallied into their
//! windows, and the one GRPO update on the agent's samples and the designer samples of the
//! windows closed in the step.

use super::designer_batch::{self, PendingDesigner};
use super::metrics::{PlayStats, StepObservations, UpdateStats};
use super::setup::concurrency;
use super::{Event, Loop, env_seed, fixed, fnv, play_record, score};
use crate::{WorkerError, play, seeds};
use spade::EnvKind;
use spade::config::FailedPlays;
use spade::report::Message;
use spade_policy::grpo::GrpoSample;
use spade_policy::train::MaskedSeq;
use std::collections::{BTreeMap, BTreeSet};

impl Loop<'_> {
    /// No-hint plays of every live environment (of the step's draw, for fixed-env GRPO): the
    /// agent samples of the step.
    /// Returns the samples, the plays' reports (retirements first) and what they measured.
    pub(super) fn play(
        &mut self,
        selection: Option<&BTreeSet<String>>,
    ) -> Result<Played, WorkerError> {
        let mut played = Played {
            messages: self.apply_retirements(),
            ..Played::default()
        };
        let step = self.state.step;
        let n_envs: usize = match selection {
            Some(sel) => sel.len(),
            None => self.state.windows.values().map(|w| w.envs.len()).sum(),
        };
        if n_envs == 0 {
            return Ok(played);
        }
        // spec 5: ceil(global_batch / n_envs) no-hint plays per environment per step.
        let per_env = spade::reward::no_hint_plays_per_env(
            u64::from(self.cfg.agent.global_batch),
            n_envs as u64,
        ) as usize;
        let popts = self.play_options();
        let mut samples = Vec::new();
        // Zero-advantage plays join the batch under the per-sample mean (the trainer skips
        // their passes; they count in the denominator).
        let keep_zero = self.cfg.grpo.counts_zero_advantage();
        let mut records = Vec::new();
        // Every live environment's plays go to the rollout backend at once; their results are
        // scored below in the windows' order.
        let mut picked: Vec<(String, usize, crate::state::LiveEnv, Vec<i64>)> = vec![];
        for (key, window) in &self.state.windows {
            for (e, env) in window.envs.iter().enumerate() {
                // A broken environment is never played again (its window still scores it).
                if env.broken_seed.is_some() {
                    continue;
                }
                if selection.is_some_and(|sel| !sel.contains(&env.env_id)) {
                    continue;
                }
                let env_seeds: Vec<i64> = (0..per_env)
                    .map(|i| env_seed(self.cfg.run.seed, step, &env.env_id, i))
                    .collect();
                picked.push((key.clone(), e, env.clone(), env_seeds));
            }
        }
        let jobs: Vec<play::PlayJob<'_>> = picked
            .iter()
            .map(|(_, _, env, env_seeds)| play::PlayJob {
                first_index: 0,
                code: &env.code,
                kind: env.kind,
                hint: None,
                seeds: env_seeds.clone(),
                sample_seed: seeds::derive(
                    self.cfg.run.seed,
                    &[seeds::tag::PLAY, step, fnv(&env.env_id)],
                ),
            })
            .collect();
        let n = concurrency(self.cfg, self.opts);
        let (all, engine) = match &self.opts.ranks {
            // Every rank plays its share of each environment's episodes.
            Some(r) => r.play_shared(&self.policy, &self.pool, &jobs, &popts, n)?,
            None => play::play_envs_measured(&self.policy, &self.pool, &jobs, &popts, n)?,
        };
        drop(jobs);
        let (lengths, truncated_share) = PlayStats::shape(all.iter().flatten());
        let mut rlve_wins: Vec<(String, Vec<bool>)> = Vec::new();
        for ((key, e, env, _), eps) in picked.into_iter().zip(all) {
            played.obs.note_plays(&eps);
            if self.state.rlve.is_some() {
                // A play that failed (the environment's fault, or generation's) is no answer.
                let wins = eps
                    .iter()
                    .filter(|x| x.failure.is_none() && x.error.is_none());
                rlve_wins.push((env.env_id.clone(), wins.map(|x| x.won).collect()));
            }
            let w = self
                .state
                .windows
                .get_mut(&key)
                .and_then(|w| w.envs.get_mut(e))
                .ok_or_else(|| WorkerError::Config("window changed during play".into()))?;
            score::tally(w, &eps, false, step);
            *played.plays.entry(env.kind).or_default() += eps.len() as u64;
            records.extend(eps.iter().map(|ep| play_record(&env.env_id, step, ep)));
            // Plays of an environment that broke the contract are kept (reported); under
            // "drop" none of them train, under "minus_one" the failed ones score -1 in the
            // group and the others train. `agent.retire_on` says whether it plays again.
            if let Some(msg) = score::broken_in_play(w, &eps, step, self.cfg.agent.retire_on) {
                played.messages.push(msg);
            }
            if self.cfg.agent.failed_plays == FailedPlays::Drop
                && eps.iter().any(|ep| ep.failure.is_some())
            {
                continue;
            }
            let returns = group_returns(&eps);
            let g = spade::reward::group_advantages(&returns);
            played.obs.zero_std.push(g.zero_std);
            played.obs.all_zero.push(returns.iter().all(|&r| r == 0.0));
            played
                .obs
                .all_positive
                .push(returns.iter().all(|&r| r > 0.0));
            let adv = g.advantages;
            for (ep, a) in eps.iter().zip(&adv) {
                // A failed play's tokens never train (the reference has none for it).
                if ep.failure.is_some() {
                    continue;
                }
                let a = &unterminated_advantage(ep, *a, self.cfg.agent.train_truncated);
                if (*a != 0.0 || keep_zero) && ep.loss_mask.iter().skip(1).any(|&x| x) {
                    samples.push(GrpoSample {
                        seq: MaskedSeq {
                            ids: ep.ids.clone(),
                            loss_mask: ep.loss_mask.clone(),
                        },
                        old_logprobs: ep.logprobs.clone(),
                        behavior_logprobs: None,
                        advantage: *a as f32,
                        weight: 1.0,
                    });
                }
            }
        }
        let logprob_gap = match self.vllm {
            Some(_) => {
                crate::vllm::rescore(&self.policy, &mut samples, self.cfg.agent.temperature)?
            }
            None => None,
        };
        let rlve = self
            .state
            .rlve
            .as_mut()
            .map(|d| fixed::rlve_update(d, self.cfg.run.seed, step, &rlve_wins));
        played.stats = Some(PlayStats {
            plays: records.len(),
            per_env,
            rlve,
            logprob_gap,
            lengths,
            truncated_share,
            engine: engine.engine,
            env_wait_s: engine.env_wait_s,
        });
        played.messages.push(Message::Plays { records });
        played.samples = samples;
        Ok(played)
    }

    /// One GRPO step on the step's agent samples and the designer samples of the windows closed
    /// in it: one batch, one optimizer update (the reference, `spade_rollout.py`, puts the
    /// delayed designer samples first in the step's batch). Reports `loss`, `clip_frac`,
    /// `grad_norm`, `tis_mean` of that update, `agent_samples`, `designer_samples` and
    /// `designer_loss_weight`.
    /// `plays`: the step's no-hint plays per kind, which the designer loss weight needs.
    pub(super) fn train(
        &mut self,
        samples: Vec<GrpoSample>,
        plays: &BTreeMap<EnvKind, u64>,
        designer: Vec<PendingDesigner>,
    ) -> Result<UpdateStats, WorkerError> {
        let (designer, weights) =
            designer_batch::weigh_designer(designer, plays, self.cfg.designer.loss_weight_cap);
        let g = &self.cfg.grpo;
        let cap = (g.trim_to_global_batch && g.counts_zero_advantage())
            .then_some(self.cfg.agent.global_batch as usize);
        let (batch, kept_designer, trimmed) = designer_batch::assemble(designer, samples, cap);
        let signal = |s: &[GrpoSample]| s.iter().filter(|x| x.advantage != 0.0).count();
        let mut stats = UpdateStats {
            agent_samples: signal(&batch[kept_designer..]),
            batch_samples: batch.len(),
            trimmed_samples: trimmed,
            designer: (!weights.is_empty()).then_some((signal(&batch[..kept_designer]), weights)),
            ..UpdateStats::default()
        };
        if batch.is_empty() {
            return Ok(stats);
        }
        self.phase("update")?;
        let step = match &self.opts.ranks {
            Some(r) => r.step(&mut self.trainer, &self.policy, &batch)?,
            None => self.trainer.step(&self.policy, &batch)?,
        };
        if step.tokens == 0 {
            // Every sample had a zero advantage: the trainer took no step, so nothing to report
            // or to sync (the batch still counts in `batch_samples`).
            return Ok(stats);
        }
        stats.grpo = Some(step);
        if let Some(f) = &self.vllm {
            let on = &mut *self.on;
            let log = &mut |l| on(Event::Log(l));
            stats.vllm = Some(crate::vllm::sync_after_update(
                f,
                &self.policy,
                self.state.step + 1,
                log,
            )?);
        }
        Ok(stats)
    }

    pub(crate) fn play_options(&self) -> play::PlayOptions {
        play::PlayOptions {
            max_turns: self.cfg.agent.max_turns,
            max_new_tokens: self.cfg.model.agent_max_new_tokens as usize,
            temperature: self.cfg.agent.temperature,
            cut: play::Cut::new(self.cfg.agent.top_p, self.cfg.agent.top_k),
            max_context: self.cfg.model.max_context as usize,
            max_episode_tokens: self.cfg.agent.max_episode_tokens as usize,
            // 0 = the whole hint.
            max_hint_chars: match self.cfg.hint.max_chars {
                0 => usize::MAX,
                n => n,
            },
            prompts: self.cfg.model.prompts,
            stop_at_violation: self.cfg.agent.failed_plays == FailedPlays::Drop,
            end_on_cut_turn: self.cfg.agent.end_on_cut_turn,
            raw_actions: self.cfg.agent.raw_actions,
            // A template without tool calling would drop the schemas (SmolLM2's).
            tool_template: if self.policy.chat_template().calls_tools() {
                self.cfg.agent.tool_template
            } else {
                spade::config::ToolTemplate::Inline
            },
            envs_inline: false,
            backend: self.backend(),
        }
    }
}

/// The advantage a play trains with: its group's, or 0 for a play that ended without
/// terminating when `agent.train_truncated` is off (the reference's `--spade-compact-filter`
/// zeroes its loss mask after the group's advantages were computed, so its return still
/// moved the others').
pub(super) fn unterminated_advantage(
    ep: &play::Episode,
    advantage: f64,
    train_truncated: bool,
) -> f64 {
    if train_truncated || ep.terminated {
        advantage
    } else {
        0.0
    }
}

/// The return a play the environment broke counts in its group's z-score under
/// `agent.failed_plays = "minus_one"` (the reference's `trajectory_build.py`).
pub(super) const FAILED_PLAY_RETURN: f64 = -1.0;

/// The returns a group's advantages are computed from: each play's return, a failed play's
/// [`FAILED_PLAY_RETURN`].
pub(super) fn group_returns(eps: &[play::Episode]) -> Vec<f64> {
    eps.iter()
        .map(|x| {
            if x.failure.is_some() {
                FAILED_PLAY_RETURN
            } else {
                x.episode_return
            }
        })
        .collect()
}

/// What a step's no-hint plays gave the update.
#[derive(Default)]
pub(super) struct Played {
    /// Agent samples: those with a non-zero advantage, and under `grpo.loss_norm =
    /// "sample_mean"` the zero-advantage ones too (they count in the loss's denominator).
    pub samples: Vec<GrpoSample>,
    /// No-hint plays of the step per environment kind (the designer loss weight's agent
    /// samples).
    pub plays: BTreeMap<EnvKind, u64>,
    /// The reports, in order: retirements, environments broken in play, the plays.
    pub messages: Vec<Message>,
    /// Checked calls, violations and zero-variance groups, for the step's metrics.
    pub obs: StepObservations,
    /// None when nothing was live.
    pub stats: Option<PlayStats>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use spade_sandbox::validate::Reason;

    #[test]
    fn a_failed_play_counts_minus_one_in_its_groups_z_score() {
        let ep = |ret: f64, failed: bool| play::Episode {
            episode_return: ret,
            failure: failed.then(|| play::PlayFailure {
                reason: Reason::Exception,
                message: "with seed 3: ZeroDivisionError".into(),
            }),
            ..play::Episode::new(3, false)
        };
        // Returns 1, 0, (failed), 0 -> 1, 0, -1, 0: mean 0, population std sqrt(0.5).
        let eps = [
            ep(1.0, false),
            ep(0.0, false),
            ep(0.0, true),
            ep(0.0, false),
        ];
        let returns = group_returns(&eps);
        assert_eq!(returns, vec![1.0, 0.0, -1.0, 0.0]);
        let g = spade::reward::group_advantages(&returns);
        let s = 0.5f64.sqrt();
        for (a, want) in g.advantages.iter().zip([1.0 / s, 0.0, -1.0 / s, 0.0]) {
            assert!((a - want).abs() < 1e-9, "{:?}", g.advantages);
        }
        // Leaving the failed play out instead (1, 0, 0: mean 1/3, std 0.471): the plays that
        // lost get -0.707 where the -1 rule gives them 0.
        let kept = [1.0, 0.0, 0.0];
        let d = spade::reward::group_advantages(&kept);
        assert!(
            (d.advantages[1] - (-1.0 / 2.0f64.sqrt())).abs() < 1e-9,
            "{:?}",
            d.advantages
        );
    }

    /// The reference's tool-use filter by hand: a group with one win (1), one loss that
    /// terminated (0) and two plays out of turns (0, not terminated): z-scores +1.732, -0.577,
    /// -0.577, -0.577; with the filter the two out of turns train with 0, without it with
    /// -0.577 like the loss.
    #[test]
    fn a_play_that_ran_out_of_turns_trains_nothing_under_the_tool_use_filter() {
        let ep = |ret: f64, terminated: bool| play::Episode {
            episode_return: ret,
            terminated,
            ..play::Episode::new(1, false)
        };
        let eps = [ep(1.0, true), ep(0.0, true), ep(0.0, false), ep(0.0, false)];
        let g = spade::reward::group_advantages(&group_returns(&eps));
        let (hi, lo) = (3f64.sqrt(), -1.0 / 3f64.sqrt());
        let trained = |filter: bool| -> Vec<f64> {
            eps.iter()
                .zip(&g.advantages)
                .map(|(e, a)| unterminated_advantage(e, *a, !filter))
                .collect()
        };
        let close =
            |got: Vec<f64>, want: [f64; 4]| got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-9);
        assert!(
            close(trained(true), [hi, lo, 0.0, 0.0]),
            "{:?}",
            trained(true)
        );
        assert!(
            close(trained(false), [hi, lo, lo, lo]),
            "{:?}",
            trained(false)
        );
    }
}
