//! The sandbox as its users see it: real runner processes, real isolation, real environments.
//! One test binary (`attacks`, `validation`, `pool`, `portable`, `repair`, `rlve`) so the runner is built once.

mod attacks;
mod pool;
mod portable;
mod reference_tool_use;
mod repair;
mod rlve;
mod validation;

use spade_sandbox::{Pool, PoolConfig, RunnerConfig};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const RUNNER: &str = env!("CARGO_BIN_EXE_spade-sandbox-runner");

pub fn pool_with(max_runners: usize, warm: usize, call_timeout: Duration) -> Pool {
    let mut cfg = PoolConfig::new(RunnerConfig::new(RUNNER));
    cfg.max_runners = max_runners;
    cfg.warm = warm;
    cfg.call_timeout = call_timeout;
    cfg.load_timeout = call_timeout;
    Pool::new(cfg)
}

/// Validation with a 30 s budget and 3 s calls: what the tests' small programs need.
pub fn quick() -> spade_sandbox::ValidationConfig {
    spade_sandbox::ValidationConfig {
        budget: Duration::from_secs(30),
        call_timeout: Duration::from_secs(3),
        ..spade_sandbox::ValidationConfig::default()
    }
}

pub fn pool() -> Pool {
    pool_with(2, 0, Duration::from_secs(20))
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Every `.py` file under `dir`, sorted.
pub fn python_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "py") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
