//! Where training jobs run. The queue itself is SQL and lives in `spade_db::jobs`
//! (`FOR UPDATE SKIP LOCKED`); this crate turns a claimed job into a running process through an
//! [`Executor`] (a local child process, [`LocalExecutor`], or a Ray job through the Ray Jobs REST
//! API, [`RayExecutor`]) and watches it with the [`Scheduler`] loop, which records every state
//! transition in PostgreSQL and re-attaches to still-running jobs after a server restart.

mod local;
mod ray;
mod scheduler;

pub use local::{LocalConfig, LocalExecutor, run_state_dir};
pub use ray::{RayConfig, RayExecutor};
pub use scheduler::{JobEnd, SchedError, Scheduler, SchedulerConfig, Tick, TokenSource};

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::PathBuf;

/// The executors a run can be scheduled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    /// A child process of the server on this machine (the default).
    Local,
    /// A job on a Ray cluster, submitted through its Jobs REST API.
    Ray,
}

impl ExecutorKind {
    /// The queue a scheduler of this kind claims from.
    pub fn queue(self) -> spade_db::jobs::JobExecutor {
        match self {
            Self::Local => spade_db::jobs::JobExecutor::Local,
            Self::Ray => spade_db::jobs::JobExecutor::Ray,
        }
    }
}

/// Errors naming an executor that does not exist.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown executor {given:?}: expected \"local\" or \"ray\"")]
pub struct UnknownExecutor {
    pub given: String,
}

impl std::str::FromStr for ExecutorKind {
    type Err = UnknownExecutor;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "local" => Ok(Self::Local),
            "ray" => Ok(Self::Ray),
            _ => Err(UnknownExecutor {
                given: s.to_owned(),
            }),
        }
    }
}

/// Ray submission ids (and local job directories) are derived from the run id and attempt so
/// that a retried submit after a lost reply cannot start the same run twice (Ray rejects a
/// duplicate submission id; a local job directory that exists names the process it started).
pub fn ray_submission_id(run_id: i64, attempt: u32) -> String {
    submission_id("spade", run_id, attempt)
}

/// `<prefix>-run-<run>-a<attempt>`. Servers with separate databases that share one Ray cluster
/// must use distinct prefixes: their run ids overlap.
pub fn submission_id(prefix: &str, run_id: i64, attempt: u32) -> String {
    format!("{prefix}-run-{run_id}-a{attempt}")
}

/// What an executor needs to start one job.
#[derive(Clone)]
pub struct JobSpec {
    pub job_id: i64,
    pub run_id: i64,
    pub attempt: u32,
    /// Base URL of the service the worker reports to.
    pub server_url: String,
    /// The run's worker token; handed to the job in `SPADE_WORKER_TOKEN`, never on a command
    /// line (command lines are world-readable in /proc).
    pub token: String,
    /// GPUs the job needs (0: CPU only).
    pub gpus: u32,
    /// The job's own arguments after the program of the command template (evaluation jobs:
    /// `eval --checkpoint ...`); `None` runs the template itself (training jobs).
    pub program_args: Option<Vec<String>>,
}

// Hand-written so the token never reaches a log line.
impl std::fmt::Debug for JobSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSpec")
            .field("job_id", &self.job_id)
            .field("run_id", &self.run_id)
            .field("attempt", &self.attempt)
            .field("server_url", &self.server_url)
            .field("token", &"***")
            .field("gpus", &self.gpus)
            .field("program_args", &self.program_args)
            .finish()
    }
}

impl JobSpec {
    /// The handle of this job once the executor named it `external_id`.
    pub fn handle(&self, external_id: String) -> JobHandle {
        JobHandle {
            job_id: self.job_id,
            run_id: self.run_id,
            attempt: self.attempt,
            external_id,
        }
    }

    /// The job's ids.
    pub fn job_ref(&self) -> JobRef {
        JobRef {
            job_id: self.job_id,
            run_id: self.run_id,
            attempt: self.attempt,
        }
    }

    /// The job's argv: the template filled in (see [`JobSpec::expand`]), or, for a job with its
    /// own [`JobSpec::program_args`], the template's program followed by those arguments as
    /// they are (they carry user-chosen paths and names, which must not be expanded).
    /// Evaluation jobs reuse the worker's program (`spade`), so one setting names the binary
    /// for both kinds.
    pub fn argv(&self, template: &[String]) -> Vec<String> {
        match &self.program_args {
            None => self.expand(template),
            Some(args) => template.iter().take(1).chain(args).cloned().collect(),
        }
    }

