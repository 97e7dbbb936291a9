//! `spade worker` against a loopback stand-in for the service: it serves the run's
//! configuration at `GET /api/v1/ingest/{run}/config`, stores what `POST /api/v1/ingest/{run}`
//! delivers (each key once) and checks the bearer token. The worker must fetch its config, run
//! to the end and report the run's start, every step's metrics and its finish.
//!
//! Uses the warm-started tiny model cached in `$SPADE_CACHE/warmstart` (trained on first use).

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use spade::config::RunConfig;
use spade::report::{Envelope, IngestReply, IngestRequest, Message};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Service {
    config: String,
    stored: BTreeMap<String, Envelope>,
}

type Shared = Arc<Mutex<Service>>;

fn authorised(h: &HeaderMap) -> bool {
    h.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bearer secret")
}

async fn config(
    State(s): State<Shared>,
    UrlPath(run): UrlPath<String>,
    h: HeaderMap,
) -> Result<String, StatusCode> {
    if !authorised(&h) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    if run != "run-7" {
        return Err(StatusCode::NOT_FOUND);
    }
    Ok(s.lock()
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?
        .config
        .clone())
}

async fn ingest(
    State(s): State<Shared>,
    h: HeaderMap,
    Json(body): Json<IngestRequest>,
) -> Result<Json<IngestReply>, StatusCode> {
    if !authorised(&h) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    let mut s = s.lock().map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    let mut acknowledged = Vec::new();
    for e in body.envelopes {
        if !e.key_is_consistent() {
            return Err(StatusCode::UNPROCESSABLE_ENTITY);
        }
        acknowledged.push(e.key.clone());
        s.stored.entry(e.key.clone()).or_insert(e);
    }
    Ok(Json(IngestReply {
        acknowledged,
        cancel_requested: false,
        retire: vec![],
    }))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_worker_fetches_its_config_and_reports_every_step() -> Result<(), Box<dyn std::error::Error>>
{
    let text = std::fs::read_to_string(repo().join("configs/tiny-demo.toml"))?;
    let mut cfg = RunConfig::from_toml_str(&text)?;
    cfg.run.steps = 2;
    cfg.curriculum.active_game_skills = 1;
    cfg.curriculum.envs_per_skill = 1;
    cfg.hint.plays = 2;
    cfg.agent.global_batch = 2;
    let state: Shared = Arc::new(Mutex::new(Service {
        config: cfg.to_toml(),
        ..Service::default()
    }));
    let (tx, rx) = std::sync::mpsc::channel();
    let served = state.clone();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::bind("127.0.0.1:0").await else {
                return;
            };
            let _ = tx.send(l.local_addr().map(|a| a.port()).unwrap_or(0));
            let app = Router::new()
                .route("/api/v1/ingest/{run}/config", get(config))
                .route("/api/v1/ingest/{run}", post(ingest))
                .with_state(served);
            let _ = axum::serve(l, app).await;
        });
    });
    let port = rx.recv_timeout(Duration::from_secs(10))?;
    let data = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_spade"))
        .current_dir(repo())
        .env("OMP_NUM_THREADS", "1")
        .env("SPADE_WORKER_TOKEN", "secret")
        .args(["worker", "--run", "run-7", "--server"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(data.path())
        .output()?;
    assert!(
        out.status.success(),
        "spade worker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = state.lock().map_err(|_| "poisoned")?;
    let all: Vec<&Envelope> = s.stored.values().collect();
    assert!(all.iter().all(|e| e.run_id == "run-7"));
    let kinds = |f: &dyn Fn(&Message) -> bool| all.iter().filter(|e| f(&e.message)).count();
    assert_eq!(kinds(&|m| matches!(m, Message::RunStarted { .. })), 1);
    assert_eq!(kinds(&|m| matches!(m, Message::Finished { .. })), 1);
    let mut steps: Vec<u64> = all
        .iter()
        .filter_map(|e| match &e.message {
            Message::Metrics { step, .. } => Some(*step),
            _ => None,
        })
        .collect();
    steps.sort_unstable();
    assert_eq!(steps, vec![0, 1]);
    assert!(kinds(&|m| matches!(m, Message::Environment { .. })) >= 1);
    let spool = std::fs::read_to_string(data.path().join("spool.jsonl"))?;
    assert!(spool.trim().is_empty(), "everything was acknowledged");
    Ok(())
}

/// Issue 35: the service refuses a configuration it cannot read (409 `unreadable_config`, the
/// run already failed there). The worker asks once, not six times with backoff, and exits with
/// the service's reason, which is what the run's job output shows.
#[test]
fn a_refused_configuration_ends_the_worker_at_once_with_the_services_reason()
-> Result<(), Box<dyn std::error::Error>> {
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = asked.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::bind("127.0.0.1:0").await else {
                return;
            };
            let _ = tx.send(l.local_addr().map(|a| a.port()).unwrap_or(0));
            let refuse = move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::future::ready((
                    StatusCode::CONFLICT,
                    Json(serde_json::json!({
                        "status": 409,
                        "code": "unreadable_config",
                        "message": "the stored configuration of run 4 cannot be read by this \
                                    version (unknown field `preset`); the run cannot start",
                    })),
                ))
            };
            let app = Router::new().route("/api/v1/ingest/{run}/config", get(refuse));
            let _ = axum::serve(l, app).await;
        });
    });
    let port = rx.recv_timeout(Duration::from_secs(10))?;
    let data = tempfile::tempdir()?;
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_spade"))
        .current_dir(repo())
        .env("SPADE_WORKER_TOKEN", "secret")
        .args(["worker", "--run", "4", "--server"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(data.path())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the worker must fail: {stderr}");
    assert!(
        stderr.contains("unknown field `preset`"),
        "the service's reason in the output: {stderr}"
    );
    assert_eq!(
        asked.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "asked once, not again with backoff"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "no retries");
    Ok(())
}
