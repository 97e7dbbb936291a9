//! Tests of this package find libtorch through an rpath instead of LD_LIBRARY_PATH. torch-sys
//! (links = "tch") exports its lib dir as DEP_TCH_LIBTORCH_LIB.
fn main() {
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
