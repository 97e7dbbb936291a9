//! The runner protocol, version [`PROTOCOL_VERSION`].
//!
//! Frames in both directions: the 4 magic bytes `SPD2`, a big-endian `u32` payload length, then
//! that many bytes of JSON (one [`Request`] or [`Response`]). The runner speaks first with a
//! [`Reply::Hello`] (id 0); a parent refuses a runner whose version differs. Every request carries
//! a random 64-bit id that the runner echoes; the id never enters the Python namespace, so bytes
//! that generated code writes to a descriptor (even a complete, well-formed frame) do not carry
//! the expected id and are reported as a protocol violation instead of being believed. Payloads
//! over [`MAX_FRAME`] are refused before they are read.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Bumped on every incompatible change of the messages below.
pub const PROTOCOL_VERSION: u32 = 2;
/// Start of every frame; a desynchronised stream fails at the next frame instead of misparsing.
pub const MAGIC: [u8; 4] = *b"SPD2";
/// Largest payload either side accepts (16 MiB).
pub const MAX_FRAME: u32 = 16 << 20;

/// Which environment contract of `shared/spade-spec.md` a source follows (defined once, in
/// `spade-types`; `Game` by default).
pub use spade::EnvKind;

/// Resource limits the runner applies to itself before any environment code runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// RLIMIT_AS in bytes.
    pub address_space: u64,
    /// RLIMIT_CPU in seconds over the runner's whole life.
    pub cpu_seconds: u64,
    /// RLIMIT_NOFILE.
    pub open_files: u64,
    /// RLIMIT_FSIZE in bytes: the largest file the environment may write in its scratch dir.
    pub file_size: u64,
    /// Longest observation (in characters) the runner passes back; longer is an error.
    pub max_observation_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            address_space: 2 << 30,
            cpu_seconds: 600,
            open_files: 64,
            file_size: 16 << 20,
            // spec "Validation": observation length limit 20,000 characters.
            max_observation_chars: 20_000,
        }
    }
}

/// Parent -> runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    #[serde(flatten)]
    pub op: Op,
}

/// What the parent asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Apply the isolation layers, then answer [`Reply::Ready`]. Must be the first request.
    Configure {
        limits: Limits,
        /// A private directory the environment may read and write; becomes its working dir.
        scratch_dir: String,
    },
    /// Parse, execute and instantiate one environment source (once per runner).
    Load {
        source: String,
        /// `None`: tool use if the class subclasses `ToolUseEnv` or `ToolUseBaseEnv`, else a game.
        kind: Option<EnvKind>,
        /// Passed as `max_turns=` when given; otherwise the class default is used.
        max_turns: Option<u32>,
    },
    Reset {
        seed: Option<i64>,
    },
    Step {
        action: String,
    },
    Solution,
    /// Tool use only: the success state of every instruction.
    Criteria,
    /// Reset with `seed`, then step the environment's own `solution()` (wrapped in `\boxed{}`
    /// for games) until it ends or `max_turns` steps were taken: a whole episode in one round
    /// trip, for validation and benchmarks.
    PlaySolution {
        seed: i64,
        max_turns: u32,
    },
    /// Execute `source` in a fresh namespace with the environment globals, return `str(expr)`.
    Exec {
        source: String,
        expr: String,
    },
    Shutdown,
}

/// Runner -> parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: u64,
    #[serde(flatten)]
    pub reply: Reply,
}

/// One observation and its info dict (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub obs: String,
    pub info: serde_json::Value,
}

/// What `step` returned, already type-checked by the runner through the C API (so tampering
/// with Python builtins cannot make a wrong type pass).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub obs: String,
    pub reward: f64,
    pub terminated: bool,
    pub truncated: bool,
    pub info: serde_json::Value,
}

/// One turn of a played episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub action: String,
    pub result: StepResult,
}

/// A whole episode as [`Op::PlaySolution`] played it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    pub reset: Observation,
    pub turns: Vec<Turn>,
    /// Set when the episode stopped on an error (the turns before it are kept).
    pub error: Option<EnvError>,
}

