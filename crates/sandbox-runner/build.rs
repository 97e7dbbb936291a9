// Without an rpath to the build interpreter's lib dir the runner would load whichever
// libpython3.11 the dynamic linker finds first (Debian's system one here), not the CPython the
// project venv was made from.
fn main() {
    let cfg = pyo3_build_config::get();
    if let Some(dir) = cfg.lib_dir() {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
    }
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
}
