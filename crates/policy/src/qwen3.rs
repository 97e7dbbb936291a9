//! The decoder-only transformer of Hugging Face's `Qwen3ForCausalLM`, with the sparse
//! feed-forward of [`moe`] its mixture-of-experts variant `Qwen3MoeForCausalLM`, and the two
//! families that differ from it only in details [`Config`] reads from `config.json`:
//! `Qwen2ForCausalLM` (Qwen2, Qwen2.5: q/k/v biases, no q/k norm) and `LlamaForCausalLM`
//! (Llama 2/3, SmolLM2: no q/k norm, optional biases, `llama3`/`linear` rope scaling). The type
//! keeps its first family's name.
//!
//! References: transformers `models/{qwen3,qwen2,llama}/modeling_*.py` (5.24, which this
//! matches to 1e-4 in float32, see `tests/hf_reference.rs`); the Qwen3 technical report (arXiv
//! 2505.09388).
//! Architecture per layer: `x + attn(rms(x))`, then `x + mlp(rms(x))`, where attention is
//! grouped-query attention with (Qwen3 only) a per-head RMSNorm on queries and keys *before*
//! rotary embeddings (rotate-half layout, theta from the config), scale `head_dim^-0.5`, and the MLP is
//! SwiGLU `down(silu(gate(x)) * up(x))`. Variables carry the Hugging Face names
//! (`model.layers.3.self_attn.q_norm.weight`), so checkpoints load by name.
//!
//! Three ways to run it: [`Qwen3::forward`] over whole right-padded sequences (causal attention
//! only); [`Qwen3::forward_cached`] over a [`KvCache`] (sampling; left padding with an explicit
//! mask, positions counted from each row's first real token as transformers' `generate` does);
//! and, for training, packed micro-batches (`packed`: several sequences in one row with a
//! block-diagonal causal mask, log-probs a chunk of tokens at a time, optional per-layer
//! activation recompute).

pub mod config;
mod moe;
mod packed;
mod pages;

pub use config::{Config, Family, Moe, RopeScaling};
pub use packed::{PackedIds, PassOptions, PassReport, WeightUnits};
pub use pages::{PagedCache, Segment, set_read_in_place_default, set_share_reads_default, upload};

use crate::error::{PolicyError, Result};
use tch::{Kind, Tensor, nn, nn::Init};

/// Models up to this size (weights in memory) decode with fused projections; see
/// [`Qwen3::new_cache`].
pub const FUSE_LIMIT_BYTES: usize = 1 << 30;

/// How new weights are filled: zeros when a checkpoint will overwrite them, or a normal
/// distribution (transformers' `initializer_range`) for a fresh model.
#[derive(Debug, Clone, Copy)]
pub enum WeightInit {
    Zeros,
    Normal { std: f64 },
}

impl WeightInit {
    fn init(self) -> Init {
        match self {
            WeightInit::Zeros => Init::Const(0.0),
            WeightInit::Normal { std } => Init::Randn {
                mean: 0.0,
                stdev: std,
            },
        }
    }
}

#[derive(Debug)]
struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn new(vs: nn::Path<'_>, size: i64, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: vs.f_ones("weight", &[size])?,
            eps,
        })
    }

    /// `weight * x / sqrt(mean(x^2) + eps)` over the last dimension. libtorch's fused kernel
    /// computes in float32 whatever the input kind, as transformers does; one dispatched op
    /// instead of eight matters for small models, where per-op overhead dominates.
    fn forward(&self, x: &Tensor) -> Tensor {
        let n = self.weight.size();
        x.rms_norm(n.as_slice(), Some(&self.weight), self.eps)
    }
}

