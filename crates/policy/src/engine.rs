//! A continuous-batching generation engine over a paged KV cache.
//!
//! Callers hold *sequences* ([`SeqId`]): an episode, a designer attempt, a hint call. A
//! sequence's turn is a [`Request`]: the sequence's whole token context so far, sampling
//! parameters, a token budget and a seed. The engine serves requests as a stream: each
//! [`Engine::step`] admits waiting requests while there is room (batch width, KV blocks), then
//! runs one forward pass over one new token of every decoding turn and up to
//! [`EngineConfig::prefill_tokens`] prompt tokens of the admitted turns still prefilling
//! (several prompts at once, a long one in pieces over several steps), samples the next token
//! of every turn whose prompt is done, and returns the turns that stopped. A turn leaves the
//! batch the step it stops, so no row decodes past its end (with a decode window, below, a
//! row may compute past it inside the window, and what it computed there is dropped).
//!
//! Memory is paged ([`crate::qwen3::PagedCache`]): the cache is a pool of blocks of
//! [`EngineConfig::block_tokens`] slots and each sequence lists the blocks holding its tokens,
//! so it takes memory for the tokens it holds, not for the longest sequence in the batch. The
//! pool grows up to [`EngineConfig::kv_tokens`] slots (rounded up to whole blocks). A turn is
//! admitted when the blocks its whole reach (prompt + token budget) may need fit beside those
//! of the turns already running, so a running turn never waits for memory; when they do not, a
//! paused sequence's blocks are given up (least recently used first) and that sequence prefills
//! again on its next turn. A request that cannot fit even alone fails with an error naming the
//! budget, and the others go on.
//!
//! KV reuse, by token identity:
//! - Across turns: a sequence keeps its blocks between turns; the next request's tokens are
//!   compared with what it holds and only the difference (the last sampled token, the
//!   observation's frame) is prefilled. If the caller's tokens diverge, the sequence is cut back
//!   to the common prefix, so the result is always that of a full prefill.
//! - Across sequences: a new sequence lists the full blocks of the longest prefix it shares
//!   with any other sequence (plays of one environment share their system prompt and first
//!   message: stored once) and copies the rest of that prefix's last block; requests that
//!   arrive together wait a pass for the first one's prefill of their common prefix. A block
//!   is written only by a sequence that alone lists it (a shared, partly filled last block is
//!   copied first). [`Engine::keep_prefix`] pins a prefix worth sharing before its users arrive.
//!
//! Sampling is [`crate::sample`]'s: the same choice rule and one SplitMix64 stream per request
//! seeded by its seed, one draw per token, so a request samples what `sample::generate` would
//! for the same prompt and seed, whatever else shares the pass (up to float rounding; greedy
//! outputs match token for token, which `tests/engine.rs` checks against the dense cache).
//!
//! Tokens are chosen on the model's device. With a decode window of `w`
//! ([`EngineConfig::decode_window`]) a step runs up to `w` passes: after the first, the
//! decoding rows take the tokens just sampled as their next inputs where they lie, and the
//! host reads the window's tokens back once at its end, so a GPU is not stopped for a
//! host read after every token. Stops (stop tokens, stop strings, budgets) are checked then,
//! token by token: a turn that stopped inside the window keeps what it had sampled up to its
//! stop and nothing after it (what it computed past it is dropped, its cache cut back), so
//! any window gives the tokens of a window of 1, up to float rounding: a pass's rows differ
//! with the window, and with them the blocking of its matrix products, which at a
//! temperature above 0 can move a draw that falls on a boundary between two tokens (as
//! continuous batching itself can). A row never passes its budget inside a window; new
//! requests and prompt pieces wait for the next step.

mod blocks;

use crate::error::{PolicyError, Result};
use crate::qwen3::{PagedCache, Qwen3, Segment, upload};
use crate::sample::{Completion, Finish, SamplingParams, SplitMix64, choose, cut_at_stop};
use crate::tokenizer::Tokenizer;
use blocks::Blocks;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use tch::{Device, Kind, Tensor};

