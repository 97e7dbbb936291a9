//! The runner as its parent sees it: a child process speaking the versioned protocol.

use spade_sandbox::{Runner, SandboxError};
use std::path::Path;

fn runner() -> Runner {
    let path = Path::new(env!("CARGO_BIN_EXE_spade-sandbox-runner"));
    match Runner::spawn(path) {
        Ok(r) => r,
        Err(e) => panic!("runner failed to start: {e}"),
    }
}

#[test]
fn python_runs_in_a_child_process_and_answers_over_the_protocol() -> Result<(), SandboxError> {
    let mut r = runner();
    assert!(
        r.python_version().starts_with("3."),
        "{}",
        r.python_version()
    );
    let pid = r.eval("import os\n", "os.getpid()")?;
    assert_ne!(
        pid,
        std::process::id().to_string(),
        "Python must not run in the caller"
    );
    assert_eq!(
        r.eval("def f(n):\n    return n * (n + 1) // 2\n", "f(100)")?,
        "5050"
    );
    r.shutdown()
}

#[test]
fn printing_cannot_corrupt_the_channel_and_errors_come_back_typed() -> Result<(), SandboxError> {
    let mut r = runner();
    // A frame-shaped print lands on stderr, not in the protocol stream.
    let fake = "print('SPD1\\x00\\x00\\x00\\x10{\"op\":\"value\"}', flush=True)\n";
    assert_eq!(r.eval(fake, "'still in sync'")?, "still in sync");
    match r.eval("x = 1 / 0\n", "x") {
        Err(SandboxError::Python { kind, message }) => {
            assert_eq!(kind, "ZeroDivisionError");
            assert!(message.contains("division by zero"), "{message}");
        }
        other => panic!("expected a Python error, got {other:?}"),
    }
    assert!(matches!(
        r.eval("a\0b", "1"),
        Err(SandboxError::BadRequest(_))
    ));
    // The namespace is fresh per request.
    assert!(matches!(r.eval("", "f"), Err(SandboxError::Python { .. })));
    // The runner survives all of the above.
    assert_eq!(r.eval("", "2 ** 10")?, "1024");
    r.shutdown()
}

#[test]
fn the_runner_starts_with_an_empty_environment() -> Result<(), SandboxError> {
    // The test process has variables (PATH, CARGO_*, ...); none may reach generated code.
    let mut r = runner();
    assert_eq!(r.eval("import os\n", "len(os.environ)")?, "0");
    r.shutdown()
}
