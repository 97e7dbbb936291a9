//! A run that asks for a GPU on a worker that has none (issue 38, "no silent fall-back"): the
//! real scheduler starts the real CPU-only `spade worker`, which fails the run at its start,
//! within seconds, and the run's page shows why: the binary, what it checked and the fix.
//! Before, `Device::cuda_if_available()` answered "CPU" and the run trained there silently.

use spade_db::RunStatus;
use spade_e2e::seed::{run_in, team_and_project};
use spade_e2e::{Browser, ServerOptions, TestServer, text_of, until, wait_for};
use std::time::{Duration, Instant};

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_cuda_run_on_a_cpu_worker_fails_at_its_start_and_its_page_says_why(
    pool: spade_db::Pool,
) -> anyhow::Result<()> {
    let server = TestServer::start_with(
        pool.clone(),
        ServerOptions {
            workers: true,
            ..ServerOptions::default()
        },
    )
    .await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    let email = "gina-gpu@example.org";
    spade_e2e::register(&c, &server, "Gina", email, "correct horse battery").await?;
    let user = spade_e2e::user_id(&pool, email).await?;
    let (team, project) = team_and_project(&pool, user, "lab-gpu", "demo").await?;
    let mut cfg = spade::config::RunConfig::from_toml_str(spade::config::DEMO_TOML)?;
    cfg.model.device = "cuda".into();
    let run = run_in(
        &pool,
        &team,
        user,
        project,
        "wants-a-gpu",
        &cfg.to_json(),
        0,
    )
    .await?;
    let t0 = Instant::now();
    let status = |pool: spade_db::Pool, id: i64| async move {
        let row: (RunStatus, Option<String>) =
            sqlx::query_as("SELECT status, status_message FROM runs WHERE id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await?;
        anyhow::Ok(row)
    };
    until(Duration::from_secs(120), "the run never failed", || async {
        Ok(status(pool.clone(), run.run_id()).await?.0 == RunStatus::Failed)
    })
    .await?;
    let took = t0.elapsed();
    let message = status(pool.clone(), run.run_id())
        .await?
        .1
        .unwrap_or_default();
    eprintln!("failed after {took:?}: {message}");
    // The scheduler's poll and the worker's start are included; no model was loaded.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(message.contains("model.device = \"cuda\""), "{message}");
    assert!(message.contains("built without CUDA"), "{message}");
    assert!(message.contains("scripts/build-cuda"), "{message}");
    let metrics: i64 = sqlx::query_scalar("SELECT count(*) FROM metrics WHERE run_id = $1")
        .bind(run.run_id())
        .fetch_one(&pool)
        .await?;
    assert_eq!(metrics, 0, "nothing trained");

    c.goto(&format!("{}/runs/{}", server.url, run.run_id()))
        .await?;
    wait_for(&c, ".run-message").await?;
    let shown = text_of(&c, ".run-message").await?;
    assert!(shown.contains("built without CUDA"), "{shown}");
    browser.screenshot("run-cuda-on-cpu-worker").await?;
    browser.close().await?;
    server.stop().await;
    Ok(())
}
