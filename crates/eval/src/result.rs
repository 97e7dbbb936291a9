//! Results: per item, per task (mean score, n, standard error, pass@k) and per suite, as serde
//! structs, and their conversion to the reporting contract's `BenchmarkResult` messages.
//!
//! With k samples per question (`--samples k`) a task's mean is **Avg@k**: every question's
//! mean over its k samples, averaged over questions (so the standard error is over questions,
//! not over the n*k samples). **pass@k** is the unbiased estimator of Chen et al. (2021),
//! `1 - C(n-c, k) / C(n, k)` for a question with c correct samples out of n, averaged over
//! questions; a sample is correct when it scores 1.

use serde::{Deserialize, Serialize};
use spade::report::Message;

/// The task name of the aggregate row in [`SuiteResult::to_messages`].
pub const AGGREGATE_TASK: &str = "all";

/// One sample of one question (or one episode) and its score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemResult {
    /// Position in the task (question index, or episode number).
    pub index: u32,
    /// Which of the question's samples this is (0 to k-1; always 0 with one sample).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sample: u32,
    /// In [0, 1]: reasoning-gym's `score_answer`, 1/0 for a math-verify match, 1/0 for a win.
    pub score: f64,
    /// What was scored: the last `\boxed{}` content (truncated to 500 characters), or the
    /// episode's last action; None when the reply had no box.
    pub answer: Option<String>,
    /// What else identifies the sample: the option order shown for multiple choice, why a
    /// program failed its tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Why the item could not be answered or scored normally (it then scores 0): a prompt
    /// longer than the model's context, an exception in the scorer, an environment error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn one() -> u32 {
    1
}

/// pass@k of a task or a suite, with its standard error (as for the mean).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassAtK {
    pub k: u32,
    pub mean: f64,
    pub stderr: Option<f64>,
}

/// One task: a reasoning-gym dataset, a QA group, or one environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub task: String,
    /// Questions scored (episodes, for an environment).
    pub n: u32,
    /// Samples per question (1 unless `--samples` asked for more).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub samples: u32,
    /// Mean score (Avg@k with k samples; 0 when n is 0).
    pub mean: f64,
    /// Standard error of the mean over questions, s / sqrt(n) with the n - 1 sample deviation;
    /// None for n < 2.
    pub stderr: Option<f64>,
    /// pass@k for k = 1, 2, 4, ... up to the samples per question (k = samples included);
    /// empty for environments played once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_at_k: Vec<PassAtK>,
    /// Samples that carry an error (they are scored 0).
    pub item_errors: u32,
    /// Wall-clock seconds spent on the task (generation, sandbox, model).
    pub elapsed_s: f64,
    /// Set when the task could not run at all (then n is 0 and it is left out of the aggregate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<ItemResult>,
}

impl TaskResult {
    /// A task from its item results: the samples of one question are the items with its
    /// index. Every question must have the same number of samples (an evaluation draws k for
    /// each); a question with fewer is scored over the samples it has.
    pub fn from_items(task: impl Into<String>, items: Vec<ItemResult>, elapsed_s: f64) -> Self {
        let questions = by_question(&items);
        let means: Vec<f64> = questions
            .iter()
            .map(|q| q.iter().sum::<f64>() / q.len() as f64)
            .collect();
        let (mean, stderr) = mean_stderr(&means);
        let samples = questions.iter().map(Vec::len).max().unwrap_or(1).max(1) as u32;
        let pass_at_k = if samples > 1 {
            let counts: Vec<(u32, u32)> = questions.iter().map(|q| counts(q)).collect();
            pass_at_ks(&counts, samples)
        } else {
            vec![]
        };
        Self {
            task: task.into(),
            n: questions.len() as u32,
            samples,
            mean,
            stderr,
            pass_at_k,
            item_errors: items.iter().filter(|i| i.error.is_some()).count() as u32,
            elapsed_s,
            error: None,
            items,
        }
    }

    /// An environment's episodes read as k samples of one problem: pass@k is the chance that
    /// at least one of k episodes wins (the mean and its standard error stay over episodes).
    pub fn with_episode_pass_at_k(mut self) -> Self {
        let scores: Vec<f64> = self.items.iter().map(|i| i.score).collect();
        let k = scores.len() as u32;
        if k > 1 && self.error.is_none() {
            self.pass_at_k = pass_at_ks(&[counts(&scores)], k);
        }
        self
    }

    /// A task that could not run.
    pub fn failed(task: impl Into<String>, error: String, elapsed_s: f64) -> Self {
        Self {
            task: task.into(),
            n: 0,
            samples: 1,
            mean: 0.0,
            stderr: None,
            pass_at_k: vec![],
            item_errors: 0,
            elapsed_s,
            error: Some(error),
            items: vec![],
        }
    }
}

