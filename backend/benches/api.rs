//! Benchmark of the run page's API and metric queries on a large run (a program, not a test).
//!
//! ```sh
//! DATABASE_URL=postgres://spade:spade@127.0.0.1:5432/spade cargo bench -p spade-server --bench api
//! cargo bench -p spade-server --bench api -- --envs 5000 --points 50000 --requests 32   # quick
//! ```
//!
//! It migrates the database it is given, registers a throw-away user, creates a run and seeds it
//! through the real ingestion endpoint (default: 100,000 environments and 1,000,000 metric points,
//! 10 metrics x 100,000 steps), then sends each query `--requests` times at concurrency 1, 4 and
//! 16 through `app(state)` without a port (so it measures the handlers and PostgreSQL, not a
//! network stack) and prints p50 / p99 latency and throughput. At the end it deletes the run
//! (cascading to everything seeded). Loopback database only; bounded by the arguments.
//!
//! `--load` (issue 19, item 6) measures the dashboard's pages instead, over loopback TCP at a
//! fixed rate (see `api/load.rs`): the run page, the runs list (the team holds `--list-runs`
//! runs, 50 by default), the environment list and one environment, each at `--load-rate`
//! requests/s (200) for `--load-secs` (60), against targets of p99 < 50 ms for the run page and
//! < 20 ms for the others with no errors. Build it in release (plain `cargo bench`):
//!
//! ```sh
//! DATABASE_URL=postgres://spade:spade@127.0.0.1:5432/<scratch db> cargo bench -p spade-server --bench api -- --load
//! ```

#[path = "api/load.rs"]
mod load;

use anyhow::{Context, bail};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use clap::Parser;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use spade::EnvKind;
use spade::report::{EnvStatus, Envelope, EnvironmentRecord, Message};
use spade_server::auth::{AuthState, secret::JwtSecret};
use spade_server::{AppState, app};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tower::ServiceExt;

