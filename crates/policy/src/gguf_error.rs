//! Why a GGUF file was refused: one variant per kind of fault, each naming the key or tensor.
//! Beside [`crate::gguf`] rather than inside it, so that [`crate::error`] can carry it without
//! the error module and the importer using each other.

/// Array nesting the reader accepts (no writer nests deeper); also named in the error.
pub(crate) const MAX_NESTING: usize = 4;

/// Why a GGUF file was refused. Every variant names the key or tensor at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GgufError {
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic {found:?}, expected \"GGUF\"")]
    BadMagic { found: Vec<u8> },
    /// A version other than 2 or 3 (version 1 used 32-bit counts and is long obsolete).
    #[error("GGUF version {version} is not supported (expected 2 or 3)")]
    UnsupportedVersion { version: u32 },
    /// The file ends inside `what`.
    #[error("truncated: the file ends inside {what}")]
    Truncated { what: String },
    /// A count larger than the rest of the file could hold.
    #[error("{what}: count {count} cannot fit in the {left} bytes left in the file")]
    BadCount {
        what: String,
        count: u64,
        left: usize,
    },
    /// A string that is not UTF-8.
    #[error("{what} is not valid UTF-8")]
    BadString { what: String },
    /// A metadata value type id outside GGUF's 0..=12.
    #[error("metadata key `{key}`: unknown value type {type_id}")]
    UnknownValueType { key: String, type_id: u32 },
    /// Arrays nested deeper than any writer produces.
    #[error("metadata key `{key}`: arrays nested more than {MAX_NESTING} deep")]
    TooDeep { key: String },
    /// The same metadata key or tensor name twice.
    #[error("duplicate {what} `{name}`")]
    Duplicate { what: &'static str, name: String },
    /// A metadata key the import needs is absent.
    #[error("missing metadata key `{key}`")]
    MissingKey { key: String },
    /// A metadata key has a type or value the import cannot use.
    #[error("metadata key `{key}`: expected {expected}, found {found}")]
    KeyType {
        key: String,
        expected: String,
        found: String,
    },
    /// `general.architecture` names a model family the import does not map.
    #[error("unsupported architecture `{arch}` (supported: llama, qwen2)")]
    UnsupportedArchitecture { arch: String },
    /// A ggml type id this reader does not know at all.
    #[error("tensor `{tensor}`: unknown ggml type {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },
    /// A known ggml type this reader cannot dequantise (K-quants, IQ types, ...).
    #[error(
        "tensor `{tensor}`: ggml type {type_name} is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)"
    )]
    UnsupportedTensorType {
        tensor: String,
        type_name: &'static str,
    },
    /// A tensor's data lies (partly) outside the data section.
    #[error(
        "tensor `{tensor}`: data at offset {offset} of {len} bytes runs past the end of the data section ({data_len} bytes)"
    )]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        len: u64,
        data_len: u64,
    },
    /// A tensor's dims, offset or block structure is impossible, or its shape is not what
    /// the metadata implies.
    #[error("tensor `{tensor}`: {reason}")]
    BadTensor { tensor: String, reason: String },
    /// A tensor the architecture requires is absent.
    #[error("missing tensor `{tensor}`")]
    MissingTensor { tensor: String },
    /// A tensor the import has no Hugging Face name for (it would be silently dropped).
    #[error("tensor `{tensor}` has no Hugging Face counterpart for architecture `{arch}`")]
    UnexpectedTensor { tensor: String, arch: String },
    /// The vocabulary cannot be turned into a `tokenizer.json`.
    #[error("tokenizer: {reason}")]
    Tokenizer { reason: String },
}
