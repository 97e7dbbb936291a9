//! The model over a slotted KV cache: the engine's ([`crate::engine`]) view of the transformer.
//!
//! A [`SlotCache`] holds `rows` independent sequences, each in its own row of
//! `[rows, kv_heads, capacity, head_dim]` key and value tensors, its tokens in slots
//! `0..len` (no padding: a token's slot is its position id). Unlike [`super::KvCache`], whose
//! rows move in lockstep, each row here has its own length, so a sequence can join, leave, or
//! pause between turns while the others decode.
//!
//! Two passes:
//! - [`Qwen3::prefill_slot`]: new tokens of one row after what it holds (a prompt, or the
//!   observation after a turn). With nothing cached this is plain causal attention (no mask);
//!   after cached tokens it needs a causal mask offset by the cached length.
//! - [`Qwen3::decode_slots`]: one token for each of rows `0..B`. Rows of equal length need no
//!   mask; rows of different lengths need one key mask per row.
//!
//! Masks are boolean on CPU. On CUDA they are passed as an additive float bias in the
//! activations' kind, which the memory-efficient kernel accepts (a boolean mask sends
//! libtorch's dispatcher to the math kernel); the unmasked cases reach flash attention.

use super::{Linear, Qwen3};
use crate::error::{PolicyError, Result};
use tch::{Device, Kind, Tensor};

#[derive(Debug)]
struct SlotLayer {
    k: Tensor,
    v: Tensor,
    fused_qkv: Option<Linear>,
    fused_gate_up: Option<Tensor>,
}

/// Keys and values of independent sequences, one per row (see the module doc).
#[derive(Debug)]
pub struct SlotCache {
    layers: Vec<SlotLayer>,
    lens: Vec<i64>,
    capacity: i64,
    kind: Kind,
    device: Device,
}

impl SlotCache {
    /// Rows allocated.
    pub fn rows(&self) -> usize {
        self.lens.len()
    }

    /// Slots per row allocated.
    pub fn capacity(&self) -> i64 {
        self.capacity
    }

    /// Tokens held by `row`.
    pub fn len(&self, row: usize) -> i64 {
        self.lens.get(row).copied().unwrap_or(0)
    }

    /// Whether `row` holds no tokens.
    pub fn is_empty(&self, row: usize) -> bool {
        self.len(row) == 0
    }

    /// Forgets everything after the first `len` tokens of `row` (the slots are overwritten by
    /// the next pass).
    pub fn truncate(&mut self, row: usize, len: i64) {
        if let Some(l) = self.lens.get_mut(row) {
            *l = (*l).min(len.max(0));
        }
    }

    /// Reallocates the cache to `rows` rows of `capacity` slots, keeping what fits: rows past
    /// `rows` are dropped (the caller moved what it keeps to the front) and a capacity below
    /// a row's length cuts that row.
    pub fn resize(&mut self, rows: usize, capacity: i64) {
        let (r0, c0) = (self.rows() as i64, self.capacity);
        let (r1, c1) = (rows as i64, capacity.max(1));
        if (r1, c1) == (r0, c0) {
            return;
        }
        let (rk, ck) = (r0.min(r1), c0.min(c1));
        for l in &mut self.layers {
            for t in [&mut l.k, &mut l.v] {
                let s = t.size();
                let fresh = Tensor::zeros([r1, s[1], c1, s[3]], (self.kind, self.device));
                if rk > 0 && ck > 0 {
                    fresh
                        .narrow(0, 0, rk)
                        .narrow(2, 0, ck)
                        .copy_(&t.narrow(0, 0, rk).narrow(2, 0, ck));
                }
                *t = fresh;
            }
        }
        self.lens.resize(r1 as usize, 0);
        for l in &mut self.lens {
            *l = (*l).min(c1);
        }
        self.capacity = c1;
    }

    /// Copies the first `len` tokens of row `from` into row `to` (prefix sharing).
    pub fn copy_prefix(&mut self, from: usize, to: usize, len: i64) {
        let len = len.min(self.len(from));
        if from == to || len <= 0 {
            return;
        }
        for l in &mut self.layers {
            for t in [&l.k, &l.v] {
                let src = t.narrow(0, from as i64, 1).narrow(2, 0, len);
                t.narrow(0, to as i64, 1).narrow(2, 0, len).copy_(&src);
            }
        }
        self.lens[to] = len;
    }

