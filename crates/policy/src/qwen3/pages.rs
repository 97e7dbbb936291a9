//! The model over a paged KV cache: the engine's ([`crate::engine`]) view of the transformer.
//!
//! A [`PagedCache`] is a pool of fixed-size blocks of key and value slots per layer
//! (`[blocks x block_tokens, kv_heads, head_dim]`). A sequence owns no memory of its own: its
//! *block table* lists the blocks that hold its tokens in order (token `p` sits in slot
//! `table[p / block] * block + p % block`), so memory follows the tokens held, not the longest
//! sequence, and two sequences that share a prompt prefix can list the same blocks. Which
//! blocks are free, shared or whose is the engine's business; the cache only stores.
//!
//! One pass, [`Qwen3::forward_paged`], runs any mix of *segments*: one new token of a decoding
//! sequence, or a piece of a prompt after what its table already holds. Every token of every
//! segment goes through the projections and the MLP as one batch. Decoding rows in float32 on
//! the CPU read their keys where the blocks lie (`spade_kernels::paged_decode_attention`, one
//! call for all rows); elsewhere attention reads a segment's keys by gathering its slots
//! (decoding rows together, with a key mask where their lengths differ), since libtorch offers
//! no paged-attention kernel. Prompt pieces are gathered on every device (each on its own,
//! causal after its cached part): a prompt is read once per token it adds, decoding once per
//! token. What the gather costs and what reading in place saves: `docs/benchmarks.md`.
//!
//! Decoding rows that list the same blocks (a shared prompt) read them once and merge the
//! parts by log-sum-exp ([`cascade`]); rows that share nothing take the plain path.
//!
//! Masks are boolean on CPU. On CUDA they are passed as an additive float bias in the
//! activations' kind, which the memory-efficient kernel accepts (a boolean mask sends
//! libtorch's dispatcher to the math kernel); the unmasked cases reach flash attention.

mod cascade;

use super::{Linear, Qwen3};
use crate::error::{PolicyError, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use tch::{Device, Kind, Tensor};

#[derive(Debug)]
struct PagedLayer {
    /// [slots, kv_heads, head_dim]
    k: Tensor,
    v: Tensor,
    fused_qkv: Option<Linear>,
    fused_gate_up: Option<Tensor>,
}

/// Blocks of key and value slots (see the module doc).
#[derive(Debug)]
pub struct PagedCache {
    layers: Vec<PagedLayer>,
    block: usize,
    blocks: usize,
    kind: Kind,
    device: Device,
    /// Whether decoding rows read the blocks they share once ([`cascade::shared_runs`]); on
    /// unless a comparison turns it off.
    share_reads: bool,
    /// Whether decoding rows read their blocks in place (`spade_kernels`) where the pool is
    /// float32 on the CPU; on unless a comparison turns it off.
    read_in_place: bool,
}

/// Whether new caches read shared blocks once ([`set_share_reads_default`]).
static SHARE_READS: AtomicBool = AtomicBool::new(true);

/// Whether new caches' decoding rows read blocks in place where the kernel applies
/// ([`set_read_in_place_default`]).
static READ_IN_PLACE: AtomicBool = AtomicBool::new(true);

/// Whether caches made from now on let decoding rows read their blocks where they lie (the
/// default; float32 on the CPU) or gather them first as on other devices: a switch for
/// comparing the two (`spade model bench-rollout --read-in-place off`).
pub fn set_read_in_place_default(on: bool) {
    READ_IN_PLACE.store(on, Ordering::Relaxed);
}

/// Whether caches made from now on read the blocks that decoding rows share once (the
/// default) or every row all of its keys: a switch for comparing the two
/// (`spade model bench-rollout --share-reads off`).
pub fn set_share_reads_default(on: bool) {
    SHARE_READS.store(on, Ordering::Relaxed);
}

/// A piece of work for [`Qwen3::forward_paged`]: `tokens` of a sequence whose first `start`
/// tokens are in the slots `table` lists; the pass writes the new tokens' keys and values
/// after them (the table must already cover `start + tokens.len()` slots).
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    pub table: &'a [u32],
    pub start: usize,
    pub tokens: &'a [i64],
    /// Whether the caller wants the logits of the segment's last token.
    pub logits: bool,
}

