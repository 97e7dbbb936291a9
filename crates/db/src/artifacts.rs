//! What a run leaves besides environments and metrics: checkpoints and benchmark results.

use crate::{DbError, RunScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// A saved checkpoint (a directory in Hugging Face layout on the worker's storage).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checkpoint {
    pub step: i64,
    pub path: String,
    pub bytes: i64,
    pub created_at: DateTime<Utc>,
}

/// One benchmark score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchmarkResult {
    pub id: i64,
    pub checkpoint_step: Option<i64>,
    pub suite: String,
    pub task: String,
    pub score: f64,
    pub n: i32,
    pub stderr: Option<f64>,
    pub samples: i32,
    pub created_at: DateTime<Utc>,
}

/// Checkpoints of the scoped run by step.
pub async fn checkpoints(pool: &PgPool, scope: &RunScope) -> Result<Vec<Checkpoint>, DbError> {
    let rows = sqlx::query_as!(
        Checkpoint,
        "SELECT step, path, bytes, created_at FROM checkpoints WHERE run_id = $1 ORDER BY step",
        scope.run_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Benchmark results of the scoped run, by suite, task, then checkpoint.
pub async fn benchmark_results(
    pool: &PgPool,
    scope: &RunScope,
) -> Result<Vec<BenchmarkResult>, DbError> {
    let rows = sqlx::query_as!(
        BenchmarkResult,
        "SELECT id, checkpoint_step, suite, task, score, n, stderr, samples, created_at
         FROM benchmark_results WHERE run_id = $1
         ORDER BY suite, task, checkpoint_step NULLS LAST, id",
        scope.run_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// A suite aggregate (task `all`) of one of a team's runs, for the team's benchmarks page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamBenchmark {
    pub run_id: i64,
    pub run_name: String,
    pub checkpoint_step: Option<i64>,
    pub suite: String,
    pub score: f64,
    pub n: i32,
    pub stderr: Option<f64>,
    pub samples: i32,
}

/// The suite aggregates of the team's newest `max_runs` runs that have results, newest run
/// first (within a run: by suite, checkpoint, then id, so the newest of a cell comes last).
pub async fn team_benchmarks(
    pool: &PgPool,
    scope: &crate::TeamScope,
    max_runs: i64,
) -> Result<Vec<TeamBenchmark>, DbError> {
    let rows = sqlx::query_as!(
        TeamBenchmark,
        r#"WITH recent AS (
               SELECT r.id, r.name FROM runs r JOIN projects p ON p.id = r.project_id
               WHERE p.team_id = $1
                 AND EXISTS (SELECT 1 FROM benchmark_results b WHERE b.run_id = r.id)
               ORDER BY r.id DESC
               LIMIT $2)
           SELECT b.run_id, recent.name AS run_name, b.checkpoint_step, b.suite, b.score, b.n,
                  b.stderr, b.samples
           FROM benchmark_results b JOIN recent ON recent.id = b.run_id
           WHERE b.task = 'all'
           ORDER BY b.run_id DESC, b.suite, b.checkpoint_step NULLS LAST, b.id"#,
        scope.team_id(),
        max_runs
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
