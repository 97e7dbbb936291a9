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
use spade::config::{MemoryWinRate, RegretTiming, RunConfig};
use spade::memory::MemoryRecord;
use spade::metrics::{ScoredEnv, StepFacts};
use spade::report::Message;
use spade::reward::{EmaLearningPotential, PlayOutcome};
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
mod tests {
    use super::*;
    use spade_sandbox::validate::Reason;

    fn live() -> LiveEnv {
        crate::run::fixed::fixed_env("e1".into(), "s".into(), EnvKind::Game, String::new())
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
        let msgs =
            crate::run::report::retire_live(&mut windows, vec![retire("e1"), retire("e9")], 6);
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
            Some(crate::run::report::RETIRED_SEED),
            "not played again"
        );
        assert_eq!(
            score_env(&cfg, env, None).reward,
            cfg.designer.invalid_reward
        );
        assert!(crate::run::report::retire_live(&mut windows, vec![retire("e1")], 7).is_empty());
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
    fn the_memory_keeps_the_regeneration_steps_share_of_positive_returns_or_the_windows() {
        // Regeneration step: returns 0.5 (a partial reward, not a win) and 0; then 2 wins.
        let mut env = LiveEnv {
            generated_step: 4,
            ..live()
        };
        tally(&mut env, &[ep(1.0), ep(1.0)], true, 4);
        tally(&mut env, &[ep(0.5), ep(0.0)], false, 4);
        tally(&mut env, &[ep(1.0), ep(1.0)], false, 5);
        // spade_rollout.py: sum(1 for r in plays if r > 0) / len(plays) at regeneration = 1/2.
        let cfg = RunConfig::default();
        let window = score_env(&cfg, &env, None).win_rate_no_hint;
        assert!(close(window, 0.5), "2 wins of 4: {window}");
        assert!(close(memory_win_rate(&cfg, &env, window), 0.5));
        // Step 4 alone with a positive partial return in both plays: the reference counts
        // 2 of 2 (reward > 0), the window's win rate counts the wins (2 of 4).
        env.first_step_returns = vec![0.5, 0.25];
        assert!(close(memory_win_rate(&cfg, &env, window), 1.0));
        let mut earlier = RunConfig::default();
        earlier.memory.win_rate_from = MemoryWinRate::Window;
        assert!(close(memory_win_rate(&earlier, &env, window), 0.5));
        // Not played at its regeneration step: the window's.
        env.first_step_returns.clear();
        assert!(close(memory_win_rate(&cfg, &env, window), 0.5));
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
