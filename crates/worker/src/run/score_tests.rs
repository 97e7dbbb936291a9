//! Closing a window's tests: tallies, scores, retirements and memory records.

use super::*;

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
    let msgs = crate::run::report::retire_live(&mut windows, vec![retire("e1"), retire("e9")], 6);
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
    assert!(broken_in_play(&mut env, &ok, 1, RetireOn::Violation).is_none());
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
    let msg = broken_in_play(&mut env, &eps, 2, RetireOn::Violation);
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
    assert!(broken_in_play(&mut env, &eps, 3, RetireOn::Violation).is_none());
}

/// The reference's rule (`agent.retire_on = "hang"`): a play that raised fails alone and
/// is no outcome of the game (the window counts the other two plays), the environment stays
/// live; a step timeout retires it. Under "violation" the exception retires it at once.
#[test]
fn only_a_hang_retires_under_the_reference_rule_and_a_failed_play_is_no_outcome() {
    let failure = |reason, message: &str| PlayFailure {
        reason,
        message: message.into(),
    };
    let raised = Episode {
        episode_return: 0.0,
        ..episode(
            7,
            Some(failure(Reason::Exception, "with seed 7: KeyError: 'x'")),
        )
    };
    let eps = [ep(1.0), raised.clone(), ep(0.0)];
    let mut env = live();
    tally(&mut env, &eps, false, 3);
    assert_eq!(env.no_hint_returns, vec![1.0, 0.0]);
    assert_eq!(env.no_hint_wins, 1);
    assert_eq!(env.first_step_returns, vec![1.0, 0.0]);
    assert!(broken_in_play(&mut env, &eps, 3, RetireOn::Hang).is_none());
    assert!(env.broken_seed.is_none() && env.failed.is_none());

    let hung = episode(
        8,
        Some(failure(Reason::Timeout, "with seed 8: step took over 30 s")),
    );
    let msg = broken_in_play(&mut env, &[ep(1.0), hung], 4, RetireOn::Hang);
    assert!(
        matches!(&msg, Some(Message::EnvironmentBroken { seed: 8, reason, .. }) if reason == "timeout"),
        "{msg:?}"
    );
    assert_eq!(env.broken_seed, Some(8));

    let mut strict = live();
    assert!(broken_in_play(&mut strict, &eps, 3, RetireOn::Violation).is_some());
    assert_eq!(strict.broken_seed, Some(7));
    for (reason, retired) in [
        (Reason::Exception, false),
        (Reason::BadReturnType, false),
        (Reason::RewardOutOfRange, false),
        (Reason::ObservationTooLong, false),
        (Reason::Timeout, true),
        (Reason::RunnerCrashed, true),
    ] {
        assert_eq!(retires(RetireOn::Hang, reason), retired, "{reason:?}");
        assert!(retires(RetireOn::Violation, reason));
    }
}
