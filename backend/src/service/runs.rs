//! Runs: the team's list (filters, sort, keyset cursor, page size) and a run's two shapes, the
//! API's [`dto::RunRecord`] and the pages' [`dto::RunSummary`].

use crate::error::AppError;
use spade_app::dto;
use spade_db::runs::{self, Run, RunFilter, RunSort};
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
}

/// One page of the team's runs, newest first unless asked otherwise; `next_cursor` is absent on
/// the last page (one row more than the page is read to know).
pub async fn page(
    db: &Pool,
    scope: &TeamScope,
    a: ListArgs<'_>,
) -> Result<dto::Page<Run>, AppError> {
    let status = a
        .status
        .map(|s| {
            // A query parameter of the wrong kind: 400, as the API's other query errors.
            parse_status(s).ok_or_else(|| AppError::BadRequest {
                code: "invalid_query",
                message: format!(
                    "`status`: unknown run status \"{s}\"; expected one of {}",
                    dto::RunStatus::ALL.map(dto::RunStatus::as_str).join(", ")
                ),
            })
        })
        .transpose()?;
    let sort = RunSort::from_param(a.sort).map_err(|m| AppError::invalid("sort", m))?;
    let name_contains = match a.q.map(str::trim).filter(|s| !s.is_empty()) {
        Some(s) if s.chars().count() > MAX_QUERY_CHARS => {
            return Err(AppError::invalid(
                "q",
                format!("a name search of at most {MAX_QUERY_CHARS} characters"),
            ));
        }
        other => other.map(str::to_owned),
    };
    let mut filter = RunFilter {
        project_id: a.project_id,
        status,
        name_contains,
        sort,
        limit: a.limit.saturating_add(1),
        ..RunFilter::default()
    };
    if let Some(c) = a.cursor
        && !sort.set_cursor(&mut filter, c)
    {
        return Err(AppError::invalid(
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
) -> Result<dto::Page<dto::RunRecord>, AppError> {
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
) -> Result<dto::Page<dto::RunSummary>, AppError> {
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
    let items = p
        .items
        .iter()
        .map(|r| {
            let project = projects.get(&r.project_id).cloned().unwrap_or_default();
            summary_of(r, project, latest.remove(&r.id).unwrap_or_default())
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
) -> Result<dto::RunSummary, AppError> {
    let key_metrics = metrics::latest_of(db, scope, &KEY_METRICS)
        .await?
        .into_iter()
        .collect();
    Ok(summary_of(r, project, key_metrics))
}

fn summary_of(r: &Run, project: String, key_metrics: BTreeMap<String, f64>) -> dto::RunSummary {
    dto::RunSummary {
        id: r.id,
        name: r.name.clone(),
        project,
        status: r.status.into(),
        step: u64::try_from(r.progress_step).unwrap_or(0),
        total_steps: crate::events::total_steps(r),
        created_at: r
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        key_metrics,
    }
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
        status: r.status.into(),
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
