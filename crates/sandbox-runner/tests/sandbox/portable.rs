//! The runner on a machine without the interpreter it was built with (a GPU node it was carried
//! to with scripts/build-cuda's bundle): the build interpreter's lib dir, standard library and
//! site-packages are hidden by tmpfs mounts in a private mount namespace, and the runner is
//! started from a copy beside scripts/python-bundle's portable Python. The same runner copied
//! without the bundle must fail with its message (so the hiding is real).

use super::workspace_root;
use spade_sandbox::{Pool, PoolConfig, RunnerConfig, validate};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Directories the runner could otherwise find a Python in: the build interpreter's lib dir
/// (libpython and the standard library), its standard library where it lies elsewhere, the
/// venv's site-packages and Debian's own standard library of the same version.
fn hidden() -> Vec<String> {
    let stdlib = env!("SPADE_RUNNER_STDLIB");
    let debian = Path::new("/usr/lib").join(Path::new(stdlib).file_name().unwrap_or_default());
    [
        env!("SPADE_RUNNER_LIBDIR").to_owned(),
        stdlib.to_owned(),
        env!("SPADE_RUNNER_SITE_PACKAGES").to_owned(),
        debian.display().to_string(),
    ]
    .into_iter()
    .filter(|d| !d.is_empty())
    .collect()
}

/// A script that starts `runner` in a mount namespace where `hidden()` are empty.
fn hiding_wrapper(dir: &Path, runner: &Path) -> PathBuf {
    let dirs: Vec<String> = hidden().iter().map(|d| format!("'{d}'")).collect();
    let script = format!(
        "#!/bin/sh\nexec /usr/bin/unshare --mount --propagation private /bin/sh -c '\
         for d in {dirs}; do if [ -d \"$d\" ]; then mount -t tmpfs none \"$d\" || exit 71; fi; done; \
         exec {runner} \"$@\"' sh \"$@\"\n",
        dirs = dirs.join(" ").replace('\'', "'\\''"),
        runner = runner.display(),
    );
    let path = dir.join("hidden-runner.sh");
    std::fs::write(&path, script).expect("write the wrapper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make the wrapper executable");
    path
}

/// `<dir>/bin/spade-sandbox-runner`, with an empty `<dir>/lib`.
fn copy_runner(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    std::fs::create_dir_all(dir.join("lib")).expect("lib dir");
    let runner = bin.join("spade-sandbox-runner");
    std::fs::copy(super::RUNNER, &runner).expect("copy the runner");
    runner
}

fn private_mounts_work() -> bool {
    Command::new("/usr/bin/unshare")
        .args(["--mount", "--propagation", "private", "/bin/true"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_runner_carried_with_its_portable_python_runs_environments_where_its_build_python_is_gone() {
    if !private_mounts_work() {
        eprintln!("skipped: this machine cannot make a private mount namespace (unshare --mount)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let bundle = tmp.path().join("bundle");
    let made = Command::new(workspace_root().join("scripts/python-bundle"))
        .arg(&bundle)
        .output()
        .expect("run scripts/python-bundle");
    assert!(
        made.status.success(),
        "python-bundle failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let runner = copy_runner(&bundle);
    let wrapper = hiding_wrapper(tmp.path(), &runner);
    let pool = Pool::new(PoolConfig::new(RunnerConfig::new(&wrapper)));
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/good/guess_number.py"),
    )
    .expect("fixture");
    let r = validate(&pool, &source, &super::quick());
    assert!(r.accepted, "{r:#?}");

    // Control: the same runner beside libpython alone, without the standard library, cannot
    // start, and says why.
    let alone = tmp.path().join("alone");
    let runner = copy_runner(&alone);
    for lib in std::fs::read_dir(bundle.join("lib"))
        .expect("bundle lib")
        .flatten()
    {
        if lib.path().is_file() {
            std::fs::copy(lib.path(), alone.join("lib").join(lib.file_name()))
                .expect("copy libpython");
        }
    }
    let wrapper = hiding_wrapper(&alone, &runner);
    let mut cfg = PoolConfig::new(RunnerConfig::new(&wrapper));
    cfg.max_runners = 1;
    let r = validate(&Pool::new(cfg), &source, &super::quick());
    assert!(!r.accepted, "a runner with its Python hidden was accepted");
    let text = format!("{r:?}");
    assert!(
        text.contains("no Python standard library"),
        "the failure does not name the missing standard library: {text}"
    );
}
