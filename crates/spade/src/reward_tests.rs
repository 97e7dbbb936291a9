//! The spec's worked examples, and properties that must hold for any input.

use super::*;
use proptest::prelude::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn plays(returns: &[f64]) -> Vec<PlayOutcome> {
    returns
        .iter()
        .map(|&r| PlayOutcome {
            episode_return: r,
            won: r >= 1.0,
        })
        .collect()
}

#[test]
fn regret_matches_the_worked_examples_of_the_spec() {
    for (hint, no_hint, want_regret, want_norm) in [
        (1.00, 0.00, 1.00, 1.0),
        (0.65, 0.30, 0.35, 1.0),
        (0.40, 0.34, 0.06, 0.4),
    ] {
        let r = regret(&[hint], &[no_hint]).expect("both arms played");
        assert!(close(r, want_regret), "regret {r} != {want_regret}");
        assert!(close(regret_norm(r), want_norm), "norm of {r}");
    }
    assert_eq!(regret(&[], &[0.0]), None);
    assert_eq!(regret_norm(-0.3), 0.0);
}

#[test]
fn plateau_matches_the_worked_examples_of_the_spec() {
    for (w, want) in [
        (0.5, 1.0),
        (0.275, 0.5),
        (0.1, 0.0),
        (0.725, 0.5),
        (0.15, 0.0),
        (0.85, 0.0),
        (0.4, 1.0),
        (0.6, 1.0),
    ] {
        assert!(
            close(plateau(w), want),
            "plateau({w}) = {} != {want}",
            plateau(w)
        );
    }
    assert!(close(designer_reward(0.35, 0.5), 1.0));
    assert!(close(designer_reward(0.0, 0.1), 0.0));
    assert!(close(designer_reward(0.06, 0.275), 0.4 * 0.4 + 0.6 * 0.5));
}

#[test]
fn episode_returns_clamp_terminated_and_zero_truncated() {
    assert_eq!(episode_return(1.0, true), 1.0);
    assert_eq!(episode_return(7.5, true), 1.0);
    assert_eq!(episode_return(-3.0, true), -1.0);
    assert_eq!(episode_return(0.3, true), 0.3);
    assert_eq!(
        episode_return(1.0, false),
        0.0,
        "truncated: 0 whatever the last reward"
    );
    assert_eq!(episode_return(f64::NAN, true), 0.0);
}

#[test]
fn group_advantages_are_z_scores_and_flag_zero_std() {
    let g = group_advantages(&[1.0, 0.0, 1.0, 0.0]);
    assert!(!g.zero_std);
    assert_eq!(g.advantages, vec![1.0, -1.0, 1.0, -1.0]);
    let g = group_advantages(&[0.0; 8]);
    assert!(g.zero_std);
    assert_eq!(g.advantages, vec![0.0; 8]);
    assert!(group_advantages(&[1.0]).zero_std);
    assert!(group_advantages(&[]).advantages.is_empty());
}

#[test]
fn environments_are_scored_from_both_arms() {
    let p = RewardParams::default();
    // Hint wins 3 of 4, no hint 1 of 4: regret 0.5, w = 0.25.
    let s = score_environment(
        &p,
        &plays(&[1.0, 1.0, 1.0, 0.0]),
        &plays(&[1.0, 0.0, 0.0, 0.0]),
    )
    .expect("both arms");
    assert!(close(s.regret, 0.5));
    assert!(close(s.win_rate_hint, 0.75));
    assert!(close(s.win_rate_no_hint, 0.25));
    assert!(close(s.reward, 0.4 * 1.0 + 0.6 * plateau(0.25)));
    assert!(score_environment(&p, &plays(&[1.0]), &[]).is_none());
}

#[test]
fn designer_advantages_centre_per_skill_without_std() {
    let a = designer_advantages(&[
        ("math", 1.0),
        ("logic", -0.5),
        ("math", 0.0),
        ("logic", 0.5),
    ]);
    assert_eq!(a, vec![0.5, -0.5, -0.5, 0.5]);
    let a = designer_advantages(&[("math", 0.9), ("math", 0.1), ("math", 0.2)]);
    assert!(close(a[0], 0.9 - 0.4), "no division by std: {a:?}");
}

