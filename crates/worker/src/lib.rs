//! The training worker: runs the SPADE loop by composing `spade` (the algorithm), `spade-sandbox`
//! (every generated environment in its own runner process) and `spade-policy` (libtorch). It
//! writes to a run directory or reports to the service; it never executes generated code itself.
//! The sandbox runner is located by `spade_sandbox::default_runner_path`.
//!
//! - [`play`]: multi-turn agent episodes through the sandbox pool;
//! - [`designer`]: designer prompts, attempts, code extraction, validation, the hint call;
//! - [`warmstart`]: SFT of the tiny model on the seed library, cached by content hash;
//! - [`pool`]: environment pools on disk (read, validate, write; a run directory's environments);
//! - [`run`]: the training loop, one step at a time (spec "One training step");
//! - [`state`]: what a checkpoint holds so `--resume` continues where a run stopped;
//! - [`sink`]: where the reports go (a run directory, or the service over HTTP);
//! - [`vllm`]: vLLM servers as the rollout backend, their weight sync and health;
//! - [`ranks`]: one run on several processes (data-parallel, ZeRO-2 sharded training).

pub mod designer;
pub mod http;
pub mod play;
pub mod pool;
pub mod ranks;
pub mod run;
/// The positional-seed scheme every draw of a run uses (one for the whole workspace).
pub use spade::seeds;
pub mod sink;
pub mod state;
pub mod vllm;
pub mod warmstart;

/// Errors of the worker library.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The policy failed (libtorch, tokenizer, checkpoint files).
    #[error("policy: {0}")]
    Policy(#[from] spade_policy::PolicyError),
    /// The model cannot play a role (e.g. no chat end token).
    #[error("model: {0}")]
    Model(String),
    /// The sandbox itself (not an environment) failed.
    #[error("sandbox: {0}")]
    Sandbox(#[from] spade_sandbox::SandboxError),
    /// A file of the run directory, the cache or the seed library could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// Persisted state or an output file is malformed.
    #[error("{path}: {message}")]
    Corrupt { path: String, message: String },
    /// The configuration cannot be run (a precise message names the field).
    #[error("configuration: {0}")]
    Config(String),
    /// The service refused a request in a way retrying cannot fix (bad token, unknown run).
    #[error("service: {0}")]
    Service(String),
    /// The run's end came while the service had not acknowledged everything it reported, and
    /// it did not within the sink's patience: the run must not count as done.
    /// The ranks of a multi-process run (rendezvous, collectives, a rank that died).
    #[error("ranks: {0}")]
    Ranks(String),
    #[error(
        "{pending} report(s) could not be sent to the service; they stay in the run's spool \
         (spool.jsonl in its state directory) and are sent when the run is resumed"
    )]
    Unsent { pending: usize },
}

impl WorkerError {
    /// An I/O error at `path`.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
