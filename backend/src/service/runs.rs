//! Runs: the team's list (filters, sort, keyset cursor, page size), a run's two shapes, the
//! API's [`dto::RunRecord`] and the pages' [`dto::RunSummary`], and the changes: create from a
//! validated configuration, cancel, resume, delete, a worker token.

use super::{audit, editor_scope};
use crate::service::{Caller, Ctx};
use crate::service::{ServiceError, ServiceResult};
use crate::tokens::jobs as job_tokens;
use serde::Deserialize;
use spade::config::{ConfigError, RunConfig};
use spade_app::dto;
use spade_db::jobs::JobState;
use spade_db::runs::{self, NewRun, Run, RunFilter, RunSort};
use spade_db::{Pool, RunScope, TeamScope, metrics, teams};
use std::collections::BTreeMap;

/// Latest-value columns of the runs list and the run page's summary (see
/// `spade_app::pages::runs::KEY_METRICS`).
pub const KEY_METRICS: [&str; 3] = ["learnable_share", "regret_mean", "acceptance_rate"];
/// Longest name search.
const MAX_QUERY_CHARS: usize = 200;

/// What a runs list asks for; every field as the request gave it, checked here.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListArgs<'a> {
    pub project_id: Option<i64>,
    /// A `run_status` name (`queued`, `running`, ...).
    pub status: Option<&'a str>,
    /// Runs whose name contains this, ignoring case; blank is none.
    pub q: Option<&'a str>,
    /// `newest` (default), `oldest` or `name`.
    pub sort: Option<&'a str>,
    /// The `next_cursor` of the previous page in the same sort.
    pub cursor: Option<&'a str>,
    /// Runs per page (the caller's limit, already within its bounds).
    pub limit: i64,
    /// Runs with this tag.
    pub tag: Option<&'a str>,
    /// `key=value`: runs whose configuration has `value` at the dotted `key`
    /// (`agent.temperature=0.6`).
    pub config: Option<&'a str>,
    /// Runs that logged this metric, with its latest value within `metric_min`..`metric_max`
    /// when they are given.
    pub metric: Option<&'a str>,
    pub metric_min: Option<f64>,
    pub metric_max: Option<f64>,
}

/// Tags a run may carry, and the characters of one.
pub const MAX_TAGS: usize = 20;
pub const MAX_TAG_CHARS: usize = 40;
/// Characters of a run's notes.
pub const MAX_NOTES_CHARS: usize = 10_000;
/// Characters of a run's name (the table's check).
pub const MAX_NAME_CHARS: usize = 200;

/// A run's name, trimmed, as creating and renaming take it.
fn checked_name(name: &str) -> ServiceResult<&str> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(ServiceError::invalid(
            "name",
            format!("must have 1 to {MAX_NAME_CHARS} characters"),
        ));
    }
    Ok(name)
}

/// One tag, trimmed, or what is wrong with it: 1-40 letters, digits, spaces and `-_.:/+`.
pub fn check_tag(tag: &str) -> Result<String, String> {
    let t = tag.trim();
    if t.is_empty() || t.chars().count() > MAX_TAG_CHARS {
        return Err(format!(
            "a tag of 1 to {MAX_TAG_CHARS} characters, got {:?}",
            tag
        ));
    }
    match t
        .chars()
        .find(|c| !(c.is_alphanumeric() || " -_.:/+".contains(*c)))
    {
        Some(c) => Err(format!(
            "letters, digits, spaces and -_.:/+ in a tag, got {c:?} in {t:?}"
        )),
        None => Ok(t.to_owned()),
    }
}

