//! Fixtures for tests of crates that use the queue (enabled by the `testing` feature), so that
//! they create runs without naming a table themselves.

use sqlx::PgPool;

/// Inserts a team, a project and `n` runs (status `queued`); returns the run ids.
pub async fn seed_runs(pool: &PgPool, n: usize) -> Result<Vec<i64>, sqlx::Error> {
    let team: i64 = sqlx::query_scalar(
        "INSERT INTO teams (name) VALUES ('team-' || gen_random_uuid()) RETURNING id",
    )
    .fetch_one(pool)
    .await?;
    let project: i64 =
        sqlx::query_scalar("INSERT INTO projects (team_id, name) VALUES ($1, 'p') RETURNING id")
            .bind(team)
            .fetch_one(pool)
            .await?;
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO runs (project_id, name, config, seed, code_version)
             VALUES ($1, $2, '{}', 7, 'test') RETURNING id",
        )
        .bind(project)
        .bind(format!("r{i}"))
        .fetch_one(pool)
        .await?;
        ids.push(id);
    }
    Ok(ids)
}

/// A run's status as text.
pub async fn run_status(pool: &PgPool, run_id: i64) -> Result<String, sqlx::Error> {
    sqlx::query_scalar("SELECT status::text FROM runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(pool)
        .await
}

/// Sets a run's status as the runs API would (cancel, resume), without a member's scope.
pub async fn set_run_status(pool: &PgPool, run_id: i64, status: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE runs SET status = $2::text::run_status WHERE id = $1")
        .bind(run_id)
        .bind(status)
        .execute(pool)
        .await
        .map(drop)
}

/// Replaces a run's stored configuration (JSON, as `runs.config` holds it).
pub async fn set_config(
    pool: &PgPool,
    run_id: i64,
    config: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE runs SET config = $2 WHERE id = $1")
        .bind(run_id)
        .bind(config)
        .execute(pool)
        .await?;
    Ok(())
}