/// The suite's headline number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    /// Tasks that ran (failed tasks are left out).
    pub tasks: u32,
    /// Items over those tasks.
    pub n: u32,
    /// Macro mean: every task weighs the same, whatever its n (as reasoning-gym reports
    /// category scores).
    pub mean: f64,
    /// Standard error of the macro mean, sqrt(sum se_t^2) / T; None if a task has n < 2.
    pub stderr: Option<f64>,
    /// Macro means of the tasks' pass@k, for the k every task that ran reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_at_k: Vec<PassAtK>,
}

impl Aggregate {
    pub fn of(tasks: &[TaskResult]) -> Self {
        let ran: Vec<&TaskResult> = tasks.iter().filter(|t| t.error.is_none()).collect();
        let t = ran.len();
        let mean = if t == 0 {
            0.0
        } else {
            ran.iter().map(|r| r.mean).sum::<f64>() / t as f64
        };
        let stderr = if t == 0 {
            None
        } else {
            ran.iter()
                .map(|r| r.stderr.map(|s| s * s))
                .sum::<Option<f64>>()
                .map(|v| v.sqrt() / t as f64)
        };
        let pass_at_k = match ran.first() {
            Some(first) => first
                .pass_at_k
                .iter()
                .filter_map(|p| {
                    let per_task: Option<Vec<&PassAtK>> = ran
                        .iter()
                        .map(|r| r.pass_at_k.iter().find(|q| q.k == p.k))
                        .collect();
                    let per_task = per_task?;
                    let stderr = per_task
                        .iter()
                        .map(|q| q.stderr.map(|s| s * s))
                        .sum::<Option<f64>>()
                        .map(|v| v.sqrt() / t as f64);
                    Some(PassAtK {
                        k: p.k,
                        mean: per_task.iter().map(|q| q.mean).sum::<f64>() / t as f64,
                        stderr,
                    })
                })
                .collect(),
            None => vec![],
        };
        Self {
            tasks: t as u32,
            n: ran.iter().map(|r| r.n).sum(),
            mean,
            stderr,
            pass_at_k,
        }
    }
}

/// A whole evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteResult {
    /// The suite as named on the command line (`rg-hard`, `qa:aime.jsonl`, `envs:envs/seed`).
    pub suite: String,
    /// The checkpoint directory.
    pub checkpoint: String,
    /// The training step of the checkpoint when its directory name tells it
    /// (`checkpoint-120`, `step_120`, ...; see [`checkpoint_step`]); None for a base model.
    pub checkpoint_step: Option<u64>,
    pub seed: u64,
    /// Items per task at most (environments at most, for envs suites); None: all.
    pub limit: Option<usize>,
    /// Sampling settings and other options, for the record.
    pub settings: serde_json::Value,
    pub tasks: Vec<TaskResult>,
    pub aggregate: Aggregate,
    pub elapsed_s: f64,
}

impl SuiteResult {
    /// One `BenchmarkResult` per task that ran, then one for the aggregate (task
    /// [`AGGREGATE_TASK`]), as the reporting contract carries them to the backend.
    pub fn to_messages(&self) -> Vec<Message> {
        let samples = self.tasks.iter().map(|t| t.samples).max().unwrap_or(1);
        let row = |task: &str, score: f64, n: u32, stderr: Option<f64>| Message::BenchmarkResult {
            checkpoint_step: self.checkpoint_step,
            suite: self.suite.clone(),
            task: task.to_string(),
            score,
            n,
            stderr,
            samples,
        };
        let mut out: Vec<Message> = self
            .tasks
            .iter()
            .filter(|t| t.error.is_none())
            .map(|t| row(&t.task, t.mean, t.n, t.stderr))
            .collect();
        out.push(row(
            AGGREGATE_TASK,
            self.aggregate.mean,
            self.aggregate.n,
            self.aggregate.stderr,
        ));
        out
    }
}

/// The scores of each question's samples, questions in order of first appearance.
fn by_question(items: &[ItemResult]) -> Vec<Vec<f64>> {
    let mut order: Vec<u32> = vec![];
    let mut scores: std::collections::HashMap<u32, Vec<f64>> = Default::default();
    for it in items {
        scores
            .entry(it.index)
            .or_insert_with(|| {
                order.push(it.index);
                vec![]
            })
            .push(it.score);
    }
    order.iter().filter_map(|i| scores.remove(i)).collect()
}

/// A sample counts as correct for pass@k when it scores 1 (partial credit, which some
/// reasoning-gym tasks give, is not a pass).
fn counts(scores: &[f64]) -> (u32, u32) {
    let correct = scores.iter().filter(|&&s| s >= 1.0 - 1e-9).count();
    (scores.len() as u32, correct as u32)
}

