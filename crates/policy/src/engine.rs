//! A continuous-batching generation engine over a slotted KV cache.
//!
//! Callers hold *sequences* ([`SeqId`]): an episode, a designer attempt, a hint call. A
//! sequence's turn is a [`Request`]: the sequence's whole token context so far, sampling
//! parameters, a token budget and a seed. The engine serves requests as a stream: each
//! [`Engine::step`] first admits waiting requests while there is room (rows, KV budget, batch
//! width), prefilling what their rows do not hold yet, then decodes one token for every
//! admitted request at once, and returns the turns that stopped. A request joins the batch
//! the step it is admitted and leaves the step it stops, so no row decodes past its end.
//!
//! KV reuse, by token identity:
//! - Across turns: a sequence keeps its row (and its keys and values) between turns; the next
//!   request's tokens are compared with what the row holds and only the difference (the last
//!   sampled token, the observation's frame) is prefilled. If the caller's tokens diverge, the
//!   row is cut back to the common prefix, so the result is always that of a full prefill.
//! - Across sequences: a new sequence copies the longest prefix it shares with any row (plays
//!   of one environment share their system prompt and first message) instead of prefilling
//!   it. [`Engine::keep_prefix`] pins a prefix worth sharing before its users arrive.
//!
//! Memory: the cache grows (rows and slots per row, doubling) up to
//! [`EngineConfig::kv_tokens`] slots in all. A request that does not fit waits; a paused
//! sequence's row is given up (least recently used first) when a waiting request needs room,
//! and that sequence prefills again on its next turn. A request that cannot fit even alone
//! fails with an error naming the budget, and the others go on. Slots are reserved per row up
//! to the longest row (padded rows, not pages): memory is rows x the longest sequence.
//!
//! Sampling is [`crate::sample`]'s: the same choice rule and one SplitMix64 stream per request
//! seeded by its seed, one draw per token, so a request samples what `sample::generate` would
//! for the same prompt and seed, whatever else shares the batch (up to float rounding; greedy
//! outputs match token for token, which `tests/engine.rs` checks).

use crate::error::{PolicyError, Result};
use crate::qwen3::{Qwen3, SlotCache};
use crate::sample::{Completion, Finish, SamplingParams, SplitMix64, choose, cut_at_stop};
use crate::tokenizer::Tokenizer;
use std::collections::{BTreeMap, VecDeque};
use tch::{Device, Tensor};

/// Limits of one engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Longest context a sequence may reach (prompt + everything generated after it).
    pub context: usize,
    /// KV slots the cache may hold in all (rows x slots per row).
    pub kv_tokens: usize,
    /// Most requests decoding at once.
    pub max_batch: usize,
}

impl EngineConfig {
    /// Bytes of KV cache `kv_tokens` slots of `model` take.
    pub fn kv_bytes(&self, model: &Qwen3) -> usize {
        let c = model.config();
        let kind = model.weight_kind();
        self.kv_tokens
            * 2
            * (c.num_hidden_layers * c.num_key_value_heads * c.head_dim) as usize
            * kind.elt_size_in_bytes()
    }
}

/// A caller's sequence: an episode or a one-turn call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeqId(u64);

impl SeqId {
    /// The id another [`Rollout`] implementation hands out as its `n`-th sequence.
    pub fn from_raw(n: u64) -> Self {
        SeqId(n)
    }

    pub fn raw(self) -> u64 {
        self.0
    }
}

/// One turn of a sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The sequence's whole context so far (not only the new tokens).
    pub tokens: Vec<i64>,
    pub params: SamplingParams,
    pub seed: u64,
}

/// A turn that stopped, or why it could not be served.
#[derive(Debug)]
pub struct Finished {
    pub seq: SeqId,
    pub result: Result<Completion>,
}

