//! Worker ingestion (`spade::report` is the contract): `POST /api/v1/ingest/{run_id}` with the
//! run's bearer token and `{"envelopes": [...]}`. The whole batch is applied in one transaction;
//! each envelope's key is claimed first, so a replayed key is acknowledged again but stored once.
//! After the commit the new facts are pushed to the run's live pages. The reply says whether a
//! user asked to cancel, which is how the worker learns to stop.
//!
//! A run token is a credential anyone with an editor role can mint, so nothing it reports is
//! trusted further than the database's own rules: a checkpoint path must lie inside the run's
//! own state directory or a model root (`paths::PathRoots::checkpoint`), an `env_id` has 1 to
//! 200 characters (422 before the database's CHECK turns it into a 500 the worker would retry),
//! and a log line is cut at [`MAX_LOG_LINE_BYTES`].
//! A token is valid only while its run is unfinished.

use crate::AppState;
use crate::auth::bearer;
use crate::error::{ApiJson, ApiPath, ApiResult, AppError};
use crate::events::RunEvent;
use crate::service::paths::PathRoots;
use crate::tokens;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use spade::report::{
    EnvStatus, Envelope, FinishStatus, IngestReply, IngestRequest, MAX_ENVELOPES_PER_BATCH, Message,
};
use spade_db::evaluations::NewResult;
use spade_db::ingest::{self, Batch, NewEnvironment, NewPlay, Scores};
use spade_db::{DbError, RunScope, RunStatus};

/// Longest log line stored (bytes); a longer one is cut at a character boundary and marked, so
/// one worker line cannot make the run page megabytes long.
pub const MAX_LOG_LINE_BYTES: usize = 16 * 1024;

/// Longest `env_id` (characters): the database's CHECK on `environments.env_id`.
const MAX_ENV_ID_CHARS: usize = 200;

async fn worker_scope(state: &AppState, headers: &HeaderMap, run_id: i64) -> ApiResult<RunScope> {
    let refused =
        || AppError::unauthenticated("invalid_run_token", "a valid run token is required");
    let token = bearer(headers)?.ok_or_else(refused)?.to_owned();
    let scope = RunScope::for_worker(&state.ctx.db, run_id, |stored| {
        tokens::token_matches(&token, stored)
    })
    .await
    .map_err(|e| match e {
        DbError::NotFound(_) => refused(),
        other => other.into(),
    })?;
    // The token dies with its job: once the run has finished (the worker's own `finished`
    // report, or the scheduler recording the job's end) nothing more may be written with it,
    // so a leaked token is worth nothing after the run.
    if spade_db::runs::status(&state.ctx.db, &scope)
        .await?
        .is_terminal()
    {
        return Err(refused());
    }
    Ok(scope)
}

/// `GET /api/v1/ingest/{run_id}/config`: the run configuration as TOML; 409
/// `unreadable_config` (and the run failed, once) when this version cannot read it.
pub async fn config(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Response> {
    let scope = worker_scope(&state, &headers, run_id).await?;
    let toml = crate::service::runs::config_for_worker(&state.ctx, &scope).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/toml; charset=utf-8")],
        toml,
    )
        .into_response())
}

/// `POST /api/v1/ingest/{run_id}`.
pub async fn ingest(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(run_id): ApiPath<i64>,
    ApiJson(req): ApiJson<IngestRequest>,
) -> ApiResult<Json<IngestReply>> {
    let scope = worker_scope(&state, &headers, run_id).await?;
    if req.envelopes.len() > MAX_ENVELOPES_PER_BATCH {
        return Err(AppError::invalid(
            "envelopes",
            format!(
                "at most {MAX_ENVELOPES_PER_BATCH} per request, got {}",
                req.envelopes.len()
            ),
        ));
    }
    let (acknowledged, status) = store(&state, &scope, &req.envelopes).await?;
    // Reviews can retire live environments; the worker hears of it on its next report.
    let retire = spade_db::reviews::retirements(&state.ctx.db, run_id)
        .await?
        .into_iter()
        .map(|r| spade::report::Retire {
            env_id: r.env_id,
            verdict: r.verdict.as_str().to_owned(),
            message: format!(
                "marked {} by {}{}",
                r.verdict.as_str(),
                r.reviewer,
                if r.comment.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.comment)
                }
            ),
        })
        .collect();
    Ok(Json(IngestReply {
        acknowledged,
        cancel_requested: matches!(status, RunStatus::Cancelling | RunStatus::Cancelled),
        retire,
    }))
}