impl PagedCache {
    /// Blocks allocated.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Turns the shared-block reads of decoding rows (see the module doc) on or off: off, every
    /// row gathers all of its keys, which gives the same attention up to float rounding.
    pub fn set_share_reads(&mut self, on: bool) {
        self.share_reads = on;
    }

    /// Turns in-place reads of decoding rows (see the module doc) on or off: off, they gather
    /// their blocks and libtorch's attention reads the copy, which gives the same attention up
    /// to float rounding.
    pub fn set_read_in_place(&mut self, on: bool) {
        self.read_in_place = on;
    }

    /// Whether this pass's decoding rows read their blocks in place.
    fn reads_in_place(&self) -> bool {
        self.read_in_place && self.device == Device::Cpu && self.kind == Kind::Float
    }

    /// Reallocates the pool to `blocks` blocks (never fewer than it has), keeping every slot
    /// where it is, so block tables stay valid.
    pub fn grow(&mut self, blocks: usize) {
        if blocks <= self.blocks {
            return;
        }
        let (old, new) = (
            (self.blocks * self.block) as i64,
            (blocks * self.block) as i64,
        );
        for l in &mut self.layers {
            for t in [&mut l.k, &mut l.v] {
                let s = t.size();
                let fresh = Tensor::zeros([new, s[1], s[2]], (self.kind, self.device));
                if old > 0 {
                    fresh.narrow(0, 0, old).copy_(t);
                }
                *t = fresh;
            }
        }
        self.blocks = blocks;
    }

    /// Copies the first `n` slots of block `from` into block `to` (a shared block's part a
    /// sequence is about to write after).
    pub fn copy_block(&mut self, from: u32, to: u32, n: usize) {
        let n = n.min(self.block) as i64;
        if from == to || n == 0 {
            return;
        }
        let (f, t) = (
            i64::from(from) * self.block as i64,
            i64::from(to) * self.block as i64,
        );
        for l in &mut self.layers {
            for x in [&l.k, &l.v] {
                x.narrow(0, t, n).copy_(&x.narrow(0, f, n));
            }
        }
    }

    /// The slot of position `p` of a sequence with block table `table`.
    fn slot(&self, table: &[u32], p: usize) -> i64 {
        (table[p / self.block] as usize * self.block + p % self.block) as i64
    }

    /// The block tables of rows reading their first `len` keys each, padded with block 0
    /// (which the caller masks) to the longest, as [rows, blocks] on the device: a table is
    /// block-size times shorter than the slots it stands for.
    fn tables(&self, rows: &[(&[u32], usize)]) -> Tensor {
        let longest = rows.iter().map(|r| r.1).max().unwrap_or(1);
        let nb = longest.div_ceil(self.block);
        let mut flat = Vec::with_capacity(rows.len() * nb);
        for (table, len) in rows {
            let held = len.div_ceil(self.block);
            flat.extend(table[..held].iter().map(|&b| i64::from(b)));
            flat.extend(std::iter::repeat_n(0, nb - held));
        }
        upload(&flat, self.device).view([rows.len() as i64, nb as i64])
    }
}

/// The keys or values a layer's `pool` holds for rows with block tables `tables`
/// ([`PagedCache::tables`]) of `block`-slot blocks, as [rows, kv_heads, longest, head_dim]:
/// whole blocks are copied (contiguous runs of block x kv_heads x head_dim), then the window
/// is cut to `longest`.
fn gather(pool: &Tensor, tables: &Tensor, block: i64, longest: i64) -> Tensor {
    let (n, nb) = tables.size2().unwrap_or((0, 0));
    let s = pool.size();
    pool.view([-1, block * s[1] * s[2]])
        .index_select(0, &tables.view([-1]))
        .view([n, nb * block, s[1], s[2]])
        .narrow(1, 0, longest)
        .transpose(1, 2)
}