/// Slots per block unless configured: small enough that a sequence wastes little in its last
/// block, large enough that block tables and gathers stay short.
pub const DEFAULT_BLOCK_TOKENS: usize = 16;

/// Prompt tokens one step prefills unless configured (vLLM's chunked-prefill budget is of this
/// order): long prompts are cut so that decoding turns keep their pace.
pub const DEFAULT_PREFILL_TOKENS: usize = 2048;

/// Decoding passes between two host reads of the sampled tokens on a GPU when the
/// configuration leaves it to the engine (`decode_window = 0`); the CPU reads after every
/// pass (its reads cost nothing and a longer window only computes past stops). Not yet
/// measured on a GPU.
pub const DEFAULT_CUDA_DECODE_WINDOW: usize = 4;

/// Limits of one engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Longest context a sequence may reach (prompt + everything generated after it).
    pub context: usize,
    /// KV slots the cache may hold in all (rounded up to whole blocks).
    pub kv_tokens: usize,
    /// Most requests decoding or prefilling at once.
    pub max_batch: usize,
    /// Slots per block of the paged cache.
    pub block_tokens: usize,
    /// Most prompt tokens one step prefills (over all the requests prefilling).
    pub prefill_tokens: usize,
    /// Decoding passes a step runs before the host reads the sampled tokens (see the module
    /// doc); 0 leaves it to the device (1 on the CPU, [`DEFAULT_CUDA_DECODE_WINDOW`] on CUDA).
    pub decode_window: usize,
}

impl EngineConfig {
    /// Limits with the default block size and prefill budget.
    pub fn new(context: usize, kv_tokens: usize, max_batch: usize) -> Self {
        Self {
            context,
            kv_tokens,
            max_batch,
            block_tokens: DEFAULT_BLOCK_TOKENS,
            prefill_tokens: DEFAULT_PREFILL_TOKENS,
            decode_window: 0,
        }
    }

    /// The decode window on `device` (`decode_window`, or the device's default for 0).
    pub fn window_on(&self, device: Device) -> usize {
        match self.decode_window {
            0 if device.is_cuda() => DEFAULT_CUDA_DECODE_WINDOW,
            0 => 1,
            w => w,
        }
    }

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
    /// Prompt tokens a sequence already held from its earlier turns.
    pub reused: u64,
    /// Prompt tokens taken from another sequence's blocks.
    pub shared: u64,
    /// Tokens sampled (those kept: a decode window's tokens past a stop are not counted).
    pub generated: u64,
    /// Times the sampled tokens were read back to the host (once a step's window).
    pub reads: u64,
    /// Forward passes that decoded, and their decoding rows summed (mean batch = rows /
    /// passes; a window's passes count, rows past a stop too).
    pub decode_passes: u64,
    pub decode_rows: u64,
    /// Forward passes that prefilled, and the prompt pieces they ran.
    pub prefill_passes: u64,
    pub prefill_pieces: u64,
    /// Sequences whose blocks were given up to make room.
    pub evictions: u64,
    /// Most KV slots allocated at once (the pool).
    pub peak_slots: i64,
    /// Most blocks in use at once.
    pub peak_blocks: i64,
    /// Most turns admitted at once (decoding or prefilling).
    pub peak_batch: u64,
}

/// The rollout interface the worker drives: this engine, or another backend in its place.
pub trait Rollout {
    /// A new, empty sequence.
    fn open(&mut self) -> SeqId;
    /// Queues the sequence's next turn. Errors at once when the sequence is unknown or busy.
    fn submit(&mut self, seq: SeqId, req: Request) -> Result<()>;
    /// Admits what fits, runs one pass (a token for every decoding turn, a piece of the
    /// prompts being prefilled; the engine's decode window may add decoding passes), returns
    /// the turns that stopped.
    fn step(&mut self) -> Result<Vec<Finished>>;
    /// Forgets the sequence (its blocks are released; a turn in progress is dropped).
    fn close(&mut self, seq: SeqId);
    /// No turn is waiting or running.
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

/// Where a turn is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Submitted, not admitted.
    Waiting,
    /// Admitted; this many of its tokens are cached.
    Prefilling(usize),
    /// Its prompt is cached; a token is sampled every step.
    Decoding,
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
    phase: Phase,
}

