//! The RLVE difficulty rule against the reference's numbers (the tests of `rlve.rs`).

use super::*;

fn batch(env: &str, difficulty: u32, correct: u32, wrong: u32) -> Vec<Sample<'_>> {
    let right = std::iter::repeat_n(true, correct as usize);
    let wrong = std::iter::repeat_n(false, wrong as usize);
    right
        .chain(wrong)
        .map(|correct| Sample {
            env,
            difficulty,
            correct,
        })
        .collect()
}

fn two() -> AdaptiveDifficulty {
    AdaptiveDifficulty::new(DifficultyParams::default(), ["A", "B"])
}

#[test]
fn the_defaults_are_rlves() {
    let p = DifficultyParams::default();
    assert_eq!(
        (p.initial, p.window, p.min_prompts, p.samples_per_prompt),
        (0, 4, 8, 16)
    );
    assert_eq!(p.min_accuracy, 0.9);
}

#[test]
fn difficulty_rises_once_accuracy_reaches_the_threshold_over_enough_samples() {
    let mut d = two();
    // 8 prompts x 16 samples = 128; 116 / 128 = 0.906 >= 0.9.
    let checks = d.update(batch("A", 0, 116, 12));
    assert_eq!(d.difficulty("A"), Some(1));
    assert_eq!(checks.len(), 1);
    assert!(checks[0].raised);
    assert_eq!(checks[0].samples, 128);
    // The count starts again at the new difficulty.
    assert_eq!(d.state("A").map(|e| (e.correct, e.samples)), Some((0, 0)));
    assert_eq!(
        d.difficulty("B"),
        Some(0),
        "another environment is untouched"
    );
}

#[test]
fn exactly_the_threshold_raises_it() {
    let mut d = AdaptiveDifficulty::new(
        DifficultyParams {
            min_prompts: 1,
            samples_per_prompt: 10,
            ..DifficultyParams::default()
        },
        ["A"],
    );
    d.update(batch("A", 0, 9, 1));
    assert_eq!(d.difficulty("A"), Some(1));
}

#[test]
fn accuracy_below_the_threshold_keeps_it_and_restarts_the_count() {
    let mut d = two();
    // 115 / 128 = 0.898 < 0.9.
    let checks = d.update(batch("A", 0, 115, 13));
    assert_eq!(d.difficulty("A"), Some(0));
    assert_eq!(checks.len(), 1);
    assert!(!checks[0].raised);
    assert_eq!(d.state("A").map(|e| e.samples), Some(0));
}

#[test]
fn too_few_samples_make_no_check_even_when_all_are_right() {
    let mut d = two();
    let checks = d.update(batch("A", 0, 127, 0));
    assert!(checks.is_empty());
    assert_eq!(d.difficulty("A"), Some(0));
    // The samples carry over to the next batch: one more makes 128, all right.
    d.update(batch("A", 0, 1, 0));
    assert_eq!(d.difficulty("A"), Some(1));
}

#[test]
fn only_samples_at_the_current_difficulty_count() {
    let mut d = two();
    d.update(batch("A", 0, 128, 0));
    assert_eq!(d.difficulty("A"), Some(1));
    // Easier problems from the window, all right: no check.
    assert!(d.update(batch("A", 0, 500, 0)).is_empty());
    assert_eq!(d.difficulty("A"), Some(1));
    // Unknown environments are ignored.
    assert!(d.update(batch("Z", 0, 500, 0)).is_empty());
}

#[test]
fn problems_are_drawn_from_a_window_of_four_difficulties() {
    let mut d = two();
    assert_eq!(d.window("A"), Some(0..=0));
    for _ in 0..5 {
        let now = d.difficulty("A").unwrap_or(0);
        d.update(batch("A", now, 128, 0));
    }
    assert_eq!(d.difficulty("A"), Some(5));
    assert_eq!(d.window("A"), Some(2..=5));
    assert_eq!(d.window("Z"), None);
}

#[test]
fn the_state_round_trips_through_json() {
    let mut d = two();
    d.update(batch("A", 0, 128, 0));
    d.update(batch("B", 0, 3, 2));
    let text = serde_json::to_string(&d).expect("serialises");
    let back: AdaptiveDifficulty = serde_json::from_str(&text).expect("deserialises");
    assert_eq!(back, d);
}
