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
    assert!(
        close(designer_loss_weight(192, 24, 4, 50.0), 32.0),
        "spec: 32 for games"
    );
    assert!(
        close(designer_loss_weight(192, 8, 8, 50.0), 50.0),
        "capped at 50"
    );
    assert_eq!(designer_loss_weight(192, 0, 4, 50.0), 0.0);
    assert_eq!(no_hint_plays_per_env(192, 24), 8);
    assert_eq!(no_hint_plays_per_env(12, 5), 3);
}

#[test]
fn ema_learning_potential_measures_change_against_the_slow_average() {
    let mut ema = EmaLearningPotential::new(0.98, 0.85);
    assert_eq!(
        ema.reward("math", 0.2),
        0.0,
        "first environment initialises"
    );
    let r = ema.reward("math", 0.8);
    assert!(close(r, 0.6));
    let (fast, slow) = ema.per_skill["math"];
    assert!(close(slow, 0.85 * 0.2 + 0.15 * 0.8));
    assert!(close(fast, 0.98 * 0.2 + 0.02 * 0.8));
    assert_eq!(ema.reward("logic", 0.5), 0.0, "skills are separate");
}

#[test]
fn the_scorer_follows_the_configured_variant() {
    let mut cfg = crate::config::RunConfig::tiny_cpu_demo();
    let (hint, no_hint) = (plays(&[1.0, 1.0]), plays(&[1.0, 0.0]));
    let mut spade = DesignerScorer::from_config(&cfg);
    let s = spade.score("math", &hint, &no_hint).expect("both arms");
    assert!(close(s.reward, designer_reward(0.5, 0.5)));
    assert_eq!(spade.invalid(), -0.5);
    assert!(spade.score("math", &hint, &[]).is_none());
    cfg.ablation.ema_learning_potential = true;
    let mut ema = DesignerScorer::from_config(&cfg);
    assert_eq!(
        ema.score("math", &hint, &plays(&[0.0, 0.0]))
            .map(|s| s.reward),
        Some(0.0)
    );
    let s = ema.score("math", &hint, &no_hint).expect("both arms");
    assert!(close(s.reward, 0.5), "|0.5 - mu_slow (0)|");
    let back: DesignerScorer =
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
