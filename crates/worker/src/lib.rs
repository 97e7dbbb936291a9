//! The training worker: runs the SPADE loop by composing `spade` (the algorithm), `spade-sandbox`
//! (every generated environment in its own runner process) and `spade-policy` (libtorch). It
//! writes to a run directory or reports to the service; it never executes generated code itself.

use std::path::PathBuf;

/// Where the worker finds the sandbox runner: `SPADE_SANDBOX_RUNNER`, else the
/// `spade-sandbox-runner` binary next to the running executable.
pub fn runner_path(env_override: Option<PathBuf>, current_exe: Option<PathBuf>) -> Option<PathBuf> {
    env_override.or_else(|| {
        current_exe
            .as_deref()
            .and_then(|p| p.parent())
            .map(|dir| dir.join("spade-sandbox-runner"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_is_found_beside_the_worker_unless_overridden() {
        let exe = Some(PathBuf::from("/opt/spade/bin/spade"));
        assert_eq!(
            runner_path(None, exe.clone()),
            Some(PathBuf::from("/opt/spade/bin/spade-sandbox-runner"))
        );
        assert_eq!(
            runner_path(Some(PathBuf::from("/x/r")), exe),
            Some(PathBuf::from("/x/r"))
        );
    }
}
