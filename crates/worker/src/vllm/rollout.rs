//! [`VllmRollout`]: the engine's [`Rollout`] over a [`Fleet`]'s servers. Each turn of a sequence
//! is one blocking `/v1/completions` request on its own thread, to the server the sequence was
//! opened on; a failed server is restarted through the fleet and its turns sent again (see the
//! parent module's doc).

use super::Fleet;
use crate::http::{Backoff, Posted, post_json};
use spade_policy::PolicyError;
use spade_policy::engine::{Finished, Request, Rollout, SeqId};
use spade_policy::sample::{Completion, Finish};
use spade_policy::tokenizer::Tokenizer;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

/// A turn's outcome from a request thread: the completion, an error of this request alone
/// (the server refused it: the episode ends), or a failure of the server (the run ends).
pub(super) enum Turn {
    Done(Completion),
    Refused(String),
    Fatal(String),
}

struct SeqState {
    server: usize,
    busy: bool,
    /// The turn in flight's stop strings (its text is cut after the first).
    stops: Vec<String>,
    /// The turn in flight's request, to send again after a restart of its server.
    body: serde_json::Value,
    max_new: usize,
    /// Sends of the turn in flight: an answer from an earlier send (a request thread of the
    /// server before its restart) is stale and dropped.
    attempt: u32,
}

/// [`Rollout`] over a [`Fleet`]: each submitted turn is one blocking request on its own
/// thread; `step` waits until at least one comes back.
pub struct VllmRollout<'a> {
    fleet: &'a Fleet,
    tok: &'a Tokenizer,
    version: String,
    next: u64,
    seqs: BTreeMap<SeqId, SeqState>,
    in_flight: usize,
    tx: Sender<(SeqId, u32, Turn)>,
    rx: Receiver<(SeqId, u32, Turn)>,
    per_server: Vec<u64>,
}

impl std::fmt::Debug for VllmRollout<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VllmRollout")
            .field("version", &self.version)
            .field("sequences", &self.seqs.len())
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl<'a> VllmRollout<'a> {
    /// A rollout over `fleet`'s servers on their current weights.
    pub(super) fn new(fleet: &'a Fleet, tok: &'a Tokenizer) -> Self {
        let (tx, rx) = channel();
        VllmRollout {
            fleet,
            tok,
            version: fleet.version(),
            next: 0,
            seqs: BTreeMap::new(),
            in_flight: 0,
            tx,
            rx,
            per_server: vec![0; fleet.servers.len()],
        }
    }

    /// The weight version every turn of this rollout was sampled on.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Turns sent to each server (in the fleet's order).
    pub fn turns_per_server(&self) -> &[u64] {
        &self.per_server
    }
}

/// How long a rollout waits on its requests before it asks the servers whether they are well.
const WATCH_EVERY: Duration = Duration::from_secs(5);

impl VllmRollout<'_> {
    fn busy_on(&self, server: usize) -> bool {
        self.seqs.values().any(|s| s.busy && s.server == server)
    }

    /// Sends sequence `seq`'s turn in flight on its own thread.
    fn send(&self, seq: SeqId) {
        let Some(s) = self.seqs.get(&seq) else {
            return;
        };
        let url = format!("{}/v1/completions", self.fleet.servers[s.server].url);
        let (client, tx) = (self.fleet.client.clone(), self.tx.clone());
        let (body, max_new, attempt) = (s.body.clone(), s.max_new, s.attempt);
        std::thread::spawn(move || {
            let turn = complete(&client, &url, &body, max_new);
            let _ = tx.send((seq, attempt, turn));
        });
    }

    /// Server `server` failed (`why`): restart it and send its turns in flight again, or end
    /// the rollout with the reason it cannot be restarted.
    fn recover(&mut self, server: usize, why: &str) -> spade_policy::Result<()> {
        self.fleet
            .restart(server, why)
            .map_err(|e| PolicyError::Backend(e.0))?;
        let lost: Vec<SeqId> = self
            .seqs
            .iter()
            .filter(|(_, s)| s.busy && s.server == server)
            .map(|(id, _)| *id)
            .collect();
        for seq in lost {
            if let Some(s) = self.seqs.get_mut(&seq) {
                s.attempt += 1;
            }
            self.send(seq);
        }
        Ok(())
    }
}

