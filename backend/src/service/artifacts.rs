//! What a run produced besides metrics and environments: checkpoints, benchmark scores,
//! held-out evaluations and share links, in the JSON API's shapes. The run page's own views of
//! them (`dashboard::run_benchmarks`, the shares panel) read the same rows.

use crate::error::ApiResult;
use spade_app::dto;
use spade_db::artifacts::{self, BenchmarkResult, Checkpoint};
use spade_db::evaluations::{self, Evaluation};
use spade_db::shares::{self, ShareLink};
use spade_db::{Pool, RunScope};

type Time = chrono::DateTime<chrono::Utc>;

fn time(t: &Time) -> String {
    // What chrono's own serializer writes, so the API's times read as before it served DTOs.
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

pub fn checkpoint(c: &Checkpoint) -> dto::CheckpointRecord {
    dto::CheckpointRecord {
        step: c.step,
        path: c.path.clone(),
        bytes: c.bytes,
        created_at: time(&c.created_at),
    }
}

pub fn benchmark(b: &BenchmarkResult) -> dto::BenchmarkRecord {
    dto::BenchmarkRecord {
        id: b.id,
        checkpoint_step: b.checkpoint_step,
        suite: b.suite.clone(),
        task: b.task.clone(),
        score: b.score,
        n: b.n,
        created_at: time(&b.created_at),
    }
}

pub fn evaluation(e: &Evaluation) -> dto::EvaluationRecord {
    dto::EvaluationRecord {
        id: e.id,
        run_id: e.run_id,
        job_id: e.job_id,
        checkpoint_step: e.checkpoint_step,
        suite: e.suite.clone(),
        item_limit: e.item_limit,
        max_new_tokens: e.max_new_tokens,
        trigger: e.trigger.clone(),
        state: job_state(e.state),
        message: e.message.clone(),
        created_at: time(&e.created_at),
        started_at: e.started_at.as_ref().map(time),
        finished_at: e.finished_at.as_ref().map(time),
    }
}

/// A job state's name (`queued`, ..., `cancelled`), as the database's enum spells it.
pub fn job_state(s: spade_db::jobs::JobState) -> String {
    match serde_json::to_value(s) {
        Ok(serde_json::Value::String(name)) => name,
        // A unit enum variant always serializes as its name.
        other => format!("{other:?}"),
    }
}

pub fn share(l: &ShareLink) -> dto::ShareRecord {
    dto::ShareRecord {
        id: l.id,
        run_id: l.run_id,
        created_by: l.created_by,
        created_at: time(&l.created_at),
        revoked_at: l.revoked_at.as_ref().map(time),
        label: l.label.clone(),
        expires_at: l.expires_at.as_ref().map(time),
    }
}

pub async fn checkpoints(db: &Pool, scope: &RunScope) -> ApiResult<Vec<dto::CheckpointRecord>> {
    Ok(artifacts::checkpoints(db, scope)
        .await?
        .iter()
        .map(checkpoint)
        .collect())
}

pub async fn benchmarks(db: &Pool, scope: &RunScope) -> ApiResult<Vec<dto::BenchmarkRecord>> {
    Ok(artifacts::benchmark_results(db, scope)
        .await?
        .iter()
        .map(benchmark)
        .collect())
}

pub async fn evaluations(db: &Pool, scope: &RunScope) -> ApiResult<Vec<dto::EvaluationRecord>> {
    Ok(evaluations::list(db, scope)
        .await?
        .iter()
        .map(evaluation)
        .collect())
}

pub async fn share_links(db: &Pool, scope: &RunScope) -> ApiResult<Vec<dto::ShareRecord>> {
    Ok(shares::list(db, scope).await?.iter().map(share).collect())
}
