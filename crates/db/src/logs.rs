//! Log lines a run's worker reported, for the run page's log tail (written by `ingest`).

use crate::{DbError, RunScope};
use sqlx::PgPool;

/// One stored log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: String,
    pub line: String,
}

/// The last `limit` lines of the scoped run, oldest first.
pub async fn tail(pool: &PgPool, scope: &RunScope, limit: i64) -> Result<Vec<LogLine>, DbError> {
    let rows = sqlx::query_as!(
        LogLine,
        r#"SELECT t.level AS "level!", t.line AS "line!" FROM (
               SELECT id, level, line FROM run_logs WHERE run_id = $1 ORDER BY id DESC LIMIT $2
           ) t ORDER BY t.id"#,
        scope.run_id(),
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