impl Rollout for VllmRollout<'_> {
    fn open(&mut self) -> SeqId {
        let id = SeqId::from_raw(self.next);
        self.next += 1;
        let server = (id.raw() % self.fleet.servers.len().max(1) as u64) as usize;
        self.seqs.insert(
            id,
            SeqState {
                server,
                busy: false,
                stops: vec![],
                body: serde_json::Value::Null,
                max_new: 0,
                attempt: 0,
            },
        );
        id
    }

    fn submit(&mut self, seq: SeqId, req: Request) -> spade_policy::Result<()> {
        let body = completion_body(self.fleet, &req);
        let s = self
            .seqs
            .get_mut(&seq)
            .ok_or_else(|| PolicyError::InvalidInput(format!("unknown sequence {}", seq.raw())))?;
        if s.busy {
            return Err(PolicyError::InvalidInput(format!(
                "sequence {} already has a turn in progress",
                seq.raw()
            )));
        }
        if req.tokens.is_empty() {
            return Err(PolicyError::InvalidInput("empty prompt".into()));
        }
        s.busy = true;
        s.stops = req.params.stop_strings.clone();
        s.body = body;
        s.max_new = req.params.max_new_tokens;
        s.attempt = 0;
        self.in_flight += 1;
        self.per_server[s.server] += 1;
        self.send(seq);
        Ok(())
    }

    fn step(&mut self) -> spade_policy::Result<Vec<Finished>> {
        if self.in_flight == 0 {
            return Ok(vec![]);
        }
        if self.fleet.version() != self.version {
            return Err(PolicyError::Backend(format!(
                "the servers' weights changed from {} to {} during a rollout",
                self.version,
                self.fleet.version()
            )));
        }
        let mut got = vec![];
        let mut waiting = Instant::now();
        loop {
            match self.rx.recv_timeout(Duration::from_millis(500)) {
                Ok(m) => {
                    got.push(m);
                    got.extend(self.rx.try_iter());
                    break;
                }
                Err(RecvTimeoutError::Timeout) => {
                    for i in 0..self.fleet.servers.len() {
                        if let Err(e) = self.fleet.servers[i].check_alive() {
                            self.recover(i, &e.0)?;
                        }
                    }
                    // A process can live on while its server no longer answers (engine core
                    // gone, stopped, left paused): ask the busy servers themselves now and then.
                    if waiting.elapsed() >= WATCH_EVERY {
                        waiting = Instant::now();
                        for i in 0..self.fleet.servers.len() {
                            if self.busy_on(i)
                                && let Err(e) = self.fleet.servers[i].watch(&self.fleet.client)
                            {
                                self.recover(i, &e.0)?;
                            }
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(PolicyError::Backend("request threads vanished".into()));
                }
            }
        }
        let mut out = vec![];
        let mut failed: Vec<(usize, String)> = vec![];
        for (seq, attempt, turn) in got {
            let Some(s) = self.seqs.get_mut(&seq) else {
                continue; // closed while its turn was in flight (counted off by `close`)
            };
            if attempt != s.attempt || !s.busy {
                continue; // an answer from before its server's restart
            }
            let result = match turn {
                Turn::Done(mut c) => {
                    c.text = Some(decode_cut(self.tok, &c.tokens, &s.stops)?);
                    Ok(c)
                }
                Turn::Refused(m) => Err(PolicyError::Backend(m)),
                Turn::Fatal(m) => {
                    // Its server is restarted below and the turn sent again; still in flight.
                    let note = self.fleet.servers[s.server].log_tail_note();
                    failed.push((s.server, format!("{m}{note}")));
                    continue;
                }
            };
            s.busy = false;
            self.in_flight = self.in_flight.saturating_sub(1);
            out.push(Finished { seq, result });
        }
        failed.sort_by_key(|(server, _)| *server);
        failed.dedup_by_key(|(server, _)| *server);
        for (server, why) in failed {
            self.recover(server, &why)?;
        }
        Ok(out)
    }

    fn close(&mut self, seq: SeqId) {
        // `in_flight` counts busy sequences, so answers that arrive for a closed one (possibly
        // several, after a restart) are dropped without counting.
        if self.seqs.remove(&seq).is_some_and(|s| s.busy) {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
    }

    fn is_idle(&self) -> bool {
        self.in_flight == 0
    }
}

/// A `/v1/completions` body for one turn (see the module doc for the choices).
pub(super) fn completion_body(fleet: &Fleet, req: &Request) -> serde_json::Value {
    let p = &req.params;
    let mut b = serde_json::json!({
        "model": fleet.model,
        "prompt": req.tokens,
        "max_tokens": p.max_new_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
        // vLLM's "no cut" is -1 (0 is refused by some versions).
        "top_k": if p.top_k == 0 { -1 } else { i64::try_from(p.top_k).unwrap_or(-1) },
        // vLLM takes an int64 seed.
        "seed": (req.seed >> 1) as i64,
        "stop_token_ids": p.stop_token_ids,
        // Only the caller's stop tokens end a turn, as in the engine.
        "ignore_eos": true,
        "logprobs": 0,
        "return_token_ids": true,
        "skip_special_tokens": false,
        "stream": false,
    });
    if !p.stop_strings.is_empty() {
        b["stop"] = serde_json::json!(p.stop_strings);
        b["include_stop_str_in_output"] = serde_json::json!(true);
    }
    if !fleet.pad_bias.is_empty() {
        b["logit_bias"] = serde_json::Value::Object(fleet.pad_bias.clone());
    }
    b
}

/// The engine's text: decoded without special tokens.
fn decode_cut(tok: &Tokenizer, ids: &[i64], stops: &[String]) -> spade_policy::Result<String> {
    let mut text = tok.decode(ids, true)?;
    for s in stops {
        if let Some(i) = text.find(s.as_str()) {
            text.truncate(i + s.len());
        }
    }
    Ok(text)
}

/// One completion request, retried on network errors and 5xx (a server restarting) a few
/// times; its answer parsed into the engine's [`Completion`].
pub(super) fn complete(
    client: &reqwest::blocking::Client,
    url: &str,
    body: &serde_json::Value,
    max_new: usize,
) -> Turn {
    let b = Backoff {
        tries: 3,
        first: Duration::from_millis(200),
        max: Duration::from_secs(2),
    };
    let mut pause = b.first;
    let mut last = String::new();
    for attempt in 1..=b.tries {
        match post_json(client, url, "", body) {
            Posted::Done(r) => {
                let v: serde_json::Value = match r.json() {
                    Ok(v) => v,
                    Err(e) => return Turn::Fatal(format!("POST {url}: unreadable answer: {e}")),
                };
                return match parse_completion(&v, max_new) {
                    Ok(c) => Turn::Done(c),
                    Err(m) => Turn::Fatal(format!("POST {url}: {m}")),
                };
            }
            Posted::Refused(m) => return Turn::Refused(m),
            Posted::Retry(why) => last = why,
        }
        if attempt < b.tries {
            std::thread::sleep(pause);
            pause = (pause * 2).min(b.max);
        }
    }
    Turn::Fatal(format!("POST {url} failed {} times; last: {last}", b.tries))
}

/// `choices[0]` of a `/v1/completions` answer: `token_ids`, `logprobs.token_logprobs`,
/// `finish_reason` / `stop_reason`.
fn parse_completion(
    v: &serde_json::Value,
    max_new: usize,
) -> std::result::Result<Completion, String> {
    let c = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or("the answer has no choices[0]")?;
    let tokens: Vec<i64> = c
        .get("token_ids")
        .and_then(|t| t.as_array())
        .ok_or("choices[0].token_ids is missing (does the server know return_token_ids?)")?
        .iter()
        .map(|t| t.as_i64().ok_or("choices[0].token_ids holds a non-integer"))
        .collect::<std::result::Result<_, _>>()?;
    let logprobs: Vec<f32> = c
        .get("logprobs")
        .and_then(|l| l.get("token_logprobs"))
        .and_then(|t| t.as_array())
        .ok_or("choices[0].logprobs.token_logprobs is missing")?
        .iter()
        .map(|l| {
            l.as_f64()
                .map(|x| x as f32)
                .ok_or("choices[0].logprobs.token_logprobs holds a non-number")
        })
        .collect::<std::result::Result<_, _>>()?;
    if logprobs.len() != tokens.len() {
        return Err(format!(
            "{} token ids but {} log-probs",
            tokens.len(),
            logprobs.len()
        ));
    }
    if tokens.len() > max_new {
        return Err(format!("{} tokens for a budget of {max_new}", tokens.len()));
    }
    let finish = match (
        c.get("finish_reason").and_then(|f| f.as_str()),
        c.get("stop_reason"),
    ) {
        (Some("length"), _) => Finish::Length,
        (Some("stop"), Some(serde_json::Value::String(_))) => Finish::StopString,
        (Some("stop"), _) => Finish::StopToken,
        (other, _) => return Err(format!("unexpected finish_reason {other:?}")),
    };
    Ok(Completion {
        tokens,
        logprobs,
        text: None,
        finish,
    })
}
