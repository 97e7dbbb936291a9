//! Evaluations: one checkpoint of a run on one held-out suite, executed as a job of kind `eval`
//! beside the run's training job (see `migrations/20261201000001_evaluations.sql`).
//!
//! An evaluation is created in one transaction with its job, so the scheduler never sees a job
//! without its parameters. The job posts its scores with its own token, which can write the
//! results of that one evaluation and nothing else; a retried post replaces the evaluation's
//! rows, so results are never doubled.

use crate::jobs::JobState;
use crate::{DbError, RunScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// Who asked for an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A person, from the run page or the API.
    Manual,
    /// The run configuration's `eval.every_steps`, when the worker reported a checkpoint.
    Auto,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::Auto => "auto",
        }
    }
}

/// What to evaluate.
#[derive(Debug, Clone)]
pub struct NewEvaluation<'a> {
    pub checkpoint_step: i64,
    /// A suite name `spade eval --suite` accepts (checked by the caller).
    pub suite: &'a str,
    /// Items per task at most (`None`: the suite's default).
    pub item_limit: Option<i32>,
    pub max_new_tokens: i32,
    /// Replies per question (1 to 1024); more than 1 needs `temperature` above 0.
    pub samples: i32,
    /// Sampling temperature; 0 is greedy.
    pub temperature: f64,
    pub trigger: Trigger,
    pub requested_by: Option<i64>,
}

/// An evaluation with the state of its job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub id: i64,
    pub run_id: i64,
    pub job_id: i64,
    pub checkpoint_step: i64,
    pub suite: String,
    pub item_limit: Option<i32>,
    pub max_new_tokens: i32,
    pub samples: i32,
    pub temperature: f64,
    /// `manual` or `auto`.
    pub trigger: String,
    pub state: JobState,
    /// Why the job ended (exit status, the executor's reason), when it did.
    pub message: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// What the scheduler needs to start an evaluation job.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalJob {
    pub evaluation_id: i64,
    pub checkpoint_step: i64,
    pub checkpoint_path: String,
    pub suite: String,
    pub item_limit: Option<i32>,
    pub max_new_tokens: i32,
    pub samples: i32,
    pub temperature: f64,
}

/// One task's score as the job reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewResult {
    pub task: String,
    pub score: f64,
    pub n: i32,
    /// Standard error of `score`, when known (finite, >= 0).
    pub stderr: Option<f64>,
    /// Samples per question (>= 1).
    pub samples: i32,
}

