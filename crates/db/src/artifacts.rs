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
        "SELECT id, checkpoint_step, suite, task, score, n, created_at
         FROM benchmark_results WHERE run_id = $1
         ORDER BY suite, task, checkpoint_step NULLS LAST, id",
        scope.run_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
