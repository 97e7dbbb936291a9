//! Starts the job scheduler of `spade_scheduler` as a tokio task, configured by the
//! `scheduler` section of [`crate::config`]: the executor (local processes or Ray), its slots,
//! the worker command and where workers reach this server. The task re-attaches to the jobs
//! this node left running, then claims and watches jobs until shutdown. [`run_logs`] reads a
//! run's job output for the API.

use crate::config::{ExecutorSetting, SchedulerSettings};
use crate::tokens::jobs as job_tokens;
use spade_db::jobs::{self, Job, JobExecutor, JobKind};
use spade_scheduler::{
    Executor, JobHandle, LocalConfig, LocalExecutor, RayConfig, RayExecutor, Scheduler,
    SchedulerConfig, TokenSource,
};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Errors in the `scheduler` section of the configuration.
#[derive(Debug, thiserror::Error)]
pub enum SchedulingError {
    /// `--worker-command` has no program.
    #[error(
        "--worker-command is empty: give at least the program, e.g. \"spade worker --run {{run}} --server {{server}}\""
    )]
    EmptyWorkerCommand,
    /// `--worker-command` carries the token, which belongs in SPADE_WORKER_TOKEN.
    #[error("--worker-command must not contain the run token; the worker reads SPADE_WORKER_TOKEN")]
    TokenInCommand,
    /// A slot count or interval that makes the scheduler useless.
    #[error("--{flag} must be at least {min}, got {got}")]
    TooSmall {
        flag: &'static str,
        min: u64,
        got: u64,
    },
    /// `--ray-address` or `--public-url` is not an http(s) URL.
    #[error("--{flag} must be an http:// or https:// URL, got {got:?}")]
    NotAUrl { flag: &'static str, got: String },
    /// The executor failed (building the Ray client, reading a job's logs).
    #[error(transparent)]
    Executor(#[from] spade_scheduler::ExecError),
    /// The job queue could not be read.
    #[error(transparent)]
    Queue(#[from] spade_db::jobs::JobError),
}

/// A [`TokenSource`] from an async function of the run id (the auth layer's token issuer).
#[derive(Debug, Clone)]
pub struct IssueFn<F>(pub F);

impl<F, Fut, E> TokenSource for IssueFn<F>
where
    F: Fn(i64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, E>> + Send,
    E: std::fmt::Display,
{
    async fn token(&self, job: &Job) -> Result<String, String> {
        (self.0)(job.run_id).await.map_err(|e| e.to_string())
    }
}

/// The worker command as argv (split on whitespace).
pub fn worker_command(s: &SchedulerSettings) -> Result<Vec<String>, SchedulingError> {
    let argv: Vec<String> = s
        .worker_command
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if argv.is_empty() {
        return Err(SchedulingError::EmptyWorkerCommand);
    }
    if argv.iter().any(|a| a.contains("--token")) {
        return Err(SchedulingError::TokenInCommand);
    }
    Ok(argv)
}

/// This server's node name: `--scheduler-node`, else the hostname, else `localhost`.
pub fn node_name(s: &SchedulerSettings) -> String {
    s.node
        .clone()
        .filter(|n| !n.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_owned())
}

fn check_url(flag: &'static str, url: &str) -> Result<(), SchedulingError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(SchedulingError::NotAUrl {
            flag,
            got: url.to_owned(),
        })
    }
}