    /// Fills a command template: `{run}`, `{job}`, `{attempt}` and `{server}` are replaced in
    /// every argument. The token has no placeholder on purpose (see [`JobSpec::token`]).
    pub fn expand(&self, template: &[String]) -> Vec<String> {
        template
            .iter()
            .map(|a| {
                a.replace("{run}", &self.run_id.to_string())
                    .replace("{job}", &self.job_id.to_string())
                    .replace("{attempt}", &self.attempt.to_string())
                    .replace("{server}", &self.server_url)
            })
            .collect()
    }
}

/// Which job, before the executor has named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRef {
    pub job_id: i64,
    pub run_id: i64,
    pub attempt: u32,
}

/// How a scheduler finds a started job again: the ids plus the executor's own name for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobHandle {
    pub job_id: i64,
    pub run_id: i64,
    pub attempt: u32,
    /// `pid:<pid>:<start ticks>` (local) or the Ray submission id.
    pub external_id: String,
}

/// What `Executor::start` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub external_id: String,
    /// Where the job's output is captured, when the executor writes a file for it.
    pub log_path: Option<PathBuf>,
}

/// A job's state as its executor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobStatus {
    /// Accepted but not yet running (Ray: waiting for resources or its runtime env).
    Pending,
    /// Running.
    Running,
    /// Exited with status 0.
    Succeeded,
    /// Exited non-zero, was killed, or failed to start; `message` says which.
    Failed {
        exit_code: Option<i32>,
        message: String,
    },
    /// Stopped through [`Executor::stop`].
    Stopped { message: String },
    /// The executor no longer knows the job (a vanished process without an exit record, a Ray
    /// head that restarted).
    Lost { message: String },
}

impl JobStatus {
    /// Whether the job has ended (nothing more will happen to it).
    pub fn is_final(&self) -> bool {
        !matches!(self, Self::Pending | Self::Running)
    }
}

/// Errors of executors.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The configured command template is empty.
    #[error("the job command is empty: configure at least the program to run")]
    EmptyCommand,
    /// The command's program is neither a path to an executable nor found on PATH.
    #[error("job command {program:?} not found (not an executable path, not on PATH)")]
    CommandNotFound { program: String },
    /// All slots are taken; the caller should try again when a job ends.
    #[error("no free {what} slot (all {total} in use)")]
    NoCapacity { what: &'static str, total: u32 },
    /// The job needs more GPUs than are free now (`total` on this node); it waits.
    #[error("waiting for {needed} GPU{} ({free} of this node's {total} free)", plural(*needed))]
    WaitingForGpus { needed: u32, free: u32, total: u32 },
    /// The job needs more GPUs than this node lends at all: it would wait for ever.
    #[error(
        "needs {needed} GPU{} but this node lends {total} (spade-server --gpus); lower the \
         run's GPUs (model.device, vllm.gpus) or run it where more are lent",
        plural(*needed)
    )]
    TooManyGpus { needed: u32, total: u32 },
    /// The operating system refused to start the process.
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// Reading or writing a job's files failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Signalling a job's process group failed.
    #[error("cannot signal process group {pgid}: {source}")]
    Signal { pgid: i32, source: std::io::Error },
    /// A job directory holds another job's process record (the jobs directory outlived the
    /// database it belonged to); it is left alone rather than adopted.
    #[error(
        "{dir} belongs to job {found}, not job {job_id}: move it away or use another jobs directory"
    )]
    StaleJobDir {
        dir: PathBuf,
        found: i64,
        job_id: i64,
    },
    /// The submission id exists at Ray but belongs to another SPADE job (a database reset, or
    /// two servers sharing a submission prefix).
    #[error(
        "Ray submission {submission_id} belongs to job {owner:?}, not job {job_id}: use another --ray-submission-prefix"
    )]
    SubmissionTaken {
        submission_id: String,
        owner: Option<String>,
        job_id: i64,
    },
    /// The handle's external id is not one this executor writes.
    #[error("external id {external_id:?} is not a {executor} job handle (expected {expected})")]
    BadExternalId {
        external_id: String,
        executor: &'static str,
        expected: &'static str,
    },
    /// The Ray dashboard could not be reached (or did not answer in time).
    #[error("Ray at {url} is unreachable: {source}")]
    RayUnreachable { url: String, source: reqwest::Error },
    /// Ray answered with an error status.
    #[error("Ray refused {what} ({status}): {message}")]
    RayRefused {
        what: String,
        status: u16,
        message: String,
    },
    /// Ray answered with a body this client does not understand.
    #[error("unexpected reply from Ray at {url}: {detail}")]
    RayReply { url: String, detail: String },
}

