//! Tests and binaries of this package find libtorch through an rpath instead of
//! LD_LIBRARY_PATH. torch-sys (links = "tch") exports its lib dir as DEP_TCH_LIBTORCH_LIB.
//!
//! A CUDA worker (`scripts/build-cuda`): with `SPADE_TORCH_CUDA_LIB` naming a directory that
//! holds a `libtorch_cuda.so`, the `spade` binary records that library as needed. Rust links
//! with `--as-needed`, which would drop it (nothing calls into it: its static initialisers
//! register libtorch's CUDA backend), so it is forced with `--no-as-needed`.
//! `SPADE_TORCH_CUDA_RPATH` (a real library's directory, never a link stub's) goes on the rpath
//! after the CPU libtorch's.
fn main() {
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    println!("cargo:rerun-if-env-changed=SPADE_TORCH_CUDA_LIB");
    if let Ok(cuda) = std::env::var("SPADE_TORCH_CUDA_LIB") {
        println!("cargo:rustc-link-arg-bins=-Wl,--no-as-needed,-L{cuda},-ltorch_cuda,--as-needed");
    }
    println!("cargo:rerun-if-env-changed=SPADE_TORCH_CUDA_RPATH");
    if let Ok(dir) = std::env::var("SPADE_TORCH_CUDA_RPATH") {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
    }
}