/// Stores one batch of `scope`'s run in one transaction, as the ingest route does: each
/// envelope's key is claimed first (a replay is acknowledged, stored once), every field is
/// checked, the new facts go to the run's live pages after the commit, and a checkpoint queues
/// its automatic evaluations. Returns the acknowledged keys and the run's status. The route
/// calls it for a worker's batch; [`crate::spool`] for what an ended worker could not send.
pub(crate) async fn store(
    state: &AppState,
    scope: &RunScope,
    envelopes: &[Envelope],
) -> ApiResult<(Vec<String>, RunStatus)> {
    let run_id = scope.run_id();
    let run_id_text = run_id.to_string();
    for (i, e) in envelopes.iter().enumerate() {
        if e.run_id != run_id_text {
            return Err(AppError::invalid(
                &format!("envelopes[{i}].run_id"),
                format!("is {:?} but the URL names run {run_id}", e.run_id),
            ));
        }
        if !e.key_is_consistent() {
            return Err(AppError::invalid(
                &format!("envelopes[{i}].key"),
                format!("expected {:?}", Envelope::key_for(&e.run_id, e.seq)),
            ));
        }
    }
    let mut batch = ingest::begin(&state.ctx.db, scope).await?;
    let mut acknowledged = Vec::with_capacity(envelopes.len());
    let mut events = Vec::new();
    for (i, e) in envelopes.iter().enumerate() {
        let seq = to_i64(e.seq, i, "seq")?;
        if batch.claim(&e.key, seq).await? {
            let ctx = Ctx {
                paths: &state.ctx.paths,
                run_id,
                i,
            };
            apply(&mut batch, &e.message, &ctx, &mut events).await?;
        }
        acknowledged.push(e.key.clone());
    }
    let status = batch.commit().await?;
    for ev in events {
        if let RunEvent::Checkpoint { step } = &ev {
            // After the commit, so a job never reads a checkpoint row that could roll back. A
            // failure here loses only the automatic evaluation (people can still queue it), not
            // the acknowledged report.
            let step = i64::try_from(*step).unwrap_or(i64::MAX);
            match super::evaluations::auto_for_checkpoint(state, scope, step).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(run_id, step, queued = n, "automatic evaluations queued"),
                Err(e) => {
                    tracing::warn!(run_id, step, error = %e, "automatic evaluation not queued")
                }
            }
        }
        state.ctx.events.publish(run_id, ev);
    }
    Ok((acknowledged, status))
}

fn to_i64(v: u64, i: usize, field: &str) -> ApiResult<i64> {
    i64::try_from(v)
        .map_err(|_| AppError::invalid(&format!("envelopes[{i}].{field}"), "must be below 2^63"))
}

fn to_i32(v: u32, i: usize, field: &str) -> ApiResult<i32> {
    i32::try_from(v)
        .map_err(|_| AppError::invalid(&format!("envelopes[{i}].{field}"), "must be below 2^31"))
}

/// An `env_id` the database accepts: 1 to 200 characters.
fn env_id<'a>(v: &'a str, i: usize, field: &str) -> ApiResult<&'a str> {
    let n = v.chars().count();
    if n == 0 || n > MAX_ENV_ID_CHARS {
        return Err(AppError::invalid(
            &format!("envelopes[{i}].{field}"),
            format!("must have 1 to {MAX_ENV_ID_CHARS} characters, got {n}"),
        ));
    }
    Ok(v)
}

/// `line` cut to at most [`MAX_LOG_LINE_BYTES`] at a character boundary, with a marker that
/// says how much was left out.
pub fn capped_log_line(line: &str) -> std::borrow::Cow<'_, str> {
    if line.len() <= MAX_LOG_LINE_BYTES {
        return line.into();
    }
    let mut end = MAX_LOG_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{} [... {} more bytes not stored]",
        &line[..end],
        line.len() - end
    )
    .into()
}

fn finite(v: f64, i: usize, field: &str) -> ApiResult<f64> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(AppError::invalid(
            &format!("envelopes[{i}].{field}"),
            "must be a finite number",
        ))
    }
}

/// A standard error: finite and not negative (the database's CHECK).
fn non_negative(v: f64, i: usize, field: &str) -> ApiResult<f64> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(AppError::invalid(
            &format!("envelopes[{i}].{field}"),
            "must be a finite number >= 0",
        ))
    }
}

