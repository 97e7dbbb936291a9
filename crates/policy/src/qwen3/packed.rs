//! The training side of [`Qwen3`]: memory that scales with the tokens of a micro-batch, not with
//! `batch x longest x vocab`.
//!
//! - **Packing**: a micro-batch is one row of sequences back to back ([`PackedIds`]), each with
//!   positions from 0, so no padding is computed. Attention is causal within each sequence:
//!   the projections, norms and MLP run on the whole row, and attention runs once per sequence
//!   (fused scaled-dot-product attention, causal, on that sequence's slice). That is what a
//!   block-diagonal causal mask computes, without the `[N, N]` mask or the work on its
//!   masked-out blocks; libtorch's variable-length flash attention is not exposed by tch, and
//!   the per-sequence calls are the same on CPU and CUDA.
//! - **Chunked log-probs**: the language-model head runs on `chunk_tokens` positions at a time;
//!   each chunk's loss is backpropagated to the final hidden states at once and its logits
//!   freed, so no `[N, vocab]` tensor of the whole micro-batch exists (the backward pass is split
//!   at the head: the body gets the summed gradient of the hidden states afterwards).
//! - **Activation recompute** (a switch): the forward pass keeps only each layer's input; the
//!   backward pass runs the layers from the last to the first, recomputing each one with
//!   autograd on and backpropagating the gradient of its output, as
//!   `torch.utils.checkpoint` does per layer.
//!
//! - **Layer-wise weights** (ZeRO-3, [`WeightUnits`]): with recompute, a pass can run with the
//!   layers' weights held elsewhere (sharded over ranks): each layer is made whole just before
//!   its forward and its recomputed backward and dropped right after, and its gradients go to
//!   the holder as soon as they exist instead of into `.grad`.
//!
//! Gradients accumulate into the variables' `.grad`, as `loss.backward()` would (a layer's go to
//! [`WeightUnits::reduce`] in a layer-wise pass).

use super::moe::Routing;
use super::{Ffn, Layer, Qwen3};
use crate::error::{PolicyError, Result};
use tch::{Kind, Tensor};

/// A packed micro-batch: the inputs and next-token targets of several sequences in one row.
#[derive(Debug)]
pub struct PackedIds {
    /// [1, N]: each sequence's tokens but its last, back to back.
    pub ids: Tensor,
    /// [1, N]: position ids, counted from 0 in each sequence.
    pub pos: Tensor,
    /// [N]: the token each position predicts.
    pub targets: Tensor,
    /// Inputs per sequence (its length - 1), in order; they sum to N.
    pub lens: Vec<i64>,
}

impl PackedIds {
    /// Positions (predicted tokens) in the row.
    pub fn len(&self) -> i64 {
        self.lens.iter().sum()
    }

    /// True when nothing is packed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How a training pass computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassOptions {
    /// Log-probs are `log softmax(logits / temperature)`.
    pub temperature: f64,
    /// Positions per language-model-head chunk.
    pub chunk_tokens: usize,
    /// Recompute each layer's activations in the backward pass instead of keeping them.
    pub recompute: bool,
    /// Weight of the router's load-balancing loss in this pass (Qwen3-MoE only; 0 = off): the
    /// caller's coefficient times this pass's share of the step, so passes add up to the
    /// coefficient times a token-weighted mean.
    pub router_aux: f64,
    /// Also measure the entropy of the sampling distribution (`softmax(logits /
    /// temperature)`) at every position: no gradient, one more pass over each head chunk.
    pub entropy: bool,
}

/// What a backward pass reports besides the gradients it accumulated.
#[derive(Debug)]
pub struct PassReport {
    /// The router loss's value (unweighted); 0 without one.
    pub router_aux: f64,
    /// With [`PassOptions::entropy`]: the entropy in nats at every position, [N] float32.
    pub entropy: Option<Tensor>,
}

