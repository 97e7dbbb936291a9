//! spade-policy's integration tests, one binary: reference tests against transformers
//! fixtures, checkpoint round trips (Rust -> transformers when the torch venv is present),
//! sampling, and training the tiny preset. Tests run on CPU, and also on CUDA when libtorch
//! sees a GPU.

mod checkpoints;
mod encoder;
mod engine;
mod engine_paged;
mod engine_window;
mod gguf;
mod hf_reference;
mod mixed;
mod moe;
mod optim;
mod sampling;
mod smollm2;
mod training;

use std::path::{Path, PathBuf};
use tch::Device;

/// This crate's directory: `CARGO_MANIFEST_DIR` at run time when set (scripts/policy/
/// gpu_check.sh runs prebuilt test binaries in another checkout), else where it was built.
pub fn crate_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// A committed fixture directory.
pub fn fixture(name: &str) -> PathBuf {
    crate_dir().join("tests/fixtures").join(name)
}

/// A fresh, empty directory under the system temp dir, unique to this process and `tag`.
pub fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-policy-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// CPU, plus the first GPU when there is one (`SPADE_REQUIRE_CUDA=1` makes a missing GPU a
/// failure, so a GPU run cannot pass on CPU alone). Also pins libtorch to one thread: its
/// default pool thrashes small machines (shared/toolchain.md).
pub fn devices() -> Vec<Device> {
    tch::set_num_threads(1);
    let mut d = vec![Device::Cpu];
    if tch::Cuda::is_available() {
        d.push(Device::Cuda(0));
    } else if std::env::var_os("SPADE_REQUIRE_CUDA").is_some_and(|v| v == "1") {
        panic!("SPADE_REQUIRE_CUDA=1 but libtorch sees no GPU (is libtorch_cuda.so linked?)");
    }
    d
}

/// Reads and parses a JSON file or panics naming it.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
