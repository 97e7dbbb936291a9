//! spade-policy's integration tests, one binary: reference tests against transformers
//! fixtures, checkpoint round trips (Rust -> transformers when the torch venv is present),
//! sampling, and training the tiny preset. Tests run on CPU, and also on CUDA when libtorch
//! sees a GPU.

mod checkpoints;
mod hf_reference;
mod sampling;
mod training;

use std::path::{Path, PathBuf};
use tch::Device;

/// A committed fixture directory.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A fresh, empty directory under the system temp dir, unique to this process and `tag`.
pub fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-policy-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// CPU, plus the first GPU when there is one. Also pins libtorch to one thread: its default
/// pool thrashes small machines (shared/toolchain.md).
pub fn devices() -> Vec<Device> {
    tch::set_num_threads(1);
    let mut d = vec![Device::Cpu];
    if tch::Cuda::is_available() {
        d.push(Device::Cuda(0));
    }
    d
}

/// Reads and parses a JSON file or panics naming it.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
