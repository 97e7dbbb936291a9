//! A run that asks for a GPU where there is none to use (issue 38, "no silent fall-back").
//! Before, `Device::cuda_if_available()` answered "CPU" and such a run trained there silently.
//!
//! - The server lends GPU 0 (`--gpus 0`, as on a GPU node) but runs the CPU-only `spade`: the
//!   real scheduler gives the job `CUDA_VISIBLE_DEVICES=0`, the real worker fails the run at its
//!   start, within seconds and before loading a model, and the run's page shows why: the
//!   binary, what it checked and the fix.
//! - A server that lends no GPU never starts such a run: it fails at scheduling, saying so.

use spade_db::RunStatus;
use spade_e2e::seed::{run_in, team_and_project};
use spade_e2e::{Browser, ServerOptions, TestServer, text_of, until, wait_for};
use std::time::{Duration, Instant};

async fn status(pool: &spade_db::Pool, id: i64) -> anyhow::Result<(RunStatus, String)> {
    let (s, m): (RunStatus, Option<String>) =
        sqlx::query_as("SELECT status, status_message FROM runs WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok((s, m.unwrap_or_default()))
}

/// Queues a CUDA run of the demo configuration and waits for it to fail: (message, time).
async fn cuda_run_fails(
    pool: &spade_db::Pool,
    gpus: Vec<u32>,
    user_email: &str,
    browse: bool,
) -> anyhow::Result<(String, Duration)> {
    let server = TestServer::start_with(
        pool.clone(),
        ServerOptions {
            workers: true,
            gpus,
            ..ServerOptions::default()
        },
    )
    .await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    spade_e2e::register(&c, &server, "Gina", user_email, "correct horse battery").await?;
    let user = spade_e2e::user_id(pool, user_email).await?;
    let (team, project) = team_and_project(pool, user, "lab-gpu", "demo").await?;
    let mut cfg = spade::config::RunConfig::from_toml_str(spade::config::DEMO_TOML)?;
    cfg.model.device = "cuda".into();
    let run = run_in(pool, &team, user, project, "wants-a-gpu", &cfg.to_json(), 0).await?;
    let t0 = Instant::now();
    until(Duration::from_secs(120), "the run never failed", || async {
        Ok(status(pool, run.run_id()).await?.0 == RunStatus::Failed)
    })
    .await?;
    let took = t0.elapsed();
    let message = status(pool, run.run_id()).await?.1;
    eprintln!("failed after {took:?}: {message}");
    let metrics: i64 = sqlx::query_scalar("SELECT count(*) FROM metrics WHERE run_id = $1")
        .bind(run.run_id())
        .fetch_one(pool)
        .await?;
    assert_eq!(metrics, 0, "nothing trained");
    c.goto(&format!("{}/runs/{}", server.url, run.run_id()))
        .await?;
    wait_for(&c, ".run-message").await?;
    let shown = text_of(&c, ".run-message").await?;
    assert_eq!(
        shown.trim(),
        message.trim(),
        "the page shows the run's message"
    );
    if browse {
        browser.screenshot("run-cuda-on-cpu-worker").await?;
    }
    browser.close().await?;
    server.stop().await;
    Ok((message, took))
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_cuda_run_on_a_cpu_worker_fails_at_its_start_and_its_page_says_why(
    pool: spade_db::Pool,
) -> anyhow::Result<()> {
    let (message, took) = cuda_run_fails(&pool, vec![0], "gina-gpu@example.org", true).await?;
    // The scheduler's poll and the worker's start are included; no model was loaded.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(message.contains("model.device = \"cuda\""), "{message}");
    assert!(message.contains("built without CUDA"), "{message}");
    assert!(message.contains("scripts/build-cuda"), "{message}");
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_cuda_run_on_a_server_lending_no_gpu_fails_at_scheduling(
    pool: spade_db::Pool,
) -> anyhow::Result<()> {
    let (message, took) = cuda_run_fails(&pool, vec![], "gus-gpu@example.org", false).await?;
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert_eq!(
        message,
        "could not start: needs 1 GPU but this node lends 0 (spade-server --gpus); lower the \
         run's GPUs (model.device, vllm.gpus) or run it where more are lent"
    );
    Ok(())
}