/// Starts the scheduler task (none with `--executor off`). `listen` is the server's bound
/// address, the default of `--public-url`. The task ends when `shutdown` turns true; running
/// jobs keep running and are re-attached at the next start.
pub fn spawn<T: TokenSource>(
    db: spade_db::Pool,
    s: &SchedulerSettings,
    listen: SocketAddr,
    tokens: T,
    shutdown: watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, SchedulingError> {
    let command = worker_command(s)?;
    let server_url = s
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{listen}"));
    check_url("public-url", &server_url)?;
    if s.poll_ms < 50 {
        return Err(SchedulingError::TooSmall {
            flag: "scheduler-poll-ms",
            min: 50,
            got: s.poll_ms,
        });
    }
    let cfg = SchedulerConfig {
        node: node_name(s),
        server_url,
        poll_interval: Duration::from_millis(s.poll_ms),
        gpus_per_job: s.gpus_per_job,
        resume_lost: s.resume_lost_jobs,
    };
    tracing::info!(executor = ?s.executor, node = %cfg.node, "starting the scheduler");
    Ok(match s.executor {
        ExecutorSetting::Off => None,
        ExecutorSetting::Local => {
            let slots = if s.gpus_per_job > 0 {
                ("gpus", s.lent_gpus().len() as u32)
            } else {
                ("cpu-slots", s.cpu_slots)
            };
            if slots.1 == 0 {
                return Err(SchedulingError::TooSmall {
                    flag: slots.0,
                    min: 1,
                    got: 0,
                });
            }
            let ex = LocalExecutor::new(local_config(s, command));
            let sched = Scheduler::new(db, Arc::new(ex), tokens, cfg);
            Some(tokio::spawn(sched.run(shutdown)))
        }
        ExecutorSetting::Ray => {
            check_url("ray-address", &s.ray_address)?;
            if s.ray_max_jobs == 0 {
                return Err(SchedulingError::TooSmall {
                    flag: "ray-max-jobs",
                    min: 1,
                    got: 0,
                });
            }
            let ex = RayExecutor::new(ray_config(s, command))?;
            let sched = Scheduler::new(db, Arc::new(ex), tokens, cfg);
            Some(tokio::spawn(sched.run(shutdown)))
        }
    })
}

/// The tokens the scheduler hands to jobs: a training job gets a fresh run token
/// ([`crate::tokens::jobs`]: the previous one stops working), an evaluation job a
/// token of its own that can post that evaluation's results and nothing else. The server wraps
/// it in [`crate::spool::SpoolTaking`], which also takes an ended job's unsent reports.
#[derive(Debug, Clone)]
pub struct LaunchTokens {
    pub db: spade_db::Pool,
}

impl TokenSource for LaunchTokens {
    async fn token(&self, job: &Job) -> Result<String, String> {
        match job.kind {
            JobKind::Train => job_tokens::for_launch(&self.db, job.run_id).await,
            JobKind::Eval => job_tokens::for_evaluation(&self.db, job.id).await,
        }
        .map_err(|e| e.to_string())
    }
}

/// [`spawn`] with [`LaunchTokens`] alone, taking no spools (tests of the scheduler alone); the
/// server starts it with [`crate::spool::spawn_scheduler`].
pub fn spawn_with_run_tokens(
    db: spade_db::Pool,
    s: &SchedulerSettings,
    listen: SocketAddr,
    shutdown: watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, SchedulingError> {
    let tokens = LaunchTokens { db: db.clone() };
    spawn(db, s, listen, tokens, shutdown)
}

fn local_config(s: &SchedulerSettings, command: Vec<String>) -> LocalConfig {
    LocalConfig {
        command,
        // Absolute, because each job runs with its own directory as the working directory and
        // its wrapper writes the exit status through this path.
        jobs_dir: std::path::absolute(&s.jobs_dir).unwrap_or_else(|_| s.jobs_dir.clone()),
        cpu_slots: s.cpu_slots,
        gpus: s.lent_gpus(),
        stop_grace: Duration::from_secs(s.stop_grace_secs),
    }
}

fn ray_config(s: &SchedulerSettings, command: Vec<String>) -> RayConfig {
    RayConfig {
        address: s.ray_address.clone(),
        command,
        num_cpus: s.ray_num_cpus,
        max_jobs: s.ray_max_jobs,
        request_timeout: Duration::from_secs(30),
        submission_prefix: s.ray_submission_prefix.clone(),
        // Where the path rule accepts checkpoints and spools are taken from (see RayConfig).
        // Absolute: the Ray job runs in a working directory of Ray's.
        jobs_dir: Some(std::path::absolute(&s.jobs_dir).unwrap_or_else(|_| s.jobs_dir.clone())),
        ray_python: s.ray_python.clone(),
    }
}

/// The last `max_bytes` (about) of the output of a run's newest job, read through the executor
/// that ran it (its log file, or Ray's log endpoint); `None` when no job of the run has started.
/// What a run page's log panel shows.
pub async fn run_logs(
    db: &spade_db::Pool,
    s: &SchedulerSettings,
    run_id: i64,
    max_bytes: usize,
) -> Result<Option<String>, SchedulingError> {
    let Some(job) = jobs::latest_for_run(db, run_id).await? else {
        return Ok(None);
    };
    let Some(external_id) = job.external_id.clone() else {
        return Ok(None);
    };
    let handle = JobHandle {
        job_id: job.id,
        run_id,
        attempt: u32::try_from(job.attempt).unwrap_or_default(),
        external_id,
    };
    // Reading logs needs no command; the executors read files or ask Ray.
    let logs = match job.executor {
        JobExecutor::Local => {
            LocalExecutor::new(local_config(s, Vec::new()))
                .logs(&handle, max_bytes)
                .await?
        }
        JobExecutor::Ray => {
            RayExecutor::new(ray_config(s, Vec::new()))?
                .logs(&handle, max_bytes)
                .await?
        }
    };
    Ok(Some(logs))
}

#[cfg(test)]
#[path = "scheduling_tests.rs"]
mod tests;
