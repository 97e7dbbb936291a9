//! `spade-sandbox-runner`: the only program of the project that runs generated Python. It
//! embeds CPython through pyo3, isolates itself (see `isolate`), loads one environment and
//! serves `spade_sandbox::protocol` until told to stop. A parent starts one runner per
//! environment; nothing of one environment survives into the next.
//!
//! Descriptors: requests arrive on a private duplicate of stdin and replies leave on a private
//! duplicate of stdout, both taken before any Python runs. Descriptor 0 then reads `/dev/null`
//! and descriptor 1 writes to stderr, so `input()` sees end-of-file and `print` output goes to
//! the parent's capped diagnostics instead of the reply stream. Replies echo the request's
//! random id, which never enters the Python namespace.

mod env;
mod isolate;

use pyo3::prelude::*;
use spade_sandbox::protocol::{
    self, EnvError, EnvErrorKind, FrameError, Op, PROTOCOL_VERSION, Reply, Request, Response,
};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit status when the channel itself fails (the parent treats any exit as a dead runner).
const EXIT_CHANNEL: u8 = 70;

fn main() -> ExitCode {
    if let Err(e) = find_stdlib() {
        eprintln!("spade-sandbox-runner: {e}");
        return ExitCode::from(EXIT_CHANNEL);
    }
    if let Err(e) = lower_priority() {
        eprintln!("spade-sandbox-runner: {e}");
        return ExitCode::from(EXIT_CHANNEL);
    }
    match serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spade-sandbox-runner: {e}");
            ExitCode::from(EXIT_CHANNEL)
        }
    }
}

/// The standard library of the interpreter the runner was built with (build.rs).
const BUILD_STDLIB: &str = env!("SPADE_RUNNER_STDLIB");

/// Makes sure the interpreter will find a standard library before it starts: without one,
/// CPython aborts during its start-up, before anything can be reported. The build
/// interpreter's is used where it exists (every machine that built or installed the runner).
/// Elsewhere (a GPU node the runner was carried to) a portable copy beside the runner, laid out
/// by scripts/python-bundle as `<dir>/bin/<runner>` and `<dir>/lib/python3.X/`, is used: the
/// embedded interpreter finds it by itself from neither its empty environment nor its compiled-in
/// prefix, so the runner re-executes itself with PYTHONHOME naming it (once: the re-executed
/// runner has PYTHONHOME set, and the parent starts every runner with an empty environment).
fn find_stdlib() -> std::io::Result<()> {
    let build = Path::new(BUILD_STDLIB);
    if build.join("os.py").is_file() || std::env::var_os("PYTHONHOME").is_some() {
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let home = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"));
    let version = build.file_name().unwrap_or_default();
    let portable = home.join("lib").join(version);
    if !portable.join("os.py").is_file() {
        return Err(std::io::Error::other(format!(
            "no Python standard library: neither {} (the interpreter this runner was built \
             with) nor {} (a portable copy beside the runner: scripts/python-bundle) exists",
            build.display(),
            portable.display()
        )));
    }
    Err(std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env("PYTHONHOME", home)
        .exec())
}

/// `--nice=N` (the parent's `RunnerConfig::nice`): lowers this process's CPU priority by N
/// before the interpreter starts, so its start-up yields to the parent's decoding too. Raising
/// it back needs the capability that isolation drops.
fn lower_priority() -> std::io::Result<()> {
    let mut by = 0;
    for arg in std::env::args().skip(1) {
        let n = arg
            .strip_prefix("--nice=")
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|n| (0..=19).contains(n))
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "unexpected argument `{arg}` (expected --nice=0..19)"
                ))
            })?;
        by = n;
    }
    if by > 0 {
        let now = rustix::process::getpriority_process(None)?;
        rustix::process::setpriority_process(None, (now + by).min(19))?;
    }
    Ok(())
}

fn take_channels() -> std::io::Result<(BufReader<File>, BufWriter<File>)> {
    let requests = File::from(rustix::io::dup(std::io::stdin())?);
    let replies = File::from(rustix::io::dup(std::io::stdout())?);
    let devnull = File::open("/dev/null")?;
    rustix::stdio::dup2_stdin(&devnull)?;
    rustix::stdio::dup2_stdout(std::io::stderr())?;
    Ok((BufReader::new(requests), BufWriter::new(replies)))
}

