//! Side-by-side benchmark: the same 1M-point metric history fetched from an MLflow tracking
//! server and from ours, in one run, over loopback HTTP (a program, not a test).
//!
//! ```sh
//! scripts/bench-mlflow                       # installs MLflow on demand, then the line below
//! DATABASE_URL=postgres://spade:spade@127.0.0.1:5432/spade_bench_mlflow \
//!   cargo bench -p spade-server --bench mlflow -- --points 1000000
//! cargo bench -p spade-server --bench mlflow -- --points 20000 --reps 5   # quick
//! ```
//!
//! Why: issue 6 asks how our metric API compares with the tool teams already use. The program
//! serves `app(state)` on a loopback port (tokio's multi-threaded runtime, one worker per core),
//! starts `mlflow server` (sqlite backend store in a temporary directory, one uvicorn worker) on
//! another, seeds the same deterministic series of one metric into both through their public
//! ingestion APIs (MLflow `runs/log-batch`, 1,000 metrics per request, its limit; ours
//! `POST /api/v1/ingest/{run}`, 500 envelopes per request, the contract's limit), then fetches
//! it `--reps` times at client concurrency 1:
//! - full history: MLflow `metrics/get-history` vs our CSV export (`metrics.csv?names=`; the
//!   JSON series endpoint caps `points` at 20,000). Both answers are decoded and compared with
//!   the seeded values bit for bit; any difference aborts the program.
//! - chart-sized: ours `metrics/{name}?points=1000` (LTTB on the server) vs MLflow's
//!   `get-history-bulk-interval` (the UI's sampled endpoint, evenly spaced steps), and MLflow's
//!   full history again, which is what a client without that endpoint has to ship.
//!
//! Timings cover the request until the last body byte arrived, not the client's decoding. At
//! the end it stops MLflow (its process group), deletes its directory and our run.

use anyhow::{Context, bail, ensure};
use clap::Parser;
use serde_json::{Value, json};
use spade::report::{Envelope, Message};
use spade_server::auth::{AuthState, secret::JwtSecret};
use spade_server::{AppState, app};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod server;
use server::MlflowServer;

