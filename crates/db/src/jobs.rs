//! The job queue in SQL. A job is one attempt to execute a run on an executor; the scheduler
//! claims queued jobs with `FOR UPDATE SKIP LOCKED`, so concurrent schedulers (several server
//! processes, or several loops) never claim the same job twice, and it records the executor's
//! handle (`external_id`) so that a restarted server finds the jobs it must re-attach to.
//!
//! The run's own `status` follows its job's state in the same transaction (claimed -> `starting`,
//! running -> `running`, the terminal states -> the same name), so pages read one column.

use sqlx::PgPool;
use sqlx::types::chrono::{DateTime, Utc};

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "job_kind", rename_all = "snake_case")]
pub enum JobKind {
    /// The SPADE training loop of a run.
    Train,
    /// Benchmarks of a run's checkpoints.
    Eval,
}

/// Where a job is in its life. `Succeeded`, `Failed` and `Cancelled` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type, serde::Serialize)]
#[sqlx(type_name = "job_state", rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting to be claimed.
    Queued,
    /// Claimed by a scheduler node, which is starting it on its executor.
    Claimed,
    /// Accepted by the executor (`external_id` is set).
    Running,
    /// A cancel was requested; the scheduler is stopping it at the executor.
    Cancelling,
    /// The job's process exited with status 0.
    Succeeded,
    /// The job could not start, exited non-zero, or vanished.
    Failed,
    /// Stopped on request (or cancelled before it started).
    Cancelled,
}

