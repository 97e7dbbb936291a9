//! `spade-sandbox-runner`: the only program of the project that runs generated Python. It
//! embeds CPython through pyo3 and serves the protocol of `spade_sandbox::protocol` on its
//! stdin and a private copy of its stdout.
//!
//! Covered so far: the protocol channel is a duplicate of the original stdout taken before any
//! Python runs, and file descriptor 1 is then pointed at stderr, so `print` in generated code
//! cannot write into the channel by accident. Not yet covered (the sandbox milestone): the
//! operating-system isolation layers (namespaces, seccomp, rlimits, cgroups), timeouts, and a
//! deliberate write to the channel's descriptor number.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use spade_sandbox::protocol::{self, FrameError, PROTOCOL_VERSION, Request, Response};
use std::ffi::CString;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::process::ExitCode;

fn main() -> ExitCode {
    match serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spade-sandbox-runner: {e}");
            ExitCode::from(70)
        }
    }
}

fn serve() -> Result<(), FrameError> {
    let channel = File::from(rustix::io::dup(std::io::stdout()).map_err(std::io::Error::from)?);
    rustix::stdio::dup2_stdout(std::io::stderr()).map_err(std::io::Error::from)?;
    let mut to_parent = BufWriter::new(channel);
    let mut from_parent = BufReader::new(std::io::stdin());

    let python = Python::attach(|_py| {
        Python::version_str()
            .split_whitespace()
            .next()
            .unwrap_or("?")
            .to_owned()
    });
    protocol::write_frame(
        &mut to_parent,
        &Response::Hello {
            protocol: PROTOCOL_VERSION,
            python,
        },
    )?;
    loop {
        let req: Request = match protocol::read_frame(&mut from_parent) {
            Ok(r) => r,
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => return Err(e),
        };
        let resp = match req {
            Request::Shutdown => return Ok(()),
            Request::Eval { source, expr } => eval(&source, &expr),
        };
        protocol::write_frame(&mut to_parent, &resp)?;
    }
}

fn eval(source: &str, expr: &str) -> Response {
    let (Ok(source), Ok(expr)) = (CString::new(source), CString::new(expr)) else {
        return Response::BadRequest {
            message: "source and expression must not contain NUL bytes".into(),
        };
    };
    Python::attach(|py| {
        let globals = PyDict::new(py);
        let result = py
            .run(&source, Some(&globals), None)
            .and_then(|()| py.eval(&expr, Some(&globals), None))
            .and_then(|v| v.str().map(|s| s.to_string_lossy().into_owned()));
        match result {
            Ok(text) => Response::Value { text },
            Err(err) => Response::PythonError {
                kind: err
                    .get_type(py)
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "Exception".into()),
                message: err
                    .value(py)
                    .str()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            },
        }
    })
}