/// Samples per question: 1 to 2^31 - 1.
fn at_least_one(v: u32, i: usize, field: &str) -> ApiResult<i32> {
    match i32::try_from(v) {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(AppError::invalid(
            &format!("envelopes[{i}].{field}"),
            "must be 1 to 2^31 - 1",
        )),
    }
}

/// What [`apply`] needs besides the message: the path rule, the run and the envelope's index.
struct Ctx<'a> {
    paths: &'a PathRoots,
    run_id: i64,
    i: usize,
}

async fn apply(
    batch: &mut Batch,
    m: &Message,
    ctx: &Ctx<'_>,
    events: &mut Vec<RunEvent>,
) -> ApiResult<()> {
    let i = ctx.i;
    match m {
        Message::RunStarted {
            code_version,
            total_steps,
            ..
        } => {
            batch
                .run_started(
                    code_version,
                    to_i64(*total_steps, i, "message.total_steps")?,
                )
                .await?;
            events.push(crate::events::status_event(RunStatus::Running));
        }
        Message::Environment { record: r } => {
            let opt = |v: Option<f64>, f: &str| v.map(|x| finite(x, i, f)).transpose();
            batch
                .environment(&NewEnvironment {
                    env_id: env_id(&r.env_id, i, "message.record.env_id")?,
                    step: to_i64(r.step, i, "message.record.step")?,
                    skill: &r.skill,
                    kind: r.kind,
                    status: r.status,
                    rejection_reason: r.rejection_reason.as_deref(),
                    rejection_message: r.rejection_message.as_deref(),
                    code: &r.code,
                    hint: r.hint.as_deref(),
                    parent_env_id: r.parent_env_id.as_deref(),
                    regret: opt(r.regret, "message.record.regret")?,
                    win_rate_hint: opt(r.win_rate_hint, "message.record.win_rate_hint")?,
                    win_rate_no_hint: opt(r.win_rate_no_hint, "message.record.win_rate_no_hint")?,
                    designer_reward: opt(r.designer_reward, "message.record.designer_reward")?,
                    reward_levels: r
                        .reward_levels
                        .map(|v| to_i32(v, i, "message.record.reward_levels"))
                        .transpose()?,
                    attempts: to_i32(r.attempts, i, "message.record.attempts")?,
                })
                .await?;
            events.push(RunEvent::Environment {
                env_id: r.env_id.clone(),
                step: r.step,
                skill: r.skill.clone(),
                status: match r.status {
                    EnvStatus::Accepted => "accepted".into(),
                    EnvStatus::Rejected => "rejected".into(),
                    EnvStatus::BrokenInPlay => "broken_in_play".into(),
                },
            });
        }
        Message::EnvironmentBroken {
            env_id,
            reason,
            message,
            ..
        } => {
            if reason.is_empty() || reason.len() > 200 {
                return Err(AppError::invalid(
                    &format!("envelopes[{i}].message.reason"),
                    "the reason must have 1 to 200 bytes".to_owned(),
                ));
            }
            batch
                .broken_in_play(self::env_id(env_id, i, "message.env_id")?, reason, message)
                .await
                .map_err(|e| match e {
                    DbError::NotFound(_) => AppError::invalid(
                        &format!("envelopes[{i}].message.env_id"),
                        format!("{env_id:?} was never reported in this run as accepted"),
                    ),
                    other => other.into(),
                })?;
        }
        Message::EnvironmentScored {
            env_id,
            regret,
            win_rate_hint,
            win_rate_no_hint,
            designer_reward,
            reward_levels,
            ..
        } => {
            let scores = Scores {
                env_id: self::env_id(env_id, i, "message.env_id")?,
                regret: Some(finite(*regret, i, "message.regret")?),
                win_rate_hint: Some(finite(*win_rate_hint, i, "message.win_rate_hint")?),
                win_rate_no_hint: Some(finite(*win_rate_no_hint, i, "message.win_rate_no_hint")?),
                designer_reward: Some(finite(*designer_reward, i, "message.designer_reward")?),
                reward_levels: Some(to_i32(*reward_levels, i, "message.reward_levels")?),
            };
            batch.scores(&scores).await.map_err(|e| match e {
                DbError::NotFound(_) => AppError::invalid(
                    &format!("envelopes[{i}].message.env_id"),
                    format!("{env_id:?} was never reported in this run"),
                ),
                other => other.into(),
            })?;
        }
        Message::Plays { records } => {
            let mut plays = Vec::with_capacity(records.len());
            for (j, p) in records.iter().enumerate() {
                plays.push(NewPlay {
                    env_id: env_id(&p.env_id, i, &format!("message.records[{j}].env_id"))?,
                    step: to_i64(p.step, i, &format!("message.records[{j}].step"))?,
                    with_hint: p.with_hint,
                    episode_return: finite(
                        p.episode_return,
                        i,
                        &format!("message.records[{j}].episode_return"),
                    )?,
                    won: p.won,
                    turns: to_i32(p.turns, i, &format!("message.records[{j}].turns"))?,
                    transcript: serde_json::to_value(&p.transcript)
                        .map_err(|e| AppError::Internal(e.into()))?,
                });
            }
            // A play must belong to an environment this run reported (earlier in this batch
            // or before): otherwise it shows on no page and skews no reviewer-visible count.
            let ids: Vec<&str> = plays.iter().map(|p| p.env_id).collect();
            if let Some(unknown) = batch.unreported_envs(&ids).await?.first() {
                let j = ids.iter().position(|id| id == unknown).unwrap_or(0);
                return Err(AppError::invalid(
                    &format!("envelopes[{i}].message.records[{j}].env_id"),
                    format!(
                        "{unknown:?} was never reported in this run: report the environment before its plays"
                    ),
                ));
            }
            batch.plays(&plays).await?;
        }
        Message::Metrics {
            step,
            elapsed_s,
            values,
        } => {
            let mut names = Vec::with_capacity(values.len());
            let mut vals = Vec::with_capacity(values.len());
            for (name, v) in values {
                if name.is_empty() || name.len() > 200 {
                    return Err(AppError::invalid(
                        &format!("envelopes[{i}].message.values"),
                        format!("metric name {name:?} must have 1 to 200 bytes"),
                    ));
                }
                names.push(name.clone());
                vals.push(finite(*v, i, &format!("message.values.{name}"))?);
            }
            batch
                .metrics(
                    to_i64(*step, i, "message.step")?,
                    finite(*elapsed_s, i, "message.elapsed_s")?,
                    &names,
                    &vals,
                )
                .await?;
            events.push(RunEvent::Metrics {
                step: *step,
                values: values.clone(),
            });
        }
        Message::Checkpoint { step, path, bytes } => {
            let path =
                ctx.paths
                    .checkpoint(ctx.run_id, &format!("envelopes[{i}].message.path"), path)?;
            batch
                .checkpoint(
                    to_i64(*step, i, "message.step")?,
                    &path,
                    to_i64(*bytes, i, "message.bytes")?,
                )
                .await?;
            events.push(RunEvent::Checkpoint { step: *step });
        }
        Message::Progress {
            step,
            total_steps,
            phase,
        } => {
            batch
                .progress(
                    to_i64(*step, i, "message.step")?,
                    to_i64(*total_steps, i, "message.total_steps")?,
                    phase,
                )
                .await?;
            events.push(RunEvent::Progress {
                step: *step,
                total_steps: *total_steps,
                phase: phase.clone(),
            });
        }
        Message::Log { level, line } => {
            let level = serde_json::to_value(level)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "info".into());
            let line = capped_log_line(line);
            batch.log(&level, &line).await?;
            events.push(RunEvent::Log {
                level,
                line: line.into_owned(),
            });
        }
        Message::BenchmarkResult {
            checkpoint_step,
            suite,
            task,
            score,
            n,
            stderr,
            samples,
        } => {
            let cs = checkpoint_step
                .map(|s| to_i64(s, i, "message.checkpoint_step"))
                .transpose()?;
            let result = NewResult {
                task: task.clone(),
                score: finite(*score, i, "message.score")?,
                n: to_i32(*n, i, "message.n")?,
                stderr: stderr
                    .map(|s| non_negative(s, i, "message.stderr"))
                    .transpose()?,
                samples: at_least_one(*samples, i, "message.samples")?,
            };
            batch.benchmark(cs, suite, &result).await?;
        }
        Message::Finished { status, message } => {
            let status = match status {
                FinishStatus::Succeeded => RunStatus::Succeeded,
                FinishStatus::Failed => RunStatus::Failed,
                FinishStatus::Cancelled => RunStatus::Cancelled,
            };
            batch.finished(status, message).await?;
            events.push(crate::events::status_event(status));
        }
    }
    Ok(())
}