/// What the engine did so far (for benchmarks and metrics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineStats {
    /// Requests admitted.
    pub requests: u64,
    /// Tokens run through a prefill.
    pub prefilled: u64,
    /// Prompt tokens a row already held from the sequence's earlier turns.
    pub reused: u64,
    /// Prompt tokens copied from another row.
    pub shared: u64,
    /// Tokens sampled.
    pub generated: u64,
    /// Decoding passes, and their rows summed (mean batch = rows / passes).
    pub decode_passes: u64,
    pub decode_rows: u64,
    /// Rows given up to make room.
    pub evictions: u64,
    /// Most KV slots (rows x slots per row) allocated at once.
    pub peak_slots: i64,
}

/// The rollout interface the worker drives: this engine, or another backend in its place.
pub trait Rollout {
    /// A new, empty sequence.
    fn open(&mut self) -> SeqId;
    /// Queues the sequence's next turn. Errors at once when the sequence is unknown or busy.
    fn submit(&mut self, seq: SeqId, req: Request) -> Result<()>;
    /// Admits what fits, decodes one token for every admitted turn, returns those that stopped.
    fn step(&mut self) -> Result<Vec<Finished>>;
    /// Forgets the sequence (its row is freed; a turn in progress is dropped).
    fn close(&mut self, seq: SeqId);
    /// No turn is waiting or decoding.
    fn is_idle(&self) -> bool;
}

/// Serves every request to its end: the same contract as [`crate::sample::generate`] (one
/// completion per prompt, in order), through a [`Rollout`]. The first failed request's error
/// is returned.
pub fn generate_all(
    r: &mut dyn Rollout,
    prompts: &[Vec<i64>],
    seeds: &[u64],
    params: &SamplingParams,
) -> Result<Vec<Completion>> {
    if seeds.len() != prompts.len() {
        return Err(PolicyError::InvalidInput(format!(
            "{} seeds for {} prompts",
            seeds.len(),
            prompts.len()
        )));
    }
    let mut ids = Vec::with_capacity(prompts.len());
    for (p, &seed) in prompts.iter().zip(seeds) {
        let id = r.open();
        r.submit(
            id,
            Request {
                tokens: p.clone(),
                params: params.clone(),
                seed,
            },
        )?;
        ids.push(id);
    }
    let mut done: BTreeMap<SeqId, Result<Completion>> = BTreeMap::new();
    while done.len() < ids.len() {
        if r.is_idle() {
            return Err(PolicyError::InvalidInput(
                "the engine went idle with requests unanswered".into(),
            ));
        }
        for f in r.step()? {
            done.insert(f.seq, f.result);
        }
    }
    let out = ids
        .iter()
        .map(|id| done.remove(id).unwrap_or_else(|| Err(unanswered())))
        .collect::<Result<Vec<_>>>();
    for id in ids {
        r.close(id);
    }
    out
}

fn unanswered() -> PolicyError {
    PolicyError::InvalidInput("a request got no answer".into())
}

#[derive(Debug)]
struct Turn {
    tokens: Vec<i64>,
    params: SamplingParams,
    rng: SplitMix64,
    /// Tokens this turn may still write (the budget clipped to the context).
    budget: usize,
    out: Vec<i64>,
    logprobs: Vec<f32>,
    /// Whether it has been admitted (prefilled) and is decoding.
    decoding: bool,
}

#[derive(Debug, Default)]
struct Seq {
    row: Option<usize>,
    /// Tokens whose keys and values the row holds, in order.
    cached: Vec<i64>,
    /// The last sampled token, which is not in the cache yet.
    pending: Option<i64>,
    turn: Option<Turn>,
    last_used: u64,
}

/// The engine (see the module doc). It borrows the model: a new engine is made after every
/// optimiser step, so its fused weights and cached keys never outlive the weights they came
/// from.
pub struct Engine<'m> {
    model: &'m Qwen3,
    tok: Option<&'m Tokenizer>,
    cfg: EngineConfig,
    cache: SlotCache,
    seqs: BTreeMap<SeqId, Seq>,
    /// Which sequence owns each allocated row. Rows `0..decoding` are the decoding ones.
    rows: Vec<Option<SeqId>>,
    decoding: usize,
    waiting: VecDeque<SeqId>,
    next_id: u64,
    clock: u64,
    stats: EngineStats,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Slots a new cache starts with per row.
