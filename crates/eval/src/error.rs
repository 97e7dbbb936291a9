//! The evaluation's error type. Every variant says what to fix: the suite name, the file and
//! line, the option, or which sandbox call failed and why.

use spade_policy::PolicyError;
use spade_sandbox::SandboxError;
use std::path::PathBuf;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The suite name matches none of the known suites.
    #[error(
        "unknown suite `{name}`; expected one of rg-algorithmic, rg-arithmetic, rg-cognition, \
         rg-logic, rg-hard, humaneval, bfcl-multi-turn, bfcl-multi-turn-base, \
         bfcl-multi-turn-miss-func, bfcl-multi-turn-miss-param, bfcl-multi-turn-long-context, \
         qa:PATH.jsonl, mc:PATH.jsonl, code:PATH.jsonl, envs, envs:DIR (a directory of .py files \
         or a pool)"
    )]
    UnknownSuite { name: String },
    /// A file or directory of a suite cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line of a QA file is not a JSON object with a string `question` and a string or number
    /// `answer`.
    #[error("{path}:{line}: {reason}")]
    MalformedLine {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// A suite's data is not installed.
    #[error("the {suite} suite cannot read its data, {provider}: {reason}")]
    MissingData {
        suite: String,
        provider: String,
        reason: String,
    },
    /// A suite's installed data is malformed (one problem per line: file, line, field).
    #[error("the {suite} suite's data is malformed:\n{problems}")]
    MalformedData { suite: String, problems: String },
    /// A QA file holds no questions.
    #[error("{path}: no questions; expected one JSON object per line with `question` and `answer`")]
    EmptyQa { path: PathBuf },
    /// An environment directory holds no `*.py` files.
    #[error("{dir}: no environment files (*.py) in it or below it")]
    NoEnvironments { dir: PathBuf },
    /// A pool's `pool.jsonl` has malformed lines or names missing files (one per line).
    #[error("malformed pool:\n{problems}")]
    MalformedPool { problems: String },
    /// An option is out of range.
    #[error("invalid option `{option}`: {reason}")]
    InvalidOption {
        option: &'static str,
        reason: String,
    },
    /// The policy failed (no tokenizer, generation error).
    #[error("policy: {0}")]
    Policy(#[from] PolicyError),
    /// A sandbox call failed (runner died, timed out, or the Python side raised).
    #[error("sandbox, {what}: {source}")]
    Sandbox {
        what: String,
        #[source]
        source: SandboxError,
    },
    /// The sandbox answered with something other than the JSON this crate asked for.
    #[error("sandbox, {what}: unexpected reply ({reason})")]
    BadReply { what: String, reason: String },
}

impl EvalError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