#[test]
fn loss_weight_and_plays_per_env_follow_the_spec() {
    // rewards.py compute_env_reward_scale: 192 agent samples / 24 designer samples * k 4 = 32.
    assert!(
        close(designer_loss_weight(192, 24, 4, 50.0), 32.0),
        "spec: 32 for games"
    );
    // Tool use: 192 / 24 * 8 = 64, capped at 50.
    assert!(
        close(designer_loss_weight(192, 24, 8, 50.0), 50.0),
        "capped at 50"
    );
    // 10 of 24 slots accepted (rejected attempts train nothing): 192 / 10 * 4 = 76.8 -> 50.
    assert!(close(designer_loss_weight(192, 10, 4, 50.0), 50.0));
    assert!(close(designer_loss_weight(96, 24, 4, 50.0), 16.0));
    // rewards.py: 1.0 when either count is 0.
    assert_eq!(designer_loss_weight(192, 0, 4, 50.0), 1.0);
    assert_eq!(designer_loss_weight(0, 24, 4, 50.0), 1.0);
    assert_eq!(no_hint_plays_per_env(192, 24), 8);
    assert_eq!(no_hint_plays_per_env(12, 5), 3);
}

#[test]
fn matched_timing_takes_regret_from_the_regeneration_step_and_w_from_the_window() {
    // delayed_env_rewards.py, recompute_delayed_env_rewards_blend: regret = R_hint - R_no_hint
    // at the regeneration step (offset 0); the plateau's w over the whole window.
    let p = RewardParams::default();
    let hint = plays(&[1.0, 1.0, 0.0, 0.0]); // mean 0.5
    let regen = plays(&[0.0, 0.0]); // regeneration step: mean 0
    let window = plays(&[0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]); // 6 of 8 won, mean 0.75
    let m = score_environment_timed(&p, &hint, &regen, &window).expect("both arms");
    // regret 0.5 - 0 = 0.5 -> norm 1; plateau(0.75) = 1 - 0.15 / 0.25 = 0.4;
    // r = 0.4 * 1 + 0.6 * 0.4 = 0.64.
    assert!(close(m.regret, 0.5));
    assert!(close(m.win_rate_no_hint, 0.75));
    assert!(close(m.mean_return_no_hint, 0.75));
    assert!(close(m.reward, 0.64), "{}", m.reward);
    // The window variant: regret 0.5 - 0.75 = -0.25 -> norm 0; r = 0.6 * 0.4 = 0.24.
    let w = score_environment(&p, &hint, &window).expect("both arms");
    assert!(close(w.regret, -0.25));
    assert!(close(w.reward, 0.24), "{}", w.reward);
    assert!(score_environment_timed(&p, &hint, &[], &window).is_none());
}

#[test]
fn ema_learning_potential_puts_gamma_on_the_new_value_and_scores_after_the_update() {
    // learning_potential.py: mu <- (1 - gamma) * mu + gamma * r; baseline = mu_slow.
    let mut ema = EmaLearningPotential::new(0.98, 0.85);
    assert_eq!(ema.baseline("math"), 0.0, "no average yet");
    // Window 1: the skill's plays won 4 of 8 -> both averages start at 0.5.
    assert_eq!(ema.update("math", 0.5), 0.0);
    // Environments at 0.75 and 0.25 are scored after the update: |0.75 - 0.5| = 0.25.
    assert!(close(ema.raw("math", 0.75), 0.25));
    assert!(close(ema.raw("math", 0.25), 0.25));
    // Window 2: 6 of 8 -> mu_slow = 0.15 * 0.5 + 0.85 * 0.75 = 0.7125,
    // mu_fast = 0.02 * 0.5 + 0.98 * 0.75 = 0.745; potential |0.745 - 0.7125| = 0.0325.
    assert!(close(ema.update("math", 0.75), 0.0325));
    let (fast, slow) = ema.per_skill["math"];
    assert!(close(slow, 0.7125), "{slow}");
    assert!(close(fast, 0.745), "{fast}");
    // Environments at 1.0 and 0.5: |1 - 0.7125| = 0.2875, |0.5 - 0.7125| = 0.2125.
    assert!(close(ema.raw("math", 1.0), 0.2875));
    assert!(close(ema.raw("math", 0.5), 0.2125));
    assert_eq!(ema.update("logic", 0.3), 0.0, "skills are separate");
    let back: EmaLearningPotential =
        serde_json::from_str(&serde_json::to_string(&ema).expect("serialises")).expect("parses");
    assert_eq!(back, ema);
}

