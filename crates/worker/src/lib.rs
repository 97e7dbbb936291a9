//! The training worker: runs the SPADE loop by composing `spade` (the algorithm), `spade-sandbox`
//! (every generated environment in its own runner process) and `spade-policy` (libtorch). It
//! writes to a run directory or reports to the service; it never executes generated code itself.
//! The sandbox runner is located by `spade_sandbox::default_runner_path`.
