//! BFCL v4 multi-turn (the Berkeley Function-Calling Leaderboard's stateful tool-use test):
//! four categories of 200 entries each (`base`, `miss_func`, `miss_param`, `long_context`),
//! read from the `bfcl-eval` package that `scripts/setup` installs into the venv.
//!
//! Every entry is played as a tool-use environment in its own sandbox runner
//! (`bfcl_env.py`, with the entry's data above it): BFCL's own backend classes (file system,
//! math, messaging, posting, ticketing, trading, travel, vehicle control) hold the state, the
//! model sees the same ChatML template as in the tool-use environments and calls functions with
//! the same `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` elements (several per
//! reply are allowed, as BFCL allows parallel calls), turn by turn as BFCL defines, and the
//! entry is scored by BFCL's multi-turn rules (state and execution-result checks against the
//! ground truth of `possible_answer`), reproduced in `bfcl_env.py` from their specification.
//! `tests/it/bfcl_verdicts.rs` checks our verdicts against BFCL's own checker entry by entry.

use crate::envs::{self, EnvFile};
use crate::error::EvalError;
use crate::generate::Generator;
use crate::result::{ItemResult, TaskResult};
use crate::sandbox;
use serde::Deserialize;
use spade_sandbox::{Pool, RunnerConfig};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The four multi-turn categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Base,
    MissFunc,
    MissParam,
    LongContext,
}

impl Category {
    pub const ALL: [Category; 4] = [
        Category::Base,
        Category::MissFunc,
        Category::MissParam,
        Category::LongContext,
    ];

    /// The name in BFCL's file names (`BFCL_v4_multi_turn_{name}.json`).
    pub fn file_name(self) -> &'static str {
        match self {
            Category::Base => "base",
            Category::MissFunc => "miss_func",
            Category::MissParam => "miss_param",
            Category::LongContext => "long_context",
        }
    }

    /// The suite (and task) name: `bfcl-multi-turn-base`, ...
    pub fn suite_name(self) -> &'static str {
        match self {
            Category::Base => "bfcl-multi-turn-base",
            Category::MissFunc => "bfcl-multi-turn-miss-func",
            Category::MissParam => "bfcl-multi-turn-miss-param",
            Category::LongContext => "bfcl-multi-turn-long-context",
        }
    }

    /// The categories a suite name stands for: one, or all four for `bfcl-multi-turn`.
    pub fn parse(name: &str) -> Option<Vec<Category>> {
        if name == ALL_SUITE {
            return Some(Self::ALL.to_vec());
        }
        Self::ALL
            .into_iter()
            .find(|c| c.suite_name() == name)
            .map(|c| vec![c])
    }
}

/// The suite name of all four categories at once.
pub const ALL_SUITE: &str = "bfcl-multi-turn";

/// Where BFCL's data comes from, for messages.
pub const SOURCE: &str = "bfcl_eval/data of the `bfcl-eval` package (scripts/requirements-nodeps.txt; \
     scripts/setup installs it)";

/// BFCL's limit of steps (replies with calls) in one turn; more force-quits the entry.
pub const STEP_LIMIT: u32 = 20;

/// The system prompt of BFCL episodes: BFCL's own instructions for prompting models (the
/// "classic" style), in the tool-call format of the tool-use environments.
pub const SYSTEM_PROMPT: &str = "You are an expert in composing functions. You are given a \
question and a set of possible functions. Based on the question, you will need to make one or \
more function/tool calls to achieve the purpose. If none of the functions can be used, point it \
out. If the given question lacks the parameters required by the function, also point it out.\n\n\
Call a function as <tool_call>{\"name\": \"FUNCTION\", \"arguments\": {...}}</tool_call>; one \
reply may hold several calls, which run in order, and you see their results.\n\n\
At each turn, you should try your best to complete the tasks requested by the user within the \
current turn. Continue to output functions to call until you have fulfilled the user's request \
to the best of your ability. Once you have no more functions to call, reply without a tool \
call: the system will consider the current turn complete and proceed to the next turn or task.";

const LOAD: &str = include_str!("bfcl_load.py");
const ENV: &str = include_str!("bfcl_env.py");

/// One test entry, ready to play.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: String,
    /// Its line in BFCL's question file.
    pub line: usize,
    /// The conversation's turns.
    pub turns: usize,
    /// The environment: `bfcl_env.py` with the entry's data.
    pub env: EnvFile,
}

#[derive(Deserialize)]
struct Loaded {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    problems: Vec<String>,
    #[serde(default)]
    entries: Vec<serde_json::Value>,
}

/// Runner settings for BFCL: an entry's first message carries the documents of every function
/// of its classes (up to about 35,000 characters for two large classes), above the 20,000
/// characters of generated environments.
pub fn runner_config(base: &RunnerConfig) -> RunnerConfig {
    let mut cfg = base.clone();
    cfg.limits.max_observation_chars = cfg.limits.max_observation_chars.max(100_000);
    cfg
}