#[derive(Debug, Parser)]
struct Args {
    /// Environments to seed.
    #[arg(long, default_value_t = 100_000)]
    envs: u64,
    /// Metric points to seed (spread over 10 metric names).
    #[arg(long, default_value_t = 1_000_000)]
    points: u64,
    /// Requests per query and concurrency level.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Measure the pages at a fixed rate over TCP instead of the query table (see the module doc).
    #[arg(long)]
    load: bool,
    /// Requests per second for each page under `--load`.
    #[arg(long, default_value_t = 200.0)]
    load_rate: f64,
    /// Seconds each page is loaded for under `--load`.
    #[arg(long, default_value_t = 60.0)]
    load_secs: f64,
    /// Pages to load under `--load`, comma-separated: run, runs, envs, env (default all).
    #[arg(long, default_value = "run,runs,envs,env")]
    pages: String,
    /// Runs in the team (the seeded one included) for the runs list under `--load`.
    #[arg(long, default_value_t = 50)]
    list_runs: usize,
    /// Leave the seeded run in the database (to inspect its queries with EXPLAIN).
    #[arg(long)]
    keep: bool,
    /// `cargo bench` passes `--bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

const METRICS: [&str; 10] = [
    "loss",
    "reward/mean",
    "reward/std",
    "regret_mean",
    "kl",
    "entropy",
    "win_rate/hint",
    "acceptance_rate",
    "learnable_share",
    "vendi",
];
const SKILLS: [&str; 12] = [
    "arithmetic",
    "logic",
    "planning",
    "spatial",
    "memory",
    "search",
    "combinatorics",
    "probability",
    "strings",
    "graphs",
    "optimization",
    "tool_use",
];

struct Bench {
    router: axum::Router,
    bearer: String,
}

impl Bench {
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Vec<u8>)> {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.bearer));
        let req = match body {
            Some(v) => b
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(v.to_string()))?,
            None => {
                b = b.header(header::ACCEPT, "application/json");
                b.body(Body::empty())?
            }
        };
        let resp = self.router.clone().oneshot(req).await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes().to_vec();
        Ok((status, bytes))
    }

    async fn json(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let (status, bytes) = self.call(method, path, body).await?;
        if !status.is_success() {
            bail!(
                "{method} {path}: {status} {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

async fn flush(b: &Bench, run: i64, pending: &mut Vec<Envelope>) -> anyhow::Result<()> {
    let body = json!({ "envelopes": std::mem::take(pending) });
    b.json("POST", &format!("/api/v1/ingest/{run}"), Some(&body))
        .await?;
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| spade_server::config::DEFAULT_DATABASE_URL.into());
    let db = spade_db::connect(&url).await?;
    spade_db::migrate(&db)
        .await
        .context("migrating the bench database")?;
    let leptos = leptos::prelude::LeptosOptions::builder()
        .output_name(spade_server::OUTPUT_NAME)
        .site_root("site")
        .build();
    let state = AppState::new(
        leptos,
        db,
        AuthState::new(
            JwtSecret::random(),
            spade_db::users::Registration::Open,
            false,
        ),
    );
    let mut bench = Bench {
        router: app(state),
        bearer: String::new(),
    };

    // A throw-away account, team, project and run.
    let tag = chrono::Utc::now().timestamp_millis();
    let email = format!("bench-{tag}@bench.invalid");
    bench
        .json(
            "POST",
            "/api/v1/auth/register",
            Some(&json!({ "email": email, "display_name": "bench", "password": "bench-password" })),
        )
        .await?;
    let login = bench
        .json(
            "POST",
            "/api/v1/auth/login",
            Some(&json!({ "email": email, "password": "bench-password", "api_client": true })),
        )
        .await?;
    bench.bearer = login["access_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let team = bench
        .json(
            "POST",
            "/api/v1/teams",
            Some(&json!({ "name": format!("bench-{tag}") })),
        )
        .await?["id"]
        .as_i64()
        .unwrap_or(0);
    let project = bench
        .json(
            "POST",
            &format!("/api/v1/teams/{team}/projects"),
            Some(&json!({ "name": "bench" })),
        )
        .await?["id"]
        .as_i64()
        .unwrap_or(0);
    let config = spade::config::RunConfig::tiny_cpu_demo().to_toml();
    let run = bench
        .json(
            "POST",
            &format!("/api/v1/projects/{project}/runs"),
            Some(&json!({ "name": "bench", "config_toml": config })),
        )
        .await?["id"]
        .as_i64()
        .unwrap_or(0);
    let worker = bench
        .json("POST", &format!("/api/v1/runs/{run}/token"), None)
        .await?["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let user_bearer = std::mem::replace(&mut bench.bearer, worker);

    // Seed through ingestion, 500 envelopes per batch.
    let t0 = Instant::now();
    let steps = args.points.div_ceil(METRICS.len() as u64);
    let mut seq = 0u64;
    let mut pending: Vec<Envelope> = Vec::with_capacity(500);
    for i in 0..args.envs {
        let status = if i % 5 == 0 {
            EnvStatus::Rejected
        } else {
            EnvStatus::Accepted
        };
        let msg = Message::Environment {
            record: EnvironmentRecord {
                rejection_reason: (i % 5 == 0).then(|| "not_solvable".into()),
                hint: Some("try the smallest move first".into()),
                parent_env_id: (i > 0).then(|| format!("env-{}", i / 2)),
                regret: Some((i % 100) as f64 / 100.0),
                win_rate_hint: Some(0.6),
                win_rate_no_hint: Some(0.3),
                designer_reward: Some(0.4),
                reward_levels: Some(3),
                ..EnvironmentRecord::new(
                    format!("env-{i}"),
                    i * steps.max(1) / args.envs.max(1),
                    SKILLS[(i % 12) as usize],
                    EnvKind::Game,
                    status,
                    format!(
                        "class Env{i}:\n    def reset(self, seed):\n        return 'obs', {{}}\n"
                    ),
                )
            },
        };
        pending.push(Envelope::at(run.to_string(), seq, 0, msg));
        seq += 1;
        if pending.len() == 500 {
            flush(&bench, run, &mut pending).await?;
        }
    }
    for s in 0..steps {
        let values: BTreeMap<String, f64> = METRICS
            .iter()
            .enumerate()
            .map(|(k, n)| (n.to_string(), ((s as f64) / 1000.0 + k as f64).sin()))
            .collect();
        pending.push(Envelope::at(
            run.to_string(),
            seq,
            0,
            Message::Metrics {
                step: s,
                elapsed_s: s as f64,
                values,
            },
        ));
        seq += 1;
        if pending.len() == 500 {
            flush(&bench, run, &mut pending).await?;
        }
    }
    if !pending.is_empty() {
        flush(&bench, run, &mut pending).await?;
    }
    let seeded = t0.elapsed();
    println!(
        "seeded {} environments and {} metric points ({} envelopes) in {:.1} s ({:.0} envelopes/s)",
        args.envs,
        steps * METRICS.len() as u64,
        seq,
        seeded.as_secs_f64(),
        seq as f64 / seeded.as_secs_f64()
    );
    bench.bearer = user_bearer;

    if args.load {
        let extra = seed_list_runs(&mut bench, project, args.list_runs.saturating_sub(1)).await?;
        let result = load_pages(&bench, &args, run, team, args.envs / 2).await;
        for id in extra.into_iter().chain([run]) {
            bench
                .json("POST", &format!("/api/v1/runs/{id}/cancel"), None)
                .await
                .ok();
            bench
                .call("DELETE", &format!("/api/v1/runs/{id}"), None)
                .await
                .ok();
        }
        println!("cleanup: deleted the seeded runs");
        return result;
    }

    let mid = steps / 2;
    let queries = [
        ("run", format!("/api/v1/runs/{run}")),
        (
            "environments page",
            format!("/api/v1/runs/{run}/environments?limit=50"),
        ),
        (
            "environments filtered",
            format!(
                "/api/v1/runs/{run}/environments?skill=logic&regret_min=0.2&regret_max=0.4&step_min={mid}&limit=50"
            ),
        ),
        (
            "environment detail",
            format!("/api/v1/runs/{run}/environments/env-{}", args.envs / 2),
        ),
        ("metric names", format!("/api/v1/runs/{run}/metrics")),
        (
            "metric series (1000 pts)",
            format!("/api/v1/runs/{run}/metrics/loss?points=1000"),
        ),
        (
            "metric range (10% of steps)",
            format!(
                "/api/v1/runs/{run}/metrics/loss?points=500&step_min={mid}&step_max={}",
                mid + steps / 10
            ),
        ),
        // The run page's data alone (its server function, JSON): the page minus its rendering.
        ("ui: run data (JSON)", format!("/ui/run?run_id={run}")),
        // Server-rendered dashboard pages (HTML, the same session extractor as the API): the
        // run page draws every metric's chart, the environment list is the largest table.
        ("page: run (HTML)", format!("/runs/{run}")),
        (
            "page: environments (HTML)",
            format!("/runs/{run}/environments"),
        ),
        (
            "page: environment (HTML)",
            format!("/runs/{run}/environments/env-{}", args.envs / 2),
        ),
    ];
    // A page that rendered a log-in prompt or an error would time the wrong thing.
    for (name, path) in queries.iter().filter(|(n, _)| n.starts_with("page:")) {
        let (status, body) = bench.call("GET", path, None).await?;
        let html = String::from_utf8_lossy(&body);
        if status != StatusCode::OK
            || html.contains("Log in to continue")
            || html.contains("class=\"form-error\"")
        {
            bail!(
                "{name}: {path} did not render the run ({status}): {}",
                &html[..html.len().min(400)]
            );
        }
        println!("{name}: {} KiB of HTML", body.len() / 1024);
    }
    println!(
        "{:<30} {:>5} {:>10} {:>10} {:>10}",
        "query", "conc", "p50 ms", "p99 ms", "req/s"
    );
    for (name, path) in &queries {
        for conc in [1usize, 4, 16] {
            let per_task = args.requests.div_ceil(conc);
            let start = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..conc {
                let (router, bearer, path) =
                    (bench.router.clone(), bench.bearer.clone(), path.clone());
                tasks.push(tokio::spawn(async move {
                    let b = Bench { router, bearer };
                    let mut lat = Vec::with_capacity(per_task);
                    for _ in 0..per_task {
                        let t = Instant::now();
                        let (status, body) = b.call("GET", &path, None).await?;
                        if status != StatusCode::OK {
                            bail!("GET {path}: {status} {}", String::from_utf8_lossy(&body));
                        }
                        lat.push(t.elapsed());
                    }
                    Ok(lat)
                }));
            }
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await??);
            }
            let wall = start.elapsed();
            all.sort();
            println!(
                "{:<30} {:>5} {:>10.2} {:>10.2} {:>10.1}",
                name,
                conc,
                percentile(&all, 0.5).as_secs_f64() * 1e3,
                percentile(&all, 0.99).as_secs_f64() * 1e3,
                all.len() as f64 / wall.as_secs_f64()
            );
        }
    }
    if args.keep {
        println!("kept run {run}");
        return Ok(());
    }
    bench
        .json("POST", &format!("/api/v1/runs/{run}/cancel"), None)
        .await
        .ok();
    let (status, _) = bench
        .call("DELETE", &format!("/api/v1/runs/{run}"), None)
        .await?;
    println!("cleanup: DELETE run {run} -> {status}");
    Ok(())
}

/// `n` more runs in the project, each with the runs list's three metric columns logged, so the
/// list renders full rows. Returns their ids.
async fn seed_list_runs(bench: &mut Bench, project: i64, n: usize) -> anyhow::Result<Vec<i64>> {
    let config = spade::config::RunConfig::tiny_cpu_demo().to_toml();
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = bench
            .json(
                "POST",
                &format!("/api/v1/projects/{project}/runs"),
                Some(&json!({ "name": format!("list-{i}"), "config_toml": config })),
            )
            .await?["id"]
            .as_i64()
            .unwrap_or(0);
        let token = bench
            .json("POST", &format!("/api/v1/runs/{id}/token"), None)
            .await?["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let user = std::mem::replace(&mut bench.bearer, token);
        let mut pending: Vec<Envelope> = (0..20u64)
            .map(|s| {
                let values: BTreeMap<String, f64> =
                    ["learnable_share", "regret_mean", "acceptance_rate"]
                        .iter()
                        .map(|n| (n.to_string(), (s as f64 + i as f64) / 100.0))
                        .collect();
                Envelope::at(
                    id.to_string(),
                    s,
                    0,
                    Message::Metrics {
                        step: s,
                        elapsed_s: s as f64,
                        values,
                    },
                )
            })
            .collect();
        flush(bench, id, &mut pending).await?;
        bench.bearer = user;
        ids.push(id);
    }
    Ok(ids)
}

/// The four pages at the fixed rate, over a real socket; fails when a page errs or misses its
/// target (after printing every page's figures).
async fn load_pages(
    bench: &Bench,
    args: &Args,
    run: i64,
    team: i64,
    env: u64,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let router = bench.router.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(spade_server::serve::serve(
        listener,
        router,
        spade_server::serve::IDLE_TIMEOUT,
        async move {
            stop_rx.await.ok();
        },
    ));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(30))
        .build()?;
    let wanted: Vec<&str> = args.pages.split(',').map(str::trim).collect();
    let all = [
        load::Target {
            name: "run page",
            path: format!("/runs/{run}"),
            p99_limit_ms: 50.0,
        },
        load::Target {
            name: "runs list",
            path: format!("/runs?team={team}"),
            p99_limit_ms: 20.0,
        },
        load::Target {
            name: "environment list",
            path: format!("/runs/{run}/environments"),
            p99_limit_ms: 20.0,
        },
        load::Target {
            name: "one environment",
            path: format!("/runs/{run}/environments/env-{env}"),
            p99_limit_ms: 20.0,
        },
    ];
    let keys = ["run", "runs", "envs", "env"];
    if let Some(bad) = wanted.iter().find(|w| !keys.contains(w)) {
        bail!(
            "--pages: unknown page {bad:?} (expected some of {})",
            keys.join(",")
        );
    }
    let targets: Vec<load::Target> = all
        .into_iter()
        .zip(keys)
        .filter(|(_, k)| wanted.contains(k))
        .map(|(t, _)| t)
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "load: {} req/s for {} s a page, {} build, tokio {threads} worker threads (server and \
         client share them), {base}",
        args.load_rate,
        args.load_secs,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    // A short warm-up per page, so connection set-up and first-render caches are not timed,
    // and a check that each page renders the run rather than a log-in prompt.
    for t in &targets {
        let (status, body) = bench.call("GET", &t.path, None).await?;
        let html = String::from_utf8_lossy(&body);
        if status != StatusCode::OK || html.contains("Log in to continue") {
            bail!("{}: {} did not render ({status})", t.name, t.path);
        }
        load::run(&http, &base, &bench.bearer, &t.path, args.load_rate, 1.0).await?;
    }
    println!(
        "{:<18} {:>6} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "page", "sent", "errors", "p50 ms", "p99 ms", "max ms", "req/s", "target"
    );
    let mut missed = Vec::new();
    for t in &targets {
        let o = load::run(
            &http,
            &base,
            &bench.bearer,
            &t.path,
            args.load_rate,
            args.load_secs,
        )
        .await?;
        let ok = o.errors == 0 && o.p99_ms < t.p99_limit_ms;
        println!(
            "{:<18} {:>6} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>8.1} {:>8}",
            t.name,
            o.sent,
            o.errors,
            o.p50_ms,
            o.p99_ms,
            o.max_ms,
            o.achieved_rps,
            format!("{}<{}", if ok { "ok " } else { "MISS " }, t.p99_limit_ms)
        );
        if let Some(e) = &o.first_error {
            println!("  first error: {e}");
        }
        if !ok {
            missed.push(t.name);
        }
    }
    stop_tx.send(()).ok();
    server.await.ok();
    if !missed.is_empty() {
        bail!("missed the target: {}", missed.join(", "));
    }
    Ok(())
}