/// Something that starts, watches and stops jobs. Every method is safe to call again after a
/// crash: `start` for a job that was already started returns the same external id instead of
/// starting it twice, and `adopt` takes over a job another instance (or an earlier server
/// process) started.
pub trait Executor: Send + Sync + 'static {
    /// Which queue this executor serves.
    fn kind(&self) -> ExecutorKind;
    /// Whether a job needing `gpus` GPUs can be started now.
    fn has_capacity(&self, gpus: u32) -> bool;
    /// Why a job needing `gpus` GPUs must wait now ([`ExecError::WaitingForGpus`]), asked
    /// before a worker token is issued for it; None when it may start (or the executor does
    /// not count GPUs itself, as Ray's queue does).
    fn gpu_wait(&self, gpus: u32) -> Option<ExecError> {
        let _ = gpus;
        None
    }
    /// Starts the job (idempotent per job id and attempt).
    fn start(&self, spec: &JobSpec) -> impl Future<Output = Result<Started, ExecError>> + Send;
    /// The job, if this executor already started it (and takes it over, as `adopt` does). Asked
    /// before a job left `claimed` is started, so that a job started just before a crash or a
    /// lost reply is recorded, not started again with a new token.
    fn find(&self, job: &JobRef)
    -> impl Future<Output = Result<Option<Started>, ExecError>> + Send;
    /// Re-attaches to a job started earlier, reserving its resources.
    fn adopt(&self, handle: &JobHandle) -> impl Future<Output = Result<(), ExecError>> + Send;
    /// The job's current state.
    fn poll(&self, handle: &JobHandle)
    -> impl Future<Output = Result<JobStatus, ExecError>> + Send;
    /// The last `max_bytes` (about) of the job's output.
    fn logs(
        &self,
        handle: &JobHandle,
        max_bytes: usize,
    ) -> impl Future<Output = Result<String, ExecError>> + Send;
    /// Stops the job; returns once it has ended or the executor took over ending it.
    fn stop(&self, handle: &JobHandle) -> impl Future<Output = Result<(), ExecError>> + Send;
    /// Forgets a job whose final state is recorded, freeing its slot.
    fn release(&self, handle: &JobHandle);
}

/// The last `max_bytes` of `text`, starting at a line boundary when cut.
pub(crate) fn tail(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut cut = text.len() - max_bytes;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    let rest = &text[cut..];
    match rest.find('\n') {
        Some(i) if i + 1 < rest.len() => &rest[i + 1..],
        _ => rest,
    }
}

/// "s" for any count but one (messages people read).
fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executor_names_parse_and_unknown_names_are_explained() {
        assert_eq!("ray".parse::<ExecutorKind>(), Ok(ExecutorKind::Ray));
        let err = "slurm"
            .parse::<ExecutorKind>()
            .expect_err("not an executor yet");
        assert!(err.to_string().contains("\"slurm\""));
        assert_eq!(ray_submission_id(12, 0), "spade-run-12-a0");
    }

    #[test]
    fn templates_expand_and_tokens_stay_out_of_debug_output() {
        let spec = JobSpec {
            job_id: 3,
            run_id: 12,
            attempt: 2,
            server_url: "http://127.0.0.1:3000".into(),
            token: "s3cret".into(),
            gpus: 0,
            program_args: None,
        };
        let argv = spec.expand(&[
            "spade".into(),
            "worker".into(),
            "--run={run}".into(),
            "--server".into(),
            "{server}".into(),
            "{job}/{attempt}".into(),
        ]);
        assert_eq!(
            argv,
            [
                "spade",
                "worker",
                "--run=12",
                "--server",
                "http://127.0.0.1:3000",
                "3/2"
            ]
        );
        assert!(!format!("{spec:?}").contains("s3cret"));
        // An evaluation job keeps the program and takes its own arguments verbatim.
        let eval = JobSpec {
            program_args: Some(vec![
                "eval".into(),
                "--suite".into(),
                "qa:{run}.jsonl".into(),
            ]),
            ..spec
        };
        assert_eq!(
            eval.argv(&["/opt/spade".into(), "worker".into(), "--run={run}".into()]),
            ["/opt/spade", "eval", "--suite", "qa:{run}.jsonl"]
        );
    }

    #[test]
    fn tails_cut_at_line_boundaries_and_respect_utf8() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("line one\nline two\n", 12), "line two\n");
        let s = "ééé\nok";
        assert_eq!(tail(s, 4), "ok");
        assert_eq!(tail("xxxxxxxx", 3), "xxx");
    }
}
