//! Runs: creation in a project, listing with filters, and the user-driven state changes
//! (cancel, resume, delete). Worker-driven changes (progress, finish) are in `ingest`.

use crate::{DbError, RunScope, RunStatus, TeamScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// A run as the API shows it (the token hash never leaves this crate).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub id: i64,
    pub project_id: i64,
    pub name: String,
    pub config: serde_json::Value,
    pub status: RunStatus,
    pub executor: String,
    pub seed: i64,
    pub code_version: String,
    pub progress_step: i64,
    pub progress_total: i64,
    pub phase: Option<String>,
    pub status_message: Option<String>,
    pub created_by: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// What the team tagged it with (the service checks their shape).
    pub tags: Vec<String>,
    /// The team's free-text notes on it.
    pub notes: String,
}

/// What people change of a run besides its status: its name, tags and notes (already checked
/// by the caller).
#[derive(Debug, Clone, Default)]
pub struct RunDetails {
    pub name: String,
    pub tags: Vec<String>,
    pub notes: String,
}

/// What creating a run needs (already validated by the caller).
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    pub project_id: i64,
    pub name: &'a str,
    pub config: &'a serde_json::Value,
    pub executor: &'a str,
    pub seed: i64,
    pub code_version: &'a str,
}

/// How the runs list is ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RunSort {
    /// Newest first (by id).
    #[default]
    Newest,
    Oldest,
    /// By name, ignoring case, then id.
    Name,
}

impl RunSort {
    pub const ALL: [RunSort; 3] = [RunSort::Newest, RunSort::Oldest, RunSort::Name];

    /// The query-parameter spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunSort::Newest => "newest",
            RunSort::Oldest => "oldest",
            RunSort::Name => "name",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The `sort` query parameter: absent or empty is the default; anything else unknown is
    /// the message the API and the pages both show ("expected a, b or c, got ...").
    pub fn from_param(v: Option<&str>) -> Result<Self, String> {
        match v.filter(|v| !v.is_empty()) {
            None => Ok(Self::default()),
            Some(v) => Self::parse(v).ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|s| s.as_str()).collect();
                format!("expected {}, got {v:?}", crate::one_of(&names))
            }),
        }
    }

    /// The cursor of the page after `last` in this order: the id for newest and oldest first
    /// (the old cursors stay valid), `id:name` by name (lowercased by the query, as it sorts).
    pub fn cursor_after(self, last: &Run) -> String {
        match self {
            RunSort::Newest | RunSort::Oldest => last.id.to_string(),
            RunSort::Name => format!("{}:{}", last.id, last.name),
        }
    }

    /// Reads a cursor of this order into the filter; false when it is not one.
    pub fn set_cursor(self, f: &mut RunFilter, c: &str) -> bool {
        match self {
            RunSort::Newest | RunSort::Oldest => match c.parse() {
                Ok(id) => {
                    f.before_id = Some(id);
                    true
                }
                Err(_) => false,
            },
            RunSort::Name => match c.split_once(':').map(|(id, n)| (id.parse(), n)) {
                Some((Ok(id), name)) => {
                    f.before_id = Some(id);
                    f.after_name = Some(name.to_owned());
                    true
                }
                _ => false,
            },
        }
    }
}

/// Filters of [`list`]. The keyset cursor is `before_id` (the last row's id: runs before it
/// newest first, after it oldest first) and, by name, `after_name` too; see
/// [`RunSort::set_cursor`].
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub project_id: Option<i64>,
    pub status: Option<RunStatus>,
    /// Runs whose name contains this text, ignoring case (`%` and `_` match themselves).
    pub name_contains: Option<String>,
    pub sort: RunSort,
    pub before_id: Option<i64>,
    /// By name: the last row's name.
    pub after_name: Option<String>,
    /// Runs tagged with exactly this tag.
    pub tag: Option<String>,
    /// Runs whose configuration has this value at this key.
    pub config: Option<ConfigMatch>,
    /// Runs whose latest value of a metric lies in a range.
    pub metric: Option<MetricMatch>,
    pub limit: i64,
}

