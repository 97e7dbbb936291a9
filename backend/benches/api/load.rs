//! `--load`: the dashboard's pages under a fixed request rate over loopback TCP (issue 19,
//! item 6). The server is `app(state)` behind `spade_server::serve::serve` (the production
//! connection loop) on a free port; the client is reqwest with keep-alive, in the same process
//! and on the same runtime (so both share the machine's cores, as a colocated proxy would).
//!
//! Open loop: a request is due every `1/rate` s whether or not earlier ones have answered, and
//! its latency counts from when it was due, not from when it was sent, so a stalled server shows
//! up as latency instead of silently lowering the rate (coordinated omission).

use anyhow::{Context, bail};
use std::time::{Duration, Instant};
use tokio::time::MissedTickBehavior;

/// One page under load and what it must stay under.
pub struct Target {
    pub name: &'static str,
    pub path: String,
    pub p99_limit_ms: f64,
}

pub struct Outcome {
    pub sent: usize,
    pub errors: usize,
    pub first_error: Option<String>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub achieved_rps: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0.0)
}

/// Sends `GET base+path` at `rate` per second for `secs` seconds.
pub async fn run(
    http: &reqwest::Client,
    base: &str,
    bearer: &str,
    path: &str,
    rate: f64,
    secs: f64,
) -> anyhow::Result<Outcome> {
    if !(rate > 0.0 && secs > 0.0) {
        bail!("--load-rate and --load-secs must be positive");
    }
    let period = Duration::from_secs_f64(1.0 / rate);
    let total = (rate * secs).round() as usize;
    let url = format!("{base}{path}");
    let mut tick = tokio::time::interval(period);
    // Burst: a tick the runtime was late for fires at once, keeping the schedule's count.
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for _ in 0..total {
        let due = tick.tick().await.into_std();
        let (http, url, bearer) = (http.clone(), url.clone(), bearer.to_owned());
        tasks.push(tokio::spawn(async move {
            let res = http.get(&url).bearer_auth(&bearer).send().await;
            let outcome = match res {
                Ok(r) if r.status().is_success() => match r.bytes().await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(format!("body: {e}")),
                },
                Ok(r) => Err(format!("status {}", r.status())),
                Err(e) => Err(format!("request: {e}")),
            };
            (due.elapsed().as_secs_f64() * 1e3, outcome)
        }));
    }
    let mut lat = Vec::with_capacity(total);
    let (mut errors, mut first_error) = (0, None);
    for t in tasks {
        let (ms, outcome) = t.await.context("a load request task panicked")?;
        lat.push(ms);
        if let Err(e) = outcome {
            errors += 1;
            first_error.get_or_insert(e);
        }
    }
    let wall = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    Ok(Outcome {
        sent: total,
        errors,
        first_error,
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
        max_ms: lat.last().copied().unwrap_or(0.0),
        achieved_rps: total as f64 / wall,
    })
}
