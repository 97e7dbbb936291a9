//! Where a run's reports go: a run directory ([`FileSink`]) or the service ([`HttpSink`]),
//! behind one trait. Both receive [`Envelope`]s in `seq` order and are idempotent: delivering an
//! envelope again (after a resume) never produces a second copy.
//!
//! - [`FileSink`] appends each envelope as one JSON line to `environments.jsonl`,
//!   `plays.jsonl`, `metrics.jsonl` or `events.jsonl` (everything else). On open it drops a torn
//!   last line and remembers the highest `seq` written; envelopes at or below it are skipped.
//! - [`HttpSink`] first appends envelopes to a spool file (`spool.jsonl` in its data directory),
//!   then posts spooled envelopes in batches of at most 500 to `POST /api/v1/ingest/{run_id}`
//!   with the run token, retrying with exponential backoff. Acknowledged keys leave the spool;
//!   while the service is unreachable the spool grows and the run goes on. A reply with
//!   `cancel_requested` is passed up so the loop stops at the next step boundary.
//!
//! At the end of a run ([`Sink::finish`]) the HTTP sink waits, retrying with growing pauses,
//! until the spool is empty, for at most [`HttpSink::final_patience`] (15 minutes by default);
//! what is still unsent then is an error ([`WorkerError::Unsent`]), never a quiet success. The
//! loop calls it before it reports the run's end and again after, so the service hears that a
//! run succeeded only once everything before it was acknowledged. The spool stays in the
//! run's state directory, which a resumed attempt shares: its sink loads the spool and sends it
//! first. A spooled `finished` report is dropped at load, since the resumed worker reports its
//! own end.

use crate::WorkerError;
use crate::http::Posted;
use spade::report::{Envelope, IngestReply, IngestRequest, MAX_ENVELOPES_PER_BATCH, Message};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a delivery learned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Envelopes still waiting (spooled, not acknowledged).
    pub pending: usize,
    /// The service asked the run to stop.
    pub cancel_requested: bool,
    /// Environments the service's reviewers retired from play (see
    /// [`spade::report::IngestReply::retire`]).
    pub retire: Vec<spade::report::Retire>,
}

/// A destination for reports.
pub trait Sink {
    /// Takes responsibility for `envelopes` (in `seq` order): when this returns Ok they are
    /// durable (written, or spooled on disk for a later retry).
    fn deliver(&mut self, envelopes: &[Envelope]) -> Result<Delivery, WorkerError>;
    /// Tries to empty any spool, waiting up to `patience` in total.
    fn flush(&mut self, patience: Duration) -> Result<Delivery, WorkerError>;
    /// Empties the spool before a run may report its end: [`WorkerError::Unsent`] when
    /// envelopes are still unacknowledged after the sink's own patience.
    fn finish(&mut self) -> Result<Delivery, WorkerError> {
        let d = self.flush(Duration::ZERO)?;
        unsent(d)
    }
}

fn unsent(d: Delivery) -> Result<Delivery, WorkerError> {
    if d.pending > 0 {
        return Err(WorkerError::Unsent { pending: d.pending });
    }
    Ok(d)
}

/// How long a run's end waits for the service to take what is spooled (see the module doc):
/// long enough for a server restart or a short outage, bounded so a run whose service is gone
/// ends (as failed) instead of holding its GPUs forever.
pub const FINAL_PATIENCE: Duration = Duration::from_secs(15 * 60);

/// The longest pause between two attempts to empty the spool at the end.
const FINAL_MAX_PAUSE: Duration = Duration::from_secs(30);

/// The file of a run directory an envelope belongs in.
pub fn file_for(message: &Message) -> &'static str {
    match message {
        Message::Environment { .. } | Message::EnvironmentScored { .. } => "environments.jsonl",
        Message::Plays { .. } => "plays.jsonl",
        Message::Metrics { .. } => "metrics.jsonl",
        _ => "events.jsonl",
    }
}

/// The JSONL files a [`FileSink`] writes.
pub const RUN_FILES: [&str; 4] = [
    "environments.jsonl",
    "plays.jsonl",
    "metrics.jsonl",
    "events.jsonl",
];

/// Writes envelopes into a run directory.
#[derive(Debug)]
pub struct FileSink {
    dir: PathBuf,
    /// Highest `seq` already written; `None` for an empty directory.
    written: Option<u64>,
}

