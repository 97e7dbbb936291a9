//! The HTTP sink against a small axum server on loopback that implements the ingest contract
//! (acknowledge keys, store each once) and misbehaves on purpose: it refuses the first requests,
//! acknowledges only part of a batch, and is down for a while. The worker must retry, keep
//! what is unacknowledged on disk, and never make the server store a key twice.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use spade::report::{Envelope, IngestReply, IngestRequest, LogLevel, Message};
use spade_worker::sink::{HttpSink, Sink};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Server {
    requests: usize,
    /// Requests answered 503 before the server works.
    refuse_first: usize,
    /// Keys stored, with how many times each was acknowledged (replays of a stored key are
    /// acknowledged again and not stored twice, as the ingest contract says).
    stored: BTreeMap<String, usize>,
    cancel: bool,
    retire: Vec<spade::report::Retire>,
}

type Shared = Arc<Mutex<Server>>;

async fn ingest(
    State(s): State<Shared>,
    Json(body): Json<IngestRequest>,
) -> Result<Json<IngestReply>, StatusCode> {
    let mut s = s.lock().map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    s.requests += 1;
    if s.requests <= s.refuse_first {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    // The first working request acknowledges only the first half of its batch.
    let take = if s.requests == s.refuse_first + 1 {
        body.envelopes.len().div_ceil(2)
    } else {
        body.envelopes.len()
    };
    let mut acknowledged = Vec::new();
    for e in body.envelopes.into_iter().take(take) {
        *s.stored.entry(e.key.clone()).or_insert(0) += 1;
        acknowledged.push(e.key);
    }
    Ok(Json(IngestReply {
        acknowledged,
        cancel_requested: s.cancel,
        retire: s.retire.clone(),
    }))
}

/// `/flaky/503,429,200`: answers the listed statuses in turn (one per request, the last one
/// from then on), counting requests in the shared state.
async fn flaky(
    State(s): State<Shared>,
    axum::extract::Path(codes): axum::extract::Path<String>,
) -> StatusCode {
    let n = match s.lock() {
        Ok(mut s) => {
            s.requests += 1;
            s.requests
        }
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR,
    };
    let codes: Vec<u16> = codes.split(',').filter_map(|c| c.parse().ok()).collect();
    let code = codes.get(n - 1).or(codes.last()).copied().unwrap_or(500);
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Serves the ingest route on a loopback port until the test ends; returns the base URL.
fn serve(state: Shared, port: Option<u16>) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => panic!("tokio: {e}"),
        };
        rt.block_on(async move {
            let addr = format!("127.0.0.1:{}", port.unwrap_or(0));
            let listener = match tokio::net::TcpListener::bind(&addr).await {
                Ok(l) => l,
                Err(e) => panic!("bind {addr}: {e}"),
            };
            let local = listener.local_addr().map(|a| a.port()).unwrap_or(0);
            let _ = tx.send(local);
            let app = Router::new()
                .route("/api/v1/ingest/{run}", post(ingest))
                .route("/flaky/{codes}", post(flaky))
                .with_state(state);
            let _ = axum::serve(listener, app).await;
        });
    });
    let port = rx.recv_timeout(Duration::from_secs(10)).unwrap_or(0);
    format!("http://127.0.0.1:{port}")
}

fn envelopes(run: &str, seqs: std::ops::Range<u64>) -> Vec<Envelope> {
    seqs.map(|seq| {
        Envelope::new(
            run,
            seq,
            Message::Log {
                level: LogLevel::Info,
                line: format!("line {seq}"),
            },
        )
    })
    .collect()
}

fn fast(mut sink: HttpSink) -> HttpSink {
    sink.first_backoff = Duration::from_millis(20);
    sink.max_backoff = Duration::from_millis(80);
    sink.tries = 6;
    sink
}

#[test]
fn retries_refusals_and_partial_acks_without_duplicates() -> Result<(), Box<dyn std::error::Error>>
{
    let state: Shared = Arc::new(Mutex::new(Server {
        refuse_first: 2,
        ..Server::default()
    }));
    let url = serve(state.clone(), None);
    let dir = tempfile::tempdir()?;
    let mut sink = fast(HttpSink::new(&url, "r1", "token", dir.path())?);
    let d = sink.deliver(&envelopes("r1", 0..10))?;
    assert_eq!(d.pending, 0, "everything acknowledged after the retries");
    {
        let s = state.lock().map_err(|_| "poisoned")?;
        assert_eq!(s.stored.len(), 10);
        assert!(
            s.stored.values().all(|&n| n == 1),
            "an acknowledged envelope was sent again: {:?}",
            s.stored
        );
    }
    // A resumed worker re-delivers its outbox: replays are acknowledged, new keys stored.
    let d = sink.deliver(&envelopes("r1", 5..12))?;
    assert_eq!(d.pending, 0);
    let s = state.lock().map_err(|_| "poisoned")?;
    assert!(
        s.requests >= 4,
        "2 refusals, a partial ack, then the rest: {}",
        s.requests
    );
    assert_eq!(s.stored.len(), 12, "each key stored once: {:?}", s.stored);
    let spool = std::fs::read_to_string(dir.path().join("spool.jsonl"))?;
    assert!(
        spool.trim().is_empty(),
        "acknowledged envelopes left the spool"
    );
    Ok(())
}