impl JobState {
    /// Whether the state is final (the job never changes again).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

/// The executor a job is queued for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "job_executor", rename_all = "snake_case")]
pub enum JobExecutor {
    /// A child process of the server's machine.
    Local,
    /// A Ray job submitted through the Ray Jobs REST API.
    Ray,
}

/// One row of `jobs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: i64,
    pub run_id: i64,
    pub kind: JobKind,
    pub state: JobState,
    pub executor: JobExecutor,
    /// Numbered per run from 1.
    pub attempt: i32,
    /// The executor's handle: `pid:<pid>:<start ticks>` (local) or the Ray submission id.
    pub external_id: Option<String>,
    /// The scheduler node that claimed the job.
    pub claimed_by: Option<String>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub log_path: Option<String>,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
    pub created_at: DateTime<Utc>,
    pub claimed_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// Errors of the job queue.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// `enqueue` for a run that does not exist.
    #[error("run {run_id} does not exist")]
    NoSuchRun { run_id: i64 },
    /// `enqueue` for a run that already has an unfinished job (queued, claimed, running or
    /// cancelling): a run executes at most once at a time.
    #[error("run {run_id} already has an unfinished job")]
    AlreadyActive { run_id: i64 },
    /// A transition for a job that does not exist or is already final.
    #[error("job {job_id} does not exist or has already finished")]
    NotActive { job_id: i64 },
    /// `finish` was asked to record a state that is not final.
    #[error("{state:?} is not a final job state (expected succeeded, failed or cancelled)")]
    NotFinal { state: JobState },
    /// Any other query error.
    #[error(transparent)]
    Query(#[from] sqlx::Error),
}

/// Queues a new job (the next attempt) for `run_id` and marks the run `queued`.
pub async fn enqueue(
    pool: &PgPool,
    run_id: i64,
    kind: JobKind,
    executor: JobExecutor,
) -> Result<Job, JobError> {
    let mut tx = pool.begin().await?;
    let inserted = sqlx::query_as!(
        Job,
        r#"INSERT INTO jobs (run_id, kind, executor, attempt)
           VALUES ($1, $2, $3,
                   COALESCE((SELECT max(attempt) FROM jobs WHERE run_id = $1), 0) + 1)
           RETURNING id, run_id, kind AS "kind: JobKind", state AS "state: JobState",
                     executor AS "executor: JobExecutor", attempt, external_id, claimed_by,
                     heartbeat_at, log_path, exit_code, message, created_at, claimed_at,
                     started_at, finished_at, updated_at"#,
        run_id,
        kind as JobKind,
        executor as JobExecutor,
    )
    .fetch_one(&mut *tx)
    .await;
    let job = match inserted {
        Ok(job) => job,
        Err(sqlx::Error::Database(e)) if e.is_foreign_key_violation() => {
            return Err(JobError::NoSuchRun { run_id });
        }
        // jobs_one_active_train_per_run, or a concurrent enqueue that took the same attempt number.
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            return Err(JobError::AlreadyActive { run_id });
        }
        Err(e) => return Err(e.into()),
    };
    sqlx::query!(
        "UPDATE runs SET status = 'queued', updated_at = now() WHERE id = $1",
        run_id
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(job)
}

/// Claims the oldest queued job for `executor` on behalf of scheduler node `node`, or returns
/// `None` when the queue is empty. Rows another transaction is claiming are skipped (`SKIP
/// LOCKED`), never waited for and never claimed twice.
pub async fn claim_next(
    pool: &PgPool,
    executor: JobExecutor,
    node: &str,
) -> Result<Option<Job>, JobError> {
    let mut tx = pool.begin().await?;
    let job = sqlx::query_as!(
        Job,
        r#"UPDATE jobs
           SET state = 'claimed', claimed_by = $2, claimed_at = now(), heartbeat_at = now(),
               updated_at = now()
           WHERE id = (SELECT id FROM jobs
                       WHERE state = 'queued' AND executor = $1
                       ORDER BY created_at, id
                       LIMIT 1
                       FOR UPDATE SKIP LOCKED)
           RETURNING id, run_id, kind AS "kind: JobKind", state AS "state: JobState",
                     executor AS "executor: JobExecutor", attempt, external_id, claimed_by,
                     heartbeat_at, log_path, exit_code, message, created_at, claimed_at,
                     started_at, finished_at, updated_at"#,
        executor as JobExecutor,
        node,
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(job) = job.as_ref().filter(|j| j.kind == JobKind::Train) {
        // Only a queued run starts: a cancel that raced the claim is kept (and reconciled).
        sqlx::query!(
            "UPDATE runs SET status = 'starting', updated_at = now()
             WHERE id = $1 AND status = 'queued'",
            job.run_id
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(job)
}

/// Records that the executor accepted the job under `external_id`. A claimed job becomes
/// `running`; a job whose cancel was requested meanwhile stays `cancelling` (the scheduler then
/// stops it). Returns the job's state after the update.
pub async fn record_started(
    pool: &PgPool,
    job_id: i64,
    external_id: &str,
    log_path: Option<&str>,
) -> Result<JobState, JobError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query!(
        r#"UPDATE jobs
           SET external_id = $2, log_path = $3, started_at = COALESCE(started_at, now()),
               heartbeat_at = now(), updated_at = now(),
               state = CASE WHEN state = 'claimed' THEN 'running'::job_state ELSE state END
           WHERE id = $1 AND state IN ('claimed', 'running', 'cancelling')
           RETURNING run_id, kind AS "kind: JobKind", state AS "state: JobState""#,
        job_id,
        external_id,
        log_path,
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(JobError::NotActive { job_id })?;
    // An evaluation runs beside its run's training and leaves the run's status alone.
    if row.state == JobState::Running && row.kind == JobKind::Train {
        sqlx::query!(
            "UPDATE runs SET status = 'running', updated_at = now()
             WHERE id = $1 AND status IN ('queued', 'starting')",
            row.run_id
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(row.state)
}

/// Records a final state with the exit code and a message for people, and mirrors it on the run
/// (training jobs only: an evaluation's end does not end its run).
pub async fn finish(
    pool: &PgPool,
    job_id: i64,
    state: JobState,
    exit_code: Option<i32>,
    message: &str,
) -> Result<Job, JobError> {
    let run_status = match state {
        JobState::Succeeded => "succeeded",
        JobState::Failed => "failed",
        JobState::Cancelled => "cancelled",
        other => return Err(JobError::NotFinal { state: other }),
    };
    let mut tx = pool.begin().await?;
    let job = sqlx::query_as!(
        Job,
        r#"UPDATE jobs
           SET state = $2, exit_code = $3, message = $4, finished_at = now(), updated_at = now()
           WHERE id = $1 AND state IN ('claimed', 'running', 'cancelling')
           RETURNING id, run_id, kind AS "kind: JobKind", state AS "state: JobState",
                     executor AS "executor: JobExecutor", attempt, external_id, claimed_by,
                     heartbeat_at, log_path, exit_code, message, created_at, claimed_at,
                     started_at, finished_at, updated_at"#,
        job_id,
        state as JobState,
        exit_code,
        message,
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(JobError::NotActive { job_id })?;
    if job.kind == JobKind::Train {
        // A worker that died without reporting (killed, out of memory) left no status message:
        // the job's own account of its end is the best there is.
        sqlx::query!(
            "UPDATE runs SET status = $2::text::run_status, finished_at = now(), updated_at = now(),
                 status_message = CASE
                     WHEN $2 = 'failed' AND coalesce(status_message, '') = ''
                     THEN 'the worker ended without reporting why: ' || $3
                     ELSE status_message END
             WHERE id = $1",
            job.run_id,
            run_status,
            message,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(job)
}

/// How a job's message starts when its run was queued again by [`requeue_lost`].
pub const LOST_REQUEUED: &str = "lost while no scheduler watched it";
/// Times in a row a run is queued again that way before its lost job fails it instead: a job
/// that takes its container down with it must not restart forever.
pub const LOST_REQUEUES_MAX: i64 = 3;

/// Ends a train job whose process died while no scheduler watched it (the container or machine
/// it ran on stopped) and queues its run again, in one transaction; the next tick gives the run
/// a new attempt, which resumes from the run's last checkpoint. Returns `false`, and changes
/// nothing, when the job is no longer running, its run is not running (cancelling, say), or
/// the run was queued again this way [`LOST_REQUEUES_MAX`] times since its last attempt that
/// ended otherwise: then the caller fails it as usual.
pub async fn requeue_lost(pool: &PgPool, job_id: i64, why: &str) -> Result<bool, JobError> {
    let mut tx = pool.begin().await?;
    // Runtime-checked queries: the offline query data (.sqlx) is made with sqlx-cli, which
    // these machines do not have.
    let row: Option<(i64, i64)> = sqlx::query_as(
        "SELECT j.run_id,
                (SELECT count(*) FROM jobs p
                 WHERE p.run_id = j.run_id AND p.kind = 'train' AND p.attempt < j.attempt
                   AND p.attempt > coalesce((SELECT max(q.attempt) FROM jobs q
                                             WHERE q.run_id = j.run_id AND q.kind = 'train'
                                               AND q.attempt < j.attempt
                                               AND coalesce(q.message, '') NOT LIKE $2 || '%'), 0))
         FROM jobs j JOIN runs r ON r.id = j.run_id
         WHERE j.id = $1 AND j.kind = 'train' AND j.state IN ('claimed', 'running')
           AND r.status IN ('starting', 'running')
         FOR UPDATE OF j, r",
    )
    .bind(job_id)
    .bind(LOST_REQUEUED)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((run_id, in_a_row)) = row else {
        return Ok(false);
    };
    if in_a_row >= LOST_REQUEUES_MAX {
        return Ok(false);
    }
    let message = format!("{LOST_REQUEUED} ({why}); its run was queued again to resume");
    sqlx::query(
        "UPDATE jobs SET state = 'failed', message = $2, finished_at = now(), updated_at = now()
         WHERE id = $1",
    )
    .bind(job_id)
    .bind(&message)
    .execute(&mut *tx)
    .await?;
    // As a resume by hand: no message on the run (a later end writes its own); the log says why
    // the run went back to the queue.
    sqlx::query(
        "UPDATE runs SET status = 'queued', finished_at = NULL, status_message = NULL,
                         updated_at = now()
         WHERE id = $1",
    )
    .bind(run_id)
    .execute(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO run_logs (run_id, level, line) VALUES ($1, 'warn', $2)")
        .bind(run_id)
        .bind(format!(
            "queued again: its job was {LOST_REQUEUED} ({why}; a container or machine restart); \
             the next attempt resumes from the last checkpoint"
        ))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// Requests that the run's unfinished job stop. A queued job is cancelled at once (it never
/// reached an executor); a claimed or running one becomes `cancelling` and the scheduler that
/// owns it stops it at the executor. Returns the job's new state, or `None` when the run has no
/// unfinished job.
pub async fn request_cancel_for_run(
    pool: &PgPool,
    run_id: i64,
) -> Result<Option<JobState>, JobError> {
    let mut tx = pool.begin().await?;
    let state = sqlx::query_scalar!(
        r#"UPDATE jobs
           SET state = CASE WHEN state = 'queued' THEN 'cancelled'::job_state
                            ELSE 'cancelling'::job_state END,
               finished_at = CASE WHEN state = 'queued' THEN now() ELSE finished_at END,
               message = CASE WHEN state = 'queued' THEN 'cancelled before it started'
                              ELSE message END,
               updated_at = now()
           WHERE run_id = $1 AND kind = 'train'
             AND state IN ('queued', 'claimed', 'running', 'cancelling')
           RETURNING state AS "state: JobState""#,
        run_id,
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(state) = state {
        let run_status = if state == JobState::Cancelled {
            "cancelled"
        } else {
            "cancelling"
        };
        sqlx::query!(
            "UPDATE runs SET status = $2::text::run_status, updated_at = now() WHERE id = $1",
            run_id,
            run_status,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(state)
}

/// What [`sync_with_runs`] changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// Jobs queued for runs that were `queued` without one (new or resumed runs).
    pub enqueued: u64,
    /// Unfinished jobs whose run was cancelled through the runs API.
    pub cancelled: u64,
}

/// Makes the queue follow the runs table, where the API records intent: a `queued` run without
/// an unfinished job gets one (its next attempt, on the run's executor), and the unfinished job
/// of a `cancelling` or `cancelled` run is cancelled (at once when still queued; otherwise it
/// becomes `cancelling` and its scheduler stops it). Idempotent and safe to run from every
/// scheduler at once.
pub async fn sync_with_runs(pool: &PgPool) -> Result<Synced, JobError> {
    let mut tx = pool.begin().await?;
    let enqueued = sqlx::query!(
        r#"INSERT INTO jobs (run_id, kind, executor, attempt)
           SELECT r.id, 'train', r.executor::job_executor,
                  COALESCE((SELECT max(j.attempt) FROM jobs j WHERE j.run_id = r.id), 0) + 1
           FROM runs r
           WHERE r.status = 'queued' AND r.executor IN ('local', 'ray')
             AND NOT EXISTS (SELECT 1 FROM jobs j
                             WHERE j.run_id = r.id AND j.kind = 'train'
                               AND j.state IN ('queued', 'claimed', 'running', 'cancelling'))
           ON CONFLICT DO NOTHING"#
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let changed = sqlx::query!(
        r#"UPDATE jobs j
           SET state = CASE WHEN j.state = 'queued' THEN 'cancelled'::job_state
                            ELSE 'cancelling'::job_state END,
               finished_at = CASE WHEN j.state = 'queued' THEN now() ELSE j.finished_at END,
               message = CASE WHEN j.state = 'queued' THEN 'cancelled before it started'
                              ELSE j.message END,
               updated_at = now()
           FROM runs r
           WHERE r.id = j.run_id AND r.status IN ('cancelling', 'cancelled')
             AND j.kind = 'train' AND j.state IN ('queued', 'claimed', 'running')
           RETURNING j.run_id, j.state AS "state: JobState""#
    )
    .fetch_all(&mut *tx)
    .await?;
    // A run whose job never started is done cancelling.
    let ended: Vec<i64> = changed
        .iter()
        .filter(|c| c.state == JobState::Cancelled)
        .map(|c| c.run_id)
        .collect();
    sqlx::query!(
        "UPDATE runs SET status = 'cancelled', finished_at = now(), updated_at = now()
         WHERE id = ANY($1) AND status = 'cancelling'",
        &ended
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Synced {
        enqueued,
        cancelled: changed.len() as u64,
    })
}

/// The unfinished jobs (claimed, running, cancelling) that node `node` owns on `executor`:
/// what a scheduler polls every tick and re-attaches to after a restart.
pub async fn list_active(
    pool: &PgPool,
    executor: JobExecutor,
    node: &str,
) -> Result<Vec<Job>, JobError> {
    Ok(sqlx::query_as!(
        Job,
        r#"SELECT id, run_id, kind AS "kind: JobKind", state AS "state: JobState",
                  executor AS "executor: JobExecutor", attempt, external_id, claimed_by,
                  heartbeat_at, log_path, exit_code, message, created_at, claimed_at,
                  started_at, finished_at, updated_at
           FROM jobs
           WHERE claimed_by = $2 AND executor = $1
             AND state IN ('claimed', 'running', 'cancelling')
           ORDER BY id"#,
        executor as JobExecutor,
        node,
    )
    .fetch_all(pool)
    .await?)
}

/// Where a run's queued training job stands ([`queue_place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePlace {
    pub executor: JobExecutor,
    /// Jobs of the same executor queued before it (of every team: counts only).
    pub ahead: i64,
    /// Jobs of the same executor claimed, running or being cancelled: the slots in use.
    pub busy: i64,
}

/// The place in line of `run_id`'s queued job `job_id` (an evaluation's), or with None of the
/// run's queued training job; None when that job is not queued.
pub async fn queue_place(
    pool: &PgPool,
    run_id: i64,
    job_id: Option<i64>,
) -> Result<Option<QueuePlace>, JobError> {
    let row = sqlx::query!(
        r#"SELECT j.executor AS "executor: JobExecutor",
                  (SELECT count(*) FROM jobs q
                   WHERE q.state = 'queued' AND q.executor = j.executor
                     AND (q.created_at, q.id) < (j.created_at, j.id)) AS "ahead!",
                  (SELECT count(*) FROM jobs b
                   WHERE b.state IN ('claimed', 'running', 'cancelling')
                     AND b.executor = j.executor) AS "busy!"
           FROM jobs j
           WHERE j.run_id = $1 AND j.state = 'queued'
             AND CASE WHEN $2::bigint IS NULL THEN j.kind = 'train' ELSE j.id = $2 END
           ORDER BY j.id DESC LIMIT 1"#,
        run_id,
        job_id
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| QueuePlace {
        executor: r.executor,
        ahead: r.ahead,
        busy: r.busy,
    }))
}

/// How a queued run's message starts while its job waits for devices ([`note_waiting`]).
pub const WAITING_FOR: &str = "waiting for ";

/// Says on a queued (or starting: claimed) run what its claimed job waits for (`Some("waiting for 2 GPUs ...")`), or
/// takes that note away once the job started (`None`; other messages stay).
pub async fn note_waiting(pool: &PgPool, run_id: i64, note: Option<&str>) -> Result<(), JobError> {
    match note {
        Some(n) => {
            sqlx::query(
                "UPDATE runs SET status_message = $2, updated_at = now()
                 WHERE id = $1 AND status IN ('queued', 'starting')
                   AND status_message IS DISTINCT FROM $2",
            )
            .bind(run_id)
            .bind(n)
            .execute(pool)
            .await?;
        }
        None => {
            sqlx::query(
                "UPDATE runs SET status_message = NULL, updated_at = now()
                 WHERE id = $1 AND starts_with(coalesce(status_message, ''), $2)",
            )
            .bind(run_id)
            .bind(WAITING_FOR)
            .execute(pool)
            .await?;
        }
    }
    Ok(())
}

/// Gives a run whose job could not be started that reason as its message (unless it has one
/// of its own other than a waiting note), before the job's end is recorded.
pub async fn note_start_failure(pool: &PgPool, run_id: i64, why: &str) -> Result<(), JobError> {
    sqlx::query(
        "UPDATE runs SET status_message = $2, updated_at = now()
         WHERE id = $1
           AND (coalesce(status_message, '') = '' OR starts_with(status_message, $3))",
    )
    .bind(run_id)
    .bind(why)
    .bind(WAITING_FOR)
    .execute(pool)
    .await?;
    Ok(())
}

/// Marks node `node` alive on all its unfinished jobs; returns how many it owns.
pub async fn heartbeat(pool: &PgPool, node: &str) -> Result<u64, JobError> {
    Ok(sqlx::query!(
        "UPDATE jobs SET heartbeat_at = now()
         WHERE claimed_by = $1 AND state IN ('claimed', 'running', 'cancelling')",
        node,
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// One job by id.
pub async fn get(pool: &PgPool, job_id: i64) -> Result<Option<Job>, JobError> {
    Ok(sqlx::query_as!(
        Job,
        r#"SELECT id, run_id, kind AS "kind: JobKind", state AS "state: JobState",
                  executor AS "executor: JobExecutor", attempt, external_id, claimed_by,
                  heartbeat_at, log_path, exit_code, message, created_at, claimed_at,
                  started_at, finished_at, updated_at
           FROM jobs WHERE id = $1"#,
        job_id,
    )
    .fetch_optional(pool)
    .await?)
}

/// The stored configuration of a job's run (JSON, as `runs.config` holds it), for what the
/// executor must give the job (its GPUs); `None` when the run is gone.
pub async fn run_config(pool: &PgPool, run_id: i64) -> Result<Option<serde_json::Value>, JobError> {
    Ok(
        sqlx::query_scalar!("SELECT config FROM runs WHERE id = $1", run_id)
            .fetch_optional(pool)
            .await?,
    )
}

/// The newest training job of a run (the one whose logs a run page shows).
pub async fn latest_for_run(pool: &PgPool, run_id: i64) -> Result<Option<Job>, JobError> {
    Ok(sqlx::query_as!(
        Job,
        r#"SELECT id, run_id, kind AS "kind: JobKind", state AS "state: JobState",
                  executor AS "executor: JobExecutor", attempt, external_id, claimed_by,
                  heartbeat_at, log_path, exit_code, message, created_at, claimed_at,
                  started_at, finished_at, updated_at
           FROM jobs WHERE run_id = $1 AND kind = 'train' ORDER BY attempt DESC LIMIT 1"#,
        run_id,
    )
    .fetch_optional(pool)
    .await?)
}

#[cfg(any(test, feature = "testing"))]
#[path = "jobs_testing.rs"]
pub mod testing;

#[cfg(test)]
#[path = "jobs_tests.rs"]
mod tests;