/// Queues an evaluation of the scoped run's checkpoint `new.checkpoint_step` on the run's
/// executor. Returns `None` for an automatic evaluation that exists already (a replayed
/// checkpoint report). Errors: `NotFound("checkpoint")` when the run has no such checkpoint,
/// `State` when the run has no executor that can run jobs.
pub async fn create(
    pool: &PgPool,
    scope: &RunScope,
    new: &NewEvaluation<'_>,
) -> Result<Option<Evaluation>, DbError> {
    let run_id = scope.run_id();
    let mut tx = pool.begin().await?;
    let path = sqlx::query_scalar!(
        "SELECT path FROM checkpoints WHERE run_id = $1 AND step = $2",
        run_id,
        new.checkpoint_step
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(DbError::NotFound("checkpoint"))?;
    let executor = sqlx::query_scalar!("SELECT executor FROM runs WHERE id = $1", run_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(DbError::NotFound("run"))?;
    if executor != "local" && executor != "ray" {
        return Err(DbError::State {
            what: "the run's executor",
            state: executor,
            hint: "evaluations run as jobs on the local or ray executor",
        });
    }
    if new.trigger == Trigger::Auto {
        let exists = sqlx::query_scalar!(
            "SELECT count(*) FROM evaluations
             WHERE run_id = $1 AND checkpoint_step = $2 AND suite = $3 AND trigger = 'auto'",
            run_id,
            new.checkpoint_step,
            new.suite
        )
        .fetch_one(&mut *tx)
        .await?;
        if exists.unwrap_or(0) > 0 {
            return Ok(None);
        }
    }
    let job_id = sqlx::query_scalar!(
        "INSERT INTO jobs (run_id, kind, executor, attempt)
         VALUES ($1, 'eval', $2::text::job_executor,
                 COALESCE((SELECT max(attempt) FROM jobs WHERE run_id = $1), 0) + 1)
         RETURNING id",
        run_id,
        executor
    )
    .fetch_one(&mut *tx)
    .await?;
    let inserted = sqlx::query!(
        "INSERT INTO evaluations (run_id, job_id, checkpoint_step, checkpoint_path, suite,
                                  item_limit, max_new_tokens, trigger, requested_by, samples,
                                  temperature)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         RETURNING id, created_at",
        run_id,
        job_id,
        new.checkpoint_step,
        path,
        new.suite,
        new.item_limit,
        new.max_new_tokens,
        new.trigger.as_str(),
        new.requested_by,
        new.samples,
        new.temperature
    )
    .fetch_one(&mut *tx)
    .await;
    let row = match inserted {
        Ok(row) => row,
        // evaluations_auto_once: a concurrent replay of the same checkpoint report won.
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    tx.commit().await?;
    // Just queued: its job has neither started nor ended.
    Ok(Some(Evaluation {
        id: row.id,
        run_id,
        job_id,
        checkpoint_step: new.checkpoint_step,
        suite: new.suite.to_owned(),
        item_limit: new.item_limit,
        max_new_tokens: new.max_new_tokens,
        samples: new.samples,
        temperature: new.temperature,
        trigger: new.trigger.as_str().to_owned(),
        state: JobState::Queued,
        message: None,
        created_at: row.created_at,
        started_at: None,
        finished_at: None,
    }))
}

/// The scoped run's evaluations, newest first.
pub async fn list(pool: &PgPool, scope: &RunScope) -> Result<Vec<Evaluation>, DbError> {
    Ok(sqlx::query_as!(
        Evaluation,
        r#"SELECT e.id, e.run_id, e.job_id, e.checkpoint_step, e.suite, e.item_limit,
                  e.max_new_tokens, e.samples, e.temperature, e.trigger,
                  j.state AS "state: JobState", j.message,
                  e.created_at, j.started_at, j.finished_at
           FROM evaluations e JOIN jobs j ON j.id = e.job_id
           WHERE e.run_id = $1
           ORDER BY e.id DESC"#,
        scope.run_id()
    )
    .fetch_all(pool)
    .await?)
}

/// The parameters of evaluation job `job_id` (the scheduler acts for the system here, as it
/// does when it claims jobs).
pub async fn for_job(pool: &PgPool, job_id: i64) -> Result<Option<EvalJob>, DbError> {
    Ok(with_token_hash(pool, job_id).await?.map(|(job, _)| job))
}

/// Evaluation job `job_id`'s parameters and the hash of its token, if it has one yet.
async fn with_token_hash(
    pool: &PgPool,
    job_id: i64,
) -> Result<Option<(EvalJob, Option<Vec<u8>>)>, DbError> {
    let row = sqlx::query!(
        r#"SELECT id, checkpoint_step, checkpoint_path, suite, item_limit, max_new_tokens,
                  samples, temperature, token_hash
           FROM evaluations WHERE job_id = $1"#,
        job_id
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| {
        let job = EvalJob {
            evaluation_id: r.id,
            checkpoint_step: r.checkpoint_step,
            checkpoint_path: r.checkpoint_path,
            suite: r.suite,
            item_limit: r.item_limit,
            max_new_tokens: r.max_new_tokens,
            samples: r.samples,
            temperature: r.temperature,
        };
        (job, r.token_hash)
    }))
}

/// The parameters of evaluation job `job_id` if `verify` accepts the presented token against
/// the stored hash; `NotFound("evaluation")` otherwise (no such job, no token yet, mismatch),
/// so a caller without the token learns nothing about the job.
pub async fn authorize(
    pool: &PgPool,
    job_id: i64,
    verify: impl FnOnce(&[u8]) -> bool,
) -> Result<EvalJob, DbError> {
    match with_token_hash(pool, job_id).await? {
        Some((job, Some(hash))) if verify(&hash) => Ok(job),
        _ => Err(DbError::NotFound("evaluation")),
    }
}

/// Stores the hash of the token handed to evaluation job `job_id` (the previous one stops
/// working). The scheduler's launch path, like `runs::set_token_hash_for_launch`.
pub async fn set_token_hash_for_launch(
    pool: &PgPool,
    job_id: i64,
    hash: &[u8],
) -> Result<(), DbError> {
    let done = sqlx::query!(
        "UPDATE evaluations SET token_hash = $2 WHERE job_id = $1",
        job_id,
        hash
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(DbError::NotFound("evaluation"));
    }
    Ok(())
}

/// Replaces the results of evaluation job `job_id` with `results`, in one transaction.
/// `verify` receives the stored token hash and says whether the presented token matches; a
/// job without a token or a mismatch gives `NotFound("evaluation")`, a job that has already
/// finished a `State` error. The run, checkpoint and suite come from the evaluation, not from
/// the caller. Returns the evaluation's id.
pub async fn store_results(
    pool: &PgPool,
    job_id: i64,
    verify: impl FnOnce(&[u8]) -> bool,
    results: &[NewResult],
) -> Result<i64, DbError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query!(
        r#"SELECT e.id, e.run_id, e.checkpoint_step, e.suite, e.token_hash,
                  j.state AS "state: JobState"
           FROM evaluations e JOIN jobs j ON j.id = e.job_id
           WHERE e.job_id = $1
           FOR UPDATE OF e"#,
        job_id
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(DbError::NotFound("evaluation"))?;
    match row.token_hash.as_deref() {
        Some(hash) if verify(hash) => {}
        _ => return Err(DbError::NotFound("evaluation")),
    }
    if row.state.is_final() {
        return Err(DbError::State {
            what: "the evaluation job",
            state: format!("{:?}", row.state).to_lowercase(),
            hint: "results are accepted only while the job runs",
        });
    }
    sqlx::query!(
        "DELETE FROM benchmark_results WHERE evaluation_id = $1",
        row.id
    )
    .execute(&mut *tx)
    .await?;
    let tasks: Vec<String> = results.iter().map(|r| r.task.clone()).collect();
    let scores: Vec<f64> = results.iter().map(|r| r.score).collect();
    let ns: Vec<i32> = results.iter().map(|r| r.n).collect();
    let stderrs: Vec<Option<f64>> = results.iter().map(|r| r.stderr).collect();
    let samples: Vec<i32> = results.iter().map(|r| r.samples).collect();
    sqlx::query!(
        "INSERT INTO benchmark_results (run_id, checkpoint_step, suite, task, score, n,
                                        stderr, samples, evaluation_id)
         SELECT $1, $2, $3, t.task, t.score, t.n, t.stderr, t.samples, $4
         FROM UNNEST($5::text[], $6::float8[], $7::int4[], $8::float8[], $9::int4[])
              AS t(task, score, n, stderr, samples)",
        row.run_id,
        row.checkpoint_step,
        row.suite,
        row.id,
        &tasks,
        &scores,
        &ns,
        &stderrs as &[Option<f64>],
        &samples
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(row.id)
}
