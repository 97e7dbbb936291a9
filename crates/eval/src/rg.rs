//! reasoning-gym at hard settings, generated and scored inside the sandbox.
//!
//! The datasets and their hard configurations are `rg_hard.json`, written by
//! `python/derive_rg_hard.py` from the package's own curricula (every attribute at its top
//! level unless that fails, takes over 2 s per item or writes questions over 4,000 characters;
//! docs/evaluation.md lists them). Each task is one dataset: a fresh runner imports reasoning-gym,
//! builds the dataset with `seed` = [`dataset_seed`] and the hard config, returns the
//! questions, keeps the entries, and later scores the model's answers with the dataset's own
//! `score_answer(answer, entry)`: exactly the library's scoring, on the library's entries.

use crate::error::EvalError;
use crate::generate::fnv1a;
use crate::sandbox;
use serde::{Deserialize, Serialize};
use spade_sandbox::Runner;
use std::time::Duration;

/// The hard settings (see the module doc).
pub const HARD_SETTINGS: &str = include_str!("rg_hard.json");

/// The four reasoning-gym categories of the paper's held-out set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Algorithmic,
    Arithmetic,
    Cognition,
    Logic,
}

impl Category {
    pub const ALL: [Category; 4] = [
        Category::Algorithmic,
        Category::Arithmetic,
        Category::Cognition,
        Category::Logic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Algorithmic => "algorithmic",
            Category::Arithmetic => "arithmetic",
            Category::Cognition => "cognition",
            Category::Logic => "logic",
        }
    }
}

/// One dataset at its hard setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RgTask {
    pub category: Category,
    pub dataset: String,
    /// The curriculum level used and the curriculum's top level.
    pub level: u32,
    pub top_level: u32,
    /// Keyword arguments of `reasoning_gym.create_dataset` besides seed and size.
    pub config: serde_json::Map<String, serde_json::Value>,
}

impl RgTask {
    /// `category/dataset`, the task name in results.
    pub fn name(&self) -> String {
        format!("{}/{}", self.category.as_str(), self.dataset)
    }
}

#[derive(Deserialize)]
struct Settings {
    categories: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Entry>>,
}

#[derive(Deserialize)]
struct Entry {
    level: u32,
    top_level: u32,
    config: serde_json::Map<String, serde_json::Value>,
}

/// The hard tasks of `categories`, in category then dataset order.
pub fn hard_tasks(categories: &[Category]) -> Vec<RgTask> {
    // The file is part of the source tree and checked by this module's tests.
    let settings: Settings = match serde_json::from_str(HARD_SETTINGS) {
        Ok(s) => s,
        Err(_) => return vec![],
    };
    let mut out = vec![];
    for &category in categories {
        if let Some(datasets) = settings.categories.get(category.as_str()) {
            for (name, e) in datasets {
                out.push(RgTask {
                    category,
                    dataset: name.clone(),
                    level: e.level,
                    top_level: e.top_level,
                    config: e.config.clone(),
                });
            }
        }
    }
    out
}

/// The dataset's seed: the evaluation seed mixed with the dataset name, so datasets do not
/// share a random stream and the same `--seed` always gives the same questions. Below 2^31.
pub fn dataset_seed(seed: u64, dataset: &str) -> u64 {
    (fnv1a(dataset.as_bytes()) ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)) & 0x7FFF_FFFF
}

/// One generated question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub question: String,
    /// The dataset's reference answer as text (None when the dataset has no single oracle
    /// answer, e.g. graph colouring, whose `score_answer` checks the answer itself).
    pub answer: Option<String>,
}

/// A score from the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    pub score: f64,
    /// The exception `score_answer` raised, if it did (the score is then 0).
    pub error: Option<String>,
}

const GENERATE: &str = r#"
import sys, types
import reasoning_gym
_cache = sys.modules.get("_spade_eval_rg")
if _cache is None:
    _cache = types.ModuleType("_spade_eval_rg")
    sys.modules["_spade_eval_rg"] = _cache
_ds = reasoning_gym.create_dataset(REQUEST["dataset"], seed=REQUEST["seed"], size=REQUEST["size"], **REQUEST["config"])
_cache.dataset = _ds
_cache.entries = [_ds[i] for i in range(REQUEST["size"])]
REPLY = json.dumps([
    {"question": e["question"], "answer": None if e.get("answer") is None else str(e["answer"])}
    for e in _cache.entries
])
"#;

