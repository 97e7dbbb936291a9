//! Compiles the C++ bridge (src/bridge.cpp) against the libtorch that torch-sys found
//! (DEP_TCH_LIBTORCH_LIB, its `include/` beside it) and links it to libtorch_cpu, which holds
//! c10d's TCPStore and ProcessGroupGloo (Gloo itself is compiled into it). The PyPI wheel
//! ships c10d's headers but not Gloo's, which ProcessGroupGloo.hpp includes: they come from
//! Debian's libgloo-dev (scripts/setup installs it). Only the declarations are taken from them;
//! the code that runs is libtorch's own.
//!
//! The CUDA build (scripts/build-cuda with real CUDA libraries) also sets
//! `SPADE_NCCL_INCLUDE` (the CUDA runtime's and NCCL's header directories, `:`-separated) and
//! `SPADE_TORCH_CUDA_LIB` (the directory of `libtorch_cuda.so` and `libc10_cuda.so`): the bridge
//! is then compiled with ProcessGroupNCCL (`SPADE_WITH_NCCL`) and linked to them.
fn main() {
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        panic!("DEP_TCH_LIBTORCH_LIB is not set: torch-sys did not find libtorch");
    };
    let root = std::path::Path::new(&lib)
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| std::path::PathBuf::from(&lib));
    let gloo = std::env::var("SPADE_GLOO_INCLUDE").unwrap_or_else(|_| "/usr/include".into());
    if !std::path::Path::new(&gloo).join("gloo/config.h").exists() {
        panic!(
            "Gloo's headers are missing ({gloo}/gloo/config.h): install Debian's libgloo-dev \
             (scripts/setup does) or set SPADE_GLOO_INCLUDE to a directory holding gloo/"
        );
    }
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("src/bridge.cpp")
        .include(root.join("include"))
        .include(root.join("include/torch/csrc/api/include"))
        .include(&gloo)
        .define("USE_C10D_GLOO", None)
        // libtorch's headers warn a great deal under -Wall; the bridge's own code is small.
        .flag_if_supported("-w");
    let nccl = std::env::var("SPADE_NCCL_INCLUDE")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let cuda_lib = std::env::var("SPADE_TORCH_CUDA_LIB").ok();
    if let Some(dirs) = &nccl {
        if cuda_lib.is_none() {
            panic!(
                "SPADE_NCCL_INCLUDE is set but SPADE_TORCH_CUDA_LIB is not (scripts/build-cuda \
                 sets both)"
            );
        }
        for d in dirs.split(':').filter(|d| !d.is_empty()) {
            build.include(d);
        }
        build
            .define("USE_C10D_NCCL", None)
            .define("USE_CUDA", None)
            .define("SPADE_WITH_NCCL", None);
    }
    build.compile("spade_dist_bridge");
    println!("cargo:rustc-link-search=native={lib}");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    // After the CPU libtorch's directory, so only the CUDA libraries are taken from this one.
    if let (Some(_), Some(cuda_lib)) = (&nccl, &cuda_lib) {
        println!("cargo:rustc-link-search=native={cuda_lib}");
        println!("cargo:rustc-link-lib=dylib=torch_cuda");
        println!("cargo:rustc-link-lib=dylib=c10_cuda");
    }
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    // This package's own binaries (the probe) and tests find the CUDA libraries there too, and
    // load libtorch_cuda.so even where nothing they call needs a symbol of it (the NCCL link
    // looks NCCL and the CUDA runtime up in the process, where libtorch_cuda brings them; the
    // `spade` binary forces it the same way, crates/cli/build.rs).
    if let (Some(_), Some(cuda_lib)) = (&nccl, &cuda_lib) {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{cuda_lib}");
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-L{cuda_lib},-ltorch_cuda,--as-needed");
    }
    println!("cargo:rerun-if-changed=src/bridge.cpp");
    println!("cargo:rerun-if-env-changed=SPADE_GLOO_INCLUDE");
    println!("cargo:rerun-if-env-changed=SPADE_NCCL_INCLUDE");
    println!("cargo:rerun-if-env-changed=SPADE_TORCH_CUDA_LIB");
}
