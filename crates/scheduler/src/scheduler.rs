//! The scheduler loop: queues a job for every run the API marked `queued`, claims queued jobs
//! from PostgreSQL, starts them on one executor, polls them, records every transition, and
//! stops the ones whose cancel was requested (through the run or the job).
//!
//! It keeps no job state in memory that it could not rebuild: every tick starts from
//! `spade_db::jobs::list_active` (the unfinished jobs this node owns), so a restarted server
//! re-attaches simply by running — [`Scheduler::reattach`] first hands each recorded handle to
//! the executor (reserving its slot), and a job left `claimed` by a crash between claim and
//! start is started again, which executors make idempotent (same submission id, same job dir).
//! A job is claimed once: `claim_next` uses `FOR UPDATE SKIP LOCKED`, and only the claiming
//! node (`claimed_by`) ever polls, stops or finishes it.

use crate::{ExecError, Executor, JobHandle, JobSpec, JobStatus};
use spade_db::Pool;
use spade_db::evaluations::{self, EvalJob};
use spade_db::jobs::{self, Job, JobError, JobKind, JobState};
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Configuration of the loop.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// This scheduler's name in `jobs.claimed_by`; stable across restarts of the same server
    /// (re-attach finds jobs by it), distinct between servers sharing a database.
    pub node: String,
    /// Base URL workers report to.
    pub server_url: String,
    /// Time between ticks.
    pub poll_interval: Duration,
    /// GPUs each job asks for.
    pub gpus_per_job: u32,
    /// Whether a train job found gone at re-attach, with no exit status (it died with the
    /// container or machine while no scheduler watched it), queues its run again to resume
    /// from its last checkpoint instead of failing it. Jobs that die under watch fail as ever.
    pub resume_lost: bool,
}

/// How a job ended, as it is about to be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub message: String,
}

/// What the server does for the jobs the scheduler runs: issue the per-run worker token handed
/// to a job (the backend's auth layer), and look at a training job's end before it is recorded.
pub trait TokenSource: Send + Sync + 'static {
    /// A token that lets the worker of `job` report to the server.
    fn token(&self, job: &Job) -> impl Future<Output = Result<String, String>> + Send;

    /// Called when a training job has ended (seen while watching it or on re-attaching after a
    /// restart), before its end is recorded; returns the end to record. The backend takes the
    /// reports the worker spooled but could not send, which may turn a worker that failed only
    /// at sending its last reports into a success. By default the end stays as it is.
    fn train_job_ended(&self, job: &Job, end: JobEnd) -> impl Future<Output = JobEnd> + Send {
        let _ = job;
        async move { end }
    }
}

/// Errors of the scheduler loop.
#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    /// The queue could not be read or written.
    #[error("job queue: {0}")]
    Queue(#[from] JobError),
    /// A job's attempt number does not fit the executors' `u32`.
    #[error("job {job_id} has attempt {attempt}, expected a positive number")]
    BadAttempt { job_id: i64, attempt: i32 },
}

/// What one tick did (for logs and tests).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tick {
    /// Jobs queued for `queued` runs that had none (see `jobs::sync_with_runs`).
    pub enqueued: u64,
    pub started: Vec<i64>,
    pub finished: Vec<(i64, JobState)>,
    pub stopping: Vec<i64>,
    /// A claimed job could not start for want of GPUs (it stays claimed, noted on its run).
    pub waiting: bool,
}

/// The loop; see the module docs.
#[derive(Debug)]
pub struct Scheduler<E, T> {
    pool: Pool,
    executor: Arc<E>,
    tokens: T,
    cfg: SchedulerConfig,
    /// Jobs with a stop in flight (stops run as their own tasks: they may wait a grace period).
    stopping: Arc<Mutex<HashSet<i64>>>,
    /// Claimed jobs waiting for GPUs ([`Scheduler::wait`]).
    waiting: Mutex<HashSet<i64>>,
}