    /// Exchanges rows `a` and `b` (the engine keeps decoding rows contiguous).
    pub fn swap(&mut self, a: usize, b: usize) {
        if a == b || a >= self.rows() || b >= self.rows() {
            return;
        }
        let n = self.len(a).max(self.len(b));
        if n > 0 {
            for l in &mut self.layers {
                for t in [&l.k, &l.v] {
                    let mut ra = t.narrow(0, a as i64, 1).narrow(2, 0, n);
                    let mut rb = t.narrow(0, b as i64, 1).narrow(2, 0, n);
                    let tmp = ra.copy();
                    ra.copy_(&rb);
                    rb.copy_(&tmp);
                }
            }
        }
        self.lens.swap(a, b);
    }

    /// Bytes one slot takes over all layers (keys and values).
    pub fn slot_bytes(&self) -> usize {
        self.layers.first().map_or(0, |l| {
            let s = l.k.size();
            2 * (s[1] * s[3]) as usize * self.kind.elt_size_in_bytes()
        }) * self.layers.len()
    }
}

/// A mask for `scaled_dot_product_attention`: booleans (true = attend) on CPU, an additive
/// bias (0 or -inf) in `kind` on CUDA (see the module doc).
fn for_device(mask: Tensor, kind: Kind, device: Device) -> Tensor {
    if device.is_cuda() {
        Tensor::zeros(mask.size(), (kind, device))
            .masked_fill(&mask.logical_not(), f64::NEG_INFINITY)
    } else {
        mask
    }
}

impl Qwen3 {
    /// An empty slot cache of `rows` rows and `capacity` slots each (both may grow). Small
    /// models get fused projections, as [`Qwen3::new_cache`] explains; the cache must not
    /// outlive an optimiser step.
    pub fn new_slot_cache(&self, rows: usize, capacity: i64) -> SlotCache {
        let c = &self.cfg;
        let (kind, device) = (self.embed_tokens.kind(), self.embed_tokens.device());
        let shape = [rows as i64, c.num_key_value_heads, capacity, c.head_dim];
        let layers = self
            .fused_projections()
            .into_iter()
            .map(|(fused_qkv, fused_gate_up)| SlotLayer {
                k: Tensor::zeros(shape, (kind, device)),
                v: Tensor::zeros(shape, (kind, device)),
                fused_qkv,
                fused_gate_up,
            })
            .collect();
        SlotCache {
            layers,
            lens: vec![0; rows],
            capacity,
            kind,
            device,
        }
    }

    /// Runs `ids` through the model after the tokens `row` holds, appends their keys and
    /// values, and returns the last token's logits [vocab] (float32, padding rows at -inf).
    pub fn prefill_slot(&self, cache: &mut SlotCache, row: usize, ids: &[i64]) -> Result<Tensor> {
        let t = ids.len() as i64;
        let start = cache.len(row);
        if row >= cache.rows() || t == 0 || start + t > cache.capacity {
            return Err(PolicyError::InvalidInput(format!(
                "slot cache: row {row} of {} holds {start} of {} slots; got {t} tokens",
                cache.rows(),
                cache.capacity
            )));
        }
        let dev = cache.device;
        let ids = Tensor::from_slice(ids).to_device(dev).unsqueeze(0);
        self.check_ids(&ids)?;
        let total = start + t;
        let mut x = Tensor::embedding(&self.embed_tokens, &ids, -1, false, false);
        let pos = Tensor::arange_start(start, total, (Kind::Int64, dev)).unsqueeze(0);
        let rope = self.rope(&pos, x.kind());
        // After cached tokens, query i (slot start + i) sees keys 0..=start + i.
        let mask = (start > 0).then(|| {
            let qi = Tensor::arange_start(start, total, (Kind::Int64, dev)).view([t, 1]);
            let kj = Tensor::arange(total, (Kind::Int64, dev)).view([1, total]);
            for_device(kj.le_tensor(&qi).view([1, 1, t, total]), x.kind(), dev)
        });
        let r = row as i64;
        for (l, lc) in self.layers.iter().zip(&cache.layers) {
            let a = &l.self_attn;
            let (q, k, v) = a.qkv(&l.input_layernorm.forward(&x), &rope, lc.fused_qkv.as_ref());
            lc.k.narrow(0, r, 1).narrow(2, start, t).copy_(&k);
            lc.v.narrow(0, r, 1).narrow(2, start, t).copy_(&v);
            let keys = lc.k.narrow(0, r, 1).narrow(2, 0, total);
            let values = lc.v.narrow(0, r, 1).narrow(2, 0, total);
            let y = sdpa(a, &q, &keys, &values, mask.as_ref(), mask.is_none());
            x = &x + a.output(&y);
            let h = l.post_attention_layernorm.forward(&x);
            x = &x + l.mlp.forward(&h, lc.fused_gate_up.as_ref());
        }
        cache.lens[row] = total;
        let h = self.norm.forward(&x.select(1, t - 1));
        Ok(self.mask_padded_vocab(self.logits(&h)).squeeze_dim(0))
    }

