//! The scheduler as the server starts it: configuration errors are precise, and a spawned
//! local scheduler runs a queued job to its end against a real PostgreSQL.

use super::*;
use crate::config::Config;
use clap::Parser;
use spade_db::jobs::{self, JobExecutor, JobKind, JobState, testing};
use sqlx::PgPool;
use std::time::Instant;

fn settings(args: &[&str]) -> SchedulerSettings {
    let mut argv = vec!["spade-server"];
    argv.extend_from_slice(args);
    Config::parse_from(argv).scheduler
}

#[test]
fn worker_commands_are_checked() {
    let s = settings(&[]);
    assert_eq!(
        worker_command(&s).expect("default"),
        ["spade", "worker", "--run", "{run}", "--server", "{server}"]
    );
    let err = worker_command(&settings(&["--worker-command", "  "])).expect_err("empty");
    assert!(
        err.to_string().contains("--worker-command is empty"),
        "{err}"
    );
    let err = worker_command(&settings(&["--worker-command", "spade worker --token x"]))
        .expect_err("token");
    assert!(err.to_string().contains("SPADE_WORKER_TOKEN"), "{err}");
    assert_eq!(
        node_name(&settings(&["--scheduler-node", "gpu-box"])),
        "gpu-box"
    );
    assert!(!node_name(&s).is_empty());
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn bad_settings_are_refused_and_off_spawns_nothing(pool: PgPool) {
    let (_tx, rx) = watch::channel(false);
    let addr: SocketAddr = "127.0.0.1:3000".parse().expect("addr");
    let tokens = IssueFn(|_run| async { Ok::<_, String>("t".to_owned()) });
    let off = spawn(
        pool.clone(),
        &settings(&["--executor", "off"]),
        addr,
        tokens.clone(),
        rx.clone(),
    );
    assert!(matches!(off, Ok(None)));
    let err = spawn(
        pool.clone(),
        &settings(&["--cpu-slots", "0"]),
        addr,
        tokens.clone(),
        rx.clone(),
    )
    .expect_err("no slots");
    assert_eq!(err.to_string(), "--cpu-slots must be at least 1, got 0");
    let err = spawn(
        pool.clone(),
        &settings(&["--executor", "ray", "--ray-address", "127.0.0.1:8265"]),
        addr,
        tokens.clone(),
        rx.clone(),
    )
    .expect_err("not a URL");
    assert!(
        err.to_string().contains("--ray-address must be an http"),
        "{err}"
    );
    let err = spawn(
        pool,
        &settings(&["--public-url", "ftp://x"]),
        addr,
        tokens,
        rx,
    )
    .expect_err("not a URL");
    assert!(err.to_string().contains("--public-url"), "{err}");
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_spawned_scheduler_runs_a_queued_job(
    pool: PgPool,
) -> Result<(), Box<dyn std::error::Error>> {
    let jobs_dir = std::env::temp_dir().join(format!("backend-scheduling-{}", std::process::id()));
    let s = settings(&[
        "--worker-command",
        "echo worker for run {run} at {server}",
        "--jobs-dir",
        jobs_dir.to_str().ok_or("path")?,
        "--scheduler-poll-ms",
        "100",
    ]);
    let run = testing::seed_runs(&pool, 1).await?[0];
    let job = jobs::enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    let (tx, rx) = watch::channel(false);
    let addr: SocketAddr = "127.0.0.1:3999".parse()?;
    let tokens = IssueFn(|run: i64| async move { Ok::<_, String>(format!("tok-{run}")) });
    let task = spawn(pool.clone(), &s, addr, tokens, rx)?.ok_or("a local scheduler")?;
    let t0 = Instant::now();
    let done = loop {
        let j = jobs::get(&pool, job.id).await?.ok_or("job")?;
        if j.state.is_final() {
            break j;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "job still {:?}",
            j.state
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done.state, JobState::Succeeded, "{:?}", done.message);
    let log = std::fs::read_to_string(done.log_path.ok_or("log path")?)?;
    assert_eq!(
        log,
        format!("worker for run {run} at http://127.0.0.1:3999\n")
    );
    assert_eq!(run_logs(&pool, &s, run, 10_000).await?, Some(log));
    assert_eq!(run_logs(&pool, &s, run + 1, 10_000).await?, None);
    tx.send(true)?;
    tokio::time::timeout(Duration::from_secs(5), task).await??;
    Ok(())
}