fn handle_of(job: &Job) -> Result<Option<JobHandle>, SchedError> {
    let attempt = u32::try_from(job.attempt).map_err(|_| SchedError::BadAttempt {
        job_id: job.id,
        attempt: job.attempt,
    })?;
    Ok(job.external_id.clone().map(|external_id| JobHandle {
        job_id: job.id,
        run_id: job.run_id,
        attempt,
        external_id,
    }))
}

fn job_ref(job: &Job) -> Result<crate::JobRef, SchedError> {
    Ok(crate::JobRef {
        job_id: job.id,
        run_id: job.run_id,
        attempt: u32::try_from(job.attempt).map_err(|_| SchedError::BadAttempt {
            job_id: job.id,
            attempt: job.attempt,
        })?,
    })
}

/// The arguments of `spade eval` for an evaluation job (after the program of the worker
/// command). The job reports its scores to its evaluation's results endpoint with the token in
/// `SPADE_WORKER_TOKEN`.
pub fn eval_args(e: &EvalJob, server_url: &str, job_id: i64) -> Vec<String> {
    let mut args: Vec<String> = [
        "eval",
        "--checkpoint",
        &e.checkpoint_path,
        "--suite",
        &e.suite,
        "--step",
        &e.checkpoint_step.to_string(),
        "--max-new-tokens",
        &e.max_new_tokens.to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    if let Some(limit) = e.item_limit {
        args.extend(["--limit".to_owned(), limit.to_string()]);
    }
    // Only when asked, so a job's command line reads as it always did for one greedy reply.
    if e.samples > 1 || e.temperature > 0.0 {
        args.extend([
            "--samples".to_owned(),
            e.samples.to_string(),
            "--temperature".to_owned(),
            e.temperature.to_string(),
        ]);
    }
    args.extend([
        "--report".to_owned(),
        spade::report::routes::evaluation_results(server_url, job_id),
    ]);
    args
}

impl<E: Executor, T: TokenSource> Scheduler<E, T> {
    pub fn new(pool: Pool, executor: Arc<E>, tokens: T, cfg: SchedulerConfig) -> Self {
        Self {
            pool,
            executor,
            tokens,
            cfg,
            stopping: Arc::default(),
            waiting: Mutex::default(),
        }
    }

    /// The executor (e.g. to read a job's logs).
    pub fn executor(&self) -> &Arc<E> {
        &self.executor
    }

    /// Re-attaches to the unfinished jobs this node owns; returns how many it adopted. A
    /// handle the executor refuses (it cannot be this executor's) fails that job.
    pub async fn reattach(&self) -> Result<usize, SchedError> {
        let mut adopted = 0;
        for job in
            jobs::list_active(&self.pool, self.executor.kind().queue(), &self.cfg.node).await?
        {
            let Some(handle) = handle_of(&job)? else {
                continue; // claimed, never started: the next tick starts it
            };
            match self.executor.adopt(&handle).await {
                Ok(()) => {
                    adopted += 1;
                    if self.cfg.resume_lost && job.kind == JobKind::Train {
                        self.requeue_if_lost(&job, &handle).await?;
                    }
                }
                Err(e) => {
                    self.finish(
                        &job,
                        JobState::Failed,
                        None,
                        &format!("cannot re-attach: {e}"),
                    )
                    .await?;
                }
            }
        }
        Ok(adopted)
    }

    /// A train job whose process is gone without an exit status when this scheduler starts
    /// died while nobody watched it: in a container, jobs are children of the server and end
    /// with it, so every restart of the container would otherwise fail every running run.
    /// Its run is queued again (the next attempt resumes from the last checkpoint); past
    /// `jobs::LOST_REQUEUES_MAX` times in a row, or when the run is being cancelled, the next
    /// tick fails or cancels it as usual.
    async fn requeue_if_lost(&self, job: &Job, handle: &JobHandle) -> Result<(), SchedError> {
        let Ok(JobStatus::Lost { message }) = self.executor.poll(handle).await else {
            return Ok(());
        };
        if jobs::requeue_lost(&self.pool, job.id, &message).await? {
            tracing::warn!(job = job.id, run = job.run_id, %message, "lost job: its run is queued again to resume");
            self.executor.release(handle);
        }
        Ok(())
    }

    /// Runs until `shutdown` turns true: re-attach, then a tick every `poll_interval`. Errors
    /// of one tick (a database hiccup) are logged and the loop goes on.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        loop {
            match self.reattach().await {
                Ok(n) => {
                    tracing::info!(node = %self.cfg.node, adopted = n, "scheduler re-attached");
                    break;
                }
                Err(e) => tracing::error!(error = %e, "scheduler re-attach failed; retrying"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.poll_interval) => {}
                _ = shutdown.changed() => return,
            }
        }
        while !*shutdown.borrow() {
            match self.tick().await {
                Ok(t) if t != Tick::default() => tracing::info!(?t, "scheduler tick"),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "scheduler tick failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.poll_interval) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// One pass: bring the queue in line with the runs table (new, resumed and cancelled runs),
    /// poll and advance every owned job, then claim and start while capacity lasts.
    pub async fn tick(&self) -> Result<Tick, SchedError> {
        let mut tick = Tick::default();
        let synced = jobs::sync_with_runs(&self.pool).await?;
        tick.enqueued = synced.enqueued;
        let queue = self.executor.kind().queue();
        for job in jobs::list_active(&self.pool, queue, &self.cfg.node).await? {
            self.advance(&job, &mut tick).await?;
        }
        jobs::heartbeat(&self.pool, &self.cfg.node).await?;
        // A claimed job that waits for GPUs goes first: claiming more behind it would let
        // smaller jobs take every GPU it waits for, and keep other nodes from the queue.
        while !tick.waiting && self.executor.has_capacity(self.cfg.gpus_per_job) {
            let Some(job) = jobs::claim_next(&self.pool, queue, &self.cfg.node).await? else {
                break;
            };
            if !self.start(&job).await? {
                tick.waiting |= self.waiting_for_gpus(&job);
                break; // an executor that cannot start one now will not start the next either
            }
            tick.started.push(job.id);
        }
        Ok(tick)
    }

    async fn advance(&self, job: &Job, tick: &mut Tick) -> Result<(), SchedError> {
        let Some(handle) = handle_of(job)? else {
            // Claimed but no handle recorded: the previous process died while starting it.
            if job.state == JobState::Cancelling {
                // If it did start, record it: the next tick stops it like any cancelled job.
                if let Ok(Some(started)) = self.executor.find(&job_ref(job)?).await {
                    self.record(job, &started).await?;
                    return Ok(());
                }
                self.finish(
                    job,
                    JobState::Cancelled,
                    None,
                    "cancelled before it started",
                )
                .await?;
                tick.finished.push((job.id, JobState::Cancelled));
            } else if self.start(job).await? {
                tick.started.push(job.id);
            } else if self.waiting_for_gpus(job) {
                tick.waiting = true;
            }
            return Ok(());
        };
        let status = match self.executor.poll(&handle).await {
            Ok(s) => s,
            Err(e) => {
                // Unreachable executor: try again next tick; the job is not lost.
                tracing::warn!(job = job.id, error = %e, "cannot poll job");
                return Ok(());
            }
        };
        if status.is_final() {
            let cancelling = job.state == JobState::Cancelling;
            let (state, code, message) = match status {
                JobStatus::Succeeded => {
                    (JobState::Succeeded, Some(0), "exited with status 0".into())
                }
                JobStatus::Failed { exit_code, message } if cancelling => (
                    JobState::Cancelled,
                    exit_code,
                    format!("stopped on request ({message})"),
                ),
                JobStatus::Stopped { message } if cancelling => (
                    JobState::Cancelled,
                    None,
                    format!("stopped on request ({message})"),
                ),
                JobStatus::Failed { exit_code, message } => (JobState::Failed, exit_code, message),
                JobStatus::Stopped { message } | JobStatus::Lost { message } => {
                    (JobState::Failed, None, message)
                }
                JobStatus::Pending | JobStatus::Running => return Ok(()),
            };
            let end = JobEnd {
                state,
                exit_code: code,
                message,
            };
            let end = if job.kind == JobKind::Train {
                self.tokens.train_job_ended(job, end).await
            } else {
                end
            };
            let state = end.state;
            self.finish(job, state, end.exit_code, &end.message).await?;
            self.executor.release(&handle);
            self.lock_stopping().remove(&job.id);
            tick.finished.push((job.id, state));
        } else if job.state == JobState::Cancelling && self.lock_stopping().insert(job.id) {
            tick.stopping.push(job.id);
            let executor = Arc::clone(&self.executor);
            let stopping = Arc::clone(&self.stopping);
            tokio::spawn(async move {
                if let Err(e) = executor.stop(&handle).await {
                    tracing::error!(job = handle.job_id, error = %e, "stopping job failed");
                    // Let the next tick try again.
                    stopping
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&handle.job_id);
                }
            });
        }
        Ok(())
    }

    /// GPUs to give `job`: the executor's per-job count, or more when the run's started vLLM
    /// servers are split over more devices (`RunConfig::job_gpus`; `vllm.gpus` indexes the
    /// devices the job is given, so it must be given that many). A configuration that does not
    /// parse keeps the per-job count: the worker refuses it itself, naming the field.
    async fn gpus_for(&self, job: &Job) -> u32 {
        if job.kind != JobKind::Train {
            return self.cfg.gpus_per_job;
        }
        let need = match jobs::run_config(&self.pool, job.run_id).await {
            Ok(Some(v)) => serde_json::from_value::<spade::config::RunConfig>(v)
                .map(|c| c.job_gpus())
                .unwrap_or(0),
            Ok(None) => 0,
            Err(e) => {
                tracing::warn!(job = job.id, error = %e, "cannot read the run's configuration");
                0
            }
        };
        self.cfg.gpus_per_job.max(need)
    }

    /// Starts a claimed job and records its handle; a job the executor cannot start is failed
    /// with the reason. Returns whether it started.
    async fn start(&self, job: &Job) -> Result<bool, SchedError> {
        let attempt = u32::try_from(job.attempt).map_err(|_| SchedError::BadAttempt {
            job_id: job.id,
            attempt: job.attempt,
        })?;
        // Started already (just before a crash, or a submit whose reply was lost)? Record it; a
        // new token would lock out the worker that holds the first one.
        match self.executor.find(&job_ref(job)?).await {
            Ok(Some(started)) => {
                tracing::info!(job = job.id, external_id = %started.external_id, "found the job already started");
                return self.record(job, &started).await;
            }
            Ok(None) => {}
            Err(e @ ExecError::RayUnreachable { .. }) => {
                tracing::warn!(job = job.id, error = %e, "cannot start job yet");
                return Ok(false);
            }
            Err(e) => {
                self.finish(
                    job,
                    JobState::Failed,
                    None,
                    &format!("could not start: {e}"),
                )
                .await?;
                return Ok(false);
            }
        }
        let gpus = self.gpus_for(job).await;
        if let Some(e) = self.executor.gpu_wait(gpus) {
            return self.wait(job, &e).await;
        }
        // An evaluation's parameters live in its own row; a job without one cannot run.
        let program_args = match job.kind {
            JobKind::Train => None,
            JobKind::Eval => match evaluations::for_job(&self.pool, job.id).await {
                Ok(Some(e)) => Some(eval_args(&e, &self.cfg.server_url, job.id)),
                Ok(None) => {
                    self.finish(job, JobState::Failed, None, "no evaluation for this job")
                        .await?;
                    return Ok(false);
                }
                Err(e) => {
                    tracing::warn!(job = job.id, error = %e, "cannot read the evaluation yet");
                    return Ok(false);
                }
            },
        };
        let token = match self.tokens.token(job).await {
            Ok(t) => t,
            Err(e) => {
                self.finish(
                    job,
                    JobState::Failed,
                    None,
                    &format!("no worker token: {e}"),
                )
                .await?;
                return Ok(false);
            }
        };
        let spec = JobSpec {
            job_id: job.id,
            run_id: job.run_id,
            attempt,
            server_url: self.cfg.server_url.clone(),
            token,
            gpus,
            program_args,
        };
        match self.executor.start(&spec).await {
            Ok(started) => self.record(job, &started).await,
            Err(e @ ExecError::WaitingForGpus { .. }) => self.wait(job, &e).await,
            // Transient: the claim stays, the next tick (or a restart) tries again.
            Err(e @ (ExecError::RayUnreachable { .. } | ExecError::NoCapacity { .. })) => {
                tracing::warn!(job = job.id, error = %e, "cannot start job yet");
                Ok(false)
            }
            Err(e) => {
                let why = format!("could not start: {e}");
                // The run's page says it in these words, not as a worker that "ended without
                // reporting why": no worker ever ran.
                if job.kind == JobKind::Train {
                    jobs::note_start_failure(&self.pool, job.run_id, &why).await?;
                }
                self.finish(job, JobState::Failed, None, &why).await?;
                Ok(false)
            }
        }
    }

    async fn record(&self, job: &Job, started: &crate::Started) -> Result<bool, SchedError> {
        let log = started.log_path.as_ref().map(|p| p.to_string_lossy());
        jobs::record_started(&self.pool, job.id, &started.external_id, log.as_deref()).await?;
        if self.lock_waiting().remove(&job.id) {
            jobs::note_waiting(&self.pool, job.run_id, None).await?;
        }
        Ok(true)
    }

    /// A claimed job that must wait for GPUs: it keeps its claim (and its place ahead of the
    /// queue), and its run says what it waits for until it starts.
    async fn wait(&self, job: &Job, why: &ExecError) -> Result<bool, SchedError> {
        if self.lock_waiting().insert(job.id) {
            tracing::info!(job = job.id, "{why}");
        }
        if job.kind == JobKind::Train {
            jobs::note_waiting(&self.pool, job.run_id, Some(&why.to_string())).await?;
        }
        Ok(false)
    }

    /// Whether `job` is waiting for GPUs (see [`Scheduler::wait`]).
    fn waiting_for_gpus(&self, job: &Job) -> bool {
        self.lock_waiting().contains(&job.id)
    }

    fn lock_waiting(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn finish(
        &self,
        job: &Job,
        state: JobState,
        exit_code: Option<i32>,
        message: &str,
    ) -> Result<(), SchedError> {
        self.lock_waiting().remove(&job.id);
        match jobs::finish(&self.pool, job.id, state, exit_code, message).await {
            // Already final (e.g. finished by an operator): nothing to record.
            Ok(_) | Err(JobError::NotActive { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn lock_stopping(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        self.stopping
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(samples: i32, temperature: f64) -> EvalJob {
        EvalJob {
            evaluation_id: 1,
            checkpoint_step: 8,
            checkpoint_path: "/runs/1/checkpoint-8".into(),
            suite: "humaneval".into(),
            item_limit: Some(20),
            max_new_tokens: 512,
            samples,
            temperature,
        }
    }

    #[test]
    fn evaluation_jobs_pass_their_samples_and_temperature_only_when_asked() {
        let greedy = eval_args(&job(1, 0.0), "http://127.0.0.1:3000", 5);
        assert!(
            !greedy
                .iter()
                .any(|a| a == "--samples" || a == "--temperature")
        );
        let sampled = eval_args(&job(4, 0.7), "http://127.0.0.1:3000", 5);
        let at = sampled
            .iter()
            .position(|a| a == "--samples")
            .unwrap_or(usize::MAX);
        assert_eq!(
            sampled.get(at..at + 4).map(<[String]>::to_vec),
            Some(vec![
                "--samples".to_owned(),
                "4".to_owned(),
                "--temperature".to_owned(),
                "0.7".to_owned()
            ])
        );
        assert_eq!(
            sampled.last().map(String::as_str),
            Some("http://127.0.0.1:3000/api/v1/evaluations/5/results")
        );
    }
}