/// The filter of a `key=value` configuration search, or what is wrong with it.
fn config_match(text: &str) -> Result<runs::ConfigMatch, ServiceError> {
    let bad = |m: &str| ServiceError::invalid("config", m);
    if text.chars().count() > MAX_QUERY_CHARS {
        return Err(bad(&format!(
            "a search of at most {MAX_QUERY_CHARS} characters"
        )));
    }
    let Some((key, value)) = text.split_once('=') else {
        return Err(bad(&format!(
            "key=value with a dotted key, e.g. agent.temperature=0.6; got {text:?}"
        )));
    };
    let path: Vec<String> = key.trim().split('.').map(str::to_owned).collect();
    if path.iter().any(|p| p.trim().is_empty()) {
        return Err(bad(&format!(
            "a dotted key without empty parts, e.g. agent.temperature; got {key:?}"
        )));
    }
    // Strings are matched without their JSON quotes, as the run page shows them.
    let value = value.trim().trim_matches('"').to_owned();
    Ok(runs::ConfigMatch { path, value })
}

/// The filter of a metric search, or what is wrong with it.
fn metric_match(a: &ListArgs<'_>) -> Result<Option<runs::MetricMatch>, ServiceError> {
    let name = a.metric.map(str::trim).filter(|m| !m.is_empty());
    let Some(name) = name else {
        if a.metric_min.is_some() || a.metric_max.is_some() {
            return Err(ServiceError::invalid(
                "metric",
                "a metric name with metric_min or metric_max",
            ));
        }
        return Ok(None);
    };
    if name.chars().count() > MAX_QUERY_CHARS {
        return Err(ServiceError::invalid(
            "metric",
            format!("a metric name of at most {MAX_QUERY_CHARS} characters"),
        ));
    }
    for (field, v) in [("metric_min", a.metric_min), ("metric_max", a.metric_max)] {
        if v.is_some_and(|v| !v.is_finite()) {
            return Err(ServiceError::invalid(field, "a finite number"));
        }
    }
    if let (Some(lo), Some(hi)) = (a.metric_min, a.metric_max)
        && lo > hi
    {
        return Err(ServiceError::invalid(
            "metric_min",
            format!("at most metric_max ({hi}), got {lo}"),
        ));
    }
    Ok(Some(runs::MetricMatch {
        name: name.to_owned(),
        min: a.metric_min,
        max: a.metric_max,
    }))
}

/// One page of the team's runs, newest first unless asked otherwise; `next_cursor` is absent on
/// the last page (one row more than the page is read to know).
pub async fn page(
    db: &Pool,
    scope: &TeamScope,
    a: ListArgs<'_>,
) -> Result<dto::Page<Run>, ServiceError> {
    let status = a
        .status
        .map(|s| {
            // A query parameter of the wrong kind: 400, as the API's other query errors.
            parse_status(s).ok_or_else(|| ServiceError::BadRequest {
                code: "invalid_query",
                message: format!(
                    "`status`: unknown run status \"{s}\"; expected one of {}",
                    dto::RunStatus::ALL.map(dto::RunStatus::as_str).join(", ")
                ),
            })
        })
        .transpose()?;
    let sort = RunSort::from_param(a.sort).map_err(|m| ServiceError::invalid("sort", m))?;
    let name_contains = match a.q.map(str::trim).filter(|s| !s.is_empty()) {
        Some(s) if s.chars().count() > MAX_QUERY_CHARS => {
            return Err(ServiceError::invalid(
                "q",
                format!("a name search of at most {MAX_QUERY_CHARS} characters"),
            ));
        }
        other => other.map(str::to_owned),
    };
    let tag = a
        .tag
        .filter(|t| !t.trim().is_empty())
        .map(check_tag)
        .transpose()
        .map_err(|m| ServiceError::invalid("tag", m))?;
    let config = a
        .config
        .filter(|c| !c.trim().is_empty())
        .map(config_match)
        .transpose()?;
    let metric = metric_match(&a)?;
    let mut filter = RunFilter {
        project_id: a.project_id,
        status,
        name_contains,
        sort,
        tag,
        config,
        metric,
        limit: a.limit.saturating_add(1),
        ..RunFilter::default()
    };
    if let Some(c) = a.cursor
        && !sort.set_cursor(&mut filter, c)
    {
        return Err(ServiceError::invalid(
            "cursor",
            "expected the next_cursor of a previous page in the same sort order",
        ));
    }
    let mut items = runs::list(db, scope, &filter).await?;
    let page_len = usize::try_from(a.limit).unwrap_or(usize::MAX);
    let more = items.len() > page_len;
    items.truncate(page_len);
    let next_cursor = if more {
        items.last().map(|r| sort.cursor_after(r))
    } else {
        None
    };
    Ok(dto::Page { items, next_cursor })
}