const SCORE: &str = r#"
import sys, math
_cache = sys.modules["_spade_eval_rg"]
_out = []
for _i, _a in zip(REQUEST["indices"], REQUEST["answers"]):
    try:
        _s = float(_cache.dataset.score_answer(_a, _cache.entries[_i]))
        _out.append({"score": _s if math.isfinite(_s) else 0.0, "error": None if math.isfinite(_s) else f"score_answer returned {_s}"})
    except Exception as _e:
        _out.append({"score": 0.0, "error": f"{type(_e).__name__}: {_e}"[:500]})
REPLY = json.dumps(_out)
"#;

/// A dataset generated in a runner, ready to score answers to its questions.
#[derive(Debug)]
pub struct RgSession<'r> {
    runner: &'r mut Runner,
    task: String,
    pub questions: Vec<Question>,
}

impl<'r> RgSession<'r> {
    /// Generates `size` questions of `task` with seed `seed` (use [`dataset_seed`]) in `runner`.
    pub fn open(
        runner: &'r mut Runner,
        task: &RgTask,
        seed: u64,
        size: usize,
    ) -> Result<Self, EvalError> {
        #[derive(Serialize)]
        struct Req<'a> {
            dataset: &'a str,
            seed: u64,
            size: usize,
            config: &'a serde_json::Map<String, serde_json::Value>,
        }
        let name = task.name();
        // The first call imports reasoning-gym (seconds); hard items take up to 2 s each.
        let limit = Duration::from_secs(120 + 2 * size as u64);
        let questions: Vec<Question> = sandbox::call(
            runner,
            &format!("generating {name}"),
            GENERATE,
            &Req {
                dataset: &task.dataset,
                seed,
                size,
                config: &task.config,
            },
            limit,
        )?;
        if questions.len() != size {
            return Err(EvalError::BadReply {
                what: format!("generating {name}"),
                reason: format!("{} questions for {size} asked", questions.len()),
            });
        }
        Ok(Self {
            runner,
            task: name,
            questions,
        })
    }

    /// Scores `answers[k]` against question `indices[k]` with the dataset's `score_answer`
    /// (None is passed as Python's None: no answer).
    pub fn score(
        &mut self,
        indices: &[usize],
        answers: &[Option<String>],
    ) -> Result<Vec<Scored>, EvalError> {
        #[derive(Serialize)]
        struct Req<'a> {
            indices: &'a [usize],
            answers: &'a [Option<String>],
        }
        let what = format!("scoring {}", self.task);
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.questions.len()) {
            return Err(EvalError::InvalidOption {
                option: "index",
                reason: format!("{what}: question {bad} of {}", self.questions.len()),
            });
        }
        let limit = Duration::from_secs(60 + answers.len() as u64);
        let scored: Vec<Scored> =
            sandbox::call(self.runner, &what, SCORE, &Req { indices, answers }, limit)?;
        if scored.len() != answers.len() {
            return Err(EvalError::BadReply {
                what,
                reason: format!("{} scores for {} answers", scored.len(), answers.len()),
            });
        }
        if let Some(s) = scored.iter().find(|s| !(0.0..=1.0).contains(&s.score)) {
            return Err(EvalError::BadReply {
                what,
                reason: format!("score {} outside [0, 1]", s.score),
            });
        }
        Ok(scored)
    }
}

/// The system prompt of reasoning-gym and QA questions.
pub const SYSTEM_PROMPT: &str = "Solve the problem. Think step by step, then give the final \
answer as \\boxed{...}; only the last \\boxed{} in your reply counts.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_category_has_hard_datasets() {
        for c in Category::ALL {
            let tasks = hard_tasks(&[c]);
            assert!(tasks.len() >= 5, "{c:?}: {} datasets", tasks.len());
            for t in &tasks {
                assert!(t.level <= t.top_level && 2 * t.level >= t.top_level.saturating_sub(1));
                assert!(!t.config.is_empty(), "{} has no config", t.name());
            }
        }
        assert_eq!(hard_tasks(&Category::ALL).len(), 58);
    }

    #[test]
    fn dataset_seeds_are_stable_and_distinct() {
        assert_eq!(dataset_seed(0, "gcd"), dataset_seed(0, "gcd"));
        assert_ne!(dataset_seed(0, "gcd"), dataset_seed(1, "gcd"));
        assert_ne!(dataset_seed(0, "gcd"), dataset_seed(0, "lcm"));
        assert!(dataset_seed(u64::MAX, "x") < 1 << 31);
    }
}