/// Reads and checks one category in a runner (the same Python that plays it). Missing data is
/// [`EvalError::MissingData`]; malformed data is refused with every problem's file, line and
/// field.
pub fn load(pool: &Pool, category: Category) -> Result<Vec<Entry>, EvalError> {
    load_request(pool, category, serde_json::json!({}))
}

/// Checks `questions` and `answers` (the texts of a category's question and possible-answer
/// files) as [`load`] checks the installed ones.
pub fn load_texts(
    pool: &Pool,
    category: Category,
    questions: &str,
    answers: &str,
) -> Result<Vec<Entry>, EvalError> {
    let texts = serde_json::json!({ "questions": questions, "answers": answers });
    load_request(pool, category, texts)
}

fn load_request(
    pool: &Pool,
    category: Category,
    mut request: serde_json::Value,
) -> Result<Vec<Entry>, EvalError> {
    request["category"] = category.file_name().into();
    let suite = category.suite_name();
    let mut leased = sandbox::checkout(pool, &format!("starting a runner to read {suite}"))?;
    let loaded: Loaded = sandbox::call(
        &mut leased.runner,
        &format!("reading {suite}"),
        LOAD,
        &request,
        Duration::from_secs(120),
    )
    .map_err(|e| EvalError::MissingData {
        suite: suite.into(),
        provider: SOURCE.into(),
        reason: e.to_string(),
    })?;
    if let Some(reason) = loaded.error {
        return Err(EvalError::MissingData {
            suite: suite.into(),
            provider: SOURCE.into(),
            reason,
        });
    }
    if !loaded.problems.is_empty() {
        return Err(EvalError::MalformedData {
            suite: suite.into(),
            problems: loaded.problems.join("\n"),
        });
    }
    loaded
        .entries
        .into_iter()
        .map(|e| entry(category, e))
        .collect()
}

fn entry(category: Category, value: serde_json::Value) -> Result<Entry, EvalError> {
    let bad = |reason: String| EvalError::BadReply {
        what: format!("reading {}", category.suite_name()),
        reason,
    };
    let id = value["id"]
        .as_str()
        .ok_or_else(|| bad("an entry without id".into()))?
        .to_string();
    let line = value["line"].as_u64().unwrap_or(0) as usize;
    let turns = value["question"].as_array().map_or(0, Vec::len);
    let data = serde_json::to_string(&value).map_err(|e| bad(e.to_string()))?;
    // The entry reaches Python as a JSON string literal (a valid Python string literal with the
    // same value), never as code.
    let literal = serde_json::to_string(&data).map_err(|e| bad(e.to_string()))?;
    Ok(Entry {
        env: EnvFile {
            name: id.clone(),
            path: PathBuf::from(format!(
                "bfcl_eval/data/BFCL_v4_multi_turn_{}.json:{line}",
                category.file_name()
            )),
            source: format!("import json\nENTRY = json.loads({literal})\n{ENV}"),
        },
        id,
        line,
        turns,
    })
}

/// Plays `entries` (`samples` episodes each) and scores them: one task, one item per entry
/// and sample. An entry that cannot be played scores 0 with the reason recorded.
pub fn run(
    pool: &Pool,
    generator: &Generator<'_>,
    category: Category,
    entries: &[Entry],
    samples: u32,
    seed: u64,
    on_entry: &mut dyn FnMut(&Entry),
) -> TaskResult {
    let started = Instant::now();
    let mut items = Vec::with_capacity(entries.len() * samples as usize);
    for (i, e) in entries.iter().enumerate() {
        let played = envs::play_episodes(
            pool,
            generator,
            &e.env,
            samples,
            u32::MAX,
            seed,
            Some(SYSTEM_PROMPT),
        );
        match played {
            Ok(eps) => items.extend(eps.into_iter().map(|mut it| {
                it.sample = it.index;
                it.index = i as u32;
                it
            })),
            Err(reason) => items.extend((0..samples).map(|s| ItemResult {
                index: i as u32,
                sample: s,
                score: 0.0,
                answer: None,
                detail: None,
                error: Some(format!("{}: {reason}", e.id)),
            })),
        }
        on_entry(e);
    }
    TaskResult::from_items(
        category.suite_name(),
        items,
        started.elapsed().as_secs_f64(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_names_map_to_categories() {
        assert_eq!(
            Category::parse("bfcl-multi-turn-miss-func"),
            Some(vec![Category::MissFunc])
        );
        assert_eq!(Category::parse(ALL_SUITE).map(|c| c.len()), Some(4));
        assert_eq!(Category::parse("bfcl-multi-turn-other"), None);
        for c in Category::ALL {
            assert!(spade::suites::NAMED.contains(&c.suite_name()), "{c:?}");
        }
        assert!(spade::suites::NAMED.contains(&ALL_SUITE));
    }
}