impl FileSink {
    /// Opens (creating) `dir`, repairing a torn last line of each file.
    pub fn open(dir: &Path) -> Result<Self, WorkerError> {
        std::fs::create_dir_all(dir).map_err(|e| WorkerError::io(dir, e))?;
        let mut written = None;
        for name in RUN_FILES {
            let path = dir.join(name);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let keep = match text.rfind('\n') {
                Some(i) => i + 1,
                None => 0,
            };
            if keep < text.len() {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| WorkerError::io(&path, e))?;
                f.set_len(keep as u64)
                    .map_err(|e| WorkerError::io(&path, e))?;
            }
            for line in text[..keep].lines().filter(|l| !l.trim().is_empty()) {
                let env: Envelope =
                    serde_json::from_str(line).map_err(|e| WorkerError::Corrupt {
                        path: path.display().to_string(),
                        message: format!("a line is not an envelope: {e}"),
                    })?;
                written = Some(written.map_or(env.seq, |w: u64| w.max(env.seq)));
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            written,
        })
    }

    /// Every envelope written so far, from all files, in `seq` order (a torn last line, left
    /// by a kill mid-write, is not an envelope yet and is skipped).
    pub fn read_all(dir: &Path) -> Result<Vec<Envelope>, WorkerError> {
        let mut all = Vec::new();
        for name in RUN_FILES {
            let path = dir.join(name);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
            for line in complete.lines().filter(|l| !l.trim().is_empty()) {
                all.push(
                    serde_json::from_str(line).map_err(|e| WorkerError::Corrupt {
                        path: path.display().to_string(),
                        message: e.to_string(),
                    })?,
                );
            }
        }
        all.sort_by_key(|e: &Envelope| e.seq);
        Ok(all)
    }
}

impl Sink for FileSink {
    fn deliver(&mut self, envelopes: &[Envelope]) -> Result<Delivery, WorkerError> {
        for env in envelopes {
            if self.written.is_some_and(|w| env.seq <= w) {
                continue;
            }
            let path = self.dir.join(file_for(&env.message));
            let mut line = serde_json::to_string(env).map_err(|e| WorkerError::Corrupt {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            line.push('\n');
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| WorkerError::io(&path, e))?;
            f.write_all(line.as_bytes())
                .map_err(|e| WorkerError::io(&path, e))?;
            self.written = Some(env.seq);
        }
        Ok(Delivery::default())
    }

    fn flush(&mut self, _patience: Duration) -> Result<Delivery, WorkerError> {
        Ok(Delivery::default())
    }
}

/// Posts envelopes to the service, spooling them on disk until acknowledged.
#[derive(Debug)]
pub struct HttpSink {
    client: reqwest::blocking::Client,
    url: String,
    token: String,
    spool_path: PathBuf,
    spool: Vec<Envelope>,
    /// Backoff of the first retry; doubles up to `max_backoff`.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// Tries per delivery before the envelopes stay spooled for the next one.
    pub tries: u32,
    /// How long [`Sink::finish`] waits for the spool to empty.
    pub final_patience: Duration,
}

impl HttpSink {
    /// A sink for `run_id` at `server` (base URL), spooling under `data_dir`.
    pub fn new(
        server: &str,
        run_id: &str,
        token: &str,
        data_dir: &Path,
    ) -> Result<Self, WorkerError> {
        std::fs::create_dir_all(data_dir).map_err(|e| WorkerError::io(data_dir, e))?;
        let spool_path = data_dir.join("spool.jsonl");
        let mut spool: Vec<Envelope> = Vec::new();
        if let Ok(text) = std::fs::read_to_string(&spool_path) {
            let mut seen = HashSet::new();
            // A torn last line (killed mid-write) is dropped: its envelope is still in the
            // worker's outbox and comes again.
            // A spooled end (of an attempt that could not send it) is stale: this worker
            // reports the run's end itself, and an old `finished` would end the run under it.
            for line in text.lines() {
                if let Ok(e) = serde_json::from_str::<Envelope>(line)
                    && !matches!(e.message, Message::Finished { .. })
                    && seen.insert(e.key.clone())
                {
                    spool.push(e);
                }
            }
        }
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| WorkerError::Service(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            client,
            url: spade::report::routes::ingest(server, run_id),
            token: token.to_string(),
            spool_path,
            spool,
            first_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(8),
            tries: 4,
            final_patience: FINAL_PATIENCE,
        })
        .and_then(|sink| {
            // What was dropped at load leaves the file too.
            sink.rewrite_spool()?;
            Ok(sink)
        })
    }

    /// Envelopes waiting for acknowledgement.
    pub fn pending(&self) -> usize {
        self.spool.len()
    }

    fn rewrite_spool(&self) -> Result<(), WorkerError> {
        let tmp = self.spool_path.with_extension("jsonl.tmp");
        let mut text = String::new();
        for e in &self.spool {
            text.push_str(&serde_json::to_string(e).unwrap_or_default());
            text.push('\n');
        }
        std::fs::write(&tmp, text).map_err(|e| WorkerError::io(&tmp, e))?;
        std::fs::rename(&tmp, &self.spool_path).map_err(|e| WorkerError::io(&self.spool_path, e))
    }

