//! One runner process seen from the parent: start, configure, request/response with a
//! wall-clock timeout, kill.
//!
//! The runner is untrusted once environment code has run in it: every reply is checked for the
//! request's id and read through a bounded frame reader, a timeout or any protocol violation
//! kills the runner's whole process group with SIGKILL, and a killed runner is never reused.

use crate::protocol::{
    self, EnvError, EnvKind, FrameError, Layer, Limits, Observation, Op, PROTOCOL_VERSION, Reply,
    Request, Response, StepResult, Trajectory,
};
use std::io::{BufReader, BufWriter, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a runner may take to start its interpreter and say hello.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The last bytes of a runner's stderr (including everything environment code printed) kept for
/// error messages; the rest is discarded as it arrives.
const STDERR_TAIL: usize = 8 << 10;

/// Errors a caller of the sandbox can see; none of them is a panic of the caller.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The runner binary could not be started.
    #[error(
        "cannot start the sandbox runner {path}: {source} (it is looked for beside this \
         program, then on PATH; SPADE_SANDBOX_RUNNER names another)"
    )]
    Spawn {
        path: String,
        source: std::io::Error,
    },
    /// The runner speaks another protocol version.
    #[error("sandbox runner speaks protocol {got}, this build needs {PROTOCOL_VERSION}")]
    Version { got: u32 },
    /// The runner could not isolate itself; it runs no environment code.
    #[error("sandbox runner could not isolate itself: {0}")]
    Isolation(String),
    /// A call did not answer within its time limit; the runner was killed.
    #[error("{call} did not finish within {limit:?}; the runner was killed")]
    Timeout { call: &'static str, limit: Duration },
    /// The runner exited (crash, `os._exit`, a resource limit, a signal).
    #[error("the sandbox runner died during {call} ({status}){stderr}")]
    Died {
        call: &'static str,
        status: String,
        stderr: String,
    },
    /// The runner sent something the protocol does not allow here (for example a forged frame
    /// written by environment code); the runner was killed.
    #[error("protocol violation during {call}: {detail}; the runner was killed")]
    Protocol { call: &'static str, detail: String },
    /// The scratch directory passed its bounds (total bytes or number of entries) by the end of
    /// a call; the runner was killed.
    #[error(
        "during {call}, the scratch directory grew past its bounds: {detail}; the runner was killed"
    )]
    Scratch { call: &'static str, detail: String },
    /// The environment (or its source) failed: an exception, a contract violation, a limit.
    #[error("{:?}: {}", .0.kind, .0.message)]
    Env(EnvError),
}

impl SandboxError {
    /// The environment's own failure, if this is one.
    pub fn env_error(&self) -> Option<&EnvError> {
        match self {
            SandboxError::Env(e) => Some(e),
            _ => None,
        }
    }
}

/// What a runner needs to start.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub runner_path: PathBuf,
    pub limits: Limits,
    /// Parent directory of the per-runner scratch directories.
    pub scratch_root: PathBuf,
    /// Bounds on the scratch directory as a whole, checked by the parent after every call.
    pub scratch: ScratchLimits,
    /// How much lower the runner's CPU priority is than its parent's (a nice increment, 0-19).
    /// The model's decoding is every episode's critical path while an environment's step is
    /// one short call of many: when runners outnumber the free cores, the scheduler should run
    /// the decoding first. Isolation drops the capability to undo it.
    pub nice: u8,
}

/// [`RunnerConfig::nice`] by default.
pub const RUNNER_NICE: u8 = 10;

/// Bounds on everything an environment keeps in its scratch directory (RLIMIT_FSIZE bounds
/// only one file). The parent measures the directory after every call, without following
/// links; within one call the directory can grow past them until the call ends (at most the
/// call's time limit), then the runner is killed and the directory removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScratchLimits {
    /// Total size of the regular files, in bytes.
    pub max_bytes: u64,
    /// Number of entries (files, directories, links) beneath the scratch directory.
    pub max_files: u64,
}

impl Default for ScratchLimits {
    fn default() -> Self {
        Self {
            max_bytes: 64 << 20,
            max_files: 256,
        }
    }
}