/// A page of runs as the API returns them.
pub async fn records(
    db: &Pool,
    scope: &TeamScope,
    a: ListArgs<'_>,
) -> Result<dto::Page<dto::RunRecord>, ServiceError> {
    let p = page(db, scope, a).await?;
    Ok(dto::Page {
        items: p.items.iter().map(record).collect(),
        next_cursor: p.next_cursor,
    })
}

/// A page of runs as the runs list shows them: project names and the key metrics' latest
/// values, one query each for the whole page.
pub async fn summaries(
    db: &Pool,
    scope: &TeamScope,
    a: ListArgs<'_>,
) -> Result<dto::Page<dto::RunSummary>, ServiceError> {
    let p = page(db, scope, a).await?;
    let projects: BTreeMap<i64, String> = teams::projects(db, scope)
        .await?
        .into_iter()
        .map(|p| (p.id, p.name))
        .collect();
    let ids: Vec<i64> = p.items.iter().map(|r| r.id).collect();
    let mut latest: BTreeMap<i64, BTreeMap<String, f64>> = BTreeMap::new();
    for (run, name, value) in metrics::latest(db, scope, &ids, &KEY_METRICS).await? {
        latest.entry(run).or_default().insert(name, value);
    }
    let mut totals = outcome_totals(db, scope.team_id(), &ids).await?;
    let items = p
        .items
        .iter()
        .map(|r| {
            let project = projects.get(&r.project_id).cloned().unwrap_or_default();
            let mut s = summary_of(r, project, latest.remove(&r.id).unwrap_or_default());
            s.warning = dto::RunWarning::of(&totals.remove(&r.id).unwrap_or_default());
            s
        })
        .collect();
    Ok(dto::Page {
        items,
        next_cursor: p.next_cursor,
    })
}

/// One run's summary (its page's header), with its key metrics.
pub async fn summary(
    db: &Pool,
    scope: &RunScope,
    r: &Run,
    project: String,
) -> Result<dto::RunSummary, ServiceError> {
    let key_metrics = metrics::latest_of(db, scope, &KEY_METRICS)
        .await?
        .into_iter()
        .collect();
    let mut s = summary_of(r, project, key_metrics);
    let mut totals = outcome_totals(db, scope.team_id(), &[scope.run_id()]).await?;
    s.warning = dto::RunWarning::of(&totals.remove(&scope.run_id()).unwrap_or_default());
    Ok(s)
}

/// The series totals behind [`dto::RunWarning`], by run.
async fn outcome_totals(
    db: &Pool,
    team_id: i64,
    ids: &[i64],
) -> Result<BTreeMap<i64, Vec<dto::SeriesTotal>>, ServiceError> {
    let mut by_run: BTreeMap<i64, Vec<dto::SeriesTotal>> = BTreeMap::new();
    for t in metrics::outcome_totals(db, team_id, ids).await? {
        by_run.entry(t.run_id).or_default().push(dto::SeriesTotal {
            name: t.name,
            sum: t.sum,
            max: t.max,
            steps: t.steps,
        });
    }
    Ok(by_run)
}

fn summary_of(r: &Run, project: String, key_metrics: BTreeMap<String, f64>) -> dto::RunSummary {
    let total_steps = crate::events::total_steps(r);
    dto::RunSummary::of(&record(r), project, total_steps, key_metrics)
}

/// The run `scope` names, as stored.
pub async fn get(db: &Pool, scope: &RunScope) -> ServiceResult<Run> {
    Ok(runs::get(db, scope).await?)
}