    /// One POST of `batch`. Ok(None) on a retryable failure.
    fn post(&self, batch: &[Envelope]) -> Result<Option<IngestReply>, WorkerError> {
        let body = IngestRequest {
            envelopes: batch.to_vec(),
        };
        match crate::http::post_json(&self.client, &self.url, &self.token, &body) {
            Posted::Done(resp) => Ok(resp.json::<IngestReply>().ok()),
            Posted::Retry(_) => Ok(None),
            Posted::Refused(m) => Err(WorkerError::Service(m)),
        }
    }

    /// Sends what is spooled, `tries` attempts per batch with backoff in between.
    fn drain(&mut self, tries: u32) -> Result<Delivery, WorkerError> {
        let mut cancel = false;
        let mut retire: Vec<spade::report::Retire> = vec![];
        let mut backoff = self.first_backoff;
        let mut failures = 0;
        while !self.spool.is_empty() {
            let n = self.spool.len().min(MAX_ENVELOPES_PER_BATCH);
            match self.post(&self.spool[..n])? {
                Some(reply) => {
                    cancel |= reply.cancel_requested;
                    for r in reply.retire {
                        if !retire.contains(&r) {
                            retire.push(r);
                        }
                    }
                    let acked: HashSet<&str> =
                        reply.acknowledged.iter().map(String::as_str).collect();
                    let before = self.spool.len();
                    self.spool.retain(|e| !acked.contains(e.key.as_str()));
                    self.rewrite_spool()?;
                    if self.spool.len() == before {
                        // Nothing acknowledged: treat as a failure so we do not spin.
                        failures += 1;
                    } else {
                        failures = 0;
                        backoff = self.first_backoff;
                        continue;
                    }
                }
                None => failures += 1,
            }
            if failures >= tries {
                break;
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(self.max_backoff);
        }
        Ok(Delivery {
            pending: self.spool.len(),
            cancel_requested: cancel,
            retire,
        })
    }
}

impl Sink for HttpSink {
    fn deliver(&mut self, envelopes: &[Envelope]) -> Result<Delivery, WorkerError> {
        let known: HashSet<String> = self.spool.iter().map(|e| e.key.clone()).collect();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.spool_path)
            .map_err(|e| WorkerError::io(&self.spool_path, e))?;
        for e in envelopes {
            if known.contains(&e.key) {
                continue;
            }
            let mut line = serde_json::to_string(e).map_err(|err| WorkerError::Corrupt {
                path: self.spool_path.display().to_string(),
                message: err.to_string(),
            })?;
            line.push('\n');
            f.write_all(line.as_bytes())
                .map_err(|err| WorkerError::io(&self.spool_path, err))?;
            self.spool.push(e.clone());
        }
        drop(f);
        self.drain(self.tries)
    }

    fn flush(&mut self, patience: Duration) -> Result<Delivery, WorkerError> {
        let started = std::time::Instant::now();
        let mut pause = self.max_backoff;
        let mut seen = Delivery::default();
        loop {
            let d = self.drain(self.tries)?;
            seen.cancel_requested |= d.cancel_requested;
            for r in d.retire {
                if !seen.retire.contains(&r) {
                    seen.retire.push(r);
                }
            }
            seen.pending = d.pending;
            let left = patience.saturating_sub(started.elapsed());
            if d.pending == 0 || left.is_zero() {
                return Ok(seen);
            }
            // Between rounds the pause grows, so a long outage costs a request every 30 s,
            // not a tight loop.
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(FINAL_MAX_PAUSE.max(self.max_backoff));
        }
    }

    fn finish(&mut self) -> Result<Delivery, WorkerError> {
        let d = self.flush(self.final_patience)?;
        unsent(d)
    }
}

/// Fetches the run's configuration (TOML text) from `GET /api/v1/ingest/{run_id}/config`.
pub fn fetch_config(server: &str, run_id: &str, token: &str) -> Result<String, WorkerError> {
    let url = spade::report::routes::ingest_config(server, run_id);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| WorkerError::Service(format!("cannot build the HTTP client: {e}")))?;
    let mut backoff = Duration::from_millis(500);
    let mut last = String::new();
    for _ in 0..6 {
        match client.get(&url).bearer_auth(token).send() {
            Ok(r) if r.status().is_success() => {
                return r
                    .text()
                    .map_err(|e| WorkerError::Service(format!("GET {url}: {e}")));
            }
            // A refusal is final (a bad token, a configuration this version cannot read): the
            // service's own message says why, and is what the run's job output shows.
            Ok(r) if r.status().is_client_error() => {
                let status = r.status();
                let why = r
                    .json::<serde_json::Value>()
                    .ok()
                    .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
                    .map_or_else(String::new, |m| format!(": {m}"));
                return Err(WorkerError::Service(format!(
                    "GET {url} answered {status}{why}"
                )));
            }
            Ok(r) => last = format!("answered {}", r.status()),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(backoff);
        backoff *= 2;
    }
    Err(WorkerError::Service(format!("GET {url}: {last}")))
}
