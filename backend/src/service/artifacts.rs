//! What a run produced besides metrics and environments: checkpoints, benchmark scores and
//! held-out evaluations, in the JSON API's shapes (the run page derives its views from them),
//! and queueing an evaluation. Share links are in `shares`.

use super::paths::PathRoots;
use super::{audit, editor_scope};
use crate::service::{Caller, Ctx};
use crate::service::{ServiceError, ServiceResult};
use serde::Deserialize;
use spade_app::dto;
use spade_db::artifacts::{self, BenchmarkResult, Checkpoint};
use spade_db::evaluations::{self, Evaluation, NewEvaluation, Trigger};
use spade_db::{DbError, Pool, RunScope};

type Time = chrono::DateTime<chrono::Utc>;

pub(super) fn time(t: &Time) -> String {
    // What chrono's own serializer writes, so the API's times read as before it served DTOs.
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A checkpoint as people see it: its path relative to the run's state directory or model
/// root, never the server's absolute path (`paths::PathRoots::shown_checkpoint`).
pub fn checkpoint(c: &Checkpoint, paths: &PathRoots, run_id: i64) -> dto::CheckpointRecord {
    dto::CheckpointRecord {
        step: c.step,
        path: paths.shown_checkpoint(run_id, &c.path),
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
        stderr: b.stderr,
        samples: b.samples,
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
        samples: e.samples,
        temperature: e.temperature,
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

pub async fn checkpoints(ctx: &Ctx, scope: &RunScope) -> ServiceResult<Vec<dto::CheckpointRecord>> {
    Ok(artifacts::checkpoints(&ctx.db, scope)
        .await?
        .iter()
        .map(|c| checkpoint(c, &ctx.paths, scope.run_id()))
        .collect())
}

/// The directory of run `scope`'s checkpoint at `step` for a download, held to the path rule
/// as an evaluation's is; `NotFound("checkpoint")` when the run has none at that step.
pub async fn checkpoint_dir(
    ctx: &Ctx,
    scope: &RunScope,
    step: i64,
) -> ServiceResult<std::path::PathBuf> {
    checked_checkpoint(ctx, scope, step, "step")
        .await?
        .map(std::path::PathBuf::from)
        .ok_or(spade_db::DbError::NotFound("checkpoint").into())
}

/// The regular files under a checkpoint directory, relative to it and sorted; links and
/// anything else that is not a plain file or directory are left out (a link could name any
/// file on the server).
pub fn checkpoint_files(dir: &std::path::Path) -> ServiceResult<Vec<std::path::PathBuf>> {
    let io = |e: std::io::Error| super::ServiceError::Internal(anyhow::Error::new(e));
    let mut out = Vec::new();
    let mut todo = vec![std::path::PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for entry in std::fs::read_dir(dir.join(&rel)).map_err(io)? {
            let entry = entry.map_err(io)?;
            let kind = entry.file_type().map_err(io)?;
            let path = rel.join(entry.file_name());
            if kind.is_dir() {
                todo.push(path);
            } else if kind.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The stored path of run `scope`'s checkpoint at `step`, held again to the path rule before
/// an evaluation loads it (a row stored before the rule, or a root an administrator has since
/// removed, is refused with a 422 about `field`); `None` when there is no such checkpoint.
pub async fn checked_checkpoint(
    ctx: &Ctx,
    scope: &RunScope,
    step: i64,
    field: &str,
) -> ServiceResult<Option<String>> {
    let Some(c) = artifacts::checkpoints(&ctx.db, scope)
        .await?
        .into_iter()
        .find(|c| c.step == step)
    else {
        return Ok(None);
    };
    ctx.paths
        .checkpoint(scope.run_id(), field, &c.path)
        .map(Some)
}

pub async fn benchmarks(db: &Pool, scope: &RunScope) -> ServiceResult<Vec<dto::BenchmarkRecord>> {
    Ok(artifacts::benchmark_results(db, scope)
        .await?
        .iter()
        .map(benchmark)
        .collect())
}

/// The paper's table of runs `ids` (each checked for the caller, a run they cannot read being
/// a 404 naming it) as CSV, in the order given (`spade_app::pages::benchmarks::paper_table`).
pub async fn benchmarks_csv(
    ctx: &Ctx,
    caller: &Caller,
    ids: &[i64],
    rows_by: spade_app::pages::benchmarks::RowsBy,
) -> ServiceResult<String> {
    use spade_app::pages::benchmarks::{paper_table, suite_tables};
    let mut per_run = Vec::with_capacity(ids.len());
    for &id in ids {
        let scope = super::member_scope(ctx, caller, id).await?;
        let name = spade_db::runs::get(&ctx.db, &scope).await?.name;
        let rows: Vec<dto::BenchmarkRow> = benchmarks(&ctx.db, &scope)
            .await?
            .into_iter()
            .map(|b| dto::BenchmarkRow::of(id, &name, b))
            .collect();
        per_run.push((format!("{name} (#{id})"), suite_tables(&rows)));
    }
    Ok(paper_table(&per_run, rows_by).to_csv())
}

pub async fn evaluations(db: &Pool, scope: &RunScope) -> ServiceResult<Vec<dto::EvaluationRecord>> {
    Ok(evaluations::list(db, scope)
        .await?
        .iter()
        .map(evaluation)
        .collect())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateEvaluation {
    /// The checkpoint's step; 0 is the model the run started from.
    pub checkpoint_step: i64,
    /// A `spade eval --suite` name (rg-hard, rg-logic, ..., humaneval, envs, envs:DIR,
    /// qa:PATH.jsonl, mc:PATH.jsonl, code:PATH.jsonl).
    pub suite: String,
    /// Items per task at most (default: the run configuration's `eval.limit`).
    pub limit: Option<u32>,
    /// Tokens per answer (default: the run configuration's `eval.max_new_tokens`).
    pub max_new_tokens: Option<u32>,
    /// Replies per question, 1 to 1024 (default 1): the score is then Avg@k and the job's
    /// output has pass@k. More than 1 needs `temperature`.
    #[serde(default)]
    pub samples: Option<u32>,
    /// Sampling temperature in [0, 10] (default 0, greedy).
    #[serde(default)]
    pub temperature: Option<f64>,
}

/// Queues `spade eval` on one checkpoint of run `run_id` and one suite (editors); limits left
/// out come from the run's configuration.
pub async fn request_evaluation(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
    req: &CreateEvaluation,
) -> ServiceResult<dto::EvaluationRecord> {
    let scope = editor_scope(ctx, caller, run_id).await?;
    spade::suites::check(&req.suite).map_err(|e| ServiceError::invalid("suite", e))?;
    let suite = ctx.paths.suite("suite", &req.suite)?;
    if req.checkpoint_step < 0 {
        return Err(ServiceError::invalid(
            "checkpoint_step",
            "must be 0 or more",
        ));
    }
    // The path is checked here; a missing checkpoint is answered below with the steps it has.
    checked_checkpoint(ctx, &scope, req.checkpoint_step, "checkpoint_step").await?;
    let cfg = super::runs::stored_config(&ctx.db, &scope).await?;
    let limit = positive("limit", req.limit.unwrap_or(cfg.eval.limit), 1_000_000)?;
    let max_new_tokens = positive(
        "max_new_tokens",
        req.max_new_tokens.unwrap_or(cfg.eval.max_new_tokens),
        131_072,
    )?;
    let samples = positive("samples", req.samples.unwrap_or(1), 1024)?;
    let temperature = req.temperature.unwrap_or(0.0);
    if !(temperature.is_finite() && (0.0..=10.0).contains(&temperature)) {
        return Err(ServiceError::invalid(
            "temperature",
            format!("must be in [0, 10] (0 is greedy), got {temperature}"),
        ));
    }
    let k = u32::try_from(samples).unwrap_or(u32::MAX);
    if spade::suites::repeats_greedy_reply(&suite, k, temperature) {
        return Err(ServiceError::invalid(
            "temperature",
            format!(
                "must be above 0 with {samples} samples per question (at 0 every sample is the \
                 same greedy reply)"
            ),
        ));
    }
    let new = NewEvaluation {
        checkpoint_step: req.checkpoint_step,
        suite: &suite,
        item_limit: Some(limit),
        max_new_tokens,
        samples,
        temperature,
        trigger: Trigger::Manual,
        requested_by: Some(caller.user_id),
    };
    let created = match evaluations::create(&ctx.db, &scope, &new).await {
        Err(DbError::NotFound("checkpoint")) => {
            let steps: Vec<String> = artifacts::checkpoints(&ctx.db, &scope)
                .await?
                .iter()
                .map(|c| c.step.to_string())
                .collect();
            let has = if steps.is_empty() {
                "it has none yet".to_owned()
            } else {
                format!("it has {}", steps.join(", "))
            };
            return Err(ServiceError::invalid(
                "checkpoint_step",
                format!(
                    "run {run_id} has no checkpoint at step {} ({has})",
                    req.checkpoint_step
                ),
            ));
        }
        other => other?,
    };
    let evaluation = created.ok_or_else(|| {
        ServiceError::Internal(anyhow::anyhow!("a manual evaluation was not created"))
    })?;
    let detail = serde_json::json!({
        "checkpoint_step": req.checkpoint_step,
        "suite": req.suite,
        "job_id": evaluation.job_id,
    });
    let target = format!("run:{run_id}");
    audit(ctx, caller, scope.team_id(), "run.evaluate", target, detail).await?;
    Ok(self::evaluation(&evaluation))
}

fn positive(field: &str, v: u32, max: u32) -> ServiceResult<i32> {
    if v == 0 || v > max {
        return Err(ServiceError::invalid(
            field,
            format!("must be 1 to {max}, got {v}"),
        ));
    }
    i32::try_from(v).map_err(|_| ServiceError::invalid(field, format!("must be 1 to {max}")))
}
