//! Tests and binaries of this package find libtorch through an rpath instead of
//! LD_LIBRARY_PATH. torch-sys (links = "tch") exports its lib dir as DEP_TCH_LIBTORCH_LIB.
//! The libtorch tree's `build-version` becomes `SPADE_LIBTORCH_VERSION` (`spade doctor`).
fn main() {
    let mut version = "unknown".to_owned();
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        let file = std::path::Path::new(&dir).join("../build-version");
        println!("cargo:rerun-if-changed={}", file.display());
        if let Ok(v) = std::fs::read_to_string(&file) {
            version = v.trim().to_owned();
        }
    }
    println!("cargo:rustc-env=SPADE_LIBTORCH_VERSION={version}");
}