/// A mask for `scaled_dot_product_attention`: booleans (true = attend) on CPU, an additive
/// bias (0 or -inf) in `kind` on CUDA (see the module doc).
fn for_device(mask: Tensor, kind: Kind, device: Device) -> Tensor {
    if device.is_cuda() {
        additive(&mask, kind)
    } else {
        mask
    }
}

/// `values` (a pass's token ids, positions, slots, tables) on `device`. On CUDA the copy is
/// queued without waiting for the stream (`non_blocking`): libtorch's blocking copy
/// synchronises the stream after every upload, which would stop the GPU several times a pass
/// and undo the engine's decode window. Safe from pageable memory: CUDA stages such a copy
/// before the call returns, so `values` may be dropped at once.
pub fn upload<T: tch::kind::Element>(values: &[T], device: Device) -> Tensor {
    let t = Tensor::from_slice(values);
    if device.is_cuda() {
        t.to_device_(device, T::KIND, true, false)
    } else {
        t
    }
}

/// A boolean mask (true = attend) as an additive bias in `kind`: 0 or -inf.
fn additive(mask: &Tensor, kind: Kind) -> Tensor {
    Tensor::zeros(mask.size(), (kind, mask.device()))
        .masked_fill(&mask.logical_not(), f64::NEG_INFINITY)
}

/// A prompt piece of a pass.
struct Piece {
    /// Its first token's index in the pass, and its length.
    at: i64,
    len: i64,
    /// Tokens cached before it.
    start: i64,
    /// With cached tokens: its block table ([`PagedCache::tables`]), and the causal mask
    /// after them.
    keys: Option<(Tensor, Tensor)>,
}

/// Decoding rows attended together.
struct Group {
    /// Which rows (None: all of them, in order).
    rows: Option<Tensor>,
    /// Their block tables [rows x blocks], padded with block 0 (masked).
    tables: Tensor,
    longest: i64,
    mask: Option<Tensor>,
}

/// Most key slots one group of decoding rows gathers per layer (keys and values each): the
/// gathered copy is what paging costs, so a pass gathers a bounded amount at a time (the
/// allocator reuses it) and rows of similar length go together (little padding).
const GROUP_SLOTS: usize = 16_384;

/// Where a pass's tokens go and what their attention reads, worked out once for all layers.
struct Plan {
    /// Segments of one token, in the order they come (first in the pass).
    decode: usize,
    /// The decoding rows, in groups of similar length (each row's own blocks where it shares
    /// some); none where they read in place.
    groups: Vec<Group>,
    /// Where decoding rows read in place: each row's blocks (its own where it shares some) and
    /// how many keys they hold, in pass order.
    in_place: Option<Vec<(Vec<u32>, usize)>>,
    /// Runs of blocks that several decoding rows share, read once for all of them.
    shared: Vec<cascade::Shared>,
    pieces: Vec<Piece>,
    /// Where each token's keys and values are written.
    slots: Tensor,
}

impl Qwen3 {
    /// An empty paged cache of `block_tokens` slots per block (the pool grows with
    /// [`PagedCache::grow`]). Small models get fused projections, as [`Qwen3::new_cache`]
    /// explains; the cache must not outlive an optimiser step.
    pub fn new_paged_cache(&self, block_tokens: usize) -> PagedCache {
        let c = &self.cfg;
        let (kind, device) = (self.embed_tokens.kind(), self.embed_tokens.device());
        let shape = [0, c.num_key_value_heads, c.head_dim];
        let layers = self
            .fused_projections()
            .into_iter()
            .map(|(fused_qkv, fused_gate_up)| PagedLayer {
                k: Tensor::zeros(shape, (kind, device)),
                v: Tensor::zeros(shape, (kind, device)),
                fused_qkv,
                fused_gate_up,
            })
            .collect();
        PagedCache {
            layers,
            block: block_tokens.max(1),
            blocks: 0,
            kind,
            device,
            share_reads: SHARE_READS.load(Ordering::Relaxed),
            read_in_place: READ_IN_PLACE.load(Ordering::Relaxed),
        }
    }