/// Bytes of regular files and number of entries beneath `dir`; stops counting once either
/// passes its bound (so a directory of a million files costs only `max_files` look-ups).
pub fn scratch_usage(dir: &Path, limits: ScratchLimits) -> (u64, u64) {
    let (mut bytes, mut entries) = (0u64, 0u64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in rd.flatten() {
            entries += 1;
            if let Ok(meta) = entry.path().symlink_metadata() {
                if meta.is_dir() {
                    stack.push(entry.path());
                } else if meta.is_file() {
                    bytes = bytes.saturating_add(meta.len());
                }
            }
            if entries > limits.max_files || bytes > limits.max_bytes {
                return (bytes, entries);
            }
        }
    }
    (bytes, entries)
}

impl RunnerConfig {
    pub fn new(runner_path: impl Into<PathBuf>) -> Self {
        Self {
            runner_path: runner_path.into(),
            limits: Limits::default(),
            scratch_root: std::env::temp_dir(),
            scratch: ScratchLimits::default(),
            nice: RUNNER_NICE,
        }
    }
}

type Frame = Result<Response, FrameError>;

/// A live, isolated runner process. Dropping it kills the process group and removes its scratch
/// directory.
#[derive(Debug)]
pub struct Runner {
    child: Child,
    pgid: rustix::process::Pid,
    to: BufWriter<ChildStdin>,
    frames: Receiver<Frame>,
    stderr: Arc<Mutex<Vec<u8>>>,
    python: String,
    layers: Vec<Layer>,
    scratch: Option<tempfile::TempDir>,
    scratch_limits: ScratchLimits,
    dead: bool,
}

