//! Compiles the C++ bridge (src/bridge.cpp) against the libtorch that torch-sys found
//! (DEP_TCH_LIBTORCH_LIB, its `include/` beside it) and links it to libtorch_cpu, which holds
//! c10d's TCPStore and ProcessGroupGloo (Gloo itself is compiled into it). The PyPI wheel
//! ships c10d's headers but not Gloo's, which ProcessGroupGloo.hpp includes: they come from
//! Debian's libgloo-dev (scripts/setup installs it). Only the declarations are taken from them;
//! the code that runs is libtorch's own.
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
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("src/bridge.cpp")
        .include(root.join("include"))
        .include(root.join("include/torch/csrc/api/include"))
        .include(&gloo)
        .define("USE_C10D_GLOO", None)
        // libtorch's headers warn a great deal under -Wall; the bridge's own code is small.
        .flag_if_supported("-w")
        .compile("spade_dist_bridge");
    println!("cargo:rustc-link-search=native={lib}");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rerun-if-changed=src/bridge.cpp");
    println!("cargo:rerun-if-env-changed=SPADE_GLOO_INCLUDE");
}
