//! All SQL of SPADE Studio lives here: the migrator and typed queries over PostgreSQL.
//! No other crate names a table; the backend calls these functions.
//!
//! Every statement is checked against the schema at compile time (`query!` / `query_as!`); the
//! checked descriptions live in `/.sqlx` at the workspace root, so builds need no database
//! (`SQLX_OFFLINE=true` in `.cargo/config.toml`). After changing a query or a migration, run
//! `cargo sqlx prepare --workspace -- -p spade-db` with `DATABASE_URL` pointing at a migrated database.
//!
//! Access control is part of the types: functions that read or change one run's data take a
//! [`scope::RunScope`], and team-level functions a [`scope::TeamScope`]. Scopes are only built
//! by queries that check a membership, a share link or a run token, so no caller can reach a run
//! it was not given.

pub mod api_tokens;
pub mod artifacts;
pub mod audit;
pub mod chart_views;
pub mod environments;
pub mod evaluations;
pub mod ingest;
pub mod jobs;
pub mod logs;
pub mod metrics;
pub mod reviews;
pub mod rollups;
pub mod runs;
pub mod scope;
pub mod shares;
pub mod teams;
pub mod types;
pub mod users;

pub use scope::{Limit, RunScope, TeamScope};
pub use types::{Role, RunStatus};

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgPool, PgPoolOptions};
use std::time::Duration;

pub use sqlx::PgPool as Pool;

/// Every migration under `migrations/`, embedded at compile time.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// Errors from the database layer.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The server could not be reached or refused the connection.
    #[error("cannot connect to PostgreSQL at {url}: {source}")]
    Connect {
        /// The URL with any password removed.
        url: String,
        source: sqlx::Error,
    },
    /// A migration failed to apply (or the applied history differs from the embedded one).
    #[error("applying migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A row the caller named does not exist, or is not visible to it (the two are not
    /// distinguished, so ids of other teams' objects do not leak).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// A uniqueness rule was violated (e.g. an email or team name already taken).
    #[error("{0} already exists")]
    Conflict(&'static str),
    /// The object is in a state that does not allow the operation (e.g. deleting a running run).
    #[error("{what} is {state}: {hint}")]
    State {
        what: &'static str,
        state: String,
        hint: &'static str,
    },
    /// The scope may read but not change (a viewer, a share link, a worker).
    #[error("read-only access")]
    ReadOnly,
    /// Any other query error.
    #[error(transparent)]
    Query(#[from] sqlx::Error),
}

impl DbError {
    /// The pool had no free connection within its acquire timeout (overload, not a fault).
    pub fn is_pool_timeout(&self) -> bool {
        matches!(self, DbError::Query(sqlx::Error::PoolTimedOut))
    }

    /// The database cannot be reached or is going away (connection refused or lost, server
    /// shutting down or not yet accepting, too many connections): a fault of the moment that a
    /// client should retry, not a fault of its request. A pool timeout is [`Self::is_pool_timeout`].
    pub fn is_unavailable(&self) -> bool {
        let DbError::Query(e) = self else {
            return matches!(self, DbError::Connect { .. });
        };
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            // SQLSTATE class 08: connection exception; 57P01-57P03: admin or crash shutdown,
            // cannot connect now; 53300: too many connections.
            sqlx::Error::Database(d) => d.code().is_some_and(|c| {
                c.starts_with("08") || matches!(c.as_ref(), "57P01" | "57P02" | "57P03" | "53300")
            }),
            _ => false,
        }
    }

    /// Maps a unique-violation (SQLSTATE 23505) to [`DbError::Conflict`], anything else unchanged.
    pub(crate) fn unique(e: sqlx::Error, what: &'static str) -> Self {
        match &e {
            sqlx::Error::Database(d) if d.code().as_deref() == Some("23505") => {
                DbError::Conflict(what)
            }
            _ => DbError::Query(e),
        }
    }
}

/// Connects a pool; fails fast (5 s) so that a missing server is reported, not waited on.
pub async fn connect(url: &str) -> Result<PgPool, DbError> {
    PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(5))
        // No ping before every hand-out: it doubled the round trips of each query (13% of a
        // run page's CPU under load). A connection that died since (a database restart) fails
        // its next query once and is dropped; idle ones are closed after 10 minutes anyway.
        .test_before_acquire(false)
        .connect(url)
        .await
        .map_err(|source| DbError::Connect {
            url: redact_password(url),
            source,
        })
}

/// Applies every pending migration.
pub async fn migrate(pool: &PgPool) -> Result<(), DbError> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// What the health endpoint reports about the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbStatus {
    pub server_version: String,
    /// Version of the newest applied migration, if any.
    pub schema_version: Option<i64>,
}

/// Round-trips to the server and reads the applied schema version.
pub async fn status(pool: &PgPool) -> Result<DbStatus, DbError> {
    let server_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(pool)
        .await?;
    let schema_version: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(pool)
            .await?;
    Ok(DbStatus {
        server_version,
        schema_version,
    })
}

/// Migrations this build knows that the database has not applied successfully (empty = the
/// schema is the one this build expects). Readiness, not liveness: a server started with
/// `--migrate false` against an old database answers requests it cannot serve.
pub async fn pending_migrations(pool: &PgPool) -> Result<Vec<i64>, DbError> {
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(pool)
            .await?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| m.version)
        .filter(|v| !applied.contains(v))
        .collect())
}

/// `postgres://user:secret@host/db` -> `postgres://user:***@host/db`, for error messages.
pub fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// "a", "a or b", "a, b or c": the choices a message names.
pub(crate) fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_error_messages() {
        assert_eq!(
            redact_password("postgres://spade:hunter2@127.0.0.1:5432/spade"),
            "postgres://spade:***@127.0.0.1:5432/spade"
        );
        assert_eq!(redact_password("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(redact_password("not a url"), "not a url");
    }

    #[sqlx::test(migrator = "crate::MIGRATOR")]
    async fn migrations_apply_and_schema_accepts_a_run(pool: PgPool) -> Result<(), DbError> {
        let st = status(&pool).await?;
        let newest = MIGRATOR.iter().map(|m| m.version).max();
        assert_eq!(st.schema_version, newest);
        assert!(st.server_version.starts_with(char::is_numeric));

        let team: i64 = sqlx::query_scalar("INSERT INTO teams (name) VALUES ('t') RETURNING id")
            .fetch_one(&pool)
            .await?;
        let project: i64 = sqlx::query_scalar(
            "INSERT INTO projects (team_id, name) VALUES ($1, 'p') RETURNING id",
        )
        .bind(team)
        .fetch_one(&pool)
        .await?;
        let status: String = sqlx::query_scalar(
            "INSERT INTO runs (project_id, name, config, seed, code_version)
             VALUES ($1, 'r', '{}', 7, 'test') RETURNING status::text",
        )
        .bind(project)
        .fetch_one(&pool)
        .await?;
        assert_eq!(status, "queued");

        // The schema refuses what the application must never store.
        let bad = sqlx::query("INSERT INTO teams (name) VALUES ('')")
            .execute(&pool)
            .await;
        assert!(bad.is_err(), "empty team name must violate the CHECK");
        Ok(())
    }

    #[test]
    fn choices_read_as_a_list() {
        assert_eq!(super::one_of(&[]), "");
        assert_eq!(super::one_of(&["a"]), "a");
        assert_eq!(super::one_of(&["a", "b", "c"]), "a, b or c");
    }
}
