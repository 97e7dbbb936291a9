//! For a fixed set of answers (correct, wrong, partially right, malformed), the scores that
//! spade-eval computes in the sandbox equal reasoning-gym's `score_answer` run directly.

use serde_json::json;
use spade_eval::rg::{Category, RgSession, dataset_seed, hard_tasks};

const DIRECT: &str = r#"
import json, sys
import reasoning_gym
out = []
for case in json.load(sys.stdin):
    ds = reasoning_gym.create_dataset(case["dataset"], seed=case["seed"], size=case["size"], **case["config"])
    entry = ds[case["index"]]
    try:
        out.append({"score": float(ds.score_answer(case["answer"], entry)), "raised": False})
    except Exception:
        out.append({"score": 0.0, "raised": True})
print(json.dumps(out))
"#;

/// The answers to score for one question: its reference answer, and answers that are wrong,
/// partly right (the reference inside extra text, or cut short) and malformed.
fn answers_for(reference: Option<&str>) -> Vec<Option<String>> {
    let r = reference.unwrap_or("1");
    let half: String = r.chars().take((r.chars().count() / 2).max(1)).collect();
    vec![
        Some(r.to_string()),
        Some("0".into()),
        Some(format!("The answer is {r}.")),
        Some(half),
        None,
        Some(String::new()),
        Some("}{ \\boxed{ [[\"".into()),
        Some("x".repeat(3000)),
    ]
}

#[test]
fn our_scores_equal_score_answer_run_directly() {
    let wanted = [
        "arithmetic/basic_arithmetic",
        "arithmetic/fraction_simplification",
        "algorithmic/word_sorting",
        "algorithmic/graph_color",
        "cognition/color_cube_rotation",
        "logic/knights_knaves",
        "logic/propositional_logic",
    ];
    let tasks: Vec<_> = hard_tasks(&Category::ALL)
        .into_iter()
        .filter(|t| wanted.contains(&t.name().as_str()))
        .collect();
    assert_eq!(
        tasks.len(),
        wanted.len(),
        "a dataset left the hard settings"
    );
    let pool = super::pool();
    let size = 2;
    let (mut cases, mut ours) = (vec![], vec![]);
    for task in &tasks {
        let mut leased = pool.checkout().unwrap_or_else(|e| panic!("runner: {e}"));
        let seed = dataset_seed(7, &task.dataset);
        let mut session = RgSession::open(&mut leased.runner, task, seed, size)
            .unwrap_or_else(|e| panic!("{}: {e}", task.name()));
        let (mut indices, mut answers) = (vec![], vec![]);
        for (i, q) in session.questions.iter().enumerate() {
            assert!(!q.question.is_empty(), "{}: empty question", task.name());
            for a in answers_for(q.answer.as_deref()) {
                indices.push(i);
                cases.push(json!({
                    "dataset": task.dataset, "seed": seed, "size": size,
                    "config": task.config, "index": i, "answer": a,
                    "task": task.name(),
                }));
                answers.push(a);
            }
        }
        let scored = session
            .score(&indices, &answers)
            .unwrap_or_else(|e| panic!("{}: {e}", task.name()));
        ours.extend(scored);
    }
    let direct = super::python_json(DIRECT, &json!(cases));
    let direct = direct.as_array().cloned().unwrap_or_default();
    assert_eq!(direct.len(), ours.len());
    let mut saw = (false, false, false);
    for ((case, d), o) in cases.iter().zip(&direct).zip(&ours) {
        let expected = d["score"].as_f64().unwrap_or(f64::NAN);
        assert_eq!(
            o.score, expected,
            "{} question {} answer {:.60}: ours {o:?}, score_answer {d}",
            case["task"], case["index"], case["answer"]
        );
        assert_eq!(
            o.error.is_some(),
            d["raised"] == json!(true),
            "{case}: {o:?}"
        );
        saw.0 |= o.score == 1.0;
        saw.1 |= o.score == 0.0;
        saw.2 |= o.score > 0.0 && o.score < 1.0;
    }
    // The fixed answers reach full, zero and partial credit, so the comparison means something.
    assert_eq!(saw, (true, true, true), "scores seen (1, 0, partial)");
}

#[test]
fn the_same_seed_gives_the_same_questions_and_another_seed_others() {
    let task = hard_tasks(&[Category::Logic])
        .into_iter()
        .find(|t| t.dataset == "knights_knaves")
        .unwrap_or_else(|| panic!("knights_knaves left the hard settings"));
    let pool = super::pool();
    let mut questions = vec![];
    for seed in [1, 1, 2] {
        let mut leased = pool.checkout().unwrap_or_else(|e| panic!("runner: {e}"));
        let s = RgSession::open(
            &mut leased.runner,
            &task,
            dataset_seed(seed, "knights_knaves"),
            2,
        )
        .unwrap();
        questions.push(s.questions.clone());
    }
    assert_eq!(questions[0], questions[1]);
    assert_ne!(questions[0], questions[2]);
}

#[test]
fn every_hard_dataset_generates_in_the_sandbox() {
    // One runner for all of them, as an evaluation uses it: a reasoning-gym release that
    // renames a dataset or rejects a hard config fails here, not in a user's run.
    let pool = super::pool();
    let mut leased = pool.checkout().unwrap_or_else(|e| panic!("runner: {e}"));
    let tasks = hard_tasks(&Category::ALL);
    assert_eq!(tasks.len(), 58);
    for task in &tasks {
        let mut s = RgSession::open(&mut leased.runner, task, dataset_seed(0, &task.dataset), 1)
            .unwrap_or_else(|e| panic!("{}: {e}", task.name()));
        let q = &s.questions[0];
        assert!(
            !q.question.is_empty() && q.question.chars().count() <= 4000,
            "{}: a question of {} characters",
            task.name(),
            q.question.chars().count()
        );
        let reference = q.answer.clone();
        let scored = s
            .score(&[0], &[reference])
            .unwrap_or_else(|e| panic!("{}: {e}", task.name()));
        assert!((0.0..=1.0).contains(&scored[0].score), "{}", task.name());
    }
}