/// A configuration key and the value it must have: `path` is the key split at its dots
/// (`["agent", "temperature"]`), `value` the value as JSON text without quotes for strings
/// (`0.6`, `true`, `qwen3-0.6b`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigMatch {
    pub path: Vec<String>,
    pub value: String,
}

/// A metric whose latest value (at its last step) is at least `min` and at most `max`.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricMatch {
    pub name: String,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// `text` as a literal inside an ILIKE pattern (its `\`, `%` and `_` escaped).
fn like_literal(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// Creates a queued run in a project of the scoped team (`NotFound("project")` otherwise).
pub async fn create(pool: &PgPool, scope: &TeamScope, new: &NewRun<'_>) -> Result<Run, DbError> {
    let row = sqlx::query_as!(
        Run,
        r#"INSERT INTO runs (project_id, name, config, executor, seed, code_version, created_by)
           SELECT p.id, $3, $4, $5, $6, $7, $8 FROM projects p WHERE p.id = $2 AND p.team_id = $1
           RETURNING id, project_id, name, config, status AS "status: RunStatus", executor, seed,
                     code_version, progress_step, progress_total, phase, status_message,
                     created_by, created_at, updated_at, started_at, finished_at, tags, notes"#,
        scope.team_id,
        new.project_id,
        new.name,
        new.config,
        new.executor,
        new.seed,
        new.code_version,
        scope.user_id
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("project"))?;
    Ok(row)
}

/// Runs of the scoped team, filtered, one page in the filter's order.
pub async fn list(pool: &PgPool, scope: &TeamScope, f: &RunFilter) -> Result<Vec<Run>, DbError> {
    let rows = sqlx::query_as!(
        Run,
        r#"SELECT r.id, r.project_id, r.name, r.config, r.status AS "status: RunStatus",
                  r.executor, r.seed, r.code_version, r.progress_step, r.progress_total, r.phase,
                  r.status_message, r.created_by, r.created_at, r.updated_at, r.started_at,
                  r.finished_at, r.tags, r.notes
           FROM runs r JOIN projects p ON p.id = r.project_id
           WHERE p.team_id = $1
             AND ($2::bigint IS NULL OR r.project_id = $2)
             AND ($3::run_status IS NULL OR r.status = $3)
             AND ($4::bigint IS NULL OR CASE $7::text
                   WHEN 'oldest' THEN r.id > $4
                   WHEN 'name' THEN (lower(r.name), r.id) > (lower($8::text), $4)
                   ELSE r.id < $4 END)
             AND ($6::text IS NULL OR r.name ILIKE '%' || $6 || '%' ESCAPE '\')
             AND ($9::text IS NULL OR $9 = ANY (r.tags))
             AND ($10::text[] IS NULL OR r.config #>> $10 = $11::text)
             AND ($12::text IS NULL OR EXISTS (
                   SELECT 1 FROM metric_series s
                   JOIN metrics m ON m.run_id = s.run_id AND m.name = s.name
                                 AND m.step = s.last_step
                   WHERE s.run_id = r.id AND s.name = $12
                     AND ($13::float8 IS NULL OR m.value >= $13)
                     AND ($14::float8 IS NULL OR m.value <= $14)))
           ORDER BY CASE WHEN $7 = 'name' THEN lower(r.name) END,
                    CASE WHEN $7 IN ('oldest', 'name') THEN r.id END,
                    r.id DESC
           LIMIT $5"#,
        scope.team_id,
        f.project_id,
        f.status as Option<RunStatus>,
        f.before_id,
        f.limit,
        f.name_contains.as_deref().map(like_literal),
        f.sort.as_str(),
        f.after_name.as_deref().unwrap_or_default(),
        f.tag.as_deref(),
        f.config.as_ref().map(|c| c.path.as_slice()),
        f.config.as_ref().map(|c| c.value.as_str()),
        f.metric.as_ref().map(|m| m.name.as_str()),
        f.metric.as_ref().and_then(|m| m.min),
        f.metric.as_ref().and_then(|m| m.max)
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// The scoped run.
pub async fn get(pool: &PgPool, scope: &RunScope) -> Result<Run, DbError> {
    sqlx::query_as!(
        Run,
        r#"SELECT id, project_id, name, config, status AS "status: RunStatus", executor, seed,
                  code_version, progress_step, progress_total, phase, status_message, created_by,
                  created_at, updated_at, started_at, finished_at, tags, notes
           FROM runs WHERE id = $1"#,
        scope.run_id
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("run"))
}

/// The run's status alone (what ingestion replies with as `cancel_requested`).
pub async fn status(pool: &PgPool, scope: &RunScope) -> Result<RunStatus, DbError> {
    sqlx::query_scalar!(
        r#"SELECT status AS "status: RunStatus" FROM runs WHERE id = $1"#,
        scope.run_id
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("run"))
}

fn state_error(status: RunStatus, hint: &'static str) -> DbError {
    DbError::State {
        what: "run",
        state: status.as_str().to_owned(),
        hint,
    }
}

/// Asks the run to stop. A queued run (nothing started) becomes `cancelled` at once; a starting
/// or running one becomes `cancelling` and the executor and worker finish the job. Cancelling a
/// run that is already cancelling is a no-op; a finished run is a `State` error.
pub async fn cancel(pool: &PgPool, scope: &RunScope) -> Result<Run, DbError> {
    let current = status(pool, scope).await?;
    if current.is_terminal() {
        return Err(state_error(
            current,
            "only queued, starting or running runs can be cancelled",
        ));
    }
    sqlx::query!(
        "UPDATE runs SET
            status = CASE WHEN status = 'queued' THEN 'cancelled'::run_status
                          ELSE 'cancelling'::run_status END,
            finished_at = CASE WHEN status = 'queued' THEN now() ELSE finished_at END,
            updated_at = now()
         WHERE id = $1 AND status IN ('queued', 'starting', 'running')",
        scope.run_id
    )
    .execute(pool)
    .await?;
    get(pool, scope).await
}

/// Queues a cancelled or failed run again; the worker continues from its last checkpoint.
pub async fn resume(pool: &PgPool, scope: &RunScope) -> Result<Run, DbError> {
    let done = sqlx::query!(
        "UPDATE runs SET status = 'queued', finished_at = NULL, status_message = NULL,
                         updated_at = now()
         WHERE id = $1 AND status IN ('cancelled', 'failed')",
        scope.run_id
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        let current = status(pool, scope).await?;
        return Err(state_error(
            current,
            "only cancelled or failed runs can be resumed",
        ));
    }
    get(pool, scope).await
}

/// Deletes a run and everything it produced. Runs with a live job (starting, running,
/// cancelling) must be cancelled first.
pub async fn delete(pool: &PgPool, scope: &RunScope) -> Result<(), DbError> {
    let done = sqlx::query!(
        "DELETE FROM runs WHERE id = $1 AND status NOT IN ('starting', 'running', 'cancelling')",
        scope.run_id
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        let current = status(pool, scope).await?;
        return Err(state_error(current, "cancel the run before deleting it"));
    }
    Ok(())
}

/// Renames the run and sets its tags and notes.
pub async fn set_details(
    pool: &PgPool,
    scope: &RunScope,
    details: &RunDetails,
) -> Result<Run, DbError> {
    sqlx::query!(
        "UPDATE runs SET name = $2, tags = $3, notes = $4, updated_at = now() WHERE id = $1",
        scope.run_id,
        details.name,
        &details.tags,
        details.notes
    )
    .execute(pool)
    .await?;
    get(pool, scope).await
}

/// Stores the hash of a new run token (the previous token stops working). Called by whoever
/// starts a worker: the scheduler at launch, or an editor who starts one by hand.
pub async fn set_token_hash(pool: &PgPool, scope: &RunScope, hash: &[u8]) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE runs SET run_token_hash = $2, updated_at = now() WHERE id = $1",
        scope.run_id,
        hash
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The same as [`set_token_hash`] for the scheduler, which acts for the system rather than for
/// a member: it launches whatever run it claimed from the queue.
pub async fn set_token_hash_for_launch(
    pool: &PgPool,
    run_id: i64,
    hash: &[u8],
) -> Result<(), DbError> {
    let done = sqlx::query!(
        "UPDATE runs SET run_token_hash = $2, updated_at = now() WHERE id = $1",
        run_id,
        hash
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(DbError::NotFound("run"));
    }
    Ok(())
}