#[test]
fn buffers_on_disk_while_the_service_is_down_and_resends_after_restart()
-> Result<(), Box<dyn std::error::Error>> {
    // A port nothing listens on yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir()?;
    {
        let mut sink = fast(HttpSink::new(&url, "r2", "token", dir.path())?);
        sink.tries = 2;
        let d = sink.deliver(&envelopes("r2", 0..7))?;
        assert_eq!(
            d.pending, 7,
            "nothing can be acknowledged while the service is down"
        );
    }
    let spooled = std::fs::read_to_string(dir.path().join("spool.jsonl"))?;
    assert_eq!(
        spooled.lines().count(),
        7,
        "the spool holds every envelope on disk"
    );

    // The service comes up; a new sink (a restarted worker) finds the spool and sends it.
    let state: Shared = Arc::new(Mutex::new(Server {
        cancel: true,
        ..Server::default()
    }));
    let url = serve(state.clone(), Some(port));
    let mut sink = fast(HttpSink::new(&url, "r2", "token", dir.path())?);
    assert_eq!(sink.pending(), 7);
    let d = sink.flush(Duration::from_secs(20))?;
    assert_eq!(d.pending, 0);
    assert!(
        d.cancel_requested,
        "the server's cancel request reaches the worker"
    );
    let s = state.lock().map_err(|_| "poisoned")?;
    let keys: Vec<&String> = s.stored.keys().collect();
    assert_eq!(keys.len(), 7, "{keys:?}");
    assert!(s.stored.values().all(|&n| n == 1));
    Ok(())
}

#[test]
fn a_refused_token_is_an_error_not_a_retry() -> Result<(), Box<dyn std::error::Error>> {
    async fn deny() -> StatusCode {
        StatusCode::UNAUTHORIZED
    }
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
            let app = Router::new().route("/api/v1/ingest/{run}", post(deny));
            let _ = axum::serve(l, app).await;
        });
    });
    let port = rx.recv_timeout(Duration::from_secs(10))?;
    let dir = tempfile::tempdir()?;
    let mut sink = fast(HttpSink::new(
        &format!("http://127.0.0.1:{port}"),
        "r3",
        "bad",
        dir.path(),
    )?);
    let err = match sink.deliver(&envelopes("r3", 0..1)) {
        Err(e) => e.to_string(),
        Ok(d) => return Err(format!("expected an error, got {d:?}").into()),
    };
    assert!(err.contains("401"), "{err}");
    Ok(())
}

/// The client the sink and `spade eval --report` share: 5xx, 408 and 429 are retried with a
/// doubling pause, any other refusal is final at once, and a dead port fails after its tries.
#[test]
fn the_shared_client_retries_what_may_pass_and_stops_at_a_refusal() {
    use spade_worker::http::{Backoff, post_json_retrying};
    let client = reqwest::blocking::Client::new();
    let b = Backoff {
        tries: 4,
        first: Duration::from_millis(10),
        max: Duration::from_millis(40),
    };
    let body = serde_json::json!({"x": 1});
    for (codes, ok, requests) in [
        ("503,429,408,200", true, 4),
        ("200", true, 1),
        ("503,400,200", false, 2),
        ("503,503,503,503,200", false, 4),
    ] {
        let state = Shared::default();
        let base = serve(state.clone(), None);
        let mut pauses = vec![];
        let r = post_json_retrying(
            &client,
            &format!("{base}/flaky/{codes}"),
            "t",
            &body,
            b,
            |_, p| pauses.push(p),
        );
        assert_eq!(r.is_ok(), ok, "{codes}: {r:?}");
        let seen = state.lock().map(|s| s.requests).unwrap_or(0);
        assert_eq!(seen, requests, "{codes}");
        if codes.starts_with("503,400") {
            let e = r.err().unwrap_or_default();
            assert!(e.contains("400"), "{e}");
        }
        // Doubling, capped: 10, 20, 40 ms.
        let want: Vec<Duration> = [10, 20, 40][..pauses.len()]
            .iter()
            .map(|&m| Duration::from_millis(m))
            .collect();
        assert_eq!(pauses, want, "{codes}");
    }
    let dead = post_json_retrying(&client, "http://127.0.0.1:9/x", "t", &body, b, |_, _| {});
    assert!(dead.is_err_and(|e| e.contains("failed 4 times")));
}

