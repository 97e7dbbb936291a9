//! One runner process: start, handshake, request/response, kill on drop.

use crate::protocol::{self, FrameError, PROTOCOL_VERSION, Request, Response};
use std::io::{BufReader, BufWriter};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// Errors a caller of the sandbox can see; none of them is a panic of the caller.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The runner binary could not be started.
    #[error("cannot start the sandbox runner {path}: {source}")]
    Spawn {
        path: String,
        source: std::io::Error,
    },
    /// The runner speaks another protocol version.
    #[error("sandbox runner speaks protocol {got}, this build needs {PROTOCOL_VERSION}")]
    Version { got: u32 },
    /// The runner sent something other than what the protocol allows at this point.
    #[error("unexpected message from the sandbox runner: {0:?}")]
    Unexpected(Box<Response>),
    /// The channel broke (the runner died, or sent an unreadable frame).
    #[error("sandbox runner channel: {0}")]
    Channel(#[from] FrameError),
    /// The environment's Python code raised.
    #[error("{kind}: {message}")]
    Python { kind: String, message: String },
    /// The runner refused the request as malformed.
    #[error("request refused by the runner: {0}")]
    BadRequest(String),
}

/// A live runner process. Dropping it kills the process.
#[derive(Debug)]
pub struct Runner {
    child: Child,
    to: BufWriter<ChildStdin>,
    from: BufReader<ChildStdout>,
    python: String,
}

impl Runner {
    /// Starts `runner_path` with an empty environment and waits for its hello.
    pub fn spawn(runner_path: &Path) -> Result<Self, SandboxError> {
        let spawn_err = |source| SandboxError::Spawn {
            path: runner_path.display().to_string(),
            source,
        };
        let mut child = Command::new(runner_path)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(spawn_err)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(spawn_err(std::io::Error::other("stdio pipes missing")));
        };
        let mut runner = Runner {
            child,
            to: BufWriter::new(stdin),
            from: BufReader::new(stdout),
            python: String::new(),
        };
        match protocol::read_frame(&mut runner.from)? {
            Response::Hello { protocol, python } if protocol == PROTOCOL_VERSION => {
                runner.python = python;
                Ok(runner)
            }
            Response::Hello { protocol, .. } => Err(SandboxError::Version { got: protocol }),
            other => Err(SandboxError::Unexpected(Box::new(other))),
        }
    }

    /// The CPython version the runner embeds, from its hello.
    pub fn python_version(&self) -> &str {
        &self.python
    }

    /// Runs `source` in a fresh namespace and returns `str(eval(expr))`.
    pub fn eval(&mut self, source: &str, expr: &str) -> Result<String, SandboxError> {
        let req = Request::Eval {
            source: source.to_owned(),
            expr: expr.to_owned(),
        };
        protocol::write_frame(&mut self.to, &req)?;
        match protocol::read_frame(&mut self.from)? {
            Response::Value { text } => Ok(text),
            Response::PythonError { kind, message } => Err(SandboxError::Python { kind, message }),
            Response::BadRequest { message } => Err(SandboxError::BadRequest(message)),
            other => Err(SandboxError::Unexpected(Box::new(other))),
        }
    }

    /// Asks the runner to exit and reaps it.
    pub fn shutdown(mut self) -> Result<(), SandboxError> {
        protocol::write_frame(&mut self.to, &Request::Shutdown)?;
        let _ = self.child.wait();
        Ok(())
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        // Already exited after shutdown: kill fails harmlessly.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
