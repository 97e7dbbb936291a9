//! Worker ingestion: one batch of envelopes is applied in one transaction. Each envelope's
//! idempotency key is claimed in `ingest_keys` first; a key that is already there (a retry of an
//! acknowledged batch) is acknowledged again without applying its message twice. The types here
//! are plain rows; the backend maps `spade::report` messages onto them.

use crate::types::{EnvKind, EnvStatus};
use crate::{DbError, RunScope, RunStatus, rollups};
use sqlx::{PgPool, Postgres, Transaction};

/// An environment as the worker reports it.
#[derive(Debug, Clone)]
pub struct NewEnvironment<'a> {
    pub env_id: &'a str,
    pub step: i64,
    pub skill: &'a str,
    pub kind: EnvKind,
    pub status: EnvStatus,
    pub rejection_reason: Option<&'a str>,
    pub rejection_message: Option<&'a str>,
    pub code: &'a str,
    pub hint: Option<&'a str>,
    pub parent_env_id: Option<&'a str>,
    pub regret: Option<f64>,
    pub win_rate_hint: Option<f64>,
    pub win_rate_no_hint: Option<f64>,
    pub designer_reward: Option<f64>,
    pub reward_levels: Option<i32>,
    pub attempts: i32,
}

/// Rewards that arrive after the environment (delayed by k steps).
#[derive(Debug, Clone)]
pub struct Scores<'a> {
    pub env_id: &'a str,
    pub regret: Option<f64>,
    pub win_rate_hint: Option<f64>,
    pub win_rate_no_hint: Option<f64>,
    pub designer_reward: Option<f64>,
    pub reward_levels: Option<i32>,
}

/// One sampled play.
#[derive(Debug, Clone)]
pub struct NewPlay<'a> {
    pub env_id: &'a str,
    pub step: i64,
    pub with_hint: bool,
    pub episode_return: f64,
    pub won: bool,
    pub turns: i32,
    pub transcript: serde_json::Value,
}

/// One open ingestion transaction for one run (held by its worker).
#[derive(Debug)]
pub struct Batch {
    tx: Transaction<'static, Postgres>,
    run_id: i64,
    /// Rollups of the metric points this batch stored, merged at commit (once per batch, not
    /// once per step: a batch of 500 steps of 10 series writes about 1,700 rollup rows).
    rollups: rollups::Pending,
}

/// Opens the transaction of one batch.
pub async fn begin(pool: &PgPool, scope: &RunScope) -> Result<Batch, DbError> {
    Ok(Batch {
        tx: pool.begin().await?,
        run_id: scope.run_id,
        rollups: rollups::Pending::default(),
    })
}

