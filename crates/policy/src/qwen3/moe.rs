//! Qwen3-MoE's sparse feed-forward block (transformers `models/qwen3_moe/modeling_qwen3_moe.py`,
//! 5.24): a router `gate` [experts, hidden] gives each token a softmax over the experts (in
//! float32); the token goes to its top-k experts, weighted by their probabilities (renormalised
//! to sum to 1 when `norm_topk_prob`), and each expert is a SwiGLU MLP of width
//! `moe_intermediate_size`. Everything else in a Qwen3-MoE model is Qwen3, so the block plugs
//! into [`super::Qwen3`] as the feed-forward of its sparse layers and every path (whole
//! sequences, the sampler's KV cache, the engine's slots, packed training) runs it unchanged.
//!
//! Dispatch does work proportional to the routed tokens: the (token, expert) pairs are sorted by
//! expert, each expert runs one matmul chain on exactly its rows, and the results are scattered
//! back with one `index_add`. The per-expert row counts are read on the host once per layer
//! (a device sync on CUDA), which sizes the slices; a grouped GEMM would avoid it, but tch
//! exposes none.
//!
//! Variables carry the names of the checkpoints on the Hub and of transformers'
//! `save_pretrained` (which writes the original per-expert layout even though 5.x fuses the
//! experts in memory): `mlp.gate.weight`, `mlp.experts.{e}.{gate,up,down}_proj.weight`.

use super::{Linear, WeightInit};
use crate::error::Result;
use crate::qwen3::config::{Config, Moe};
use tch::{Kind, Tensor, nn};

#[derive(Debug)]
struct Expert {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Expert {
    fn forward(&self, x: &Tensor) -> Tensor {
        self.down_proj
            .forward(&(self.gate_proj.forward(x).silu() * self.up_proj.forward(x)))
    }
}

/// What the router decided for a batch of tokens, for the load-balancing loss.
#[derive(Debug)]
pub(crate) struct Routing {
    /// [N, experts] router probabilities (float32, with gradient).
    pub probs: Tensor,
    /// [N, top_k] chosen experts.
    pub chosen: Tensor,
}

impl Routing {
    /// Top-k assignments per expert [experts] (float32, no gradient), over this batch's tokens.
    pub fn counts(&self, experts: i64) -> Tensor {
        tch::no_grad(|| {
            self.chosen
                .reshape([-1])
                .one_hot(experts)
                .to_kind(Kind::Float)
                .sum_dim_intlist(0, false, Kind::Float)
        })
    }

    /// The sum of the router probabilities per expert [experts] (with gradient).
    pub fn prob_sums(&self) -> Tensor {
        self.probs.sum_dim_intlist(0, false, Kind::Float)
    }

    /// [`Routing::counts`] and [`Routing::prob_sums`].
    pub fn sums(&self, experts: i64) -> (Tensor, Tensor) {
        (self.counts(experts), self.prob_sums())
    }
}

#[derive(Debug)]
pub(crate) struct SparseMoe {
    gate: Tensor,
    experts: Vec<Expert>,
    top_k: i64,
    norm_topk_prob: bool,
}

impl SparseMoe {
    pub fn new(vs: nn::Path<'_>, c: &Config, m: &Moe, init: WeightInit) -> Result<Self> {
        let (h, i) = (c.hidden_size, m.moe_intermediate_size);
        let gate = (&vs / "gate").f_var("weight", &[m.num_experts, h], init.init())?;
        let experts = (0..m.num_experts)
            .map(|e| {
                let p = &vs / "experts" / e;
                Ok(Expert {
                    gate_proj: Linear::new(&p / "gate_proj", h, i, false, init)?,
                    up_proj: Linear::new(&p / "up_proj", h, i, false, init)?,
                    down_proj: Linear::new(&p / "down_proj", i, h, false, init)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            gate,
            experts,
            top_k: m.num_experts_per_tok,
            norm_topk_prob: m.norm_topk_prob,
        })
    }

    pub fn num_experts(&self) -> i64 {
        self.experts.len() as i64
    }

    /// `x` [.., hidden] -> the block's output of the same shape, and the routing.
    pub fn forward_routed(&self, x: &Tensor) -> (Tensor, Routing) {
        let shape = x.size();
        let h = shape.last().copied().unwrap_or(0);
        let flat = x.reshape([-1, h]);
        let probs = flat
            .linear::<Tensor>(&self.gate, None)
            .softmax(-1, Kind::Float);
        let (top, chosen) = probs.topk(self.top_k, -1, true, true);
        let top = if self.norm_topk_prob {
            &top / top.sum_dim_intlist(-1, true, Kind::Float)
        } else {
            top
        };
        let weights = top.to_kind(flat.kind()).reshape([-1]);
        // (token, expert) pairs sorted by expert; pair p belongs to token p / top_k.
        let pairs = chosen.reshape([-1]);
        let order = pairs.argsort_stable(true, 0, false);
        let counts = Vec::<i64>::try_from(
            pairs
                .bincount::<Tensor>(None, self.num_experts())
                .to_device(tch::Device::Cpu),
        )
        .unwrap_or_default();
        let tokens = order.floor_divide_scalar(self.top_k);
        let rows = flat.index_select(0, &tokens);
        let mut outs = Vec::with_capacity(self.experts.len());
        let mut start = 0;
        for (expert, &n) in self.experts.iter().zip(&counts) {
            if n > 0 {
                outs.push(expert.forward(&rows.narrow(0, start, n)));
                start += n;
            }
        }
        if outs.is_empty() {
            return (x.zeros_like(), Routing { probs, chosen });
        }
        let ys = Tensor::cat(&outs, 0) * weights.index_select(0, &order).unsqueeze(1);
        let out = flat.zeros_like().index_add(0, &tokens, &ys);
        (out.reshape(shape.as_slice()), Routing { probs, chosen })
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.forward_routed(x).0
    }
}
