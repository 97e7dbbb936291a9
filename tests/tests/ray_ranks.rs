//! A run on two ranks launched through the dashboard's Ray executor (issue 41, item 6): the
//! server submits one Ray job for the run; its `spade worker` sees `run.ranks = 2` and
//! `SPADE_LAUNCHER=ray` (set by the executor) and places the ranks with scripts/ray-ranks, one
//! per node of the cluster (a placement group over the two nodes scripts/ray-head starts); rank
//! 0 reports to the server as a one-process worker would, and the run succeeds with its step.
//!
//! Needs the Ray cluster scripts/test starts (SPADE_RAY_ADDRESS, SPADE_RAY_PYTHON); without it
//! the test says why and returns. Needs `target/debug/spade` and `spade-sandbox-runner`, and
//! the demo's warm start (cached by the worker's tests; from an empty cache it trains first).

use spade_db::{Pool, RunStatus};
use spade_e2e::{RayCluster, ServerOptions, TestServer, seed, until};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The demo's warm start is usually cached by now (as for the outage test); a cold one trains
/// first, 7-12 minutes on 2 busy cores.
const RUN_LIMIT: Duration = Duration::from_secs(2400);

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_run_on_two_ranks_through_the_ray_executor_is_placed_one_rank_per_node(
    pool: Pool,
) -> anyhow::Result<()> {
    let (Ok(address), Ok(python)) = (
        std::env::var("SPADE_RAY_ADDRESS"),
        std::env::var("SPADE_RAY_PYTHON"),
    ) else {
        eprintln!(
            "skipped: SPADE_RAY_ADDRESS and SPADE_RAY_PYTHON are not set (scripts/test starts a \
             two-node Ray cluster and sets them)"
        );
        return Ok(());
    };
    let started = Instant::now();
    let server = TestServer::start_with(
        pool.clone(),
        ServerOptions {
            workers: true,
            ray: Some(RayCluster { address, python }),
            ..ServerOptions::default()
        },
    )
    .await?;

    let owner = sqlx::query_scalar::<_, i64>(
        "INSERT INTO users (email, display_name, password_hash) VALUES ('ranks@example.org', \
         'Owner', 'x') RETURNING id",
    )
    .fetch_one(&pool)
    .await?;
    let (scope, project) = seed::team_and_project(&pool, owner, "ranks", "ray").await?;
    let mut cfg = spade::config::RunConfig::from_toml_str(spade::config::DEMO_TOML)?;
    cfg.run.steps = 1;
    cfg.run.ranks = 2;
    cfg.eval.every_steps = 0;
    cfg.eval.base_model = false;
    let seed = i64::try_from(cfg.run.seed)?;
    let run = seed::run_on(
        &pool,
        &scope,
        owner,
        project,
        "two-ranks",
        &cfg.to_json(),
        seed,
        "ray",
    )
    .await?
    .run_id();

    let status = || async {
        let (s, m): (RunStatus, Option<String>) =
            sqlx::query_as("SELECT status, status_message FROM runs WHERE id = $1")
                .bind(run)
                .fetch_one(&pool)
                .await?;
        anyhow::Ok((s, m.unwrap_or_default()))
    };
    until(RUN_LIMIT, "the run on two ranks to end", || async {
        Ok(matches!(
            status().await?.0,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled
        ))
    })
    .await?;
    let last = status().await?;
    let settings = server
        .scheduler_settings()
        .ok_or_else(|| anyhow::anyhow!("the server has no scheduler"))?;
    let logs = spade_server::scheduling::run_logs(&pool, &settings, run, 1 << 20)
        .await?
        .unwrap_or_default();
    eprintln!(
        "run {run}: {:?} ({}) after {:.0} s; the Ray job said:\n{logs}",
        last.0,
        last.1,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(last.0, RunStatus::Succeeded, "{}", last.1);
    assert!(
        logs.contains("starting 2 ranks on the Ray cluster"),
        "the worker did not place its ranks on Ray"
    );
    // One rank on each node, as ray-ranks reports the placement.
    let nodes: BTreeSet<&str> = logs
        .lines()
        .filter_map(|l| l.split(" on node ").nth(1)?.split_whitespace().next())
        .collect();
    assert_eq!(nodes.len(), 2, "the ranks were not on two nodes");
    // Rank 0 reported the step as a one-process worker does.
    let steps: Vec<i64> =
        sqlx::query_scalar("SELECT DISTINCT step FROM metrics WHERE run_id = $1 ORDER BY step")
            .bind(run)
            .fetch_all(&pool)
            .await?;
    assert_eq!(steps, [0], "the run's metrics");
    server.stop().await;
    Ok(())
}