    /// Feeds one token to each of rows `0..ids.len()` (each after the tokens it holds) and
    /// returns their next-token logits [B, vocab] (float32, padding rows at -inf). The ids are
    /// the sampler's own, so they are not range-checked.
    pub fn decode_slots(&self, cache: &mut SlotCache, ids: &[i64]) -> Result<Tensor> {
        let b = ids.len();
        if b == 0 || b > cache.rows() {
            return Err(PolicyError::InvalidInput(format!(
                "slot cache: decode of {b} rows in a cache of {}",
                cache.rows()
            )));
        }
        let lens = &cache.lens[..b];
        if let Some(r) = lens.iter().position(|&l| l + 1 > cache.capacity) {
            return Err(PolicyError::InvalidInput(format!(
                "slot cache: row {r} is full ({} slots)",
                cache.capacity
            )));
        }
        let dev = cache.device;
        let longest = lens.iter().copied().max().unwrap_or(0) + 1;
        let uniform = lens.iter().all(|&l| l + 1 == longest);
        let pos = Tensor::from_slice(lens).to_device(dev);
        let ids = Tensor::from_slice(ids).to_device(dev).unsqueeze(1);
        let mut x = Tensor::embedding(&self.embed_tokens, &ids, -1, false, false);
        let rope = self.rope(&pos.unsqueeze(1), x.kind());
        // Row r's new token sits in slot lens[r] and sees slots 0..=lens[r]; rows of one length
        // see every key of the window, so no mask.
        let mask = (!uniform).then(|| {
            let kj = Tensor::arange(longest, (Kind::Int64, dev)).view([1, longest]);
            for_device(
                kj.le_tensor(&pos.view([b as i64, 1]))
                    .view([b as i64, 1, 1, longest]),
                x.kind(),
                dev,
            )
        });
        let rows = Tensor::arange(b as i64, (Kind::Int64, dev));
        for (l, lc) in self.layers.iter().zip(&mut cache.layers) {
            let a = &l.self_attn;
            let (q, k, v) = a.qkv(&l.input_layernorm.forward(&x), &rope, lc.fused_qkv.as_ref());
            let at = [Some(rows.shallow_clone()), None, Some(pos.shallow_clone())];
            let _ = lc.k.index_put_(&at, &k.squeeze_dim(2), false);
            let _ = lc.v.index_put_(&at, &v.squeeze_dim(2), false);
            let keys = lc.k.narrow(0, 0, b as i64).narrow(2, 0, longest);
            let values = lc.v.narrow(0, 0, b as i64).narrow(2, 0, longest);
            let y = sdpa(a, &q, &keys, &values, mask.as_ref(), false);
            x = &x + a.output(&y);
            let h = l.post_attention_layernorm.forward(&x);
            x = &x + l.mlp.forward(&h, lc.fused_gate_up.as_ref());
        }
        for l in &mut cache.lens[..b] {
            *l += 1;
        }
        let h = self.norm.forward(&x.squeeze_dim(1));
        Ok(self.mask_padded_vocab(self.logits(&h)))
    }
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