#[derive(Debug, Parser)]
struct Args {
    /// Points of the one metric series seeded into both servers.
    #[arg(long, default_value_t = 1_000_000)]
    points: u64,
    /// Repetitions of each fetch (medians and p90 over these).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Points of the chart-sized fetch.
    #[arg(long, default_value_t = 1_000)]
    chart_points: usize,
    /// The `mlflow` executable (default: `$SPADE_CACHE/venv-mlflow/bin/mlflow`, `SPADE_CACHE`
    /// defaulting to `~/.cache/spade-studio`).
    #[arg(long)]
    mlflow: Option<PathBuf>,
    /// `cargo bench` passes `--bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

const METRIC: &str = "loss";
/// MLflow's `log-batch` accepts at most 1,000 metrics per request (MLflow REST API docs).
const MLFLOW_BATCH: usize = 1_000;
/// Our ingestion accepts at most 500 envelopes per request (the reporting contract).
const OUR_BATCH: usize = 500;

/// The seeded value at `step`: deterministic, smooth plus a fast wiggle, not representable in
/// few digits (so the comparison checks that full precision survives both servers).
fn value_at(step: u64) -> f64 {
    let s = step as f64;
    (s / 5_000.0).sin() * (-s / 2_000_000.0).exp() + 0.05 * (s * 0.37).sin()
}

/// POST JSON, fail with the server's answer on a non-2xx status.
async fn post(
    http: &reqwest::Client,
    url: &str,
    bearer: Option<&str>,
    body: &Value,
) -> anyhow::Result<Value> {
    let mut req = http.post(url).json(body);
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    let resp = req.send().await.with_context(|| format!("POST {url}"))?;
    let status = resp.status();
    let bytes = resp.bytes().await?;
    if !status.is_success() {
        bail!("POST {url}: {status} {}", String::from_utf8_lossy(&bytes));
    }
    Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// GET a body; returns it and the time until its last byte arrived.
async fn fetch(
    http: &reqwest::Client,
    url: &str,
    bearer: Option<&str>,
) -> anyhow::Result<(Vec<u8>, Duration)> {
    let t = Instant::now();
    let mut req = http.get(url);
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    let resp = req.send().await.with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    let bytes = resp.bytes().await?;
    let took = t.elapsed();
    if !status.is_success() {
        let start = String::from_utf8_lossy(bytes.get(..500).unwrap_or(&bytes)).into_owned();
        bail!("GET {url}: {status} {start}");
    }
    Ok((bytes.to_vec(), took))
}

/// Seeds MLflow; returns its run id and the seeding time.
async fn seed_mlflow(
    http: &reqwest::Client,
    base: &str,
    points: u64,
) -> anyhow::Result<(String, Duration)> {
    let api = format!("{base}/api/2.0/mlflow");
    let tag = chrono::Utc::now().timestamp_millis();
    let exp = post(
        http,
        &format!("{api}/experiments/create"),
        None,
        &json!({ "name": format!("spade-bench-{tag}") }),
    )
    .await?;
    let exp_id = exp["experiment_id"]
        .as_str()
        .context("experiments/create: no experiment_id")?;
    let run = post(
        http,
        &format!("{api}/runs/create"),
        None,
        &json!({ "experiment_id": exp_id, "start_time": tag }),
    )
    .await?;
    let run_id = run["run"]["info"]["run_id"]
        .as_str()
        .context("runs/create: no run.info.run_id")?
        .to_owned();
    let t0 = Instant::now();
    let mut step = 0u64;
    while step < points {
        let end = (step + MLFLOW_BATCH as u64).min(points);
        let metrics: Vec<Value> = (step..end)
            .map(|s| json!({ "key": METRIC, "value": value_at(s), "timestamp": tag, "step": s }))
            .collect();
        post(
            http,
            &format!("{api}/runs/log-batch"),
            None,
            &json!({ "run_id": run_id, "metrics": metrics }),
        )
        .await?;
        step = end;
    }
    Ok((run_id, t0.elapsed()))
}

/// Registers a throw-away account, creates a run and seeds it through ingestion; returns the
/// user's bearer token, the run id and the seeding time.
async fn seed_ours(
    http: &reqwest::Client,
    base: &str,
    points: u64,
) -> anyhow::Result<(String, i64, Duration)> {
    let api = format!("{base}/api/v1");
    let tag = chrono::Utc::now().timestamp_millis();
    let email = format!("bench-mlflow-{tag}@bench.invalid");
    post(
        http,
        &format!("{api}/auth/register"),
        None,
        &json!({ "email": email, "display_name": "bench", "password": "bench-password" }),
    )
    .await?;
    let login = post(
        http,
        &format!("{api}/auth/login"),
        None,
        &json!({ "email": email, "password": "bench-password", "api_client": true }),
    )
    .await?;
    let user = login["access_token"]
        .as_str()
        .context("login: no access_token")?
        .to_owned();
    let b = Some(user.as_str());
    let team = post(
        http,
        &format!("{api}/teams"),
        b,
        &json!({ "name": format!("bench-mlflow-{tag}") }),
    )
    .await?["id"]
        .as_i64()
        .context("teams: no id")?;
    let project = post(
        http,
        &format!("{api}/teams/{team}/projects"),
        b,
        &json!({ "name": "bench" }),
    )
    .await?["id"]
        .as_i64()
        .context("projects: no id")?;
    let config = spade::config::RunConfig::tiny_cpu_demo().to_toml();
    let run = post(
        http,
        &format!("{api}/projects/{project}/runs"),
        b,
        &json!({ "name": "bench-mlflow", "config_toml": config }),
    )
    .await?["id"]
        .as_i64()
        .context("runs: no id")?;
    let worker = post(http, &format!("{api}/runs/{run}/token"), b, &Value::Null).await?["token"]
        .as_str()
        .context("runs/token: no token")?
        .to_owned();
    let t0 = Instant::now();
    let mut pending: Vec<Envelope> = Vec::with_capacity(OUR_BATCH);
    for s in 0..points {
        let values = BTreeMap::from([(METRIC.to_owned(), value_at(s))]);
        let message = Message::Metrics {
            step: s,
            elapsed_s: s as f64,
            values,
        };
        pending.push(Envelope::at(run.to_string(), s, 0, message));
        if pending.len() == OUR_BATCH || s + 1 == points {
            let body = json!({ "envelopes": std::mem::take(&mut pending) });
            post(http, &format!("{api}/ingest/{run}"), Some(&worker), &body).await?;
        }
    }
    Ok((user, run, t0.elapsed()))
}

/// MLflow's full history, following `next_page_token` if this version paginates.
async fn mlflow_history(
    http: &reqwest::Client,
    base: &str,
    run_id: &str,
) -> anyhow::Result<(Vec<(u64, f64)>, usize, Duration)> {
    let mut points = Vec::new();
    let (mut bytes, mut took) = (0usize, Duration::ZERO);
    let mut token: Option<String> = None;
    loop {
        let mut url = format!(
            "{base}/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key={METRIC}"
        );
        if let Some(t) = &token {
            url.push_str(&format!("&page_token={t}"));
        }
        let (body, t) = fetch(http, &url, None).await?;
        took += t;
        bytes += body.len();
        let v: Value = serde_json::from_slice(&body).context("get-history: not JSON")?;
        decode_mlflow(&v["metrics"], &mut points).context("get-history")?;
        match v["next_page_token"].as_str() {
            Some(t) if !t.is_empty() => token = Some(t.to_owned()),
            _ => break,
        }
    }
    Ok((points, bytes, took))
}

fn decode_mlflow(metrics: &Value, out: &mut Vec<(u64, f64)>) -> anyhow::Result<()> {
    let Some(arr) = metrics.as_array() else {
        // MLflow omits empty lists.
        return Ok(());
    };
    for m in arr {
        let step = m["step"]
            .as_u64()
            .or_else(|| m["step"].as_str().and_then(|s| s.parse().ok()))
            .context("metric without a step")?;
        let value = m["value"].as_f64().context("metric without a value")?;
        out.push((step, value));
    }
    Ok(())
}

/// `run_id,name,step,value,elapsed_s` rows of our CSV export.
fn decode_csv(body: &[u8]) -> anyhow::Result<Vec<(u64, f64)>> {
    let text = std::str::from_utf8(body).context("CSV export: not UTF-8")?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let cols: Vec<&str> = line.split(',').collect();
        let (Some(step), Some(value)) = (cols.get(2), cols.get(3)) else {
            bail!(
                "CSV export line {}: expected 5 columns, got {line:?}",
                i + 1
            );
        };
        out.push((
            step.parse()
                .with_context(|| format!("CSV line {}: step", i + 1))?,
            value
                .parse()
                .with_context(|| format!("CSV line {}: value", i + 1))?,
        ));
    }
    Ok(out)
}

/// Full history: exactly the seeded points, in step order, values bit for bit.
fn check_full(who: &str, mut got: Vec<(u64, f64)>, points: u64) -> anyhow::Result<()> {
    got.sort_by_key(|p| p.0);
    ensure!(
        got.len() as u64 == points,
        "{who}: {} points, expected {points}",
        got.len()
    );
    for (i, (step, value)) in got.iter().enumerate() {
        ensure!(*step == i as u64, "{who}: point {i} has step {step}");
        ensure!(
            value.to_bits() == value_at(*step).to_bits(),
            "{who}: step {step} is {value}, seeded {}",
            value_at(*step)
        );
    }
    Ok(())
}

/// A sampled series: at most `max` points, each one of the seeded points, first and last kept.
fn check_sample(who: &str, got: &[(u64, f64)], max: usize, points: u64) -> anyhow::Result<()> {
    ensure!(
        !got.is_empty() && got.len() <= max + 1,
        "{who}: {} points, expected 1 to {max}",
        got.len()
    );
    for (step, value) in got {
        ensure!(*step < points, "{who}: step {step} was never seeded");
        ensure!(
            value.to_bits() == value_at(*step).to_bits(),
            "{who}: step {step} is {value}, seeded {}",
            value_at(*step)
        );
    }
    ensure!(
        got.first().map(|p| p.0) == Some(0),
        "{who}: first step missing"
    );
    ensure!(
        got.last().map(|p| p.0) == Some(points - 1),
        "{who}: last step missing"
    );
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// One table row: p50, p90 (ms), bytes and points of the last repetition.
struct Row {
    p50: f64,
    p90: f64,
    bytes: usize,
    points: usize,
}

fn row(mut lat: Vec<Duration>, bytes: usize, points: usize) -> Row {
    lat.sort();
    Row {
        p50: percentile(&lat, 0.5).as_secs_f64() * 1e3,
        p90: percentile(&lat, 0.9).as_secs_f64() * 1e3,
        bytes,
        points,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(args.points >= 2, "--points must be at least 2");
    ensure!(args.reps >= 1, "--reps must be at least 1");
    let exe = args.mlflow.clone().unwrap_or_else(|| {
        let cache = std::env::var_os("SPADE_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                    .join(".cache/spade-studio")
            });
        cache.join("venv-mlflow/bin/mlflow")
    });
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;

    // Ours on a loopback port, the way main.rs serves it.
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
    let auth = AuthState::new(
        JwtSecret::random(),
        spade_db::users::Registration::Open,
        false,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let ours = format!("http://{}", listener.local_addr()?);
    let service =
        app(AppState::new(leptos, db, auth)).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });

    let mut mlflow = MlflowServer::start(&exe)?;
    mlflow.wait_ready(&http).await?;
    let version = Command::new(&exe)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{version}: {} (sqlite, 1 uvicorn worker); ours: {ours} (tokio, {threads} worker threads, \
         PostgreSQL); client concurrency 1; {} build",
        mlflow.base,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );

    let n = args.points;
    let (ml_run, ml_seed) = seed_mlflow(&http, &mlflow.base, n).await?;
    println!(
        "seeded MLflow: {n} points in {:.1} s ({:.0} points/s, {MLFLOW_BATCH} per log-batch)",
        ml_seed.as_secs_f64(),
        n as f64 / ml_seed.as_secs_f64()
    );
    let (bearer, run, our_seed) = seed_ours(&http, &ours, n).await?;
    println!(
        "seeded ours:   {n} points in {:.1} s ({:.0} points/s, {OUR_BATCH} envelopes per ingest)",
        our_seed.as_secs_f64(),
        n as f64 / our_seed.as_secs_f64()
    );

    let b = Some(bearer.as_str());
    let csv_url = format!("{ours}/api/v1/runs/{run}/metrics.csv?names={METRIC}");
    let chart_url = format!(
        "{ours}/api/v1/runs/{run}/metrics/{METRIC}?points={}",
        args.chart_points
    );
    let bulk_url = format!(
        "{}/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?run_ids={ml_run}&metric_key={METRIC}&max_results={}",
        mlflow.base, args.chart_points
    );
    // Interleaved repetitions, so that load from elsewhere hits both alike.
    let (mut ml_full, mut our_full, mut ml_bulk, mut our_chart) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut ml_full_b, mut our_full_b, mut ml_bulk_b, mut our_chart_b) = (0, 0, 0, 0);
    let (mut ml_bulk_n, mut our_chart_n) = (0, 0);
    for rep in 0..args.reps {
        let (pts, bytes, took) = mlflow_history(&http, &mlflow.base, &ml_run).await?;
        check_full("MLflow get-history", pts, n)?;
        ml_full.push(took);
        ml_full_b = bytes;

        let (body, took) = fetch(&http, &csv_url, b).await?;
        check_full("our CSV export", decode_csv(&body)?, n)?;
        our_full.push(took);
        our_full_b = body.len();

        let (body, took) = fetch(&http, &bulk_url, None).await?;
        let v: Value = serde_json::from_slice(&body).context("bulk-interval: not JSON")?;
        let mut pts = Vec::new();
        decode_mlflow(&v["metrics"], &mut pts).context("bulk-interval")?;
        check_sample("MLflow bulk-interval", &pts, args.chart_points, n)?;
        ml_bulk.push(took);
        (ml_bulk_b, ml_bulk_n) = (body.len(), pts.len());

        let (body, took) = fetch(&http, &chart_url, b).await?;
        let v: Value = serde_json::from_slice(&body).context("series: not JSON")?;
        let pts: Vec<(u64, f64)> = v["points"]
            .as_array()
            .context("series: no points")?
            .iter()
            .map(|p| Some((p["step"].as_u64()?, p["value"].as_f64()?)))
            .collect::<Option<_>>()
            .context("series: a point without step or value")?;
        check_sample("our LTTB series", &pts, args.chart_points, n)?;
        our_chart.push(took);
        (our_chart_b, our_chart_n) = (body.len(), pts.len());
        println!(
            "repetition {}/{} done, all answers verified",
            rep + 1,
            args.reps
        );
    }

    let nn = n as usize;
    let table = [
        (
            "full: MLflow get-history",
            row(ml_full.clone(), ml_full_b, nn),
            None,
        ),
        (
            "full: ours metrics.csv",
            row(our_full, our_full_b, nn),
            Some(0),
        ),
        (
            "chart: MLflow full history",
            row(ml_full, ml_full_b, nn),
            None,
        ),
        (
            "chart: MLflow bulk-interval",
            row(ml_bulk, ml_bulk_b, ml_bulk_n),
            None,
        ),
        (
            "chart: ours LTTB ?points=",
            row(our_chart, our_chart_b, our_chart_n),
            Some(2),
        ),
    ];
    println!(
        "\n{:<30} {:>8} {:>10} {:>10} {:>12} {:>16} {:>16}",
        "fetch", "points", "p50 ms", "p90 ms", "bytes", "p50 ours/mlflow", "bytes ours/ml"
    );
    for (i, (name, r, _)) in table.iter().enumerate() {
        println!(
            "{:<30} {:>8} {:>10.1} {:>10.1} {:>12} {:>16} {:>16}",
            name, r.points, r.p50, r.p90, r.bytes, "", ""
        );
        // Ratios on our rows, against each MLflow row above them in the same section.
        if let Some(first) = table[i].2 {
            for (ml_name, m, _) in &table[first..i] {
                println!(
                    "{:<30} {:>8} {:>10} {:>10} {:>12} {:>16.4} {:>16.4}",
                    format!("  vs {}", ml_name.split(": ").nth(1).unwrap_or(ml_name)),
                    "",
                    "",
                    "",
                    "",
                    r.p50 / m.p50,
                    r.bytes as f64 / m.bytes as f64
                );
            }
        }
    }

    drop(mlflow);
    post(
        &http,
        &format!("{ours}/api/v1/runs/{run}/cancel"),
        b,
        &Value::Null,
    )
    .await
    .ok();
    let status = http
        .delete(format!("{ours}/api/v1/runs/{run}"))
        .bearer_auth(&bearer)
        .send()
        .await?
        .status();
    println!("cleanup: MLflow stopped and its directory deleted; DELETE our run {run} -> {status}");
    Ok(())
}