#[derive(Debug)]
struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    fn new(vs: nn::Path<'_>, inp: i64, out: i64, bias: bool, init: WeightInit) -> Result<Self> {
        Ok(Self {
            weight: vs.f_var("weight", &[out, inp], init.init())?,
            bias: bias.then(|| vs.f_zeros("bias", &[out])).transpose()?,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

#[derive(Debug)]
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    /// Qwen3's per-head norms; None for Qwen2 and Llama.
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    n_heads: i64,
    n_kv: i64,
    head_dim: i64,
}

impl Attention {
    fn new(vs: nn::Path<'_>, c: &Config, init: WeightInit) -> Result<Self> {
        let (h, hd, b) = (c.hidden_size, c.head_dim, c.qkv_bias());
        let (q, kv) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
        let norm = |name: &str| {
            c.qk_norm()
                .then(|| RmsNorm::new(&vs / name, hd, c.rms_norm_eps))
                .transpose()
        };
        Ok(Self {
            q_proj: Linear::new(&vs / "q_proj", h, q, b, init)?,
            k_proj: Linear::new(&vs / "k_proj", h, kv, b, init)?,
            v_proj: Linear::new(&vs / "v_proj", h, kv, b, init)?,
            o_proj: Linear::new(&vs / "o_proj", q, h, c.o_bias(), init)?,
            q_norm: norm("q_norm")?,
            k_norm: norm("k_norm")?,
            n_heads: c.num_attention_heads,
            n_kv: c.num_key_value_heads,
            head_dim: hd,
        })
    }

    /// Queries [B, H, T, hd], keys and values [B, kv, T, hd] of `x` [B, T, hidden], normed and
    /// rotated (`rope`: cos and sin [B, 1, T, head_dim]).
    fn qkv(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        fused: Option<&Linear>,
    ) -> (Tensor, Tensor, Tensor) {
        let (b, t, _) = x.size3().unwrap_or((0, 0, 0));
        let (nq, nkv) = (self.n_heads * self.head_dim, self.n_kv * self.head_dim);
        let (q, k, v) = match fused {
            Some(qkv) => {
                let y = qkv.forward(x);
                (
                    y.narrow(-1, 0, nq),
                    y.narrow(-1, nq, nkv),
                    y.narrow(-1, nq + nkv, nkv),
                )
            }
            None => (
                self.q_proj.forward(x),
                self.k_proj.forward(x),
                self.v_proj.forward(x),
            ),
        };
        let heads = |y: Tensor, n: i64, norm: &Option<RmsNorm>| {
            let y = y.view([b, t, n, self.head_dim]);
            match norm {
                Some(norm) => norm.forward(&y),
                None => y,
            }
        };
        let q = heads(q, self.n_heads, &self.q_norm);
        let k = heads(k, self.n_kv, &self.k_norm);
        let v = heads(v, self.n_kv, &None).transpose(1, 2);
        let (q, k) = apply_rope(&q.transpose(1, 2), &k.transpose(1, 2), rope);
        (q, k, v)
    }

    fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let scale = (self.head_dim as f64).powf(-0.5);
        Tensor::scaled_dot_product_attention(
            q,
            k,
            v,
            mask,
            0.0,
            mask.is_none(),
            scale,
            self.n_kv != self.n_heads,
        )
    }

    /// [B, H, T, hd] -> [B, T, hidden]
    fn output(&self, y: &Tensor) -> Tensor {
        let (b, _, t, _) = y.size4().unwrap_or((0, 0, 0, 0));
        self.o_proj.forward(
            &y.transpose(1, 2)
                .reshape([b, t, self.n_heads * self.head_dim]),
        )
    }

    /// `x`: [B, T, hidden]; `rope`: cos and sin [B, 1, T, head_dim]; `mask`: [B, 1, T, S]
    /// booleans (true = attend) or None for plain causal attention over T keys.
    fn forward(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        mask: Option<&Tensor>,
        cache: Option<(&mut LayerCache, i64)>,
    ) -> Tensor {
        let fused = cache.as_ref().and_then(|(c, _)| c.fused_qkv.as_ref());
        let (q, k, v) = self.qkv(x, rope, fused);
        let (k, v) = match cache {
            Some((c, start)) => c.append(&k, &v, start),
            None => (k, v),
        };
        self.output(&self.attend(&q, &k, &v, mask))
    }

    /// Packed sequences in one row (`x` [1, N, hidden], segments of `lens` tokens back to
    /// back): causal attention within each segment, one fused attention call per segment (the
    /// result of a block-diagonal causal mask, without an [N, N] mask or its wasted work).
    fn forward_segments(&self, x: &Tensor, rope: &(Tensor, Tensor), lens: &[i64]) -> Tensor {
        let (q, k, v) = self.qkv(x, rope, None);
        if lens.len() <= 1 {
            return self.output(&self.attend(&q, &k, &v, None));
        }
        let mut start = 0;
        let parts: Vec<Tensor> = lens
            .iter()
            .map(|&n| {
                let seg = |t: &Tensor| t.narrow(2, start, n);
                let y = self.attend(&seg(&q), &seg(&k), &seg(&v), None);
                start += n;
                y
            })
            .collect();
        self.output(&Tensor::cat(&parts, 2))
    }
}

/// Rotary embeddings in the rotate-half layout: `x * cos + rotate_half(x) * sin`, where
/// `rotate_half(x) = cat(-x2, x1)`. `rope.1` holds `cat(-sin, sin)`, so the rotation is one
/// `roll` by half the head: `roll(x) = cat(x2, x1)`, times the signed sines. `cos` and `sin`
/// are [B, 1, T, head_dim], broadcasting over heads.
fn apply_rope(q: &Tensor, k: &Tensor, (cos, sin): &(Tensor, Tensor)) -> (Tensor, Tensor) {
    let rot = |x: &Tensor| {
        let half = x.size().last().copied().unwrap_or(0) / 2;
        x * cos + x.roll([half], [-1]) * sin
    };
    (rot(q), rot(k))
}

#[derive(Debug)]
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    fn new(vs: nn::Path<'_>, c: &Config, init: WeightInit) -> Result<Self> {
        let (h, i, b) = (c.hidden_size, c.intermediate_size, c.mlp_bias());
        Ok(Self {
            gate_proj: Linear::new(&vs / "gate_proj", h, i, b, init)?,
            up_proj: Linear::new(&vs / "up_proj", h, i, b, init)?,
            down_proj: Linear::new(&vs / "down_proj", i, h, b, init)?,
        })
    }

    /// `gate_up`: the fused [gate; up] weight of a [`KvCache`], if it has one.
    fn forward(&self, x: &Tensor, gate_up: Option<&Tensor>) -> Tensor {
        let (gate, up) = match gate_up {
            Some(w) => {
                let y = x.linear::<Tensor>(w, None);
                let i = y.size().last().copied().unwrap_or(0) / 2;
                (y.narrow(-1, 0, i), y.narrow(-1, i, i))
            }
            None => (self.gate_proj.forward(x), self.up_proj.forward(x)),
        };
        self.down_proj.forward(&(gate.silu() * up))
    }
}

