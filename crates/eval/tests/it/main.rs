//! Integration tests of spade-eval against the real sandbox and the project venv's Python:
//! our reasoning-gym scores equal `score_answer` computed directly, and our QA verdicts equal
//! math-verify's. They need `spade-sandbox-runner` built (`cargo build -p spade-sandbox-runner`)
//! and the venv (`scripts/setup`); a missing one fails the test with instructions, never skips.

mod bfcl_verdicts;
mod code_judging;
mod qa_scoring;
mod rg_scoring;

use spade_sandbox::{Pool, PoolConfig};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The workspace root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv's Python, the reference for scores (the same interpreter the runner embeds).
fn venv_python() -> PathBuf {
    let p = root().join(".deps/venv/bin/python3");
    assert!(
        p.exists(),
        "{} is missing: run scripts/setup (it creates the venv with reasoning-gym and math-verify)",
        p.display()
    );
    p
}

/// Runs `code` in the venv's Python with `input` on stdin; returns stdout parsed as JSON.
fn python_json(code: &str, input: &serde_json::Value) -> serde_json::Value {
    use std::io::Write;
    let mut child = Command::new(venv_python())
        .args(["-c", code])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the venv's python: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("writing to python: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("python: {e}"));
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "python printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A one-runner pool with the evaluation's runner limits.
fn pool() -> Pool {
    let path = spade_sandbox::default_runner_path();
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p spade-sandbox-runner`",
        path.display()
    );
    let mut runner = spade_sandbox::RunnerConfig::new(path);
    runner.limits.address_space = 4 << 30;
    let mut cfg = PoolConfig::new(runner);
    cfg.max_runners = 1;
    cfg.warm = 0;
    Pool::new(cfg)
}