/// A review's retirement travels back in the ingest reply and out of `deliver`.
#[test]
fn retirements_in_the_reply_reach_the_loop() -> Result<(), Box<dyn std::error::Error>> {
    let state = Shared::default();
    let r = spade::report::Retire {
        env_id: "s0-g0-a0".into(),
        verdict: "broken".into(),
        message: "marked broken by ada".into(),
    };
    if let Ok(mut s) = state.lock() {
        s.retire = vec![r.clone()];
    }
    let base = serve(state.clone(), None);
    let dir = tempfile::tempdir()?;
    let mut sink = fast(HttpSink::new(&base, "run-r", "t", dir.path())?);
    let d = sink.deliver(&envelopes("run-r", 0..3))?;
    assert_eq!(d.pending, 0);
    assert_eq!(d.retire, vec![r]);
    Ok(())
}

/// A run's reports: metrics for every step and a log line between them, `n` in all.
fn run_reports(run: &str, n: u64) -> Vec<Envelope> {
    (0..n)
        .map(|seq| {
            let message = if seq % 2 == 0 {
                Message::Metrics {
                    step: seq / 2,
                    elapsed_s: seq as f64,
                    values: BTreeMap::from([("loss".to_string(), 1.0 / (seq as f64 + 1.0))]),
                }
            } else {
                Message::Log {
                    level: LogLevel::Info,
                    line: format!("line {seq}"),
                }
            };
            Envelope::new(run, seq, message)
        })
        .collect()
}

fn finished(run: &str, seq: u64) -> Envelope {
    Envelope::new(
        run,
        seq,
        Message::Finished {
            status: spade::report::FinishStatus::Succeeded,
            message: "6 of 6 steps".into(),
        },
    )
}

fn free_port() -> Result<u16, std::io::Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The attack (silent loss): the service is down when the run ends and stays down longer than
/// the end waits. Before, the worker flushed for 60 s, reported success anyway and left the
/// rest in its spool for good. Now the end is an error naming what is unsent, `finished` is
/// never sent ahead of the data, and a resumed attempt's sink sends the spool (without the
/// stale end) once the service is back: every report arrives exactly once.
#[test]
fn an_outage_at_the_runs_end_is_a_failure_and_the_resumed_attempt_sends_the_spool()
-> Result<(), Box<dyn std::error::Error>> {
    let port = free_port()?;
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir()?;
    {
        let mut sink = fast(HttpSink::new(&url, "r5", "token", dir.path())?);
        sink.tries = 2;
        sink.final_patience = Duration::from_millis(600);
        sink.deliver(&run_reports("r5", 54))?;
        // What the loop's end does: everything first, then the end, then everything again.
        let err = match sink.finish() {
            Err(e) => e.to_string(),
            Ok(d) => return Err(format!("the end succeeded with the service down: {d:?}").into()),
        };
        assert!(err.contains("54 report(s) could not be sent"), "{err}");
        // An end that was spooled anyway (the service died between the two waits).
        sink.deliver(&[finished("r5", 54)])?;
        assert!(sink.finish().is_err());
    }
    let spooled = std::fs::read_to_string(dir.path().join("spool.jsonl"))?;
    assert_eq!(
        spooled.lines().count(),
        55,
        "nothing unsent is lost from disk"
    );

    // The service is back; the resumed attempt's sink finds the spool and sends it first.
    let state = Shared::default();
    let url = serve(state.clone(), Some(port));
    let mut sink = fast(HttpSink::new(&url, "r5", "token2", dir.path())?);
    assert_eq!(sink.pending(), 54, "the stale end is dropped at load");
    sink.finish()?;
    sink.deliver(&[finished("r5", 55)])?;
    sink.finish()?;
    let s = state.lock().map_err(|_| "poisoned")?;
    assert_eq!(
        s.stored.len(),
        55,
        "54 reports and the new end: {:?}",
        s.stored
    );
    assert!(s.stored.values().all(|&n| n == 1), "{:?}", s.stored);
    assert!(!s.stored.contains_key("r5/54"), "the stale end was sent");
    Ok(())
}

/// The other half: the service is down at the end but back within the end's patience. The end
/// waits (with growing pauses) instead of giving up after one round, and everything arrives
/// before it returns.
#[test]
fn the_runs_end_waits_for_a_service_that_comes_back() -> Result<(), Box<dyn std::error::Error>> {
    let port = free_port()?;
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir()?;
    let mut sink = fast(HttpSink::new(&url, "r6", "token", dir.path())?);
    sink.tries = 2;
    sink.final_patience = Duration::from_secs(60);
    sink.deliver(&run_reports("r6", 54))?;
    assert_eq!(sink.pending(), 54);
    let state = Shared::default();
    let later = state.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        serve(later, Some(port));
    });
    let d = sink.finish()?;
    assert_eq!(d.pending, 0);
    let s = state.lock().map_err(|_| "poisoned")?;
    assert_eq!(s.stored.len(), 54, "{:?}", s.stored);
    Ok(())
}
