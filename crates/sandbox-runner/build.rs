//! Facts about the build interpreter (PYO3_PYTHON: the project venv's python3) are baked
//! into the runner:
//! - an rpath to its lib dir: without it the runner would load whichever libpython3.11 the
//!   dynamic linker finds first (Debian's system one here), not the CPython the venv was made
//!   from; then `$ORIGIN/../lib`, where a portable copy lies on a machine without that
//!   interpreter (scripts/python-bundle: a GPU node);
//! - the venv's site-packages, which the embedded interpreter does not find by itself (it takes
//!   its prefix from libpython, i.e. the base installation) and which holds numpy and math_verify;
//! - the standard library's directory, whose absence sends the runner to the portable copy.
use std::process::Command;

fn main() {
    let cfg = pyo3_build_config::get();
    let libdir = cfg.lib_dir().unwrap_or_default();
    if !libdir.is_empty() {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{libdir}");
    }
    println!("cargo:rustc-env=SPADE_RUNNER_LIBDIR={libdir}");
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN/../lib");
    let ask = |code: &str| {
        cfg.executable()
            .and_then(|exe| Command::new(exe).args(["-c", code]).output().ok())
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    let site = ask("import sysconfig; print(sysconfig.get_paths()['purelib'])");
    println!("cargo:rustc-env=SPADE_RUNNER_SITE_PACKAGES={site}");
    let stdlib = ask("import sysconfig; print(sysconfig.get_paths()['stdlib'])");
    println!("cargo:rustc-env=SPADE_RUNNER_STDLIB={stdlib}");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
    println!("cargo:rerun-if-changed=build.rs");
}
