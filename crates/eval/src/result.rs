//! Results: per item, per task (mean score, n, standard error) and per suite, as serde structs,
//! and their conversion to the reporting contract's `BenchmarkResult` messages.

use serde::{Deserialize, Serialize};
use spade::report::Message;

/// The task name of the aggregate row in [`SuiteResult::to_messages`].
pub const AGGREGATE_TASK: &str = "all";

/// One question (or one episode) and its score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemResult {
    /// Position in the task (question index, or episode number).
    pub index: u32,
    /// In [0, 1]: reasoning-gym's `score_answer`, 1/0 for a math-verify match, 1/0 for a win.
    pub score: f64,
    /// What was scored: the last `\boxed{}` content (truncated to 500 characters), or the
    /// episode's last action; None when the reply had no box.
    pub answer: Option<String>,
    /// Why the item could not be answered or scored normally (it then scores 0): a prompt
    /// longer than the model's context, an exception in the scorer, an environment error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One task: a reasoning-gym dataset, a QA group, or one environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub task: String,
    /// Items scored.
    pub n: u32,
    /// Mean score over the items (0 when n is 0).
    pub mean: f64,
    /// Standard error of the mean, s / sqrt(n) with the n - 1 sample deviation; None for n < 2.
    pub stderr: Option<f64>,
    /// Items that carry an error (they are in n, scored 0).
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
    /// A task from its item results.
    pub fn from_items(task: impl Into<String>, items: Vec<ItemResult>, elapsed_s: f64) -> Self {
        let scores: Vec<f64> = items.iter().map(|i| i.score).collect();
        let (mean, stderr) = mean_stderr(&scores);
        Self {
            task: task.into(),
            n: items.len() as u32,
            mean,
            stderr,
            item_errors: items.iter().filter(|i| i.error.is_some()).count() as u32,
            elapsed_s,
            error: None,
            items,
        }
    }

    /// A task that could not run.
    pub fn failed(task: impl Into<String>, error: String, elapsed_s: f64) -> Self {
        Self {
            task: task.into(),
            n: 0,
            mean: 0.0,
            stderr: None,
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
        Self {
            tasks: t as u32,
            n: ran.iter().map(|r| r.n).sum(),
            mean,
            stderr,
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
        let row = |task: &str, score: f64, n: u32| Message::BenchmarkResult {
            checkpoint_step: self.checkpoint_step,
            suite: self.suite.clone(),
            task: task.to_string(),
            score,
            n,
        };
        let mut out: Vec<Message> = self
            .tasks
            .iter()
            .filter(|t| t.error.is_none())
            .map(|t| row(&t.task, t.mean, t.n))
            .collect();
        out.push(row(AGGREGATE_TASK, self.aggregate.mean, self.aggregate.n));
        out
    }
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

    fn item(score: f64) -> ItemResult {
        ItemResult {
            index: 0,
            score,
            answer: None,
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
        let a = TaskResult::from_items("a", vec![item(1.0), item(1.0)], 0.0);
        let b = TaskResult::from_items("b", vec![item(0.0), item(1.0), item(0.0), item(1.0)], 0.0);
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
                n: 6
            }
        );
        let json = serde_json::to_value(&msgs[0]).unwrap_or_default();
        assert_eq!(json["kind"], "benchmark_result", "{json}");
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