/// Who holds the decoder layers' weights in a layer-wise pass
/// ([`Qwen3::backward_packed_units`]): the pass asks for layer `i` whole before it runs it and
/// gives it back after, and hands over the layer's gradients from its recomputed backward. Every
/// pass calls these in the same order: for each layer from the first `gather`, `prefetch` of
/// the next (but after the last), `release`; then for each layer from the last `gather`,
/// `prefetch` of the one before (but after the first), `reduce`, `release` (what a rank with
/// no micro-batch left repeats, so collectives inside them stay in step).
pub trait WeightUnits {
    /// Makes layer `layer`'s weights whole in the model's variables.
    fn gather(&mut self, layer: usize) -> Result<()>;
    /// The pass is done with layer `layer`: the holder drops its whole weights now or keeps
    /// them for a `gather` of the same layer that comes next (never two layers whole).
    fn release(&mut self, layer: usize) -> Result<()>;
    /// The pass will ask for layer `layer` next: a holder may start making it whole now,
    /// beside the current layer's compute (called right after each `gather` but the last of
    /// each direction, in the same order on every rank).
    fn prefetch(&mut self, layer: usize) -> Result<()> {
        let _ = layer;
        Ok(())
    }
    /// Layer `layer`'s trainable variables, in the order `reduce` receives their gradients.
    fn params(&self, layer: usize) -> Vec<Tensor>;
    /// The gradients of `params(layer)` from one pass (undefined where a variable had none,
    /// e.g. an expert no token chose).
    fn reduce(&mut self, layer: usize, grads: &[Tensor]) -> Result<()>;
}

