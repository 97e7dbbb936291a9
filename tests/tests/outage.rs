//! The end-of-run outage with real workers (issue 36, item 5): the server goes away while a
//! worker trains and stays away through the worker's final flush.
//!
//! - Down for 90 s: the worker keeps every report in its spool, waits at its end with growing
//!   pauses, and the restarted server (same address, same jobs directory: it re-attaches) gets
//!   everything; the run succeeds with every environment and every step's metrics.
//! - Down past the worker's patience (`SPADE_FINAL_FLUSH_SECS=5`): the worker ends as failed with
//!   its reports in the spool; the restarted server takes the spool when it sees the job ended,
//!   so the run still gets everything, and succeeds since its last report says it finished.
//!
//! Before the fix a run whose server was down longer than a 60 s flush was marked succeeded
//! with a third of its environments and metrics, the rest left in the spool forever.

use spade_db::{Pool, RunStatus};
use spade_e2e::{ServerOptions, TestServer, seed, until};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The demo's warm start (game families, the one `scripts/serve`, the launch test and the CLI's
/// train tests use) is usually cached by then; from an empty cache it trains first (7-12
/// minutes on 2 busy cores). The seed-library preset (`tiny_cpu_demo`) this test used before
/// trained 3,017 s on a fresh AMD EPYC and missed this bound.
const FIRST_STEP: Duration = Duration::from_secs(2400);
const STEPS: u64 = 3;

fn jobs_dir(port: u16) -> PathBuf {
    // As `worker_settings` of the harness names it.
    std::env::temp_dir().join(format!("spade-e2e-jobs-{port}"))
}

async fn seed_run(db: &Pool, name: &str) -> anyhow::Result<i64> {
    let owner = sqlx::query_scalar::<_, i64>(
        "INSERT INTO users (email, display_name, password_hash) VALUES ($1, 'Owner', 'x')
         RETURNING id",
    )
    .bind(format!("{name}@example.org"))
    .fetch_one(db)
    .await?;
    let (scope, project) = seed::team_and_project(db, owner, name, "outages").await?;
    let mut cfg = spade::config::RunConfig::from_toml_str(spade::config::DEMO_TOML)?;
    cfg.run.steps = STEPS;
    // The demo's seed: the warm start it keys is the one the other tests cache.
    let seed = cfg.run.seed;
    cfg.eval.every_steps = 0;
    cfg.eval.base_model = false;
    let run = seed::run_in(
        db,
        &scope,
        owner,
        project,
        name,
        &cfg.to_json(),
        i64::try_from(seed)?,
    )
    .await?;
    Ok(run.run_id())
}

async fn status(db: &Pool, run: i64) -> anyhow::Result<(RunStatus, String)> {
    let (s, m): (RunStatus, Option<String>) =
        sqlx::query_as("SELECT status, status_message FROM runs WHERE id = $1")
            .bind(run)
            .fetch_one(db)
            .await?;
    Ok((s, m.unwrap_or_default()))
}

async fn env_ids(db: &Pool, run: i64) -> anyhow::Result<BTreeSet<String>> {
    Ok(
        sqlx::query_scalar::<_, String>("SELECT env_id FROM environments WHERE run_id = $1")
            .bind(run)
            .fetch_all(db)
            .await?
            .into_iter()
            .collect(),
    )
}

async fn metric_steps(db: &Pool, run: i64) -> anyhow::Result<BTreeSet<i64>> {
    Ok(
        sqlx::query_scalar::<_, i64>("SELECT DISTINCT step FROM metrics WHERE run_id = $1")
            .bind(run)
            .fetch_all(db)
            .await?
            .into_iter()
            .collect(),
    )
}

/// The env_ids in a spool's environment reports.
fn spooled_env_ids(spool: &str) -> BTreeSet<String> {
    spool
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["message"]["kind"] == "environment")
        .filter_map(|e| e["message"]["record"]["env_id"].as_str().map(str::to_owned))
        .collect()
}

/// The report spool of `run`'s worker under the jobs directory of the server on `port`.
fn spool_file(port: u16, run: i64) -> PathBuf {
    jobs_dir(port)
        .join(format!("spade-run-{run}-state"))
        .join("spool.jsonl")
}

/// Starts the server again on `port` (same node and jobs directory: it re-attaches) and waits
/// up to `limit_s` for `run` to end; returns the server and the run's status and message.
async fn restart_until_ended(
    pool: &Pool,
    port: u16,
    run: i64,
    limit_s: u64,
) -> anyhow::Result<(TestServer, RunStatus, String)> {
    let server = TestServer::start_with(
        pool.clone(),
        ServerOptions {
            workers: true,
            port: Some(port),
            ..ServerOptions::default()
        },
    )
    .await?;
    until(
        Duration::from_secs(limit_s),
        "the run never ended",
        || async { Ok(status(pool, run).await?.0.is_terminal()) },
    )
    .await?;
    let (st, message) = status(pool, run).await?;
    Ok((server, st, message))
}