/// The run `scope` names, as the API shows it.
pub async fn get_record(db: &Pool, scope: &RunScope) -> ServiceResult<dto::RunRecord> {
    Ok(record(&runs::get(db, scope).await?))
}

/// The API's view of a stored run.
pub fn record(r: &Run) -> dto::RunRecord {
    // AutoSi is what chrono's own serializer writes, so the API's times read as before.
    let time =
        |t: &chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    dto::RunRecord {
        id: r.id,
        project_id: r.project_id,
        name: r.name.clone(),
        config: r.config.clone(),
        status: r.status,
        executor: r.executor.clone(),
        seed: r.seed,
        code_version: r.code_version.clone(),
        progress_step: r.progress_step,
        progress_total: r.progress_total,
        phase: r.phase.clone(),
        status_message: r.status_message.clone(),
        created_by: r.created_by,
        created_at: time(&r.created_at),
        updated_at: time(&r.updated_at),
        started_at: r.started_at.as_ref().map(time),
        finished_at: r.finished_at.as_ref().map(time),
        tags: r.tags.clone(),
        notes: r.notes.clone(),
    }
}

/// A `run_status` name.
pub fn parse_status(s: &str) -> Option<spade_db::RunStatus> {
    use spade_db::RunStatus::*;
    [
        Queued, Starting, Running, Cancelling, Cancelled, Succeeded, Failed,
    ]
    .into_iter()
    .find(|v| v.as_str() == s)
}

/// Executors a run may ask for.
pub const EXECUTORS: [&str; 2] = ["local", "ray"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    pub name: String,
    /// The configuration as TOML text (what `spade worker` reads).
    pub config_toml: Option<String>,
    /// The configuration as JSON (the same keys as the TOML).
    pub config: Option<serde_json::Value>,
    /// `local` (default) or `ray`.
    #[serde(default = "default_executor")]
    pub executor: String,
}

fn default_executor() -> String {
    "local".into()
}

/// Parses and validates a run configuration given as TOML or JSON; errors name the key path.
pub fn parse_config(req: &CreateRun) -> Result<RunConfig, ServiceError> {
    let cfg = match (&req.config_toml, &req.config) {
        (Some(text), None) => RunConfig::from_toml_str(text).map_err(|e| match e {
            ConfigError::Invalid(_) => ServiceError::Invalid {
                code: "invalid_config",
                message: e.to_string(),
            },
            other => ServiceError::invalid("config_toml", other),
        })?,
        (None, Some(json)) => {
            let cfg: RunConfig = serde_path_to_error::deserialize(json)
                .map_err(|e| ServiceError::invalid(&format!("config.{}", e.path()), e.inner()))?;
            let issues = cfg.validate();
            if !issues.is_empty() {
                return Err(ServiceError::Invalid {
                    code: "invalid_config",
                    message: ConfigError::Invalid(issues).to_string(),
                });
            }
            cfg
        }
        _ => {
            return Err(ServiceError::invalid(
                "config",
                "give exactly one of `config_toml` (TOML text) and `config` (JSON)",
            ));
        }
    };
    Ok(cfg)
}

/// Creates a run in project `project_id` (editors): the name, the executor and the
/// configuration are checked here (errors name the field or the configuration's key path), and
/// what is stored is the configuration's JSON with every default filled in, so a run can be
/// repeated from the row alone.
pub async fn create(
    ctx: &Ctx,
    caller: &Caller,
    project_id: i64,
    req: &CreateRun,
) -> ServiceResult<dto::RunRecord> {
    let scope = caller.team(TeamScope::for_project(&ctx.db, caller.user_id, project_id).await?)?;
    if !scope.role().can_edit() {
        return Err(ServiceError::read_only());
    }
    let name = checked_name(&req.name)?;
    if !EXECUTORS.contains(&req.executor.as_str()) {
        return Err(ServiceError::invalid(
            "executor",
            format!("expected one of {EXECUTORS:?}"),
        ));
    }
    let mut cfg = parse_config(req)?;
    ctx.paths.check_config(&mut cfg)?;
    let seed = i64::try_from(cfg.run.seed)
        .map_err(|_| ServiceError::invalid("config.run.seed", "must be at most 2^63 - 1"))?;
    let run = runs::create(
        &ctx.db,
        &scope,
        &NewRun {
            project_id,
            name,
            config: &cfg.to_json(),
            executor: &req.executor,
            seed,
            code_version: env!("CARGO_PKG_VERSION"),
        },
    )
    .await?;
    logged(ctx, caller, scope.team_id(), "run.create", run.id).await?;
    Ok(record(&run))
}