impl Runner {
    /// Starts a runner with an empty environment, waits for its hello, and has it isolate
    /// itself. The returned runner has not run any environment code yet.
    pub fn start(cfg: &RunnerConfig) -> Result<Self, SandboxError> {
        let spawn_err = |source| SandboxError::Spawn {
            path: cfg.runner_path.display().to_string(),
            source,
        };
        let scratch = tempfile::Builder::new()
            .prefix("spade-sandbox-")
            .tempdir_in(&cfg.scratch_root)
            .map_err(spawn_err)?;
        let mut child = Command::new(&cfg.runner_path)
            .arg(format!("--nice={}", cfg.nice.min(19)))
            .env_clear()
            // Fixed hashing makes set and dict-of-str iteration order, and so environments,
            // reproducible across runners; one BLAS thread because the runner may not make more.
            .env("PYTHONHASHSEED", "0")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONIOENCODING", "utf-8")
            .env("OPENBLAS_NUM_THREADS", "1")
            .env("OMP_NUM_THREADS", "1")
            .env("MKL_NUM_THREADS", "1")
            .current_dir(scratch.path())
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err(spawn_err(std::io::Error::other("stdio pipes missing")));
        };
        let pgid = rustix::process::Pid::from_child(&child);
        let (tx, frames) = mpsc::channel();
        std::thread::Builder::new()
            .name("sandbox-reader".into())
            .spawn(move || {
                let mut r = BufReader::new(stdout);
                loop {
                    let frame = protocol::read_frame::<Response>(&mut r);
                    let stop = frame.is_err();
                    if tx.send(frame).is_err() || stop {
                        return;
                    }
                }
            })
            .map_err(spawn_err)?;
        let tail = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&tail);
        std::thread::Builder::new()
            .name("sandbox-stderr".into())
            .spawn(move || drain_tail(stderr, &sink))
            .map_err(spawn_err)?;
        let mut runner = Runner {
            child,
            pgid,
            to: BufWriter::new(stdin),
            frames,
            stderr: tail,
            python: String::new(),
            layers: Vec::new(),
            scratch: Some(scratch),
            scratch_limits: cfg.scratch,
            dead: false,
        };
        match runner.receive(0, "start-up", START_TIMEOUT)? {
            Reply::Hello { protocol, python } if protocol == PROTOCOL_VERSION => {
                runner.python = python;
            }
            Reply::Hello { protocol, .. } => return Err(SandboxError::Version { got: protocol }),
            other => {
                return Err(runner.violation("start-up", format!("expected hello, got {other:?}")));
            }
        }
        let scratch_dir = runner
            .scratch
            .as_ref()
            .map(|d| d.path().display().to_string())
            .unwrap_or_default();
        let op = Op::Configure {
            limits: cfg.limits.clone(),
            scratch_dir,
        };
        match runner.call(op, "configure", START_TIMEOUT)? {
            Reply::Ready { layers } => runner.layers = layers,
            Reply::Error(e) => return Err(SandboxError::Isolation(e.message)),
            other => return Err(runner.violation("configure", format!("unexpected {other:?}"))),
        }
        Ok(runner)
    }

    /// The CPython version the runner embeds.
    pub fn python_version(&self) -> &str {
        &self.python
    }

    /// The isolation layers the runner applied before running any environment code.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The runner's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `op` and waits up to `limit` for the reply with the same id.
    pub fn call(
        &mut self,
        op: Op,
        call: &'static str,
        limit: Duration,
    ) -> Result<Reply, SandboxError> {
        if self.dead {
            return Err(SandboxError::Died {
                call,
                status: "killed earlier".into(),
                stderr: String::new(),
            });
        }
        let id = loop {
            let id: u64 = rand::random();
            // 0 is the hello's id.
            if id != 0 {
                break id;
            }
        };
        if let Err(e) = protocol::write_frame(&mut self.to, &Request { id, op }) {
            return Err(self.died(call, &e.to_string()));
        }
        let reply = self.receive(id, call, limit)?;
        self.check_scratch(call)?;
        Ok(reply)
    }

    /// Kills the runner if its scratch directory passed its bounds.
    fn check_scratch(&mut self, call: &'static str) -> Result<(), SandboxError> {
        let Some(dir) = self.scratch.as_ref().map(|d| d.path().to_path_buf()) else {
            return Ok(());
        };
        let lim = self.scratch_limits;
        let (bytes, entries) = scratch_usage(&dir, lim);
        if bytes <= lim.max_bytes && entries <= lim.max_files {
            return Ok(());
        }
        self.kill();
        let detail = if entries > lim.max_files {
            format!("more than {} files and directories", lim.max_files)
        } else {
            format!(
                "at least {bytes} bytes in its files (limit {})",
                lim.max_bytes
            )
        };
        Err(SandboxError::Scratch { call, detail })
    }

    fn receive(
        &mut self,
        id: u64,
        call: &'static str,
        limit: Duration,
    ) -> Result<Reply, SandboxError> {
        match self.frames.recv_timeout(limit) {
            Ok(Ok(resp)) if resp.id == id => Ok(resp.reply),
            Ok(Ok(resp)) => Err(self.violation(
                call,
                format!(
                    "reply with id {} while waiting for {id} (a forged frame?)",
                    resp.id
                ),
            )),
            Ok(Err(FrameError::Closed)) | Err(RecvTimeoutError::Disconnected) => {
                Err(self.died(call, "channel closed"))
            }
            Ok(Err(e)) => Err(self.violation(call, e.to_string())),
            Err(RecvTimeoutError::Timeout) => {
                self.kill();
                Err(SandboxError::Timeout { call, limit })
            }
        }
    }

    fn violation(&mut self, call: &'static str, detail: String) -> SandboxError {
        self.kill();
        SandboxError::Protocol { call, detail }
    }

    fn died(&mut self, call: &'static str, fallback: &str) -> SandboxError {
        // Give the exit status a moment to become visible after the pipe closed.
        let status = (0..50)
            .find_map(|_| match self.child.try_wait() {
                Ok(Some(s)) => Some(describe_exit(s)),
                _ => {
                    std::thread::sleep(Duration::from_millis(2));
                    None
                }
            })
            .unwrap_or_else(|| fallback.to_owned());
        self.kill();
        let tail = self.stderr_tail();
        let stderr = if tail.is_empty() {
            String::new()
        } else {
            format!("; stderr: {tail}")
        };
        SandboxError::Died {
            call,
            status,
            stderr,
        }
    }

    /// The last lines the runner (or environment code) wrote to stderr/stdout.
    pub fn stderr_tail(&self) -> String {
        let buf = self.stderr.lock().map(|b| b.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&buf);
        let lines: Vec<&str> = text.lines().rev().take(8).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// SIGKILL to the whole process group, then reap.
    pub fn kill(&mut self) {
        if !self.dead {
            self.dead = true;
            let _ = rustix::process::kill_process_group(self.pgid, rustix::process::Signal::KILL);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Asks the runner to exit, then makes sure it has.
    pub fn shutdown(mut self) {
        if !self.dead {
            let _ = self.call(Op::Shutdown, "shutdown", Duration::from_secs(2));
        }
        self.kill();
    }

    // Typed wrappers ------------------------------------------------------------------------

    pub fn load(
        &mut self,
        source: &str,
        kind: Option<EnvKind>,
        max_turns: Option<u32>,
        limit: Duration,
    ) -> Result<(String, EnvKind, u32), SandboxError> {
        let op = Op::Load {
            source: source.to_owned(),
            kind,
            max_turns,
        };
        match self.call(op, "load", limit)? {
            Reply::Loaded {
                class_name,
                kind,
                max_turns,
            } => Ok((class_name, kind, max_turns)),
            other => Err(self.unexpected("load", other)),
        }
    }

    pub fn reset(
        &mut self,
        seed: Option<i64>,
        limit: Duration,
    ) -> Result<Observation, SandboxError> {
        match self.call(Op::Reset { seed }, "reset", limit)? {
            Reply::Reset(o) => Ok(o),
            other => Err(self.unexpected("reset", other)),
        }
    }

    pub fn step(&mut self, action: &str, limit: Duration) -> Result<StepResult, SandboxError> {
        let op = Op::Step {
            action: action.to_owned(),
        };
        match self.call(op, "step", limit)? {
            Reply::Step(s) => Ok(s),
            other => Err(self.unexpected("step", other)),
        }
    }

    pub fn solution(&mut self, limit: Duration) -> Result<String, SandboxError> {
        match self.call(Op::Solution, "solution", limit)? {
            Reply::Text { text } => Ok(text),
            other => Err(self.unexpected("solution", other)),
        }
    }

    pub fn criteria(&mut self, limit: Duration) -> Result<Vec<bool>, SandboxError> {
        match self.call(Op::Criteria, "criteria", limit)? {
            Reply::Criteria { done } => Ok(done),
            other => Err(self.unexpected("criteria", other)),
        }
    }

    pub fn play_solution(
        &mut self,
        seed: i64,
        max_turns: u32,
        limit: Duration,
    ) -> Result<Trajectory, SandboxError> {
        match self.call(Op::PlaySolution { seed, max_turns }, "play_solution", limit)? {
            Reply::Trajectory(t) => Ok(t),
            other => Err(self.unexpected("play_solution", other)),
        }
    }

    /// Runs `source` in a fresh environment namespace and returns `str(expr)`.
    pub fn exec(
        &mut self,
        source: &str,
        expr: &str,
        limit: Duration,
    ) -> Result<String, SandboxError> {
        let op = Op::Exec {
            source: source.to_owned(),
            expr: expr.to_owned(),
        };
        match self.call(op, "exec", limit)? {
            Reply::Text { text } => Ok(text),
            other => Err(self.unexpected("exec", other)),
        }
    }

    /// An environment error passes through; any other reply is a protocol violation.
    fn unexpected(&mut self, call: &'static str, reply: Reply) -> SandboxError {
        match reply {
            Reply::Error(e) => SandboxError::Env(e),
            other => self.violation(call, format!("unexpected reply {other:?}")),
        }
    }

    /// Whether the process is still running (false after a kill or an exit).
    pub fn is_alive(&mut self) -> bool {
        !self.dead && matches!(self.child.try_wait(), Ok(None))
    }

    /// The scratch directory (removed when the runner is dropped).
    pub fn scratch_dir(&self) -> Option<&Path> {
        self.scratch.as_ref().map(|d| d.path())
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.kill();
    }
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(9)) => "killed by SIGKILL (a resource limit or an external kill)".into(),
        (None, Some(24)) => "killed by SIGXCPU (CPU time limit)".into(),
        (None, Some(11)) => "killed by SIGSEGV (a crash, e.g. C-level recursion)".into(),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => "unknown exit".into(),
    }
}

/// Keeps the last [`STDERR_TAIL`] bytes of `r`, discarding the rest as it arrives, so a runner
/// that prints gigabytes can neither fill memory nor block on a full pipe.
fn drain_tail(mut r: impl Read, tail: &Mutex<Vec<u8>>) {
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Ok(mut t) = tail.lock() {
                    t.extend_from_slice(&buf[..n]);
                    if t.len() > STDERR_TAIL {
                        let cut = t.len() - STDERR_TAIL;
                        t.drain(..cut);
                    }
                }
            }
        }
    }
}
