//! Running evaluation Python in a sandbox runner: a request goes in as a JSON string literal
//! (never spliced into code), the reply comes back as JSON text.

use crate::error::EvalError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use spade_sandbox::{Pool, PoolConfig, Runner, RunnerConfig};
use std::time::Duration;

/// A pool for evaluation: runners with room for sympy and the reasoning-gym generators, one
/// started ahead so the next task's runner is ready while the model generates.
pub fn pool(runner: &RunnerConfig) -> Pool {
    let mut cfg = PoolConfig::new(runner.clone());
    cfg.max_runners = 2;
    cfg.warm = 1;
    Pool::new(cfg)
}

/// Runs `code` with `request` bound to the Python name `REQUEST` (decoded from JSON) and
/// parses the JSON text that `code` leaves in `REPLY`.
pub fn call<Req: Serialize, Rep: DeserializeOwned>(
    runner: &mut Runner,
    what: &str,
    code: &str,
    request: &Req,
    limit: Duration,
) -> Result<Rep, EvalError> {
    let request = serde_json::to_string(request).map_err(|e| EvalError::BadReply {
        what: what.to_string(),
        reason: format!("cannot encode the request: {e}"),
    })?;
    // A JSON string literal is a valid Python string literal with the same value (serde_json
    // escapes only ", \ and control characters, all as Python reads them).
    let literal = serde_json::to_string(&request).map_err(|e| EvalError::BadReply {
        what: what.to_string(),
        reason: format!("cannot encode the request: {e}"),
    })?;
    let source = format!("import json\nREQUEST = json.loads({literal})\n{code}");
    let text = runner
        .exec(&source, "REPLY", limit)
        .map_err(|source| EvalError::Sandbox {
            what: what.to_string(),
            source,
        })?;
    serde_json::from_str(&text).map_err(|e| EvalError::BadReply {
        what: what.to_string(),
        reason: format!("{e}; got {:.200}", text),
    })
}

/// A started runner from `pool`, with the error naming what it was for.
pub fn checkout(pool: &Pool, what: &str) -> Result<spade_sandbox::Leased, EvalError> {
    pool.checkout().map_err(|source| EvalError::Sandbox {
        what: what.to_string(),
        source,
    })
}

/// Runner settings for evaluation: the default limits, with a larger address space (sympy and
/// the reasoning-gym generators import a lot) and CPU time for long tasks.
pub fn runner_config(runner_path: std::path::PathBuf) -> RunnerConfig {
    let mut cfg = RunnerConfig::new(runner_path);
    cfg.limits.address_space = 4 << 30;
    cfg.limits.cpu_seconds = 1800;
    cfg
}