/// Cancels run `run_id` (editors): a queued run stops at once, a running one goes to
/// cancelling. Open pages hear of it.
pub async fn cancel(ctx: &Ctx, caller: &Caller, run_id: i64) -> ServiceResult<dto::RunRecord> {
    let scope = editor_scope(ctx, caller, run_id).await?;
    let run = runs::cancel(&ctx.db, &scope).await?;
    status_changed(ctx, caller, &scope, &run, "run.cancel").await
}

/// Queues a cancelled or failed run `run_id` again (editors).
pub async fn resume(ctx: &Ctx, caller: &Caller, run_id: i64) -> ServiceResult<dto::RunRecord> {
    let scope = editor_scope(ctx, caller, run_id).await?;
    let run = runs::resume(&ctx.db, &scope).await?;
    status_changed(ctx, caller, &scope, &run, "run.resume").await
}

/// After a user changed `run`'s status: open pages hear of it and the audit log records it.
async fn status_changed(
    ctx: &Ctx,
    caller: &Caller,
    scope: &RunScope,
    run: &Run,
    action: &str,
) -> ServiceResult<dto::RunRecord> {
    ctx.events
        .publish(run.id, crate::events::status_event(run.status));
    logged(ctx, caller, scope.team_id(), action, run.id).await?;
    Ok(record(run))
}

/// What `PATCH /runs/{id}` changes: each field that is present (name, tags, notes).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateRun {
    /// 1 to 200 characters.
    pub name: Option<String>,
    /// At most 20 tags of 1 to 40 letters, digits, spaces and `-_.:/+`; duplicates are
    /// dropped, the order kept.
    pub tags: Option<Vec<String>>,
    /// Free text, at most 10,000 characters.
    pub notes: Option<String>,
}

/// Renames run `run_id` or sets its tags or notes (editors). Every field is checked before
/// anything changes; the first wrong one is named.
pub async fn update(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
    req: &UpdateRun,
) -> ServiceResult<dto::RunRecord> {
    let scope = editor_scope(ctx, caller, run_id).await?;
    let run = runs::get(&ctx.db, &scope).await?;
    let mut details = runs::RunDetails {
        name: run.name,
        tags: run.tags,
        notes: run.notes,
    };
    if let Some(name) = &req.name {
        details.name = checked_name(name)?.to_owned();
    }
    if let Some(tags) = &req.tags {
        let mut kept: Vec<String> = Vec::new();
        for (i, t) in tags.iter().enumerate() {
            let t = check_tag(t).map_err(|m| ServiceError::invalid(&format!("tags[{i}]"), m))?;
            if !kept.contains(&t) {
                kept.push(t);
            }
        }
        if kept.len() > MAX_TAGS {
            return Err(ServiceError::invalid(
                "tags",
                format!("at most {MAX_TAGS} tags, got {}", kept.len()),
            ));
        }
        details.tags = kept;
    }
    if let Some(notes) = &req.notes {
        let n = notes.chars().count();
        if n > MAX_NOTES_CHARS {
            return Err(ServiceError::invalid(
                "notes",
                format!("at most {MAX_NOTES_CHARS} characters, got {n}"),
            ));
        }
        details.notes = notes.clone();
    }
    let run = runs::set_details(&ctx.db, &scope, &details).await?;
    logged(ctx, caller, scope.team_id(), "run.update", run_id).await?;
    Ok(record(&run))
}