/// Starts a run on a server with workers, stops the server once step 0 is stored, and returns
/// the stopped server's port, the run and the environments stored before the outage.
async fn run_into_an_outage(
    db: &Pool,
    name: &str,
    worker_env: Vec<String>,
) -> anyhow::Result<(u16, i64, BTreeSet<String>)> {
    let server = TestServer::start_with(
        db.clone(),
        ServerOptions {
            workers: true,
            worker_env,
            ..ServerOptions::default()
        },
    )
    .await?;
    let run = seed_run(db, name).await?;
    until(FIRST_STEP, "step 0's metrics never arrived", || async {
        Ok(!metric_steps(db, run).await?.is_empty())
    })
    .await?;
    let before = env_ids(db, run).await?;
    let port = server.port();
    server.stop().await;
    Ok((port, run, before))
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_outage_at_the_runs_end_loses_nothing_and_a_restarted_server_takes_the_spool(
    pool: Pool,
) -> anyhow::Result<()> {
    let all_steps: BTreeSet<i64> = (0..i64::try_from(STEPS)?).collect();

    // 1. Down for 90 s across the final flush; the worker waits and delivers.
    let (port, run, before) = run_into_an_outage(&pool, "down-90s", vec![]).await?;
    let down = Instant::now();
    let spool_path = spool_file(port, run);
    until(
        Duration::from_secs(600),
        "the worker never reached its end during the outage",
        || async {
            Ok(std::fs::read_to_string(&spool_path)
                .unwrap_or_default()
                .contains(r#""kind":"finished""#))
        },
    )
    .await?;
    let reached_end = down.elapsed();
    tokio::time::sleep(Duration::from_secs(90).saturating_sub(down.elapsed())).await;
    let spooled = std::fs::read_to_string(&spool_path)?;
    let expected: BTreeSet<String> = before.union(&spooled_env_ids(&spooled)).cloned().collect();
    assert!(
        expected.len() > before.len(),
        "the outage held environment reports back"
    );
    assert_eq!(
        status(&pool, run).await?.0,
        RunStatus::Running,
        "nobody may call the run finished while the server is down"
    );
    let (server, st, message) = restart_until_ended(&pool, port, run, 300).await?;
    eprintln!(
        "down 90 s ({:.0} s to the worker's end): {st:?} {message:?}, {} environments ({} before the outage)",
        reached_end.as_secs_f64(),
        expected.len(),
        before.len()
    );
    assert_eq!(st, RunStatus::Succeeded, "{message}");
    assert_eq!(env_ids(&pool, run).await?, expected);
    assert_eq!(metric_steps(&pool, run).await?, all_steps);
    server.stop().await;

    // 2. Down past the worker's patience: it gives up; the restarted server takes the spool.
    let (port, run, before) = run_into_an_outage(
        &pool,
        "down-past-patience",
        vec!["SPADE_FINAL_FLUSH_SECS=5".into()],
    )
    .await?;
    let exit_file = jobs_dir(port)
        .join(format!("spade-run-{run}-a1"))
        .join("exit_status");
    until(
        Duration::from_secs(600),
        "the worker never gave up",
        || async { Ok(exit_file.exists()) },
    )
    .await?;
    let code = std::fs::read_to_string(&exit_file)?;
    assert_ne!(
        code.trim(),
        "0",
        "a worker with unsent reports exits as failed"
    );
    let spool_path = spool_file(port, run);
    let spooled = std::fs::read_to_string(&spool_path)?;
    assert!(spooled.contains(r#""kind":"finished""#), "{spooled}");
    let expected: BTreeSet<String> = before.union(&spooled_env_ids(&spooled)).cloned().collect();
    let (server, st, message) = restart_until_ended(&pool, port, run, 120).await?;
    let job_message: String =
        sqlx::query_scalar("SELECT message FROM jobs WHERE run_id = $1 ORDER BY id DESC LIMIT 1")
            .bind(run)
            .fetch_one(&pool)
            .await?;
    eprintln!("down past patience: {st:?} {message:?}; job: {job_message}");
    assert_eq!(st, RunStatus::Succeeded, "{message} / {job_message}");
    assert!(job_message.contains("the server took"), "{job_message}");
    assert_eq!(env_ids(&pool, run).await?, expected);
    assert_eq!(metric_steps(&pool, run).await?, all_steps);
    assert!(!spool_path.exists(), "what was taken left the spool");
    server.stop().await;
    Ok(())
}