/// The unbiased pass@k estimate for one question with `c` correct samples out of `n`:
/// `1 - C(n-c, k) / C(n, k)`, computed as a product (Chen et al. 2021) so that no binomial
/// coefficient overflows. `k` must be at most `n`.
pub fn pass_at_k(n: u32, c: u32, k: u32) -> f64 {
    if n < k || k == 0 {
        return f64::NAN;
    }
    if n - c < k {
        return 1.0;
    }
    let miss: f64 = (n - c + 1..=n)
        .map(|i| 1.0 - f64::from(k) / f64::from(i))
        .product();
    1.0 - miss
}

/// pass@k over questions `(n, c)` for k = 1, 2, 4, ... below `samples`, and `samples` itself;
/// each k needs every question to have at least k samples.
fn pass_at_ks(questions: &[(u32, u32)], samples: u32) -> Vec<PassAtK> {
    let mut ks: Vec<u32> = std::iter::successors(Some(1u32), |k| k.checked_mul(2))
        .take_while(|&k| k < samples)
        .collect();
    ks.push(samples);
    ks.into_iter()
        .filter(|&k| questions.iter().all(|&(n, _)| n >= k))
        .map(|k| {
            let per: Vec<f64> = questions.iter().map(|&(n, c)| pass_at_k(n, c, k)).collect();
            let (mean, stderr) = mean_stderr(&per);
            PassAtK { k, mean, stderr }
        })
        .collect()
}

/// Mean and standard error of the mean (None for fewer than 2 values).
pub fn mean_stderr(xs: &[f64]) -> (f64, Option<f64>) {
    let n = xs.len();
    if n == 0 {
        return (0.0, None);
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (mean, None);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, Some((var / n as f64).sqrt()))
}

