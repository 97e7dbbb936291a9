//! Shares, thresholds, the formula-reveal heuristic and the step summary.

use super::*;

#[test]
fn learnable_and_difficulty_shares_use_the_spec_thresholds() {
    let w = [0.0, 0.1, 0.2, 0.5, 0.8, 0.9, 1.0, 0.79];
    assert_eq!(learnable_share(&w, 0.2, 0.8), Some(0.5));
    let d = difficulty(&w, 0.8, 0.2).expect("non-empty");
    assert_eq!((d.easy, d.hard), (0.25, 0.25));
    assert!((d.medium - 0.5).abs() < 1e-12);
    assert_eq!(learnable_share(&[], 0.2, 0.8), None);
    // A fraction, as the reference logs it: 1 of 4 groups -> 0.25 (was 25.0).
    assert_eq!(zero_std_group_pct(&[true, false, false, false]), Some(0.25));
}

#[test]
fn acceptance_levels_and_skills() {
    let mut a = Acceptance::default();
    assert_eq!(a.rate(), None);
    a.accept();
    a.reject("not_solvable");
    a.reject("not_solvable");
    a.reject("timeout");
    assert_eq!(a.rate(), Some(0.25));
    assert_eq!(a.reasons["not_solvable"], 2);
    assert_eq!(
        distinct_reward_levels(&[1.0, 0.0, 1.0, 0.0000001, -0.1, f64::NAN]),
        3
    );
    let by_skill = per_skill_win_rate(&[("a", 1.0), ("b", 0.5), ("a", 0.0)]);
    assert_eq!(by_skill["a"], 0.5);
    assert_eq!(by_skill["b"], 0.5);
}

#[test]
fn formula_reveals_are_flagged_cheaply() {
    assert!(reveals_formula(
        "Find the sum. (The answer is 7.)",
        "\\boxed{7}"
    ));
    assert!(reveals_formula(
        "Sort these: pear apple. Expected: apple pear",
        "\\boxed{apple pear}"
    ));
    assert!(reveals_formula(
        "Compute 6 * 7 = 42 and report it.",
        "\\boxed{42}"
    ));
    assert!(
        !reveals_formula("How many coins for 13 with 1, 3, 4?", "\\boxed{4}"),
        "one digit occurs by chance"
    );
    assert!(!reveals_formula("Compute 6 * 7.", "\\boxed{42}"));
    assert!(
        !reveals_formula("Is 421 prime?", "\\boxed{42}"),
        "tokens, not substrings"
    );
    assert!(!reveals_formula("anything", "\\boxed{ }"));
}

#[test]
fn step_metrics_are_named_and_skip_missing_data() {
    let env = |skill: &str, w: f64, regret: f64| ScoredEnv {
        skill: skill.into(),
        win_rate_no_hint: w,
        regret,
        mean_return_hint: w + regret,
        mean_return_no_hint: w,
        designer_reward: regret,
        reward_levels: 2,
    };
    let mut acceptance = Acceptance::default();
    acceptance.accept();
    acceptance.reject("nondeterministic");
    let facts = StepFacts {
        scored: vec![
            env("Optimization", 0.5, 0.3),
            env("Causal Inference", 0.9, 0.1),
        ],
        zero_std: vec![false, true],
        all_zero: vec![false, true, false, false],
        all_positive: vec![false, false, false, false],
        acceptance,
        formula_reveals: vec![false, false, true, false],
        vendi: None,
        vendi_kernel: "ngram",
    };
    let m = step_metrics(&facts, &MetricsSection::default());
    assert_eq!(m["learnable_share"], 0.5);
    assert_eq!(m["easy_share"], 0.5);
    assert_eq!(m["zero_std_group_pct"], 0.5);
    assert_eq!(m["all_zero_group_pct"], 0.25);
    assert_eq!(m["all_positive_group_pct"], 0.0);
    assert!((m["regret_mean"] - 0.2).abs() < 1e-12);
    assert!((m["r_hint"] - 0.9).abs() < 1e-12);
    assert!((m["designer_reward_mean"] - 0.2).abs() < 1e-12);
    assert_eq!(m["win_rate/Optimization"], 0.5);
    assert_eq!(m["acceptance_rate"], 0.5);
    assert_eq!(m["rejections/nondeterministic"], 1.0);
    assert_eq!(m["formula_reveal_rate"], 0.25);
    assert!(!m.contains_key("vendi_ngram_mean"));
    // The kernel is in the name, so a chart shows which similarity produced the score.
    let v = vendi::VendiSummary {
        mean: 6.0,
        sd: 0.5,
        n_envs: 30,
        subsample: 24,
        draws: 12,
    };
    let named = step_metrics(
        &StepFacts {
            vendi: Some(v),
            ..facts.clone()
        },
        &MetricsSection::default(),
    );
    assert_eq!(named["vendi_ngram_mean"], 6.0);
    assert_eq!(named["vendi_ngram_per_n"], 0.25, "6 / 24");
    assert!(!named.contains_key("vendi_mean"));
    let empty = step_metrics(&StepFacts::default(), &MetricsSection::default());
    assert!(empty.is_empty(), "{empty:?}");
}