/// Isolation layers the runner applied to itself before running any environment code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// New network namespace: only a downed loopback, no route anywhere.
    NetNamespace,
    /// New IPC and UTS namespaces.
    IpcUtsNamespace,
    /// A user namespace (used when the runner does not start as root).
    UserNamespace,
    /// Every capability dropped (a root runner keeps uid 0 but no privilege).
    NoCapabilities,
    /// Landlock: reads only under the interpreter's and packages' dirs, writes only in scratch.
    Landlock,
    /// Landlock scoping: no signals to, no abstract unix sockets of, processes outside.
    LandlockScope,
    /// seccomp: no new processes or threads, no sockets, no exec, no ptrace, no kill of others.
    Seccomp,
    /// rlimits: address space, CPU time, open files, file size, no core dumps.
    Rlimits,
}

/// A failure that is the environment's (or its source's) fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvError {
    pub kind: EnvErrorKind,
    pub message: String,
}

/// Machine-readable classes of [`EnvError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvErrorKind {
    /// The source does not parse.
    Syntax,
    /// No top-level class whose name ends in `Env`.
    NoEnvClass,
    /// More than one top-level class whose name ends in `Env`.
    MultipleEnvClasses,
    /// Environment code raised an exception.
    Exception,
    /// A method returned something other than the contract says (the message names what).
    Contract,
    /// An observation longer than the limit.
    ObservationTooLong,
    /// The request came in the wrong order (e.g. `step` before `load`).
    BadRequest,
}

/// What the runner answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Hello {
        protocol: u32,
        python: String,
    },
    Ready {
        layers: Vec<Layer>,
    },
    Loaded {
        class_name: String,
        kind: EnvKind,
        max_turns: u32,
    },
    Reset(Observation),
    Step(StepResult),
    Text {
        text: String,
    },
    Criteria {
        done: Vec<bool>,
    },
    Trajectory(Trajectory),
    Error(EnvError),
    Bye,
}

/// Errors of reading or writing a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("I/O on the runner channel: {0}")]
    Io(#[from] io::Error),
    #[error("the peer closed the channel")]
    Closed,
    #[error("bad frame magic {0:?} (stream out of sync)")]
    BadMagic([u8; 4]),
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(u64),
    #[error("malformed frame payload: {0}")]
    Json(#[from] serde_json::Error),
}

/// Writes one frame and flushes.
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), FrameError> {
    let payload = serde_json::to_vec(msg)?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|n| *n <= MAX_FRAME)
        .ok_or(FrameError::TooLarge(payload.len() as u64))?;
    let mut frame = Vec::with_capacity(payload.len() + 8);
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&payload);
    // One write for the whole frame keeps frames whole on the pipe.
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame; [`FrameError::Closed`] on a clean end of stream before a frame starts.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut header = [0u8; 8];
    match r.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let magic = [header[0], header[1], header[2], header[3]];
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(u64::from(len)));
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    Ok(serde_json::from_slice(&payload)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() -> Result<(), FrameError> {
        let mut buf = Vec::new();
        let req = Request {
            id: 7,
            op: Op::Step {
                action: "\\boxed{42}".into(),
            },
        };
        write_frame(&mut buf, &req)?;
        write_frame(
            &mut buf,
            &Request {
                id: 8,
                op: Op::Shutdown,
            },
        )?;
        let mut r = buf.as_slice();
        assert_eq!(read_frame::<Request>(&mut r)?, req);
        assert_eq!(read_frame::<Request>(&mut r)?.op, Op::Shutdown);
        assert!(matches!(
            read_frame::<Request>(&mut r),
            Err(FrameError::Closed)
        ));
        Ok(())
    }

    #[test]
    fn replies_serialise_with_their_tag() -> Result<(), FrameError> {
        let resp = Response {
            id: 3,
            reply: Reply::Step(StepResult {
                obs: "o".into(),
                reward: 1.0,
                terminated: true,
                truncated: false,
                info: serde_json::json!({}),
            }),
        };
        let text = serde_json::to_string(&resp)?;
        assert!(text.contains("\"reply\":\"step\""), "{text}");
        assert_eq!(serde_json::from_str::<Response>(&text)?, resp);
        Ok(())
    }

    #[test]
    fn garbage_and_oversized_frames_are_refused_without_allocating() {
        let mut r: &[u8] = b"hello world!";
        assert!(matches!(
            read_frame::<Request>(&mut r),
            Err(FrameError::BadMagic(_))
        ));
        let mut big = MAGIC.to_vec();
        big.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            read_frame::<Request>(&mut big.as_slice()),
            Err(FrameError::TooLarge(_))
        ));
    }
}