    /// Runs `segs` (see [`Segment`]; one-token segments must come first) as one pass: writes
    /// their keys and values into the slots their tables give and returns the last-token
    /// logits [n, vocab] of the segments that asked for them, in order (float32, padding rows
    /// at -inf; an empty tensor when none asked). Token ids are not range-checked: the engine
    /// checks them when a request arrives.
    pub fn forward_paged(&self, cache: &mut PagedCache, segs: &[Segment<'_>]) -> Result<Tensor> {
        self.forward_paged_with(cache, segs, None)
    }

    /// [`Qwen3::forward_paged`] where the one-token segments' inputs are `drawn` ([n] token
    /// ids on the cache's device, one per one-token segment, in order) instead of their
    /// `tokens`: the engine's decode window feeds the tokens it just sampled without reading
    /// them back to the host. The ids are not range-checked (they come from the sampler).
    pub fn forward_paged_with(
        &self,
        cache: &mut PagedCache,
        segs: &[Segment<'_>],
        drawn: Option<&Tensor>,
    ) -> Result<Tensor> {
        // Sampling never back-propagates. With the trainable weights recording, the pool's
        // in-place writes would chain every pass's graph to the next and keep each gathered
        // key copy alive until the engine is dropped (13 GB where 2 GB suffice, measured).
        let _no_grad = tch::no_grad_guard();
        let plan = self.plan(cache, segs)?;
        let dev = cache.device;
        let pos: Vec<i64> = segs
            .iter()
            .flat_map(|s| (s.start..s.start + s.tokens.len()).map(|p| p as i64))
            .collect();
        let ids = match drawn {
            None => {
                let ids: Vec<i64> = segs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
                upload(&ids, dev)
            }
            Some(d) => {
                if d.size() != [plan.decode as i64] || d.device() != dev {
                    return Err(PolicyError::InvalidInput(format!(
                        "paged cache: {:?} drawn tokens on {:?} for {} one-token segments on {dev:?}",
                        d.size(),
                        d.device(),
                        plan.decode
                    )));
                }
                let rest: Vec<i64> = segs[plan.decode..]
                    .iter()
                    .flat_map(|s| s.tokens.iter().copied())
                    .collect();
                if rest.is_empty() {
                    d.to_kind(Kind::Int64)
                } else {
                    Tensor::cat(&[d.to_kind(Kind::Int64), upload(&rest, dev)], 0)
                }
            }
        }
        .unsqueeze(0);
        let mut x = Tensor::embedding(&self.embed_tokens, &ids, -1, false, false);
        let rope = self.rope(&upload(&pos, dev).unsqueeze(0), x.kind());
        let block = cache.block as i64;
        for (l, lc) in self.layers.iter().zip(&mut cache.layers) {
            let a = &l.self_attn;
            let (q, k, v) = a.qkv(&l.input_layernorm.forward(&x), &rope, lc.fused_qkv.as_ref());
            // [1, kv_heads, T, head_dim] -> [T, kv_heads, head_dim] into the pool.
            let tok_major = |t: &Tensor| t.squeeze_dim(0).transpose(0, 1);
            let _ = lc.k.index_copy_(0, &plan.slots, &tok_major(&k));
            let _ = lc.v.index_copy_(0, &plan.slots, &tok_major(&v));
            let mut parts = Vec::with_capacity(plan.pieces.len() + 1);
            if plan.decode > 0 && !plan.shared.is_empty() {
                let qd = q.narrow(2, 0, plan.decode as i64).permute([2, 1, 0, 3]);
                let y = cascade::cascade(a, &qd, &plan, &lc.k, &lc.v, block)?;
                parts.push(y.permute([2, 1, 0, 3]));
            } else if let (true, Some(reads)) = (plan.decode > 0, &plan.in_place) {
                let qd = q.narrow(2, 0, plan.decode as i64).permute([2, 1, 0, 3]);
                let (y, _) = in_place(a, &qd, reads, &lc.k, &lc.v, cache.block)?;
                parts.push(y.permute([2, 1, 0, 3]));
            } else if plan.decode > 0 {
                // Queries [1, H, b, d] -> [b, H, 1, d], one row per sequence.
                let qd = q.narrow(2, 0, plan.decode as i64).permute([2, 1, 0, 3]);
                let mut yd = if plan.groups.len() == 1 && plan.groups[0].rows.is_none() {
                    None
                } else {
                    Some(qd.zeros_like())
                };
                for g in &plan.groups {
                    let gather = |pool: &Tensor| gather(pool, &g.tables, block, g.longest);
                    let q_rows = match &g.rows {
                        Some(r) => qd.index_select(0, r),
                        None => qd.shallow_clone(),
                    };
                    let y = decode_attention(
                        a,
                        &q_rows,
                        &gather(&lc.k),
                        &gather(&lc.v),
                        g.mask.as_ref(),
                    );
                    match (&mut yd, &g.rows) {
                        (Some(out), Some(r)) => {
                            let _ = out.index_copy_(0, r, &y);
                        }
                        _ => yd = Some(y),
                    }
                }
                if let Some(y) = yd {
                    parts.push(y.permute([2, 1, 0, 3]));
                }
            }
            for Piece {
                at,
                len: t,
                start,
                keys,
            } in &plan.pieces
            {
                let qs = q.narrow(2, *at, *t);
                let y = match keys {
                    None => sdpa(
                        a,
                        &qs,
                        &k.narrow(2, *at, *t),
                        &v.narrow(2, *at, *t),
                        None,
                        true,
                    ),
                    Some((tables, mask)) => {
                        let gather = |pool: &Tensor| gather(pool, tables, block, start + t);
                        sdpa(a, &qs, &gather(&lc.k), &gather(&lc.v), Some(mask), false)
                    }
                };
                parts.push(y);
            }
            let y = if parts.len() == 1 {
                parts.remove(0)
            } else {
                Tensor::cat(&parts, 2)
            };
            x = &x + a.output(&y);
            let h = l.post_attention_layernorm.forward(&x);
            x = &x + l.mlp.forward(&h, lc.fused_gate_up.as_ref());
        }
        let mut last = vec![];
        let mut end = 0i64;
        for s in segs {
            end += s.tokens.len() as i64;
            if s.logits {
                last.push(end - 1);
            }
        }
        if last.is_empty() {
            return Ok(Tensor::zeros([0, self.cfg.vocab_size], (Kind::Float, dev)));
        }
        let h = self
            .norm
            .forward(&x.squeeze_dim(0).index_select(0, &upload(&last, dev)));
        Ok(self.mask_padded_vocab(self.logits(&h)))
    }

    /// Checks `segs` against the cache and works out the pass's slots and masks.
    fn plan(&self, cache: &PagedCache, segs: &[Segment<'_>]) -> Result<Plan> {
        let bad = |why: String| Err(PolicyError::InvalidInput(format!("paged cache: {why}")));
        if segs.is_empty() {
            return bad("a pass of no segments".into());
        }
        let decode = segs.iter().take_while(|s| s.tokens.len() == 1).count();
        let (dev, kind) = (cache.device, self.weight_kind());
        let mut slots = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let reach = s.start + s.tokens.len();
            if s.tokens.is_empty() {
                return bad(format!("segment {i} has no tokens"));
            }
            if s.table.len() * cache.block < reach {
                return bad(format!(
                    "segment {i} reaches slot {reach} but its table covers {}",
                    s.table.len() * cache.block
                ));
            }
            if let Some(b) = s.table.iter().find(|&&b| b as usize >= cache.blocks) {
                return bad(format!("segment {i} names block {b} of {}", cache.blocks));
            }
            slots.extend((s.start..reach).map(|p| cache.slot(s.table, p)));
        }
        let slots = upload(&slots, dev);
        let (groups, shared, in_place) = decode_groups(cache, &segs[..decode], kind);
        let mut pieces = vec![];
        let mut at = decode as i64;
        for s in &segs[decode..] {
            let (t, start) = (s.tokens.len() as i64, s.start as i64);
            let keys = (start > 0).then(|| {
                let total = start + t;
                // Query i (position start + i) sees keys 0..=start + i.
                let qi = Tensor::arange_start(start, total, (Kind::Int64, dev)).view([t, 1]);
                let kj = Tensor::arange(total, (Kind::Int64, dev)).view([1, total]);
                let mask = for_device(kj.le_tensor(&qi).view([1, 1, t, total]), kind, dev);
                (cache.tables(&[(s.table, total as usize)]), mask)
            });
            pieces.push(Piece {
                at,
                len: t,
                start,
                keys,
            });
            at += t;
        }
        Ok(Plan {
            decode,
            groups,
            in_place,
            shared,
            pieces,
            slots,
        })
    }
}

/// What each decoding row reads alone where rows read in place (its blocks and key count).
type InPlace = Option<Vec<(Vec<u32>, usize)>>;

/// The decoding rows `segs` in groups to attend together, and the runs of blocks they share
/// ([`cascade::shared_runs`], when the cache reads shared blocks once): sorted by the length of
/// what each row reads alone, a group closes when its gather would pass [`GROUP_SLOTS`] or its
/// shortest row is under half its longest. Where the rows read in place, no groups: what each
/// row reads alone, in pass order.
fn decode_groups(
    cache: &PagedCache,
    segs: &[Segment<'_>],
    kind: Kind,
) -> (Vec<Group>, Vec<cascade::Shared>, InPlace) {
    let dev = cache.device;
    let (runs, own) = if cache.share_reads {
        cascade::shared_runs(cache.block, segs)
    } else {
        (vec![], vec![])
    };
    // What row i reads alone: its own blocks and how many of their slots hold keys.
    let reads: Vec<(&[u32], usize)> = segs
        .iter()
        .enumerate()
        .map(|(i, s)| match own.get(i) {
            Some(o) if !runs.is_empty() => {
                let shared = (s.start + 1).div_ceil(cache.block) - o.len();
                (o.as_slice(), s.start + 1 - shared * cache.block)
            }
            _ => (s.table, s.start + 1),
        })
        .collect();
    let shared = cascade::shared(segs, runs, dev);
    if cache.reads_in_place() {
        let reads = reads
            .iter()
            .map(|&(blocks, len)| (blocks[..len.div_ceil(cache.block)].to_vec(), len))
            .collect();
        return (vec![], shared, Some(reads));
    }
    // The cascade's kernels take masks as an additive bias (libtorch's CPU flash kernel
    // refuses booleans).
    let additive_masks = !shared.is_empty();
    let mut order: Vec<usize> = (0..segs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(reads[i].1));
    let mut spans: Vec<Vec<usize>> = vec![];
    for i in order {
        let len = reads[i].1;
        match spans.last_mut() {
            Some(g) if (g.len() + 1) * reads[g[0]].1 <= GROUP_SLOTS && 2 * len >= reads[g[0]].1 => {
                g.push(i)
            }
            _ => spans.push(vec![i]),
        }
    }
    let whole = spans.len() == 1;
    let groups = spans
        .into_iter()
        .map(|mut rows| {
            if whole {
                rows.sort_unstable();
            }
            let reads: Vec<(&[u32], usize)> = rows.iter().map(|&i| reads[i]).collect();
            let lens: Vec<usize> = reads.iter().map(|r| r.1).collect();
            let longest = lens.iter().copied().max().unwrap_or(1);
            let n = rows.len() as i64;
            let tables = cache.tables(&reads);
            // Rows of one length see every key of the window, so no mask.
            let mask = lens.iter().any(|&l| l != longest).then(|| {
                let lens: Vec<i64> = lens.iter().map(|&l| l as i64).collect();
                let kj = Tensor::arange(longest as i64, (Kind::Int64, dev)).view([1, -1]);
                let m =
                    kj.lt_tensor(&upload(&lens, dev).view([-1, 1]))
                        .view([n, 1, 1, longest as i64]);
                if additive_masks {
                    additive(&m, kind)
                } else {
                    for_device(m, kind, dev)
                }
            });
            let idx: Vec<i64> = rows.iter().map(|&i| i as i64).collect();
            Group {
                // One group holds every row, put back in pass order above.
                rows: (!whole).then(|| upload(&idx, dev)),
                tables,
                longest: longest as i64,
                mask,
            }
        })
        .collect();
    (groups, shared, None)
}

/// One query token per row ([rows, heads, 1, head_dim]) over its row's keys and values
/// ([rows, kv_heads, keys, head_dim]). With grouped-query attention the heads that share a key
/// head become that key head's query rows ([rows, kv_heads, heads / kv_heads, head_dim]):
/// libtorch's grouped path repeats every gathered key and value once per query head and then
/// multiplies one query row at a time (a matrix-vector product per head), which made
/// decoding memory-bound on long contexts; as query rows the keys are read once per group and
/// the fused kernel takes them (one token's queries need no causal mask among themselves).
/// Without grouping (as many key heads as query heads) the reshape changes nothing.
fn decode_attention(
    a: &super::Attention,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> Tensor {
    let rows = q.size()[0];
    let groups = q.reshape([rows, a.n_kv, a.n_heads / a.n_kv, a.head_dim]);
    let scale = (a.head_dim as f64).powf(-0.5);
    Tensor::scaled_dot_product_attention(&groups, k, v, mask, 0.0, false, scale, false)
        .reshape([rows, a.n_heads, 1, a.head_dim])
}

/// [`decode_attention`] reading the pools `k` and `v` in place (`spade_kernels`): queries
/// [rows, heads, 1, head_dim] (float32, CPU), each row's blocks and key count in `reads`.
/// Returns the output [rows, heads, 1, head_dim] and each query's log-sum-exp [rows, kv_heads,
/// heads / kv_heads, 1] (for [`cascade`]).
fn in_place(
    a: &super::Attention,
    q: &Tensor,
    reads: &[(Vec<u32>, usize)],
    k: &Tensor,
    v: &Tensor,
    block: usize,
) -> Result<(Tensor, Tensor)> {
    let rows = q.size()[0];
    let groups = q.reshape([rows, a.n_kv, a.n_heads / a.n_kv, a.head_dim]);
    let reads: Vec<spade_kernels::Reads<'_>> =
        reads.iter().map(|(b, len)| (b.as_slice(), *len)).collect();
    let scale = (a.head_dim as f64).powf(-0.5);
    let (y, lse) = spade_kernels::paged_decode_attention(&groups, k, v, block, &reads, scale)
        .map_err(PolicyError::InvalidInput)?;
    Ok((y.reshape([rows, a.n_heads, 1, a.head_dim]), lse))
}

/// Attention with an explicit causal switch: a single query over a window must not be causal
/// (libtorch aligns the causal triangle top-left, so it would see only the first key).
fn sdpa(
    a: &super::Attention,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
) -> Tensor {
    let scale = (a.head_dim as f64).powf(-0.5);
    Tensor::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale, a.n_kv != a.n_heads)
}
