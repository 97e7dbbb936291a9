//! The policy's error type. Every variant names what a user has to fix: the file, the config
//! field, the tensor and its shapes.

use std::path::PathBuf;

/// Errors from the policy crate.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The checkpoint directory has no `config.json` (or it cannot be read).
    #[error("missing config: cannot read {path}")]
    MissingConfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `config.json` is not a JSON object.
    #[error("malformed config {path}: {reason}")]
    MalformedConfig { path: PathBuf, reason: String },
    /// A field of `config.json` is missing, has the wrong type or an impossible value.
    #[error("config field `{field}`: {reason}")]
    ConfigField { field: String, reason: String },
    /// `architectures` / `model_type` names a model this crate does not implement.
    #[error(
        "unsupported architecture {found}: this crate implements Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2ForCausalLM and LlamaForCausalLM"
    )]
    UnsupportedArchitecture { found: String },
    /// The config asks for a feature this implementation lacks (e.g. YaRN rope scaling).
    #[error("unsupported config: `{field}` = {value}")]
    UnsupportedConfig { field: String, value: String },
    /// A weight the config requires is in none of the checkpoint's safetensors files.
    #[error("missing tensor `{name}` in {path}")]
    MissingTensor { name: String, path: PathBuf },
    /// A checkpoint holds a weight the config's model has no place for (e.g. `q_norm` in a
    /// checkpoint whose config says Llama): loading would silently drop it.
    #[error(
        "unexpected tensor `{name}` in {path}: the model the config describes has no such weight"
    )]
    UnexpectedTensor { name: String, path: PathBuf },
    /// A weight has a shape other than the config implies.
    #[error("shape mismatch for `{name}`: expected {expected:?}, found {found:?}")]
    ShapeMismatch {
        name: String,
        expected: Vec<i64>,
        found: Vec<i64>,
    },
    /// A safetensors file or its shard index cannot be parsed.
    #[error("bad safetensors {path}: {reason}")]
    Safetensors { path: PathBuf, reason: String },
    /// An optimiser state file is malformed or does not fit the model (names, shapes, dtype).
    #[error("bad optimizer state {path}: {reason}")]
    OptimizerState { path: PathBuf, reason: String },
    /// The checkpoint has no `*.safetensors` weights at all.
    #[error("no weights in {dir}: expected model.safetensors or model.safetensors.index.json")]
    NoWeights { dir: PathBuf },
    /// A GGUF file is malformed or holds something the import does not support; the reason
    /// names the key or tensor.
    #[error("GGUF {path}: {reason}")]
    Gguf {
        path: PathBuf,
        reason: crate::gguf_error::GgufError,
    },
    /// Reading or writing a file failed.
    #[error("cannot read or write {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `tokenizer.json` cannot be loaded, saved or trained, or a text cannot be encoded.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A caller passed something unusable (token id out of range, empty batch, ...).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A rollout backend outside this crate (a vLLM server) failed; the message names it.
    #[error("rollout backend: {0}")]
    Backend(String),
    /// libtorch reported an error.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

impl PolicyError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn field(field: &str, reason: impl Into<String>) -> Self {
        Self::ConfigField {
            field: field.to_string(),
            reason: reason.into(),
        }
    }
}

/// Results of this crate.
pub type Result<T, E = PolicyError> = std::result::Result<T, E>;