const FIRST_CAPACITY: i64 = 256;

impl<'m> Engine<'m> {
    /// An engine over `model`; `tokenizer` decodes texts and finds stop strings.
    pub fn new(
        model: &'m Qwen3,
        tokenizer: Option<&'m Tokenizer>,
        cfg: EngineConfig,
    ) -> Result<Self> {
        if cfg.context == 0 || cfg.max_batch == 0 || cfg.kv_tokens < cfg.context {
            return Err(PolicyError::InvalidInput(format!(
                "engine: context {} and batch {} must be positive and the KV budget ({} slots) \
                 at least one context",
                cfg.context, cfg.max_batch, cfg.kv_tokens
            )));
        }
        let cap = FIRST_CAPACITY.min(cfg.context as i64);
        Ok(Self {
            model,
            tok: tokenizer,
            cache: model.new_slot_cache(0, cap),
            cfg,
            seqs: BTreeMap::new(),
            rows: vec![],
            decoding: 0,
            waiting: VecDeque::new(),
            next_id: 0,
            clock: 0,
            stats: EngineStats::default(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// The limits it runs under.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Prefills `tokens` into a row of their own, so sequences that start with them copy their
    /// keys and values instead of computing them (the row is given up like a paused
    /// sequence's when room is needed).
    pub fn keep_prefix(&mut self, tokens: &[i64]) -> Result<SeqId> {
        let id = self.open();
        if tokens.is_empty() {
            return Ok(id);
        }
        let Some(row) = self.free_row(id, tokens.len())? else {
            return Err(self.over_budget(tokens.len()));
        };
        self.bind(id, row);
        self.share_into(id, row, tokens);
        let have = self.cache.len(row) as usize;
        if have < tokens.len() {
            let _ = self
                .model
                .prefill_slot(&mut self.cache, row, &tokens[have..])?;
            self.stats.prefilled += (tokens.len() - have) as u64;
        }
        if let Some(s) = self.seqs.get_mut(&id) {
            s.cached = tokens.to_vec();
        }
        Ok(id)
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn over_budget(&self, need: usize) -> PolicyError {
        PolicyError::InvalidInput(format!(
            "a request needing {need} KV slots does not fit the engine's KV budget of {} slots \
             (context {})",
            self.cfg.kv_tokens, self.cfg.context
        ))
    }

    fn used_rows(&self) -> usize {
        self.rows.iter().filter(|r| r.is_some()).count()
    }

    /// Slots per row the rows in use need: a decoding turn's whole reach, a paused row's length.
    fn reserved(&self) -> i64 {
        self.rows
            .iter()
            .enumerate()
            .filter_map(|(r, id)| {
                let s = self.seqs.get(id.as_ref()?)?;
                Some(match s.turn.as_ref().filter(|t| t.decoding) {
                    Some(t) => (t.tokens.len() + t.budget) as i64,
                    None => self.cache.len(r),
                })
            })
            .max()
            .unwrap_or(0)
    }

    /// Makes the cache hold the rows in use plus `extra` free ones, each of at least `cap`
    /// slots, within the budget: grows (doubling where the budget allows), or compacts the rows
    /// in use to the front and reallocates exactly, giving up paused rows (least recently used
    /// first, never `id`'s) while even that does not fit. False when nothing more can be given
    /// up.
    fn room(&mut self, id: SeqId, extra: usize, cap: i64) -> Result<bool> {
        let budget = self.cfg.kv_tokens as i64;
        loop {
            let cap = cap.max(self.reserved());
            let rows = self.used_rows() + extra;
            let (r0, c0) = (self.cache.rows(), self.cache.capacity());
            if rows <= r0 && cap <= c0 {
                return Ok(true);
            }
            if rows as i64 * cap <= budget {
                let want_cap = if cap > c0 {
                    ((cap as u64)
                        .next_power_of_two()
                        .min(self.cfg.context as u64) as i64)
                        .max(cap)
                } else {
                    c0
                };
                let want_rows = if rows > r0 {
                    (r0 * 2).max(rows).max(4)
                } else {
                    r0
                };
                let options = [(want_rows, want_cap), (rows.max(r0), cap.max(c0))];
                if let Some(&(r, c)) = options.iter().find(|(r, c)| *r as i64 * c <= budget) {
                    self.resize(r, c);
                } else {
                    self.compact();
                    self.resize(rows, cap);
                }
                return Ok(true);
            }
            // Give up the row of the least recently used paused sequence.
            let victim = self
                .rows
                .iter()
                .flatten()
                .filter(|s| **s != id)
                .filter_map(|s| self.seqs.get(s).map(|q| (q, *s)))
                .filter(|(q, _)| q.turn.as_ref().is_none_or(|t| !t.decoding))
                .map(|(q, s)| (q.last_used, s))
                .min();
            match victim {
                Some((_, s)) => self.evict(s),
                None => return Ok(false),
            }
        }
    }

    fn resize(&mut self, rows: usize, cap: i64) {
        self.cache.resize(rows, cap);
        self.rows.resize(rows, None);
        self.stats.peak_slots = self.stats.peak_slots.max(rows as i64 * cap);
    }

    /// Moves the rows in use to the front (decoding rows are already there).
    fn compact(&mut self) {
        let mut free = self.decoding;
        for r in self.decoding..self.rows.len() {
            if self.rows[r].is_some() {
                while free < r && self.rows[free].is_some() {
                    free += 1;
                }
                if free < r {
                    self.swap_rows(r, free);
                }
            }
        }
    }

    /// A row for `id` whose capacity takes `need` slots: a free one, a new one, or one given
    /// up by a paused sequence. None when nothing fits now.
    fn free_row(&mut self, id: SeqId, need: usize) -> Result<Option<usize>> {
        let extra = usize::from(self.used_rows() == self.rows.len());
        if !self.room(id, extra, need as i64)? {
            return Ok(None);
        }
        Ok((self.decoding..self.rows.len()).find(|&r| self.rows[r].is_none()))
    }

    /// Gives up the row of a sequence to make room (it prefills again on its next turn).
    fn evict(&mut self, id: SeqId) {
        if let Some(r) = self.seqs.get(&id).and_then(|s| s.row) {
            self.evict_row(id, r);
            self.stats.evictions += 1;
        }
    }

    fn bind(&mut self, id: SeqId, row: usize) {
        self.rows[row] = Some(id);
        self.cache.truncate(row, 0);
        if let Some(s) = self.seqs.get_mut(&id) {
            s.row = Some(row);
            s.cached.clear();
        }
    }

    /// Copies into `row` the longest prefix of `tokens` another row holds.
    fn share_into(&mut self, id: SeqId, row: usize, tokens: &[i64]) {
        let mut best: Option<(usize, usize, SeqId)> = None;
        for (r, owner) in self.rows.iter().enumerate() {
            let Some(o) = owner.filter(|o| *o != id) else {
                continue;
            };
            let Some(s) = self.seqs.get(&o) else { continue };
            let n = common_prefix(&s.cached, tokens);
            if n > 0 && best.is_none_or(|b| n > b.0) {
                best = Some((n, r, o));
            }
        }
        if let Some((n, from, owner)) = best {
            // Leave the last token to the prefill: its logits start the turn.
            let n = n.min(tokens.len().saturating_sub(1));
            if n == 0 {
                return;
            }
            self.cache.copy_prefix(from, row, n as i64);
            let now = self.tick();
            if let Some(o) = self.seqs.get_mut(&owner) {
                o.last_used = now;
            }
            if let Some(s) = self.seqs.get_mut(&id) {
                s.cached = tokens[..n].to_vec();
            }
            self.stats.shared += n as u64;
        }
    }

    /// Swaps two rows and who owns them.
    fn swap_rows(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.cache.swap(a, b);
        self.rows.swap(a, b);
        for r in [a, b] {
            if let Some(id) = self.rows[r]
                && let Some(s) = self.seqs.get_mut(&id)
            {
                s.row = Some(r);
            }
        }
    }

    /// Admits the head of the queue if it fits: Ok(false) when it must wait.
    fn admit(&mut self, id: SeqId) -> Result<bool> {
        let Some(seq) = self.seqs.get(&id) else {
            return Ok(true);
        };
        let Some(turn) = seq.turn.as_ref() else {
            return Ok(true);
        };
        let need = turn.tokens.len() + turn.budget;
        // Its own row, cut back to what still matches.
        let row = match seq.row {
            Some(r) => {
                if !self.room(id, 0, need as i64)? {
                    return Ok(false);
                }
                // Room may have moved rows.
                self.seqs.get(&id).and_then(|s| s.row).unwrap_or(r)
            }
            None => match self.free_row(id, need)? {
                Some(r) => {
                    self.bind(id, r);
                    r
                }
                None => return Ok(false),
            },
        };
        let tokens = self.seqs[&id]
            .turn
            .as_ref()
            .map(|t| t.tokens.clone())
            .unwrap_or_default();
        let own = common_prefix(&self.seqs[&id].cached, &tokens).min(tokens.len() - 1);
        self.cache.truncate(row, own as i64);
        if let Some(s) = self.seqs.get_mut(&id) {
            s.cached.truncate(own);
        }
        self.stats.reused += own as u64;
        if own == 0 {
            self.share_into(id, row, &tokens);
        }
        let have = self.cache.len(row) as usize;
        let logits = self
            .model
            .prefill_slot(&mut self.cache, row, &tokens[have..])?;
        self.stats.prefilled += (tokens.len() - have) as u64;
        self.stats.requests += 1;
        let now = self.tick();
        let s = self.seqs.get_mut(&id).ok_or_else(unanswered)?;
        s.cached = tokens;
        s.last_used = now;
        // Into the decoding region.
        let at = self.decoding;
        self.swap_rows(row, at);
        self.decoding += 1;
        if let Some(t) = self.seqs.get_mut(&id).and_then(|s| s.turn.as_mut()) {
            t.decoding = true;
        }
        self.sample_rows(&[at], &logits.unsqueeze(0))?;
        Ok(true)
    }

    /// Samples the next token of each of `rows` from `logits` [rows, vocab] and records it.
    fn sample_rows(&mut self, rows: &[usize], logits: &Tensor) -> Result<()> {
        // Rows are grouped by their sampling rule (usually one group).
        let mut groups: Vec<((u64, u64, usize), Vec<usize>)> = vec![];
        for (i, r) in rows.iter().enumerate() {
            let Some(t) = self.rows[*r]
                .and_then(|id| self.seqs.get(&id))
                .and_then(|s| s.turn.as_ref())
            else {
                continue;
            };
            let key = (
                t.params.temperature.to_bits(),
                t.params.top_p.to_bits(),
                t.params.top_k,
            );
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.1.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        for (_, members) in groups {
            let ids: Vec<SeqId> = members.iter().filter_map(|&i| self.rows[rows[i]]).collect();
            let Some(params) = ids
                .first()
                .and_then(|id| self.seqs.get(id))
                .and_then(|s| s.turn.as_ref())
                .map(|t| t.params.clone())
            else {
                continue;
            };
            let mut rngs: Vec<SplitMix64> = ids
                .iter()
                .filter_map(|id| {
                    self.seqs
                        .get(id)
                        .and_then(|s| s.turn.as_ref())
                        .map(|t| t.rng.clone())
                })
                .collect();
            let sel: Vec<i64> = members.iter().map(|&i| i as i64).collect();
            let part = if sel.len() == rows.len() {
                logits.shallow_clone()
            } else {
                logits.index_select(0, &Tensor::from_slice(&sel).to_device(logits.device()))
            };
            let (next, lp) = choose(&part, &params, &mut rngs);
            let next = Vec::<i64>::try_from(next.to_device(Device::Cpu))?;
            let lp = Vec::<f32>::try_from(lp.to_device(Device::Cpu))?;
            for (k, id) in ids.iter().enumerate() {
                if let Some(s) = self.seqs.get_mut(id)
                    && let Some(t) = s.turn.as_mut()
                {
                    t.rng = rngs[k].clone();
                    t.out.push(next[k]);
                    t.logprobs.push(lp[k]);
                    s.pending = Some(next[k]);
                }
            }
            self.stats.generated += ids.len() as u64;
        }
        Ok(())
    }

    /// Why the turn of `id` should stop now, if it should.
    fn stopped(&self, id: SeqId) -> Result<Option<Finish>> {
        let Some(t) = self.seqs.get(&id).and_then(|s| s.turn.as_ref()) else {
            return Ok(None);
        };
        let Some(&last) = t.out.last() else {
            return Ok(None);
        };
        if t.params.stop_token_ids.contains(&last) {
            return Ok(Some(Finish::StopToken));
        }
        let tail = t.params.stop_tail();
        if let Some(tok) = self.tok.filter(|_| tail > 1) {
            let from = t.out.len().saturating_sub(tail);
            let text = tok.decode(&t.out[from..], false)?;
            if t.params
                .stop_strings
                .iter()
                .any(|s| text.contains(s.as_str()))
            {
                return Ok(Some(Finish::StopString));
            }
        }
        Ok((t.out.len() >= t.budget).then_some(Finish::Length))
    }

    /// Ends the turn of the decoding sequence `id`: its row leaves the decoding region.
    fn finish(&mut self, id: SeqId, finish: Finish) -> Result<Completion> {
        let s = self.seqs.get_mut(&id).ok_or_else(unanswered)?;
        let t = s.turn.take().ok_or_else(unanswered)?;
        if let Some(r) = s.row
            && r < self.decoding
        {
            let last = self.decoding - 1;
            self.swap_rows(r, last);
            self.decoding -= 1;
        }
        let text = match self.tok {
            Some(tok) => Some(cut_at_stop(
                tok.decode(&t.out, true)?,
                &t.params.stop_strings,
            )),
            None => None,
        };
        Ok(Completion {
            tokens: t.out,
            logprobs: t.logprobs,
            text,
            finish,
        })
    }

    /// Collects the decoding rows' turns that stopped.
    fn collect(&mut self, done: &mut Vec<Finished>) -> Result<()> {
        let mut stop = vec![];
        for r in 0..self.decoding {
            if let Some(id) = self.rows[r]
                && let Some(f) = self.stopped(id)?
            {
                stop.push((id, f));
            }
        }
        for (id, f) in stop {
            let result = self.finish(id, f);
            done.push(Finished { seq: id, result });
        }
        Ok(())
    }
}

impl Rollout for Engine<'_> {
    fn open(&mut self) -> SeqId {
        let id = SeqId(self.next_id);
        self.next_id += 1;
        let now = self.tick();
        self.seqs.insert(
            id,
            Seq {
                last_used: now,
                ..Seq::default()
            },
        );
        id
    }

    fn submit(&mut self, seq: SeqId, req: Request) -> Result<()> {
        let context = self.cfg.context;
        let s = self
            .seqs
            .get_mut(&seq)
            .ok_or_else(|| PolicyError::InvalidInput(format!("unknown sequence {}", seq.0)))?;
        if s.turn.is_some() {
            return Err(PolicyError::InvalidInput(format!(
                "sequence {} already has a turn in progress",
                seq.0
            )));
        }
        if req.tokens.is_empty() {
            return Err(PolicyError::InvalidInput("empty prompt".into()));
        }
        if !req.params.stop_strings.is_empty() && self.tok.is_none() {
            return Err(PolicyError::InvalidInput(
                "stop strings need a tokenizer".into(),
            ));
        }
        if req.tokens.len() >= context {
            return Err(PolicyError::InvalidInput(format!(
                "a prompt of {} tokens leaves no room in the context of {context} tokens",
                req.tokens.len()
            )));
        }
        let vocab = self.model.config().vocab_size;
        if let Some(bad) = req.tokens.iter().find(|&&t| t < 0 || t >= vocab) {
            return Err(PolicyError::InvalidInput(format!(
                "token id {bad} outside the vocabulary of {vocab}"
            )));
        }
        if req.params.max_new_tokens == 0 {
            return Err(PolicyError::InvalidInput("a token budget of 0".into()));
        }
        let budget = req.params.max_new_tokens.min(context - req.tokens.len());
        s.turn = Some(Turn {
            budget,
            rng: SplitMix64::new(req.seed),
            tokens: req.tokens,
            params: req.params,
            out: vec![],
            logprobs: vec![],
            decoding: false,
        });
        // The last sampled token is part of the new request's tokens (or not, if the caller
        // replaced it); either way the cache knows only `cached`.
        s.pending = None;
        self.waiting.push_back(seq);
        Ok(())
    }

    fn step(&mut self) -> Result<Vec<Finished>> {
        let mut done = vec![];
        // Admit in arrival order while there is room; a request that cannot fit even with
        // nothing else decoding fails alone.
        while self.decoding < self.cfg.max_batch
            && let Some(&id) = self.waiting.front()
        {
            match self.admit(id) {
                Ok(true) => {
                    self.waiting.pop_front();
                }
                Ok(false) if self.decoding > 0 => break,
                Ok(false) => {
                    self.waiting.pop_front();
                    let need = self
                        .seqs
                        .get_mut(&id)
                        .and_then(|s| s.turn.take())
                        .map_or(0, |t| t.tokens.len() + t.budget);
                    done.push(Finished {
                        seq: id,
                        result: Err(self.over_budget(need)),
                    });
                }
                Err(e) => {
                    // This request's own fault (say, an id out of the vocabulary): the others go
                    // on.
                    self.waiting.pop_front();
                    if let Some(s) = self.seqs.get_mut(&id) {
                        s.turn = None;
                    }
                    if let Some(r) = self.seqs.get(&id).and_then(|s| s.row) {
                        self.evict_row(id, r);
                    }
                    done.push(Finished {
                        seq: id,
                        result: Err(e),
                    });
                }
            }
            // A turn may stop at its first token.
            self.collect(&mut done)?;
        }
        if self.decoding == 0 {
            return Ok(done);
        }
        let ids: Vec<i64> = (0..self.decoding)
            .map(|r| {
                self.rows[r]
                    .and_then(|id| self.seqs.get(&id))
                    .and_then(|s| s.pending)
                    .unwrap_or(0)
            })
            .collect();
        let logits = self.model.decode_slots(&mut self.cache, &ids)?;
        self.stats.decode_passes += 1;
        self.stats.decode_rows += ids.len() as u64;
        for (r, &tok) in ids.iter().enumerate() {
            if let Some(s) = self.rows[r].and_then(|id| self.seqs.get_mut(&id)) {
                s.cached.push(tok);
                s.pending = None;
            }
        }
        let rows: Vec<usize> = (0..self.decoding).collect();
        self.sample_rows(&rows, &logits)?;
        self.collect(&mut done)?;
        Ok(done)
    }

    fn close(&mut self, seq: SeqId) {
        let Some(s) = self.seqs.get(&seq) else { return };
        if let Some(r) = s.row {
            self.evict_row(seq, r);
        }
        self.waiting.retain(|w| *w != seq);
        self.seqs.remove(&seq);
    }

    fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.decoding == 0
    }
}

impl Engine<'_> {
    /// Frees `row` of `id`, moving it out of the decoding region first.
    fn evict_row(&mut self, id: SeqId, row: usize) {
        let mut row = row;
        if row < self.decoding {
            let last = self.decoding - 1;
            self.swap_rows(row, last);
            self.decoding -= 1;
            row = last;
        }
        if self.rows.get(row).copied().flatten() == Some(id) {
            self.rows[row] = None;
            self.cache.truncate(row, 0);
        }
        if let Some(s) = self.seqs.get_mut(&id) {
            s.row = None;
            s.cached.clear();
            if let Some(t) = s.turn.as_mut() {
                t.decoding = false;
            }
        }
    }
}

fn common_prefix(a: &[i64], b: &[i64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