fn serve() -> Result<(), FrameError> {
    let (mut from_parent, mut to_parent) = take_channels()?;
    let site = env!("SPADE_RUNNER_SITE_PACKAGES");
    let (template, python, roots) = Python::attach(|py| {
        let t = env::Template::build(py, site)?;
        let roots = env::import_roots(py)?;
        let version = Python::version_str()
            .split_whitespace()
            .next()
            .unwrap_or("?")
            .to_owned();
        PyResult::Ok((t, version, roots))
    })
    .map_err(|e| std::io::Error::other(format!("interpreter start-up failed: {e}")))?;
    let hello = Response {
        id: 0,
        reply: Reply::Hello {
            protocol: PROTOCOL_VERSION,
            python,
        },
    };
    protocol::write_frame(&mut to_parent, &hello)?;

    let mut configured = false;
    let mut loaded: Option<env::LoadedEnv> = None;
    let mut max_obs_chars = protocol::Limits::default().max_observation_chars;
    loop {
        let Request { id, op } = match protocol::read_frame(&mut from_parent) {
            Ok(r) => r,
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => return Err(e),
        };
        let reply = match op {
            Op::Shutdown => {
                protocol::write_frame(
                    &mut to_parent,
                    &Response {
                        id,
                        reply: Reply::Bye,
                    },
                )?;
                return Ok(());
            }
            Op::Configure {
                limits,
                scratch_dir,
            } if !configured => {
                max_obs_chars = limits.max_observation_chars;
                match isolate::apply(&limits, &PathBuf::from(scratch_dir), &roots) {
                    Ok(layers) => {
                        configured = true;
                        Reply::Ready { layers }
                    }
                    // Never run environment code half-isolated: report and exit.
                    Err(e) => {
                        let reply = Reply::Error(EnvError {
                            kind: EnvErrorKind::BadRequest,
                            message: format!("isolation failed: {e}"),
                        });
                        protocol::write_frame(&mut to_parent, &Response { id, reply })?;
                        return Ok(());
                    }
                }
            }
            _ if !configured => bad_request("the first request must be `configure`"),
            Op::Configure { .. } => bad_request("already configured"),
            Op::Load {
                source,
                kind,
                max_turns,
            } => {
                if loaded.is_some() {
                    bad_request("an environment is already loaded; start a new runner")
                } else {
                    let result = Python::attach(|py| {
                        env::load(py, &template, &source, kind, max_turns, max_obs_chars)
                    });
                    match result {
                        Ok(env) => {
                            let reply = Reply::Loaded {
                                class_name: env.class_name.clone(),
                                kind: env.kind,
                                max_turns: env.max_turns,
                            };
                            loaded = Some(env);
                            reply
                        }
                        Err(e) => Reply::Error(e),
                    }
                }
            }
            Op::Exec { source, expr } => {
                match Python::attach(|py| env::exec(py, &template, &source, &expr)) {
                    Ok(text) => Reply::Text { text },
                    Err(e) => Reply::Error(e),
                }
            }
            op => match &loaded {
                None => bad_request("no environment loaded"),
                Some(env) => Python::attach(|py| on_env(py, env, op)),
            },
        };
        protocol::write_frame(&mut to_parent, &Response { id, reply })?;
    }
}

fn on_env(py: Python<'_>, env: &env::LoadedEnv, op: Op) -> Reply {
    let result = match op {
        Op::Reset { seed } => env.reset(py, seed).map(Reply::Reset),
        Op::Step { action } => env.step(py, &action).map(Reply::Step),
        Op::Solution => env.solution(py).map(|text| Reply::Text { text }),
        Op::Criteria => env.criteria(py).map(|done| Reply::Criteria { done }),
        Op::PlaySolution { seed, max_turns } => {
            Ok(Reply::Trajectory(env.play_solution(py, seed, max_turns)))
        }
        _ => Ok(bad_request("unexpected request")),
    };
    result.unwrap_or_else(Reply::Error)
}

fn bad_request(message: &str) -> Reply {
    Reply::Error(EnvError {
        kind: EnvErrorKind::BadRequest,
        message: message.to_owned(),
    })
}