/// A layer's feed-forward: the dense SwiGLU, or (Qwen3-MoE's sparse layers) routed experts.
#[derive(Debug)]
enum Ffn {
    Dense(Mlp),
    Sparse(moe::SparseMoe),
}

impl Ffn {
    /// `gate_up`: a dense layer's fused [gate; up] weight of a cache (sparse layers have none).
    fn forward(&self, x: &Tensor, gate_up: Option<&Tensor>) -> Tensor {
        match self {
            Ffn::Dense(m) => m.forward(x, gate_up),
            Ffn::Sparse(m) => m.forward(x),
        }
    }
}

#[derive(Debug)]
struct Layer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Ffn,
}

impl Layer {
    fn new(vs: nn::Path<'_>, c: &Config, index: i64, init: WeightInit) -> Result<Self> {
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let mlp = match &c.moe {
            Some(m) if m.is_sparse(index) => {
                Ffn::Sparse(moe::SparseMoe::new(&vs / "mlp", c, m, init)?)
            }
            _ => Ffn::Dense(Mlp::new(&vs / "mlp", c, init)?),
        };
        Ok(Self {
            input_layernorm: RmsNorm::new(&vs / "input_layernorm", h, eps)?,
            self_attn: Attention::new(&vs / "self_attn", c, init)?,
            post_attention_layernorm: RmsNorm::new(&vs / "post_attention_layernorm", h, eps)?,
            mlp,
        })
    }
}

/// One layer's keys and values: [B, kv_heads, capacity, head_dim], filled up to the cache length;
/// and, for small models, its projections fused for decoding (see [`Qwen3::new_cache`]).
#[derive(Debug)]
struct LayerCache {
    k: Tensor,
    v: Tensor,
    fused_qkv: Option<Linear>,
    fused_gate_up: Option<Tensor>,
}

impl LayerCache {
    /// Writes `k`, `v` ([B, kv, T, hd]) at slots `start..start+T` and returns every filled slot.
    fn append(&mut self, k: &Tensor, v: &Tensor, start: i64) -> (Tensor, Tensor) {
        let t = k.size()[2];
        self.k.narrow(2, start, t).copy_(k);
        self.v.narrow(2, start, t).copy_(v);
        (
            self.k.narrow(2, 0, start + t),
            self.v.narrow(2, 0, start + t),
        )
    }
}