impl Turn {
    /// Slots the turn may fill: its prompt and its whole budget.
    fn reach(&self) -> usize {
        self.tokens.len() + self.budget
    }
}

#[derive(Debug, Default)]
struct Seq {
    /// The blocks holding `cached`, in order.
    blocks: Vec<u32>,
    /// Tokens whose keys and values the blocks hold, in order.
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
    cache: PagedCache,
    blocks: Blocks,
    seqs: BTreeMap<SeqId, Seq>,
    /// Admitted turns (prefilling or decoding), in the order they were admitted.
    active: Vec<SeqId>,
    waiting: VecDeque<SeqId>,
    next_id: u64,
    clock: u64,
    stats: EngineStats,
    /// Passes a step runs before reading the tokens back ([`EngineConfig::window_on`]).
    window: usize,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The rows of a pass that drew a token, and the tokens and log-probs drawn ([rows] each,
/// on the model's device).
type Draw = (Vec<SeqId>, (Tensor, Tensor));

/// The tokens of a window's later passes' segments: their inputs are the tokens drawn before,
/// passed to the model as a tensor ([`Qwen3::forward_paged_with`]).
const DRAWN: [i64; 1] = [0];

/// One sequence's share of a pass.
struct Work {
    id: SeqId,
    start: usize,
    tokens: Vec<i64>,
    /// The piece ends the prompt (or is a decoding token): a token is sampled after it.
    samples: bool,
}

impl<'m> Engine<'m> {
    /// An engine over `model`; `tokenizer` decodes texts and finds stop strings.
    pub fn new(
        model: &'m Qwen3,
        tokenizer: Option<&'m Tokenizer>,
        cfg: EngineConfig,
    ) -> Result<Self> {
        if cfg.context == 0
            || cfg.max_batch == 0
            || cfg.block_tokens == 0
            || cfg.prefill_tokens == 0
            || cfg.kv_tokens < cfg.context
        {
            return Err(PolicyError::InvalidInput(format!(
                "engine: context {}, batch {}, block size {} and prefill budget {} must be \
                 positive and the KV budget ({} slots) at least one context",
                cfg.context, cfg.max_batch, cfg.block_tokens, cfg.prefill_tokens, cfg.kv_tokens
            )));
        }
        let mut cache = model.new_paged_cache(cfg.block_tokens);
        let mut blocks = Blocks::new(cfg.kv_tokens.div_ceil(cfg.block_tokens));
        // On the CPU the pool grows with what sequences hold; a GPU's memory plan counts the
        // whole budget, so it is taken at once there (see `Blocks::allocate_all`).
        if model.device().is_cuda() {
            blocks.allocate_all(&mut cache);
        }
        let window = cfg.window_on(model.device());
        Ok(Self {
            window,
            model,
            tok: tokenizer,
            cache,
            blocks,
            cfg,
            seqs: BTreeMap::new(),
            active: vec![],
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

    /// Blocks in use now (a shared block counts once).
    pub fn blocks_in_use(&self) -> usize {
        self.blocks.used()
    }

    /// Prefills `tokens` into blocks of their own, so sequences that start with them list
    /// those blocks instead of computing them (given up like a paused sequence's when room is
    /// needed).
    pub fn keep_prefix(&mut self, tokens: &[i64]) -> Result<SeqId> {
        let id = self.open();
        if tokens.is_empty() {
            return Ok(id);
        }
        self.share_into(id, tokens);
        let have = self.seqs.get(&id).map_or(0, |s| s.blocks.len());
        let need = tokens.len().div_ceil(self.cfg.block_tokens) - have;
        if !self.make_room(id, need) {
            self.close(id);
            return Err(self.over_budget(tokens.len()));
        }
        let start = self.seqs.get(&id).map_or(0, |s| s.cached.len());
        self.cover(id, tokens.len())?;
        let table = self
            .seqs
            .get(&id)
            .map(|s| s.blocks.clone())
            .unwrap_or_default();
        let seg = Segment {
            table: &table,
            start,
            tokens: &tokens[start..],
            logits: false,
        };
        let _ = self.model.forward_paged(&mut self.cache, &[seg])?;
        self.stats.prefilled += (tokens.len() - start) as u64;
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

    /// Blocks in use plus those the admitted turns may still take to reach their ends.
    fn committed(&self) -> usize {
        let bs = self.cfg.block_tokens;
        let ahead: usize = self
            .active
            .iter()
            .filter_map(|id| self.seqs.get(id))
            .filter_map(|s| {
                let t = s.turn.as_ref()?;
                Some(t.reach().div_ceil(bs).saturating_sub(s.blocks.len()))
            })
            .sum();
        self.blocks.used() + ahead
    }

    /// Makes room for `need` more blocks beside what is committed, giving up paused sequences'
    /// blocks (least recently used first, never `id`'s). False when that is not enough.
    fn make_room(&mut self, id: SeqId, need: usize) -> bool {
        loop {
            if self.committed() + need <= self.blocks.limit() {
                return true;
            }
            let victim = self
                .seqs
                .iter()
                .filter(|(s, q)| **s != id && !q.blocks.is_empty())
                .filter(|(_, q)| q.turn.as_ref().is_none_or(|t| t.phase == Phase::Waiting))
                .map(|(s, q)| (q.last_used, *s))
                .min();
            match victim {
                Some((_, s)) => {
                    self.cut(s, 0);
                    self.stats.evictions += 1;
                }
                None => return false,
            }
        }
    }

    /// Keeps the first `keep` cached tokens of `id`, releasing the blocks past them.
    fn cut(&mut self, id: SeqId, keep: usize) {
        let bs = self.cfg.block_tokens;
        let Some(s) = self.seqs.get_mut(&id) else {
            return;
        };
        let keep = keep.min(s.cached.len());
        s.cached.truncate(keep);
        for b in s.blocks.drain(keep.div_ceil(bs)..) {
            self.blocks.release(b);
        }
    }

    /// Takes blocks until `id`'s table covers `len` slots (room was made at admission).
    fn cover(&mut self, id: SeqId, len: usize) -> Result<()> {
        let want = len.div_ceil(self.cfg.block_tokens);
        while self.seqs.get(&id).is_some_and(|s| s.blocks.len() < want) {
            let b = self.blocks.take(&mut self.cache).ok_or_else(|| {
                PolicyError::InvalidInput("engine: no free KV block for an admitted turn".into())
            })?;
            if let Some(s) = self.seqs.get_mut(&id) {
                s.blocks.push(b);
            }
        }
        self.stats.peak_blocks = self.stats.peak_blocks.max(self.blocks.used() as i64);
        self.stats.peak_slots = self
            .stats
            .peak_slots
            .max((self.cache.blocks() * self.cfg.block_tokens) as i64);
        Ok(())
    }

    /// Lists in `id` (which holds nothing) the blocks of the longest prefix of `tokens` another
    /// sequence holds: its full blocks shared, the rest of its last block copied.
    fn share_into(&mut self, id: SeqId, tokens: &[i64]) {
        let bs = self.cfg.block_tokens;
        let best = self
            .seqs
            .iter()
            .filter(|(o, s)| **o != id && !s.blocks.is_empty())
            .map(|(o, s)| (common_prefix(&s.cached, tokens), *o))
            .max_by_key(|(n, o)| (*n, std::cmp::Reverse(*o)));
        let Some((n, owner)) = best else { return };
        // Leave the last token to the prefill: its logits start the turn.
        let n = n.min(tokens.len().saturating_sub(1));
        if n == 0 {
            return;
        }
        let from: Vec<u32> = self
            .seqs
            .get(&owner)
            .map(|s| s.blocks[..n.div_ceil(bs)].to_vec())
            .unwrap_or_default();
        let full = n / bs;
        let mut table: Vec<u32> = from[..full].to_vec();
        for &b in &table {
            self.blocks.share(b);
        }
        let mut got = full * bs;
        if n > got
            && let Some(b) = self.blocks.take(&mut self.cache)
        {
            self.cache.copy_block(from[full], b, n - got);
            table.push(b);
            got = n;
        }
        if got == 0 {
            return;
        }
        let now = self.tick();
        if let Some(o) = self.seqs.get_mut(&owner) {
            o.last_used = now;
        }
        if let Some(s) = self.seqs.get_mut(&id) {
            s.blocks = table;
            s.cached = tokens[..got].to_vec();
        }
        self.stats.shared += got as u64;
    }

    /// Whether a turn being prefilled will hold at least a block more of `tokens`' prefix than
    /// any sequence holds now: requests that arrive together (the plays of one environment)
    /// then wait a pass for the first one's prompt instead of each computing it.
    fn prefix_coming(&self, id: SeqId, tokens: &[i64]) -> bool {
        let cap = tokens.len().saturating_sub(1);
        let now = self
            .seqs
            .iter()
            .filter(|(o, s)| **o != id && !s.blocks.is_empty())
            .map(|(_, s)| common_prefix(&s.cached, tokens))
            .max()
            .unwrap_or(0)
            .min(cap);
        self.active.iter().filter(|o| **o != id).any(|o| {
            let Some(t) = self.seqs.get(o).and_then(|s| s.turn.as_ref()) else {
                return false;
            };
            let Phase::Prefilling(done) = t.phase else {
                return false;
            };
            let coming = common_prefix(&t.tokens, tokens).min(cap);
            coming > done && coming >= now + self.cfg.block_tokens
        })
    }

    /// Admits the head of the queue if its reach fits: Ok(false) when it must wait.
    fn admit(&mut self, id: SeqId) -> Result<bool> {
        let bs = self.cfg.block_tokens;
        let Some(seq) = self.seqs.get(&id) else {
            return Ok(true);
        };
        let Some(turn) = seq.turn.as_ref() else {
            return Ok(true);
        };
        let (tokens, reach) = (turn.tokens.clone(), turn.reach());
        // What it holds, cut back to what still matches.
        let own = common_prefix(&seq.cached, &tokens).min(tokens.len() - 1);
        if own == 0 && self.prefix_coming(id, &tokens) {
            return Ok(false);
        }
        self.cut(id, own);
        if own == 0 {
            self.share_into(id, &tokens);
        }
        let (held, last) = self
            .seqs
            .get(&id)
            .map(|s| (s.cached.len(), s.blocks.last().copied()))
            .unwrap_or((0, None));
        // A partly filled block another sequence lists is copied before this one writes in it.
        let cow = last.filter(|&b| held % bs != 0 && self.blocks.shared(b));
        let have = self.seqs.get(&id).map_or(0, |s| s.blocks.len());
        let need = reach.div_ceil(bs).saturating_sub(have) + usize::from(cow.is_some());
        if !self.make_room(id, need) {
            return Ok(false);
        }
        if let Some(old) = cow {
            let b = self.blocks.take(&mut self.cache).ok_or_else(|| {
                PolicyError::InvalidInput("engine: no free KV block to copy into".into())
            })?;
            self.cache.copy_block(old, b, held % bs);
            self.blocks.release(old);
            if let Some(s) = self.seqs.get_mut(&id)
                && let Some(slot) = s.blocks.last_mut()
            {
                *slot = b;
            }
        }
        self.stats.reused += own as u64;
        self.stats.requests += 1;
        let now = self.tick();
        let s = self.seqs.get_mut(&id).ok_or_else(unanswered)?;
        s.last_used = now;
        if let Some(t) = s.turn.as_mut() {
            t.phase = Phase::Prefilling(held);
        }
        self.active.push(id);
        self.stats.peak_batch = self.stats.peak_batch.max(self.active.len() as u64);
        Ok(true)
    }

    /// This step's work: a token of every decoding turn, then prompt pieces up to the budget.
    fn plan(&mut self) -> Result<Vec<Work>> {
        let mut work = vec![];
        for &id in &self.active {
            let Some(s) = self.seqs.get(&id) else {
                continue;
            };
            if let (Some(t), Some(p)) = (s.turn.as_ref(), s.pending)
                && t.phase == Phase::Decoding
            {
                work.push(Work {
                    id,
                    start: s.cached.len(),
                    tokens: vec![p],
                    samples: true,
                });
            }
        }
        let mut left = self.cfg.prefill_tokens;
        for &id in &self.active {
            if left == 0 {
                break;
            }
            let Some(t) = self.seqs.get(&id).and_then(|s| s.turn.as_ref()) else {
                continue;
            };
            if let Phase::Prefilling(done) = t.phase {
                let n = (t.tokens.len() - done).min(left);
                left -= n;
                work.push(Work {
                    id,
                    start: done,
                    tokens: t.tokens[done..done + n].to_vec(),
                    samples: done + n == t.tokens.len(),
                });
            }
        }
        for w in &work {
            self.cover(w.id, w.start + w.tokens.len())?;
        }
        Ok(work)
    }

    /// Chooses the next token of each of `ids` from `logits` [ids, vocab] where the logits lie,
    /// advancing each turn's random stream: (tokens, log-probs), [ids] each, in `ids`' order.
    /// Nothing is read back to the host ([`Engine::record`] does that once a window).
    fn draw(&mut self, ids: &[SeqId], logits: &Tensor) -> Result<(Tensor, Tensor)> {
        let dev = logits.device();
        // Turns are grouped by their sampling rule (usually one group).
        let mut groups: Vec<((u64, u64, usize), Vec<usize>)> = vec![];
        for (i, id) in ids.iter().enumerate() {
            let Some(t) = self.seqs.get(id).and_then(|s| s.turn.as_ref()) else {
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
        let mut order: Vec<i64> = Vec::with_capacity(ids.len());
        let mut parts: Vec<(Tensor, Tensor)> = vec![];
        for (_, members) in groups {
            let group: Vec<SeqId> = members.iter().map(|&i| ids[i]).collect();
            let Some(params) = group
                .first()
                .and_then(|id| self.seqs.get(id))
                .and_then(|s| s.turn.as_ref())
                .map(|t| t.params.clone())
            else {
                continue;
            };
            let mut rngs: Vec<SplitMix64> = group
                .iter()
                .filter_map(|id| {
                    self.seqs
                        .get(id)
                        .and_then(|s| s.turn.as_ref())
                        .map(|t| t.rng.clone())
                })
                .collect();
            let sel: Vec<i64> = members.iter().map(|&i| i as i64).collect();
            let part = if sel.len() == ids.len() {
                logits.shallow_clone()
            } else {
                logits.index_select(0, &upload(&sel, dev))
            };
            parts.push(choose(&part, &params, &mut rngs));
            for (k, id) in group.iter().enumerate() {
                if let Some(t) = self.seqs.get_mut(id).and_then(|s| s.turn.as_mut()) {
                    t.rng = rngs[k].clone();
                }
            }
            order.extend(sel);
        }
        let in_order = order.iter().enumerate().all(|(i, &o)| o == i as i64);
        if parts.len() == 1 && in_order && order.len() == ids.len() {
            return Ok(parts.remove(0));
        }
        // Rows without a turn (none in practice) get token 0, which `record` never reads.
        let n = ids.len() as i64;
        let mut next = Tensor::zeros([n], (Kind::Int64, dev));
        let mut lp = Tensor::zeros([n], (Kind::Float, dev));
        if !parts.is_empty() {
            let (ns, ls): (Vec<Tensor>, Vec<Tensor>) = parts.into_iter().unzip();
            let at = upload(&order, dev);
            next = next.index_copy(0, &at, &Tensor::cat(&ns, 0));
            lp = lp.index_copy(0, &at, &Tensor::cat(&ls, 0));
        }
        Ok((next, lp))
    }

    /// The rest of a step's decode window (see the module doc): after the pass that drew
    /// `draws[0]`, each of its rows that may still write a token decodes the token it drew
    /// last, taken where it lies, until the window or the rows' budgets end.
    fn decode_on(&mut self, draws: &mut Vec<Draw>) -> Result<()> {
        let Some((first, _)) = draws.first() else {
            return Ok(());
        };
        // Tokens each row may still draw after the first pass's, and where its next input's
        // keys go.
        let mut rows: BTreeMap<SeqId, (usize, usize)> = BTreeMap::new();
        for id in first {
            if let Some(s) = self.seqs.get(id)
                && let Some(t) = s.turn.as_ref()
            {
                let left = t.budget.saturating_sub(t.out.len() + 1);
                rows.insert(*id, (left, s.cached.len()));
            }
        }
        for j in 1..self.window {
            let Some((prev, (prev_next, _))) = draws.last() else {
                break;
            };
            let keep: Vec<i64> = prev
                .iter()
                .enumerate()
                .filter(|(_, id)| rows.get(id).is_some_and(|r| r.0 >= j))
                .map(|(i, _)| i as i64)
                .collect();
            if keep.is_empty() {
                break;
            }
            let ids: Vec<SeqId> = keep.iter().map(|&i| prev[i as usize]).collect();
            let input = if keep.len() == prev.len() {
                prev_next.shallow_clone()
            } else {
                prev_next.index_select(0, &upload(&keep, prev_next.device()))
            };
            let starts: Vec<usize> = ids
                .iter()
                .map(|id| rows.get(id).map_or(0, |r| r.1))
                .collect();
            for (id, &at) in ids.iter().zip(&starts) {
                self.cover(*id, at + 1)?;
            }
            let logits = {
                let segs: Vec<Segment<'_>> = ids
                    .iter()
                    .zip(&starts)
                    .map(|(id, &start)| Segment {
                        table: self.seqs.get(id).map_or(&[][..], |s| &s.blocks[..]),
                        start,
                        tokens: &DRAWN,
                        logits: true,
                    })
                    .collect();
                self.model
                    .forward_paged_with(&mut self.cache, &segs, Some(&input))?
            };
            for id in &ids {
                if let Some(r) = rows.get_mut(id) {
                    r.1 += 1;
                }
            }
            self.stats.decode_passes += 1;
            self.stats.decode_rows += ids.len() as u64;
            let drawn = self.draw(&ids, &logits)?;
            draws.push((ids, drawn));
        }
        Ok(())
    }

    /// Reads a window's tokens back (once) and records them turn by turn, stopping each turn
    /// at its first stop: what it drew after that is dropped, and its cache keeps only the
    /// inputs before it. Stopped turns go to `done`.
    fn record(&mut self, draws: Vec<Draw>, done: &mut Vec<Finished>) -> Result<()> {
        if draws.iter().all(|d| d.0.is_empty()) {
            return Ok(());
        }
        let (ns, ls): (Vec<Tensor>, Vec<Tensor>) = draws
            .iter()
            .map(|(_, (n, l))| (n.shallow_clone(), l.shallow_clone()))
            .unzip();
        let next = Vec::<i64>::try_from(Tensor::cat(&ns, 0).to_device(Device::Cpu))?;
        let lp = Vec::<f32>::try_from(Tensor::cat(&ls, 0).to_device(Device::Cpu))?;
        self.stats.reads += 1;
        let mut stopped: BTreeSet<SeqId> = BTreeSet::new();
        let mut k = 0;
        for (j, (ids, _)) in draws.iter().enumerate() {
            for id in ids {
                let (tok, l) = (next.get(k).copied(), lp.get(k).copied());
                k += 1;
                let (Some(tok), Some(l)) = (tok, l) else {
                    return Err(unanswered());
                };
                if stopped.contains(id) {
                    continue;
                }
                let Some(s) = self.seqs.get_mut(id) else {
                    continue;
                };
                // A later pass's input was the token drawn before it: now in the cache.
                if j > 0
                    && let Some(p) = s.pending
                {
                    s.cached.push(p);
                }
                let Some(t) = s.turn.as_mut() else {
                    continue;
                };
                t.out.push(tok);
                t.logprobs.push(l);
                s.pending = Some(tok);
                self.stats.generated += 1;
                if let Some(f) = self.stopped(*id)? {
                    stopped.insert(*id);
                    let result = self.finish(*id, f);
                    done.push(Finished { seq: *id, result });
                }
            }
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

    /// Ends the turn of `id`: it leaves the batch and keeps its blocks (paused).
    fn finish(&mut self, id: SeqId, finish: Finish) -> Result<Completion> {
        self.active.retain(|a| *a != id);
        let s = self.seqs.get_mut(&id).ok_or_else(unanswered)?;
        let t = s.turn.take().ok_or_else(unanswered)?;
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
            phase: Phase::Waiting,
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
        // nothing else running fails alone.
        while self.active.len() < self.cfg.max_batch
            && let Some(&id) = self.waiting.front()
        {
            match self.admit(id) {
                Ok(true) => {
                    self.waiting.pop_front();
                }
                Ok(false) if !self.active.is_empty() => break,
                Ok(false) => {
                    self.waiting.pop_front();
                    let need = self
                        .seqs
                        .get_mut(&id)
                        .and_then(|s| s.turn.take())
                        .map_or(0, |t| t.reach());
                    done.push(Finished {
                        seq: id,
                        result: Err(self.over_budget(need)),
                    });
                }
                Err(e) => {
                    // This request's own failure: the others go on.
                    self.waiting.pop_front();
                    self.active.retain(|a| *a != id);
                    if let Some(s) = self.seqs.get_mut(&id) {
                        s.turn = None;
                    }
                    self.cut(id, 0);
                    done.push(Finished {
                        seq: id,
                        result: Err(e),
                    });
                }
            }
        }
        if self.active.is_empty() {
            return Ok(done);
        }
        let work = self.plan()?;
        if work.is_empty() {
            return Ok(done);
        }
        let logits = {
            let segs: Vec<Segment<'_>> = work
                .iter()
                .map(|w| Segment {
                    table: self.seqs.get(&w.id).map_or(&[][..], |s| &s.blocks[..]),
                    start: w.start,
                    tokens: &w.tokens,
                    logits: w.samples,
                })
                .collect();
            self.model.forward_paged(&mut self.cache, &segs)?
        };
        let decoding = work
            .iter()
            .filter(|w| {
                self.seqs
                    .get(&w.id)
                    .and_then(|s| s.turn.as_ref())
                    .is_some_and(|t| t.phase == Phase::Decoding)
            })
            .count();
        if decoding > 0 {
            self.stats.decode_passes += 1;
            self.stats.decode_rows += decoding as u64;
        }
        if work.len() > decoding {
            self.stats.prefill_passes += 1;
            self.stats.prefill_pieces += (work.len() - decoding) as u64;
        }
        let mut sampled = vec![];
        for w in &work {
            let Some(s) = self.seqs.get_mut(&w.id) else {
                continue;
            };
            s.cached.extend_from_slice(&w.tokens);
            s.pending = None;
            if let Some(t) = s.turn.as_mut()
                && let Phase::Prefilling(d) = t.phase
            {
                self.stats.prefilled += w.tokens.len() as u64;
                t.phase = if w.samples {
                    Phase::Decoding
                } else {
                    Phase::Prefilling(d + w.tokens.len())
                };
            }
            if w.samples {
                sampled.push(w.id);
            }
        }
        let first = self.draw(&sampled, &logits)?;
        let mut draws = vec![(sampled, first)];
        self.decode_on(&mut draws)?;
        self.record(draws, &mut done)?;
        Ok(done)
    }

    fn close(&mut self, seq: SeqId) {
        self.cut(seq, 0);
        self.active.retain(|a| *a != seq);
        self.waiting.retain(|w| *w != seq);
        self.seqs.remove(&seq);
    }

    fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.active.is_empty()
    }
}

fn common_prefix(a: &[i64], b: &[i64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