impl Qwen3 {
    /// Decoder layers.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    fn check_packed(&self, p: &PackedIds) -> Result<i64> {
        let n = p.len();
        let ok = n > 0
            && p.ids.size() == [1, n]
            && p.pos.size() == [1, n]
            && p.targets.size() == [n]
            && p.lens.iter().all(|&l| l > 0);
        if !ok {
            return Err(PolicyError::InvalidInput(format!(
                "a packed batch of {n} positions needs ids and pos [1, {n}] and targets [{n}]"
            )));
        }
        self.check_ids(&p.ids)?;
        self.check_ids(&p.targets.view([1, n]))?;
        Ok(n)
    }

    fn layer_forward(l: &Layer, x: &Tensor, rope: &(Tensor, Tensor), lens: &[i64]) -> Tensor {
        Self::layer_forward_routed(l, x, rope, lens, false).0
    }

    /// [`Self::layer_forward`], also returning a sparse layer's routing when `route`.
    fn layer_forward_routed(
        l: &Layer,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        lens: &[i64],
        route: bool,
    ) -> (Tensor, Option<Routing>) {
        let x = x + l
            .self_attn
            .forward_segments(&l.input_layernorm.forward(x), rope, lens);
        let h = l.post_attention_layernorm.forward(&x);
        match &l.mlp {
            Ffn::Sparse(m) if route => {
                let (y, r) = m.forward_routed(&h);
                (&x + y, Some(r))
            }
            mlp => (&x + mlp.forward(&h, None), None),
        }
    }

    /// Experts per sparse layer and the number of sparse layers (0, 0 for a dense model).
    fn sparse_shape(&self) -> (i64, i64) {
        let sparse: Vec<i64> = self
            .layers
            .iter()
            .filter_map(|l| match &l.mlp {
                Ffn::Sparse(m) => Some(m.num_experts()),
                Ffn::Dense(_) => None,
            })
            .collect();
        (sparse.first().copied().unwrap_or(0), sparse.len() as i64)
    }

    /// Final hidden states [1, N, hidden] of a packed batch, with autograd as usual.
    pub fn forward_packed(&self, p: &PackedIds) -> Result<Tensor> {
        self.check_packed(p)?;
        let mut x = Tensor::embedding(&self.embed_tokens, &p.ids, -1, false, false);
        let rope = self.rope(&p.pos, x.kind());
        for l in &self.layers {
            x = Self::layer_forward(l, &x, &rope, &p.lens);
        }
        Ok(self.norm.forward(&x))
    }

    /// Log-probs [n, 1] (float32) of `targets` [n] from hidden states [n, hidden]: the head in
    /// float32, padding rows masked, at `temperature`.
    fn head_logprobs(&self, hidden: &Tensor, targets: &Tensor, temperature: f64) -> Tensor {
        self.head(hidden, targets, temperature, false).0
    }

    /// [`Self::head_logprobs`] and, with `entropy`, the entropy [n] of each row's distribution
    /// (no gradient; padded vocabulary rows have probability 0).
    fn head(
        &self,
        hidden: &Tensor,
        targets: &Tensor,
        temperature: f64,
        entropy: bool,
    ) -> (Tensor, Option<Tensor>) {
        let logits = self.mask_padded_vocab(self.logits(hidden));
        let logits = if temperature == 1.0 {
            logits
        } else {
            logits / temperature
        };
        let all = logits.log_softmax(-1, Kind::Float);
        let h = entropy.then(|| {
            tch::no_grad(|| {
                let l = all.detach();
                // 0 * log 0 = 0 for the masked rows (log-prob -inf).
                -(l.exp() * l.nan_to_num(0.0, Some(0.0), Some(0.0))).sum_dim_intlist(
                    -1,
                    false,
                    Kind::Float,
                )
            })
        });
        (all.gather(1, &targets.unsqueeze(1), false), h)
    }

    /// Log-probs [N] of a packed batch's targets without gradients, the head a chunk at a
    /// time.
    pub fn packed_logprobs(&self, p: &PackedIds, o: &PassOptions) -> Result<Tensor> {
        tch::no_grad(|| {
            let n = self.check_packed(p)?;
            let h = self.forward_packed(p)?.view([n, -1]);
            let step = o.chunk_tokens.max(1) as i64;
            let parts: Vec<Tensor> = (0..n)
                .step_by(step as usize)
                .map(|start| {
                    let len = step.min(n - start);
                    self.head_logprobs(
                        &h.narrow(0, start, len),
                        &p.targets.narrow(0, start, len),
                        o.temperature,
                    )
                })
                .collect();
            Ok(Tensor::cat(&parts, 0).view([n]))
        })
    }

    /// Forward and backward of a packed batch. `loss(logp, start)` receives the log-probs
    /// [n, 1] (float32, with gradient) of positions `start..start + n` (one chunk) and returns
    /// the scalar whose gradient to accumulate; chunks come in order and cover every position.
    ///
    /// With `o.router_aux > 0` on a Qwen3-MoE model the router's load-balancing loss of the
    /// pass is added, weighted by `o.router_aux`, and its value (unweighted) returned; else 0.
    /// The loss is transformers' `load_balancing_loss_func` (Switch Transformer eq. 4-6) over
    /// this pass's tokens and all sparse layers: `E * sum_e f_e * P_e`, `f_e` the share of top-k
    /// assignments to expert e (summing to k) and `P_e` its mean router probability, both
    /// pooled over layers. `f` carries no gradient, so the loss is linear in each layer's
    /// probability sums, which is what lets activation recompute add it layer by layer.
    pub fn backward_packed(
        &self,
        p: &PackedIds,
        o: &PassOptions,
        loss: impl FnMut(&Tensor, i64) -> Result<Tensor>,
    ) -> Result<PassReport> {
        self.backward_packed_units(p, o, None, loss)
    }

    /// [`Self::backward_packed`] with the layers' weights held by `units` (see
    /// [`WeightUnits`]; needs `o.recompute`): the embedding, the final norm and the head stay
    /// whole and their gradients accumulate into `.grad`; a layer's gradients go to
    /// `units.reduce`. The pass makes every `units` call even when the loss has no gradient.
    pub fn backward_packed_units(
        &self,
        p: &PackedIds,
        o: &PassOptions,
        mut units: Option<&mut dyn WeightUnits>,
        mut loss: impl FnMut(&Tensor, i64) -> Result<Tensor>,
    ) -> Result<PassReport> {
        if units.is_some() && !o.recompute {
            return Err(PolicyError::InvalidInput(
                "a pass with layer-wise (sharded) weights needs recompute".into(),
            ));
        }
        let n = self.check_packed(p)?;
        let (experts, sparse_layers) = self.sparse_shape();
        let route = o.router_aux > 0.0 && sparse_layers > 0;
        // Pooled rows of the aux loss: every token in every sparse layer.
        let rows = (n * sparse_layers.max(1)) as f64;
        let embed = || Tensor::embedding(&self.embed_tokens, &p.ids, -1, false, false);
        // Forward: with recompute, only each layer's input is kept (no graph). Routing sums per
        // sparse layer: assignments (no gradient) and probabilities (a graph without recompute).
        let mut sums: Vec<(Tensor, Tensor)> = vec![];
        let (body_out, inputs, rope) = if o.recompute {
            tch::no_grad(|| -> Result<_> {
                let mut x = embed();
                let rope = self.rope(&p.pos, x.kind());
                let mut inputs = Vec::with_capacity(self.layers.len());
                let n_layers = self.layers.len();
                for (i, l) in self.layers.iter().enumerate() {
                    if let Some(u) = units.as_deref_mut() {
                        u.gather(i)?;
                        if i + 1 < n_layers {
                            u.prefetch(i + 1)?;
                        }
                    }
                    let (next, r) = Self::layer_forward_routed(l, &x, &rope, &p.lens, route);
                    if let Some(u) = units.as_deref_mut() {
                        u.release(i)?;
                    }
                    sums.extend(r.map(|r| r.sums(experts)));
                    inputs.push(x);
                    x = next;
                }
                Ok((x, inputs, rope))
            })?
        } else {
            let mut x = embed();
            let rope = self.rope(&p.pos, x.kind());
            for l in &self.layers {
                let (next, r) = Self::layer_forward_routed(l, &x, &rope, &p.lens, route);
                sums.extend(r.map(|r| r.sums(experts)));
                x = next;
            }
            (x, vec![], rope)
        };
        // f_e, pooled over layers; the aux loss's value.
        let (share, aux_value) = if route {
            let counts = Tensor::stack(&sums.iter().map(|s| &s.0).collect::<Vec<_>>(), 0)
                .sum_dim_intlist(0, false, Kind::Float)
                / rows;
            let probs =
                tch::no_grad(|| {
                    Tensor::stack(&sums.iter().map(|s| &s.1).collect::<Vec<_>>(), 0)
                        .sum_dim_intlist(0, false, Kind::Float)
                        / rows
                });
            let value = (&counts * probs).sum(Kind::Float).double_value(&[]) * experts as f64;
            (Some(counts), value)
        } else {
            (None, 0.0)
        };
        // The aux loss's term for one layer's probability sums, weighted.
        let aux_term = |prob_sum: &Tensor, f: &Tensor| {
            (prob_sum * f).sum(Kind::Float) * (experts as f64 * o.router_aux / rows)
        };
        // With recompute the body's output is a leaf, so the final norm's backward stops there.
        let top = if o.recompute {
            body_out.detach().set_requires_grad(true)
        } else {
            body_out.shallow_clone()
        };
        let hidden = self.norm.forward(&top);
        // The head, a chunk at a time, backpropagated to a detached copy of the hidden states.
        let h = hidden.detach().set_requires_grad(true);
        let flat = h.view([n, -1]);
        let step = o.chunk_tokens.max(1) as i64;
        let mut entropies = vec![];
        for start in (0..n).step_by(step as usize) {
            let len = step.min(n - start);
            let (lp, ent) = self.head(
                &flat.narrow(0, start, len),
                &p.targets.narrow(0, start, len),
                o.temperature,
                o.entropy,
            );
            entropies.extend(ent);
            loss(&lp, start)?.backward();
        }
        let report = PassReport {
            router_aux: aux_value,
            entropy: o.entropy.then(|| Tensor::cat(&entropies, 0)),
        };
        let mut g = h.grad();
        if !g.defined() {
            if units.is_none() {
                return Ok(report);
            }
            // The layer-wise calls still happen: other ranks' collectives wait for them.
            g = h.zeros_like();
        }
        // The rest of the graph: the final norm (and, without recompute, the whole body and
        // the aux loss of its routers).
        let mut rest = (hidden * g).sum(Kind::Float);
        if let (Some(f), false) = (&share, o.recompute) {
            for (_, prob_sum) in &sums {
                rest += aux_term(prob_sum, f);
            }
        }
        rest.backward();
        if !o.recompute {
            return Ok(report);
        }
        let mut g = top.grad();
        if !g.defined() {
            g = top.zeros_like();
        }
        for (i, (l, x_in)) in self.layers.iter().zip(inputs).enumerate().rev() {
            let x = x_in.detach().set_requires_grad(true);
            if let Some(u) = units.as_deref_mut() {
                u.gather(i)?;
                if i > 0 {
                    u.prefetch(i - 1)?;
                }
            }
            let (y, r) = Self::layer_forward_routed(l, &x, &rope, &p.lens, route);
            let mut out = (y * &g).sum(Kind::Float);
            if let (Some(f), Some(r)) = (&share, r) {
                // The counts are the forward's; only the probabilities carry the gradient.
                out += aux_term(&r.prob_sums(), f);
            }
            match units.as_deref_mut() {
                Some(u) => {
                    // The layer's gradients straight to the holder (autograd.grad: nothing
                    // lands in `.grad` of weights that are about to be dropped).
                    let mut inputs = vec![x.shallow_clone()];
                    inputs.extend(u.params(i));
                    let mut grads = Tensor::f_run_backward(&[&out], &inputs, false, false)?;
                    let gx = grads.remove(0);
                    u.reduce(i, &grads)?;
                    u.release(i)?;
                    g = if gx.defined() { gx } else { x.zeros_like() };
                }
                None => {
                    out.backward();
                    g = x.grad();
                }
            }
        }
        (embed() * g).sum(Kind::Float).backward();
        Ok(report)
    }
}