proptest! {
    #[test]
    fn designer_rewards_stay_in_range(regret in -2.0f64..2.0, w in 0.0f64..=1.0) {
        let r = designer_reward(regret, w);
        prop_assert!((0.0..=1.0).contains(&r));
        prop_assert!((0.0..=1.0).contains(&regret_norm(regret)));
    }

    #[test]
    fn plateau_is_symmetric_about_its_centre(d in 0.0f64..0.5) {
        prop_assert!((plateau(0.5 - d) - plateau(0.5 + d)).abs() < 1e-9);
    }

    #[test]
    fn episode_returns_stay_in_range(last in -1e6f64..1e6, terminated: bool) {
        prop_assert!((-1.0..=1.0).contains(&episode_return(last, terminated)));
    }

    #[test]
    fn advantages_have_mean_zero_and_ignore_shifts(
        returns in prop::collection::vec(-1.0f64..=1.0, 1..32),
        shift in -5.0f64..5.0,
    ) {
        let g = group_advantages(&returns);
        let sum: f64 = g.advantages.iter().sum();
        prop_assert!(sum.abs() < 1e-6, "mean {}", sum);
        if !g.zero_std {
            let var = g.advantages.iter().map(|a| a * a).sum::<f64>() / returns.len() as f64;
            prop_assert!((var - 1.0).abs() < 1e-6);
        }
        let shifted: Vec<f64> = returns.iter().map(|r| r + shift).collect();
        let h = group_advantages(&shifted);
        prop_assert_eq!(g.zero_std, h.zero_std);
        for (a, b) in g.advantages.iter().zip(&h.advantages) {
            prop_assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn designer_advantages_sum_to_zero_per_skill(
        rs in prop::collection::vec((0usize..3, -0.5f64..=1.0), 1..40),
    ) {
        let skills = ["a", "b", "c"];
        let samples: Vec<(&str, f64)> = rs.iter().map(|&(s, r)| (skills[s], r)).collect();
        let adv = designer_advantages(&samples);
        for skill in skills {
            let sum: f64 = samples.iter().zip(&adv).filter(|((s, _), _)| *s == skill).map(|(_, a)| a).sum();
            prop_assert!(sum.abs() < 1e-9);
        }
    }
}

#[test]
fn the_plateau_reads_the_mean_return_as_the_reference_does_or_the_win_rate() {
    // A game with partial rewards: four no-hint plays end with 0.5, 0.5, 0.5 and a win (1.0).
    let hint = vec![
        PlayOutcome {
            episode_return: 1.0,
            won: true,
        };
        4
    ];
    let window: Vec<PlayOutcome> = [0.5, 0.5, 0.5, 1.0]
        .iter()
        .map(|&r| PlayOutcome {
            episode_return: r,
            won: r == 1.0,
        })
        .collect();
    // regret = 1 - 0.625 = 0.375 -> norm 1 either way.
    // Mean return 0.625 (reference, delayed_env_rewards.py's `win_rate`): plateau 1 - 0.025 /
    // 0.25 = 0.9, r = 0.4 + 0.6 * 0.9 = 0.94.
    let reference = RewardParams {
        plateau_on_return: true,
        ..RewardParams::default()
    };
    let m = score_environment(&reference, &hint, &window).expect("both arms");
    assert!(close(m.reward, 0.94), "{}", m.reward);
    // Win rate 0.25 (spec 7 read literally): plateau 1 - 0.15 / 0.25 = 0.4, r = 0.4 + 0.24 =
    // 0.64.
    let spec = RewardParams::default();
    let m = score_environment(&spec, &hint, &window).expect("both arms");
    assert!(close(m.reward, 0.64), "{}", m.reward);
    assert!(close(m.win_rate_no_hint, 0.25) && close(m.mean_return_no_hint, 0.625));
    // The run configuration's default is the reference's.
    assert!(
        crate::config::RunConfig::default()
            .reward_params()
            .plateau_on_return
    );
}