impl Batch {
    /// Claims an idempotency key; `true` when it is new (apply the message), `false` when it was
    /// already stored (acknowledge only).
    pub async fn claim(&mut self, key: &str, seq: i64) -> Result<bool, DbError> {
        let done = sqlx::query!(
            "INSERT INTO ingest_keys (run_id, key, seq) VALUES ($1, $2, $3)
             ON CONFLICT (run_id, key) DO NOTHING",
            self.run_id,
            key,
            seq
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The worker started: `queued`/`starting` becomes `running` (a cancelling run stays so).
    pub async fn run_started(
        &mut self,
        code_version: &str,
        total_steps: i64,
    ) -> Result<(), DbError> {
        sqlx::query!(
            "UPDATE runs SET
                status = CASE WHEN status IN ('queued', 'starting') THEN 'running'::run_status
                              ELSE status END,
                code_version = $2, progress_total = $3,
                started_at = coalesce(started_at, now()), updated_at = now()
             WHERE id = $1",
            self.run_id,
            code_version,
            total_steps
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Stores an environment (a resumed run that reports an env_id again overwrites it).
    pub async fn environment(&mut self, e: &NewEnvironment<'_>) -> Result<(), DbError> {
        sqlx::query!(
            "INSERT INTO environments (run_id, env_id, step, skill, kind, status, rejection_reason,
                 rejection_message, code, hint, parent_env_id, regret, win_rate_hint,
                 win_rate_no_hint, designer_reward, reward_levels, attempts)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
             ON CONFLICT (run_id, env_id) DO UPDATE SET
                 step = EXCLUDED.step, skill = EXCLUDED.skill, kind = EXCLUDED.kind,
                 status = EXCLUDED.status, rejection_reason = EXCLUDED.rejection_reason,
                 rejection_message = EXCLUDED.rejection_message, code = EXCLUDED.code,
                 hint = EXCLUDED.hint, parent_env_id = EXCLUDED.parent_env_id,
                 regret = EXCLUDED.regret, win_rate_hint = EXCLUDED.win_rate_hint,
                 win_rate_no_hint = EXCLUDED.win_rate_no_hint,
                 designer_reward = EXCLUDED.designer_reward,
                 reward_levels = EXCLUDED.reward_levels, attempts = EXCLUDED.attempts",
            self.run_id,
            e.env_id,
            e.step,
            e.skill,
            e.kind as EnvKind,
            e.status as EnvStatus,
            e.rejection_reason,
            e.rejection_message,
            e.code,
            e.hint,
            e.parent_env_id,
            e.regret,
            e.win_rate_hint,
            e.win_rate_no_hint,
            e.designer_reward,
            e.reward_levels,
            e.attempts
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Fills in delayed rewards; `NotFound("environment")` when the env_id was never reported.
    pub async fn scores(&mut self, s: &Scores<'_>) -> Result<(), DbError> {
        let done = sqlx::query!(
            "UPDATE environments SET
                regret = coalesce($3, regret), win_rate_hint = coalesce($4, win_rate_hint),
                win_rate_no_hint = coalesce($5, win_rate_no_hint),
                designer_reward = coalesce($6, designer_reward),
                reward_levels = coalesce($7, reward_levels)
             WHERE run_id = $1 AND env_id = $2",
            self.run_id,
            s.env_id,
            s.regret,
            s.win_rate_hint,
            s.win_rate_no_hint,
            s.designer_reward,
            s.reward_levels
        )
        .execute(&mut *self.tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(DbError::NotFound("environment"));
        }
        Ok(())
    }

    /// Marks an accepted environment `broken_in_play` with the reason and message of its first
    /// violation in play (the message names the play's seed); `NotFound("environment")` when
    /// the env_id was never reported. A rejected environment stays rejected.
    pub async fn broken_in_play(
        &mut self,
        env_id: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), DbError> {
        let done = sqlx::query!(
            "UPDATE environments SET status = 'broken_in_play', rejection_reason = $3,
                rejection_message = $4
             WHERE run_id = $1 AND env_id = $2 AND status <> 'rejected'",
            self.run_id,
            env_id,
            reason,
            message
        )
        .execute(&mut *self.tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(DbError::NotFound("environment"));
        }
        Ok(())
    }

    /// The env_ids among `ids` this run never reported (in the order given, each once): plays
    /// may only name environments the run stored (`plays_reported_env`), and the caller names
    /// the offending one before the database refuses the batch.
    pub async fn unreported_envs(&mut self, ids: &[&str]) -> Result<Vec<String>, DbError> {
        let ids: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
        let known = sqlx::query_scalar!(
            "SELECT env_id FROM environments WHERE run_id = $1 AND env_id = ANY($2::text[])",
            self.run_id,
            &ids
        )
        .fetch_all(&mut *self.tx)
        .await?;
        let known: std::collections::HashSet<String> = known.into_iter().collect();
        let mut seen = std::collections::HashSet::new();
        Ok(ids
            .into_iter()
            .filter(|id| !known.contains(id) && seen.insert(id.clone()))
            .collect())
    }

    /// Stores plays; `NotFound("environment")` when one names an environment this run never
    /// reported (see [`Batch::unreported_envs`] for which).
    pub async fn plays(&mut self, plays: &[NewPlay<'_>]) -> Result<(), DbError> {
        let ids: Vec<&str> = plays.iter().map(|p| p.env_id).collect();
        if !self.unreported_envs(&ids).await?.is_empty() {
            return Err(DbError::NotFound("environment"));
        }
        for p in plays {
            sqlx::query!(
                "INSERT INTO plays (run_id, env_id, step, with_hint, episode_return, won, turns,
                                    transcript)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                self.run_id,
                p.env_id,
                p.step,
                p.with_hint,
                p.episode_return,
                p.won,
                p.turns,
                p.transcript
            )
            .execute(&mut *self.tx)
            .await?;
        }
        Ok(())
    }

    /// Stores the metric values of one step in one statement (a step logged again, e.g. after a
    /// resume, keeps the newest value). The series' rollups follow at [`Batch::commit`].
    pub async fn metrics(
        &mut self,
        step: i64,
        elapsed_s: f64,
        names: &[String],
        values: &[f64],
    ) -> Result<(), DbError> {
        // New points also count into `metric_series`; a re-logged step (xmax <> 0: the row
        // was updated, not inserted) does not count twice, and its rollups are recomputed
        // rather than merged.
        let stored = sqlx::query!(
            r#"WITH stored AS (
                   INSERT INTO metrics (run_id, name, step, value, elapsed_s)
                   SELECT $1, n, $2, v, $3 FROM UNNEST($4::text[], $5::float8[]) AS t (n, v)
                   ON CONFLICT (run_id, name, step) DO UPDATE
                       SET value = EXCLUDED.value, elapsed_s = EXCLUDED.elapsed_s,
                           logged_at = now()
                   RETURNING name, value, (xmax = 0) AS inserted),
               series AS (
                   INSERT INTO metric_series (run_id, name, points, first_step, last_step,
                                              last_value)
                   SELECT $1, name, count(*) FILTER (WHERE inserted), $2, $2, min(value)
                   FROM stored GROUP BY name
                   ON CONFLICT (run_id, name) DO UPDATE SET
                       points = metric_series.points + EXCLUDED.points,
                       first_step = least(metric_series.first_step, EXCLUDED.first_step),
                       last_step = greatest(metric_series.last_step, EXCLUDED.last_step),
                       revision = metric_series.revision + 1,
                       last_value = CASE WHEN EXCLUDED.last_step >= metric_series.last_step
                                         THEN EXCLUDED.last_value
                                         ELSE metric_series.last_value END)
               SELECT name AS "name!", value AS "value!", inserted AS "inserted!" FROM stored"#,
            self.run_id,
            step,
            elapsed_s,
            names,
            values
        )
        .fetch_all(&mut *self.tx)
        .await?;
        for row in stored {
            if row.inserted {
                let point = rollups::TimedValue {
                    step,
                    value: row.value,
                    elapsed_s,
                };
                self.rollups.add(&row.name, point);
            } else {
                self.rollups.changed(&row.name, step);
            }
        }
        Ok(())
    }

    /// Records a checkpoint (the same step saved again replaces the row).
    pub async fn checkpoint(&mut self, step: i64, path: &str, bytes: i64) -> Result<(), DbError> {
        sqlx::query!(
            "INSERT INTO checkpoints (run_id, step, path, bytes) VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_id, step) DO UPDATE SET path = EXCLUDED.path, bytes = EXCLUDED.bytes",
            self.run_id,
            step,
            path,
            bytes
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Updates the progress shown on the run page.
    pub async fn progress(&mut self, step: i64, total: i64, phase: &str) -> Result<(), DbError> {
        sqlx::query!(
            "UPDATE runs SET progress_step = $2, progress_total = $3, phase = $4, updated_at = now()
             WHERE id = $1",
            self.run_id,
            step,
            total,
            phase
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Appends a log line.
    pub async fn log(&mut self, level: &str, line: &str) -> Result<(), DbError> {
        sqlx::query!(
            "INSERT INTO run_logs (run_id, level, line) VALUES ($1, $2, $3)",
            self.run_id,
            level,
            line
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Stores a benchmark score.
    pub async fn benchmark(
        &mut self,
        checkpoint_step: Option<i64>,
        suite: &str,
        result: &crate::evaluations::NewResult,
    ) -> Result<(), DbError> {
        sqlx::query!(
            "INSERT INTO benchmark_results (run_id, checkpoint_step, suite, task, score, n,
                                            stderr, samples)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            self.run_id,
            checkpoint_step,
            suite,
            result.task,
            result.score,
            result.n,
            result.stderr,
            result.samples
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// The worker finished with a terminal status; a run already terminal is left as it is.
    pub async fn finished(&mut self, status: RunStatus, message: &str) -> Result<(), DbError> {
        sqlx::query!(
            "UPDATE runs SET status = $2, status_message = $3, finished_at = now(),
                             updated_at = now()
             WHERE id = $1 AND status NOT IN ('cancelled', 'succeeded', 'failed')",
            self.run_id,
            status as RunStatus,
            message
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Commits the batch and returns the run's status afterwards (for `cancel_requested`).
    pub async fn commit(mut self) -> Result<RunStatus, DbError> {
        let pending = std::mem::take(&mut self.rollups);
        pending.flush(&mut self.tx, self.run_id).await?;
        let status = sqlx::query_scalar!(
            r#"SELECT status AS "status: RunStatus" FROM runs WHERE id = $1"#,
            self.run_id
        )
        .fetch_one(&mut *self.tx)
        .await?;
        self.tx.commit().await?;
        Ok(status)
    }
}