/// Keys and values of every layer for a batch being sampled, preallocated to a capacity so a
/// decoding step copies one slot instead of reallocating the cache.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<LayerCache>,
    /// [B, capacity]: the slot holds a real token (false for left padding).
    valid: Tensor,
    /// [B]: position id of each row's next token (real tokens seen so far).
    next_pos: Tensor,
    len: i64,
    capacity: i64,
}

impl KvCache {
    /// Slots filled so far.
    pub fn len(&self) -> i64 {
        self.len
    }

    /// True before the first forward pass.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Total slots.
    pub fn capacity(&self) -> i64 {
        self.capacity
    }
}

/// The transformer: `model.*` variables and the language-model head.
#[derive(Debug)]
pub struct Qwen3 {
    cfg: Config,
    embed_tokens: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Tensor,
    inv_freq: Tensor,
    /// Vocabulary rows a tokenizer can produce; rows past it (padding of the embedding matrix)
    /// get no probability mass, in sampling and in training alike.
    usable_vocab: i64,
}

impl Qwen3 {
    /// Creates the variables under `vs` (the var store's root) with the names transformers uses.
    /// Tied embeddings share `model.embed_tokens.weight` with the head, so a tied model has no
    /// `lm_head.weight` variable, as in transformers' checkpoints.
    pub fn new(vs: &nn::Path<'_>, cfg: &Config, init: WeightInit) -> Result<Self> {
        let m = vs / "model";
        let shape = [cfg.vocab_size, cfg.hidden_size];
        let embed_tokens = (&m / "embed_tokens").f_var("weight", &shape, init.init())?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::new(&m / "layers" / i, cfg, i, init))
            .collect::<Result<_>>()?;
        let lm_head = if cfg.tie_word_embeddings {
            embed_tokens.shallow_clone()
        } else {
            (vs / "lm_head").f_var("weight", &shape, init.init())?
        };
        // As transformers computes it: 1 / theta^(arange(0, d, 2) / d), in float32; scaled
        // frequencies (Llama 3) in float64 first, as its rule compares wavelengths.
        let d = cfg.head_dim;
        let inv_freq = match cfg.rope_scaling {
            RopeScaling::Default => {
                let exponent =
                    Tensor::arange_start_step(0, d, 2, (Kind::Float, vs.device())) / d as f64;
                Tensor::from(cfg.rope_theta)
                    .to_kind(Kind::Float)
                    .to_device(vs.device())
                    .pow(&exponent)
                    .reciprocal()
            }
            _ => Tensor::from_slice(&cfg.inv_freq())
                .to_kind(Kind::Float)
                .to_device(vs.device()),
        };
        Ok(Self {
            cfg: cfg.clone(),
            embed_tokens,
            norm: RmsNorm::new(&m / "norm", cfg.hidden_size, cfg.rms_norm_eps)?,
            layers,
            lm_head,
            inv_freq,
            usable_vocab: cfg.vocab_size,
        })
    }

    /// Marks the vocabulary rows from `n` on as padding (see [`Qwen3::mask_padded_vocab`]).
    pub fn set_usable_vocab(&mut self, n: i64) {
        self.usable_vocab = n.clamp(1, self.cfg.vocab_size);
    }

    /// Rows of the vocabulary a tokenizer can produce.
    pub fn usable_vocab(&self) -> i64 {
        self.usable_vocab
    }

    /// `logits` [.., vocab] with the padding rows at -inf, so log-probabilities are over the
    /// tokens the sampler may pick, as the sampler computes them.
    pub fn mask_padded_vocab(&self, logits: Tensor) -> Tensor {
        let n = logits.size().last().copied().unwrap_or(0);
        if self.usable_vocab >= n {
            return logits;
        }
        let pad = Tensor::arange(n, (Kind::Int64, logits.device())).ge(self.usable_vocab);
        logits.masked_fill(&pad, f64::NEG_INFINITY)
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The weights' kind (the KV cache's too).
    pub fn weight_kind(&self) -> Kind {
        self.embed_tokens.kind()
    }

    /// Where the weights live.
    pub fn device(&self) -> tch::Device {
        self.embed_tokens.device()
    }

    /// cos and signed sin (see [`apply_rope`]) for position ids [B, T], as [B, 1, T, head_dim]:
    /// computed in float32, then cast to the activations' kind, as transformers does.
    fn rope(&self, pos: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let freqs = pos.to_kind(Kind::Float).unsqueeze(1).unsqueeze(-1) * &self.inv_freq;
        let (cos, sin) = (freqs.cos(), freqs.sin());
        (
            Tensor::cat(&[&cos, &cos], -1).to_kind(kind),
            Tensor::cat(&[&sin.neg(), &sin], -1).to_kind(kind),
        )
    }

    fn check_ids(&self, ids: &Tensor) -> Result<(i64, i64)> {
        let (b, t) = ids.size2().map_err(|_| {
            PolicyError::InvalidInput(format!(
                "token ids must be [batch, time], got {:?}",
                ids.size()
            ))
        })?;
        if b == 0 || t == 0 {
            return Err(PolicyError::InvalidInput("empty batch of token ids".into()));
        }
        let (lo, hi) = (ids.min().int64_value(&[]), ids.max().int64_value(&[]));
        if lo < 0 || hi >= self.cfg.vocab_size {
            return Err(PolicyError::InvalidInput(format!(
                "token id {} outside the vocabulary of {}",
                if lo < 0 { lo } else { hi },
                self.cfg.vocab_size
            )));
        }
        Ok((b, t))
    }

    /// Final hidden states [B, T, hidden] of right-padded sequences `ids` [B, T] (causal
    /// attention, positions 0..T). Padding at the end of a row cannot affect earlier positions.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = self.check_ids(ids)?;
        let mut x = Tensor::embedding(&self.embed_tokens, ids, -1, false, false);
        let pos = Tensor::arange(t, (Kind::Int64, ids.device()))
            .unsqueeze(0)
            .expand([b, t], false);
        let rope = self.rope(&pos, x.kind());
        for l in &self.layers {
            x = &x
                + l.self_attn
                    .forward(&l.input_layernorm.forward(&x), &rope, None, None);
            x = &x + l.mlp.forward(&l.post_attention_layernorm.forward(&x), None);
        }
        Ok(self.norm.forward(&x))
    }

    /// Logits [.., vocab] from hidden states, in float32 whatever the weights' kind.
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden
            .linear::<Tensor>(&self.lm_head, None)
            .to_kind(Kind::Float)
    }

    /// An empty cache for `batch` rows and up to `capacity` tokens (prompt + generated).
    ///
    /// For models up to [`FUSE_LIMIT_BYTES`] the cache also snapshots each layer's q/k/v and
    /// gate/up weights concatenated, so a decoding step runs 4 matmuls per layer instead of 7
    /// (about 20% faster on the tiny model on CPU, where steps are memory-bound and per-op
    /// overhead counts). The snapshot is why a cache must not outlive an optimiser step; its
    /// keys and values would be stale then anyway. Larger models skip it: their memory is worth
    /// more than the saving.
    pub fn new_cache(&self, batch: i64, capacity: i64) -> KvCache {
        let c = &self.cfg;
        let opts = (self.embed_tokens.kind(), self.embed_tokens.device());
        let shape = [batch, c.num_key_value_heads, capacity, c.head_dim];
        KvCache {
            layers: self
                .fused_projections()
                .into_iter()
                .map(|(fused_qkv, fused_gate_up)| LayerCache {
                    k: Tensor::zeros(shape, opts),
                    v: Tensor::zeros(shape, opts),
                    fused_qkv,
                    fused_gate_up,
                })
                .collect(),
            valid: Tensor::zeros([batch, capacity], (Kind::Bool, opts.1)),
            next_pos: Tensor::zeros([batch], (Kind::Int64, opts.1)),
            len: 0,
            capacity,
        }
    }

    /// Each layer's q/k/v and gate/up weights concatenated for decoding (see
    /// [`Qwen3::new_cache`]); None for models above [`FUSE_LIMIT_BYTES`].
    fn fused_projections(&self) -> Vec<(Option<Linear>, Option<Tensor>)> {
        let bytes =
            self.cfg.num_parameters() as usize * self.embed_tokens.kind().elt_size_in_bytes();
        let fuse = bytes <= FUSE_LIMIT_BYTES;
        self.layers
            .iter()
            .map(|l| {
                let (a, m) = (&l.self_attn, &l.mlp);
                let cat = |ts: &[&Tensor]| Tensor::cat(ts, 0).detach();
                let bias = match (&a.q_proj.bias, &a.k_proj.bias, &a.v_proj.bias) {
                    (Some(q), Some(k), Some(v)) => Some(cat(&[q, k, v])),
                    _ => None,
                };
                let weight = [&a.q_proj.weight, &a.k_proj.weight, &a.v_proj.weight];
                // A biased MLP (Llama's mlp_bias) decodes unfused: the fused path has no bias.
                let gate_up = match m {
                    Ffn::Dense(m) if fuse && m.gate_proj.bias.is_none() => {
                        Some(cat(&[&m.gate_proj.weight, &m.up_proj.weight]))
                    }
                    _ => None,
                };
                (
                    fuse.then(|| Linear {
                        weight: cat(&weight),
                        bias,
                    }),
                    gate_up,
                )
            })
            .collect()
    }

    /// Runs `ids` [B, T] through the model after what `cache` holds and appends their keys and
    /// values. `real` [B, T] marks real tokens (false = left padding); None means all real.
    /// Returns the final hidden states [B, T, hidden].
    pub fn forward_cached(
        &self,
        ids: &Tensor,
        real: Option<&Tensor>,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        self.check_ids(ids)?;
        self.forward_cached_unchecked(ids, real, cache)
    }

    /// [`Qwen3::forward_cached`] without checking that the ids are in the vocabulary, for ids
    /// the sampler just produced: saves two reductions and a device sync per decoding step.
    pub(crate) fn forward_cached_unchecked(
        &self,
        ids: &Tensor,
        real: Option<&Tensor>,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let (b, t) = ids.size2()?;
        let (start, dev) = (cache.len, ids.device());
        if b != cache.valid.size()[0] || start + t > cache.capacity {
            return Err(PolicyError::InvalidInput(format!(
                "cache holds {} rows and {} of {} slots; got {b} rows of {t} tokens",
                cache.valid.size()[0],
                start,
                cache.capacity
            )));
        }
        let total = start + t;
        let mut x = Tensor::embedding(&self.embed_tokens, ids, -1, false, false);
        let (rope, mask) = match real {
            None if t == 1 => {
                // Decoding one real token per row: it sits in the newest slot, takes the row's
                // next position and sees every real slot. (The general path below computes the
                // same, with a dozen more small ops per step.)
                let _ = cache.valid.narrow(1, start, 1).fill_(1);
                let rope = self.rope(&cache.next_pos.unsqueeze(1), x.kind());
                let _ = cache.next_pos.g_add_scalar_(1);
                (rope, cache.valid.narrow(1, 0, total).view([b, 1, 1, total]))
            }
            _ => {
                let real = match real {
                    Some(r) => r.to_kind(Kind::Bool),
                    None => Tensor::ones([b, t], (Kind::Bool, dev)),
                };
                cache.valid.narrow(1, start, t).copy_(&real);
                // Positions count real tokens only, so left padding does not shift a row;
                // padding slots get position 0 (their outputs are never read).
                let counted = real.to_kind(Kind::Int64).cumsum(1, Kind::Int64);
                let pos = (cache.next_pos.unsqueeze(1) + &counted - 1).clamp_min(0);
                let _ = cache.next_pos.g_add_(&counted.select(1, t - 1));
                // Query slot i (= start + row index) may see key slot j iff j <= i and j holds
                // a real token; a padding query also sees itself, so no row of the softmax is
                // empty (an empty row gives NaN, and NaN values poison later layers even
                // behind a zero weight).
                let qi = Tensor::arange_start(start, total, (Kind::Int64, dev)).view([t, 1]);
                let kj = Tensor::arange(total, (Kind::Int64, dev)).view([1, total]);
                let causal = kj.le_tensor(&qi).view([1, 1, t, total]);
                let diag = kj.eq_tensor(&qi).view([1, 1, t, total]);
                let keys = cache.valid.narrow(1, 0, total).view([b, 1, 1, total]);
                (
                    self.rope(&pos, x.kind()),
                    causal.logical_and(&keys.logical_or(&diag)),
                )
            }
        };
        for (l, lc) in self.layers.iter().zip(cache.layers.iter_mut()) {
            let h = l.input_layernorm.forward(&x);
            x = &x
                + l.self_attn
                    .forward(&h, &rope, Some(&mask), Some((lc, start)));
            let h = l.post_attention_layernorm.forward(&x);
            x = &x + l.mlp.forward(&h, lc.fused_gate_up.as_ref());
        }
        cache.len = total;
        Ok(self.norm.forward(&x))
    }
}
