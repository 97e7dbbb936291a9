//! An optimiser state file ([`crate::optim::write_state`]'s safetensors) read in parts: its
//! header first, then only the bytes of the elements asked for. A rank re-sharding a state
//! reads its own part of each file and no more: a 4B model's whole AdamW state is about 48 GB,
//! which every one of eight ranks would otherwise read in full.

use crate::error::{PolicyError, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor};

/// safetensors' own bound on a header.
const MAX_HEADER: u64 = 100_000_000;

/// One tensor of the file: dtype, shape and byte range in the data.
#[derive(Debug, Clone)]
struct Entry {
    dtype: String,
    shape: Vec<i64>,
    begin: u64,
    end: u64,
}

/// An open state file (see the module doc).
#[derive(Debug)]
pub(super) struct StateFile {
    path: PathBuf,
    file: File,
    /// Where the data begins (8 + the header's length).
    data_start: u64,
    tensors: HashMap<String, Entry>,
    /// The header's `__metadata__`.
    pub meta: HashMap<String, String>,
}

impl StateFile {
    /// Opens `path` and reads and checks its header (every tensor's range inside the file, the
    /// file as long as the header says); no tensor data is read.
    pub fn open(path: &Path) -> Result<Self> {
        let bad = |reason: String| PolicyError::OptimizerState {
            path: path.to_path_buf(),
            reason,
        };
        let mut file = File::open(path).map_err(|e| PolicyError::io(path, e))?;
        let len = file.metadata().map_err(|e| PolicyError::io(path, e))?.len();
        let mut n = [0u8; 8];
        file.read_exact(&mut n)
            .map_err(|_| bad("not a safetensors file: shorter than its header".into()))?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER || 8 + n > len {
            return Err(bad(format!(
                "not a safetensors file: a header of {n} bytes in a file of {len}"
            )));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact(&mut header)
            .map_err(|e| bad(format!("reading the header: {e}")))?;
        let v: serde_json::Value = serde_json::from_slice(&header)
            .map_err(|e| bad(format!("not a safetensors file: its header: {e}")))?;
        let serde_json::Value::Object(map) = v else {
            return Err(bad(
                "not a safetensors file: its header is not an object".into()
            ));
        };
        let data_start = 8 + n;
        let mut tensors = HashMap::new();
        let mut meta = HashMap::new();
        let mut data_end = 0;
        for (name, t) in map {
            if name == "__metadata__" {
                for (k, v) in t.as_object().into_iter().flatten() {
                    if let Some(s) = v.as_str() {
                        meta.insert(k.clone(), s.to_string());
                    }
                }
                continue;
            }
            let dtype = t["dtype"].as_str().unwrap_or_default().to_string();
            let shape: Option<Vec<i64>> = t["shape"]
                .as_array()
                .and_then(|s| s.iter().map(|d| d.as_i64().filter(|&d| d >= 0)).collect());
            let offsets: Option<Vec<u64>> = t["data_offsets"]
                .as_array()
                .and_then(|o| o.iter().map(serde_json::Value::as_u64).collect());
            let (Some(shape), Some([begin, end])) = (shape, offsets.as_deref()) else {
                return Err(bad(format!(
                    "`{name}`: no shape or data offsets in the header"
                )));
            };
            let (begin, end) = (*begin, *end);
            let elements: i64 = shape.iter().product();
            if end < begin || (dtype == "F32" && end - begin != 4 * elements as u64) {
                return Err(bad(format!(
                    "`{name}`: bytes {begin}..{end} for {dtype} {shape:?}"
                )));
            }
            data_end = data_end.max(end);
            tensors.insert(
                name,
                Entry {
                    dtype,
                    shape,
                    begin,
                    end,
                },
            );
        }
        if data_start + data_end != len {
            return Err(bad(format!(
                "the header describes {} bytes, the file has {len} (truncated or padded)",
                data_start + data_end
            )));
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            data_start,
            tensors,
            meta,
        })
    }

    /// The names of its tensors.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.tensors.keys()
    }

    /// Whether it holds `name`.
    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The shape of the float32 tensor `name`; an error naming it when it is missing or of
    /// another dtype.
    pub fn f32_shape(&self, name: &str) -> Result<Vec<i64>> {
        let e = self.entry(name)?;
        if e.dtype != "F32" {
            return Err(PolicyError::OptimizerState {
                path: self.path.clone(),
                reason: format!("`{name}` is {} {:?}, expected F32", e.dtype, e.shape),
            });
        }
        Ok(e.shape.clone())
    }

    /// Elements `lo..lo + n` of the float32 tensor `name`, flattened, read from the file.
    pub fn read_f32(&mut self, name: &str, lo: i64, n: i64) -> Result<Tensor> {
        let e = self.entry(name)?.clone();
        self.f32_shape(name)?;
        let elements = (e.end - e.begin) / 4;
        if lo < 0 || n < 0 || (lo + n) as u64 > elements {
            return Err(PolicyError::InvalidInput(format!(
                "{}: elements {lo}..{} of `{name}`, which has {elements}",
                self.path.display(),
                lo + n
            )));
        }
        let mut bytes = vec![0u8; 4 * n as usize];
        let at = self.data_start + e.begin + 4 * lo as u64;
        self.file
            .seek(SeekFrom::Start(at))
            .and_then(|_| self.file.read_exact(&mut bytes))
            .map_err(|err| PolicyError::io(&self.path, err))?;
        Ok(Tensor::f_from_data_size(&bytes, &[n], Kind::Float)?)
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.tensors
            .get(name)
            .ok_or_else(|| PolicyError::MissingTensor {
                name: name.to_string(),
                path: self.path.clone(),
            })
    }
}