/// Deletes run `run_id` (editors), which must have no live job.
pub async fn delete(ctx: &Ctx, caller: &Caller, run_id: i64) -> ServiceResult<()> {
    let scope = editor_scope(ctx, caller, run_id).await?;
    runs::delete(&ctx.db, &scope).await?;
    logged(ctx, caller, scope.team_id(), "run.delete", run_id).await
}

/// A new worker token for run `run_id` (editors), for a worker started by hand; the previous
/// one stops working. Refused (409) while a scheduled job of the run is live: its worker holds
/// the current token, and replacing it would make that worker's next report a 401, which ends
/// the run.
pub async fn issue_token(ctx: &Ctx, caller: &Caller, run_id: i64) -> ServiceResult<String> {
    let scope = editor_scope(ctx, caller, run_id).await?;
    let job = spade_db::jobs::latest_for_run(&ctx.db, run_id)
        .await
        .map_err(|e| ServiceError::Internal(e.into()))?;
    if let Some(job) = job
        && matches!(
            job.state,
            JobState::Claimed | JobState::Running | JobState::Cancelling
        )
    {
        return Err(ServiceError::Conflict {
            code: "job_running",
            message: format!(
                "run {run_id} has a running job (job {}) whose worker holds the run's token; \
                 cancel the run before starting a worker by hand",
                job.id
            ),
        });
    }
    let token = job_tokens::for_worker_by_hand(&ctx.db, &scope).await?;
    logged(ctx, caller, scope.team_id(), "run.token", run_id).await?;
    Ok(token)
}

async fn logged(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    action: &str,
    run_id: i64,
) -> ServiceResult<()> {
    audit(
        ctx,
        caller,
        team_id,
        action,
        format!("run:{run_id}"),
        serde_json::json!({}),
    )
    .await
}

/// The configuration the worker of run `scope` runs (`GET /api/v1/ingest/{run}/config`), as
/// TOML. A stored configuration this version cannot read (stored by an older version, or
/// written into the database by hand) can never start: the run fails once, with the reason in
/// its log and status message, and the worker gets a 409 (`unreadable_config`) naming it, which
/// it does not retry. (Issue 35: such runs answered their workers 500 again and again, and the
/// page never said why.)
pub async fn config_for_worker(ctx: &Ctx, scope: &RunScope) -> ServiceResult<String> {
    let run = runs::get(&ctx.db, scope).await?;
    let already_final = run.status.is_terminal();
    let e = match serde_json::from_value::<RunConfig>(run.config) {
        Ok(cfg) => return Ok(cfg.to_toml()),
        Err(e) => e,
    };
    let message = format!(
        "the stored configuration of run {} cannot be read by this version ({e}); the run \
         cannot start: launch a new run",
        scope.run_id()
    );
    // Once: a run that already ended (this refusal, or a cancel) keeps its status and log.
    if !already_final {
        tracing::warn!(run_id = scope.run_id(), error = %e, "unreadable stored configuration");
        let mut batch = spade_db::ingest::begin(&ctx.db, scope).await?;
        batch.log("error", &message).await?;
        batch
            .finished(spade_db::RunStatus::Failed, &message)
            .await?;
        let status = batch.commit().await?;
        ctx.events
            .publish(scope.run_id(), crate::events::status_event(status));
    }
    Err(ServiceError::Conflict {
        code: "unreadable_config",
        message,
    })
}

/// The configuration a run was created with (stored with every default filled in).
pub async fn stored_config(db: &Pool, scope: &RunScope) -> ServiceResult<RunConfig> {
    let run = runs::get(db, scope).await?;
    serde_json::from_value(run.config).map_err(|e| {
        ServiceError::Internal(
            anyhow::Error::new(e).context(format!("stored config of run {}", scope.run_id())),
        )
    })
}