/// The step number at the end of a checkpoint directory's name: `checkpoint-120`, `step_120`,
/// `step120`, `global_step120` give 120; anything else None.
pub fn checkpoint_step(dir: &std::path::Path) -> Option<u64> {
    let name = dir.file_name()?.to_str()?.to_ascii_lowercase();
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let (prefix, number) = name.split_at(name.len() - digits);
    let prefix = prefix.trim_end_matches(['-', '_']);
    (prefix.ends_with("checkpoint") || prefix.ends_with("step"))
        .then(|| number.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(index: u32, sample: u32, score: f64) -> ItemResult {
        ItemResult {
            index,
            sample,
            score,
            answer: None,
            detail: None,
            error: None,
        }
    }

    #[test]
    fn standard_errors_use_the_sample_deviation() {
        // 1, 0, 1, 0: mean 0.5, s^2 = 1/3, se = sqrt(1/12).
        let (m, se) = mean_stderr(&[1.0, 0.0, 1.0, 0.0]);
        assert_eq!(m, 0.5);
        assert!((se.unwrap_or(f64::NAN) - (1.0f64 / 12.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_stderr(&[0.3]), (0.3, None));
        assert_eq!(mean_stderr(&[]), (0.0, None));
    }

    #[test]
    fn the_aggregate_is_a_macro_mean_without_failed_tasks() {
        let items = |scores: &[f64]| -> Vec<ItemResult> {
            (0..).zip(scores).map(|(i, &s)| sample(i, 0, s)).collect()
        };
        let a = TaskResult::from_items("a", items(&[1.0, 1.0]), 0.0);
        let b = TaskResult::from_items("b", items(&[0.0, 1.0, 0.0, 1.0]), 0.0);
        assert!(a.pass_at_k.is_empty() && a.samples == 1);
        let c = TaskResult::failed("c", "boom".into(), 0.0);
        let agg = Aggregate::of(&[a.clone(), b.clone(), c]);
        assert_eq!((agg.tasks, agg.n), (2, 6));
        assert!((agg.mean - 0.75).abs() < 1e-12);
        let expected = (0.0f64 + (1.0f64 / 12.0)).sqrt() / 2.0;
        assert!((agg.stderr.unwrap_or(f64::NAN) - expected).abs() < 1e-12);
        let suite = SuiteResult {
            suite: "rg-logic".into(),
            checkpoint: "/c/checkpoint-40".into(),
            checkpoint_step: Some(40),
            seed: 0,
            limit: Some(4),
            settings: serde_json::json!({}),
            tasks: vec![a, b],
            aggregate: agg,
            elapsed_s: 0.0,
        };
        let msgs = suite.to_messages();
        assert_eq!(msgs.len(), 3);
        assert_eq!(
            msgs[2],
            Message::BenchmarkResult {
                checkpoint_step: Some(40),
                suite: "rg-logic".into(),
                task: AGGREGATE_TASK.into(),
                score: 0.75,
                n: 6,
                stderr: Some(expected),
                samples: 1,
            }
        );
        let json = serde_json::to_value(&msgs[0]).unwrap_or_default();
        assert_eq!(json["kind"], "benchmark_result", "{json}");
    }

    #[test]
    fn pass_at_k_is_the_unbiased_estimator_by_hand() {
        // 1 - C(n-c, k) / C(n, k), by hand.
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(pass_at_k(5, 2, 1), 0.4));
        assert!(close(pass_at_k(5, 2, 2), 1.0 - 3.0 / 10.0));
        assert!(close(pass_at_k(10, 3, 4), 1.0 - 35.0 / 210.0));
        assert!(close(pass_at_k(4, 0, 4), 0.0));
        assert!(close(pass_at_k(4, 1, 4), 1.0));
        assert!(close(pass_at_k(4, 3, 2), 1.0));
        assert!(pass_at_k(2, 1, 3).is_nan());
        // 200 samples, 7 correct, k = 100: no overflow, 1 - C(193,100)/C(200,100).
        let p = pass_at_k(200, 7, 100);
        assert!(p > 0.99 && p < 1.0, "{p}");
    }

    #[test]
    fn k_samples_give_avg_at_k_over_questions_and_pass_at_k() {
        // Question 0: samples 1, 0, 0, 1 (c = 2); question 1: 0, 0, 0, 0; question 2: 0.5
        // (partial credit, not a pass), 1, 1, 1 (c = 3). Samples arrive interleaved.
        let scores = [[1.0, 0.0, 0.0, 1.0], [0.0; 4], [0.5, 1.0, 1.0, 1.0]];
        let mut items = vec![];
        for s in 0..4u32 {
            for (q, row) in scores.iter().enumerate() {
                items.push(sample(q as u32, s, row[s as usize]));
            }
        }
        let t = TaskResult::from_items("t", items, 0.0);
        assert_eq!((t.n, t.samples), (3, 4));
        let avg = [0.5, 0.0, 0.875];
        let (m, se) = mean_stderr(&avg);
        assert!((t.mean - m).abs() < 1e-12 && t.stderr == se);
        let ks: Vec<u32> = t.pass_at_k.iter().map(|p| p.k).collect();
        assert_eq!(ks, vec![1, 2, 4]);
        let p1 = (0.5 + 0.0 + 0.75) / 3.0;
        let p2 = ((1.0 - 1.0 / 6.0) + 0.0 + 1.0) / 3.0;
        let p4 = (1.0 + 0.0 + 1.0) / 3.0;
        for (p, want) in t.pass_at_k.iter().zip([p1, p2, p4]) {
            assert!(
                (p.mean - want).abs() < 1e-12,
                "pass@{}: {} vs {want}",
                p.k,
                p.mean
            );
        }
        // Non-powers of two end at k = samples; the aggregate is a macro mean per k.
        let five: Vec<ItemResult> = (0..5).map(|s| sample(0, s, f64::from(s % 2))).collect();
        let u = TaskResult::from_items("u", five, 0.0);
        let ks: Vec<u32> = u.pass_at_k.iter().map(|p| p.k).collect();
        assert_eq!(ks, vec![1, 2, 4, 5]);
        let agg = Aggregate::of(&[t.clone(), u.clone()]);
        let agg_ks: Vec<u32> = agg.pass_at_k.iter().map(|p| p.k).collect();
        assert_eq!(agg_ks, vec![1, 2, 4]);
        assert!((agg.pass_at_k[0].mean - (p1 + 0.4) / 2.0).abs() < 1e-12);
        // Episodes of an environment: one problem, k tries.
        let eps: Vec<ItemResult> = (0..4).map(|e| sample(e, 0, f64::from(e == 3))).collect();
        let env = TaskResult::from_items("env", eps, 0.0).with_episode_pass_at_k();
        assert_eq!(env.n, 4);
        assert!((env.pass_at_k[0].mean - 0.25).abs() < 1e-12);
        assert_eq!(env.pass_at_k.last().map(|p| (p.k, p.mean)), Some((4, 1.0)));
    }

    #[test]
    fn steps_come_from_checkpoint_directory_names() {
        use std::path::Path;
        assert_eq!(
            checkpoint_step(Path::new("/runs/x/checkpoint-120")),
            Some(120)
        );
        assert_eq!(checkpoint_step(Path::new("step_7")), Some(7));
        assert_eq!(checkpoint_step(Path::new("global_step300")), Some(300));
        assert_eq!(checkpoint_step(Path::new("/models/qwen3-4b")), None);
        assert_eq!(checkpoint_step(Path::new("/tmp/tiny")), None);
    }
}
