//! One GRPO optimisation step. Exactly this variant (DAPO-style token-level GRPO, as the SPADE
//! paper trains both roles; spade-spec.md, "Update"):
//!
//! - **Advantages come from the caller**, one scalar `A_i` per sample (the agent's z-score within
//!   its environment's group, the designer's `r - mean_skill(r)`); this step does no
//!   normalisation of its own, no entropy bonus and no per-sample length normalisation.
//! - For every token `t` of sample `i` with loss mask `m_it = 1` (tokens the policy generated;
//!   prompts, observations and padding have `m = 0`):
//!   - `logp_it = log softmax(logits / T)[y_t]`, `T` = the sampling temperature;
//!   - ratio `r_it = exp(logp_it - old_it)`, where `old` is the log-prob under the policy the
//!     update is measured against (the sampler's log-probs for fresh samples);
//!   - clipped surrogate `s_it = min(r A_i, clip(r, 1 - 0.2, 1 + 0.28) A_i)` (asymmetric
//!     "clip-higher", DAPO; 0.2 / 0.28 from the paper);
//!   - truncated importance weight `c_it = min(exp(old_it - behav_it), 2)` (detached) for
//!     delayed samples whose `behav` log-probs came from an older policy (the designer's,
//!     trained k steps late); `c = 1` for samples without behaviour log-probs;
//!   - optional KL to a frozen reference, k3 estimator (Schulman 2020):
//!     `kl_it = exp(ref_it - logp_it) - (ref_it - logp_it) - 1`, coefficient `beta` (0 default,
//!     0.005 the paper's option);
//!   - per-token loss `l_it = w_i (-c_it s_it + beta kl_it)` with `w_i` the sample's loss weight
//!     (the designer weight, e.g. 32 for games).
//! - **The loss normalisation** ([`LossNorm`]): by default each sample's mean over its trained
//!   tokens, averaged over the step's samples, zero-advantage samples included:
//!   `L = (1/n) sum_i (sum_t m_it l_it / sum_t m_it)` (slime's default, which the reference
//!   trains with: a sample's share does not grow with its length, and a step whose groups are
//!   mostly uniform moves less). The variant [`LossNorm::TokenMean`] is one mean over every
//!   trained token of the step, `L = sum_it m_it l_it / sum_it m_it` (DAPO's token-level mean,
//!   as the spec's text words it). A zero-advantage sample contributes nothing to the loss but
//!   its count; without a KL term or a router loss its pass is skipped (the result is the same).
//! - Micro-batches accumulate gradients of their share of `L` in float32; then the global
//!   gradient L2 norm is clipped (1.0) and AdamW takes one step (float32 masters, accumulators
//!   and moments, see [`crate::optim`]).
//!
//! How it computes (equal results up to float rounding, see the tests): samples are packed
//! into micro-batches of at most `micro_batch_tokens` predicted tokens (one row each, a
//! block-diagonal causal mask, no padding), log-probs come a `logprob_chunk_tokens` chunk at a
//! time with the backward pass split at the head, and `recompute` recomputes each layer's
//! activations in the backward pass ([`crate::qwen3::PassOptions`]).

use crate::error::{PolicyError, Result};
use crate::optim::AdamW;
use crate::policy::Policy;
use crate::qwen3::PassOptions;
use crate::sample::Completion;
use crate::train::{self, MaskedSeq, OptimConfig};
use crate::zero::ZeroStage;
use std::path::Path;
use tch::{Kind, Tensor};

/// How a step's per-token losses become one loss (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LossNorm {
    /// Each sample's token mean, averaged over the samples (slime's default, the reference's).
    #[default]
    SampleMean,
    /// One mean over every trained token of the step (DAPO; the spec's text).
    TokenMean,
}

/// GRPO hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoConfig {
    /// How per-token losses are averaged (default: per sample, as the reference).
    pub loss_norm: LossNorm,
    /// Lower clip range: ratios below `1 - clip_low` stop pushing down (paper: 0.2).
    pub clip_low: f64,
    /// Upper clip range: ratios above `1 + clip_high` stop pushing up (paper: 0.28).
    pub clip_high: f64,
    /// KL coefficient to the frozen reference (paper: 0 by default, 0.005 as an option).
    pub kl_coef: f64,
    /// Cap of truncated importance-sampling weights for delayed samples (paper: "e.g. 2").
    pub tis_cap: f64,
    /// Temperature the samples were drawn at; log-probs are taken at the same temperature.
    pub temperature: f64,
    /// Predicted tokens per forward/backward pass: consecutive samples are packed up to this
    /// many (a longer sample gets a pass of its own); gradients accumulate across passes.
    pub micro_batch_tokens: usize,
    /// Positions per chunk of the language-model head.
    pub logprob_chunk_tokens: usize,
    /// Per-layer activation recompute (less memory, one more forward pass).
    pub recompute: bool,
    /// Coefficient of a Qwen3-MoE router's load-balancing loss (see
    /// [`crate::qwen3::Qwen3::backward_packed`]); 0 = off, the default. RL fine-tuning of a
    /// pretrained MoE usually leaves it off: the routers are balanced by pretraining, the
    /// term's gradient pulls away from the reward, and at the checkpoints' 0.001 it is
    /// small next to a GRPO loss of order 0.01-0.1 anyway. Dense models ignore it.
    pub router_aux_coef: f64,
    pub optim: OptimConfig,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        Self {
            loss_norm: LossNorm::SampleMean,
            clip_low: 0.2,
            clip_high: 0.28,
            kl_coef: 0.0,
            tis_cap: 2.0,
            // Both roles sample at 0.6 (spade-spec.md, "Play").
            temperature: 0.6,
            micro_batch_tokens: 16_384,
            logprob_chunk_tokens: crate::train::DEFAULT_CHUNK_TOKENS,
            recompute: false,
            router_aux_coef: 0.0,
            optim: OptimConfig::default(),
        }
    }
}

/// One trajectory to learn from.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoSample {
    pub seq: MaskedSeq,
    /// `log pi_old` of each token, aligned with `seq.ids` (read only where the mask is set).
    pub old_logprobs: Vec<f32>,
    /// Log-probs of the policy that actually sampled the tokens, when it is older than
    /// `old_logprobs`' (delayed samples); enables the truncated importance weight.
    pub behavior_logprobs: Option<Vec<f32>>,
    pub advantage: f32,
    /// Loss weight (1 for agent samples; the designer weight for designer samples).
    pub weight: f32,
}

impl GrpoSample {
    /// A fresh on-policy sample: `prompt` then the sampler's completion and log-probs.
    pub fn from_completion(prompt: &[i64], completion: &Completion, advantage: f32) -> Self {
        let seq = MaskedSeq::prompt_completion(prompt, &completion.tokens);
        let mut old = vec![0.0; prompt.len()];
        old.extend_from_slice(&completion.logprobs);
        Self {
            seq,
            old_logprobs: old,
            behavior_logprobs: None,
            advantage,
            weight: 1.0,
        }
    }

    fn check(&self) -> Result<()> {
        self.seq.check()?;
        let n = self.seq.ids.len();
        let bad = self.old_logprobs.len() != n
            || self
                .behavior_logprobs
                .as_ref()
                .is_some_and(|b| b.len() != n);
        if bad {
            return Err(PolicyError::InvalidInput(format!(
                "log-prob vectors must have one entry per id ({n})"
            )));
        }
        Ok(())
    }
}

/// What one step did, for logging.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GrpoStats {
    /// The loss `L` (normalised as [`GrpoConfig::loss_norm`] says).
    pub loss: f64,
    /// Trainable tokens of the samples that were computed (the ratio, clip and KL figures are
    /// means over them).
    pub tokens: usize,
    /// Samples in the step, zero-advantage ones included, and those whose pass was skipped
    /// because they could not change the loss (zero advantage, no KL term, no router loss).
    pub samples: usize,
    pub skipped: usize,
    /// Share of tokens whose clipped branch was active (no gradient from them).
    pub clip_frac: f64,
    pub mean_ratio: f64,
    pub mean_kl: f64,
    /// Mean truncated importance weight.
    pub mean_tis: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// The router load-balancing loss (token-weighted mean over the step's passes), when
    /// `router_aux_coef > 0` on a Qwen3-MoE model; else 0.
    pub router_aux: f64,
    /// Mean entropy (nats) of the policy's sampling distribution over the computed samples'
    /// trained tokens, at the sampling temperature: a collapse toward one answer shows here
    /// before it shows in the rewards.
    pub entropy: f64,
}

/// Sums over the masked tokens of one micro-batch; all tensors `[B, T-1]` except `adv`, `weight`
/// `[B]`. Returns the summed per-token loss, each token weighted by `weight` (the sample's loss
/// weight times its normalisation), and the sums behind [`GrpoStats`]: clipped tokens, ratios,
/// kl, tis.
#[allow(clippy::too_many_arguments)]
pub fn grpo_loss_sum(
    logp: &Tensor,
    old: &Tensor,
    behavior: &Tensor,
    reference: Option<&Tensor>,
    adv: &Tensor,
    weight: &Tensor,
    mask: &Tensor,
    c: &GrpoConfig,
) -> (Tensor, [f64; 4]) {
    let adv = adv.unsqueeze(1);
    let ratio = (logp - old).exp();
    let unclipped = &ratio * &adv;
    let clipped = ratio.clamp(1.0 - c.clip_low, 1.0 + c.clip_high) * &adv;
    let surrogate = unclipped.minimum(&clipped);
    let tis = (old - behavior).exp().clamp_max(c.tis_cap).detach();
    let policy_term = -(surrogate * &tis);
    let (per_token, kl_sum) = match (reference, c.kl_coef > 0.0) {
        (Some(r), true) => {
            let d = r - logp;
            let kl = d.exp() - &d - 1.0;
            let kl_sum = (&kl * mask).sum(Kind::Float).double_value(&[]);
            (policy_term + kl * c.kl_coef, kl_sum)
        }
        _ => (policy_term, 0.0),
    };
    let loss = (per_token * weight.unsqueeze(1) * mask).sum(Kind::Float);
    let r = ratio.detach();
    let is_clipped = (adv.gt(0.0).logical_and(&r.gt(1.0 + c.clip_high)))
        .logical_or(&adv.lt(0.0).logical_and(&r.lt(1.0 - c.clip_low)))
        .to_kind(Kind::Float);
    let sum = |t: &Tensor| (t * mask).sum(Kind::Float).double_value(&[]);
    (loss, [sum(&is_clipped), sum(&r), kl_sum, sum(&tis)])
}

/// Applies GRPO steps to a policy.
/// How an optimiser state was saved (see [`GrpoTrainer::load_optimizer_from`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedOptimizer {
    /// One file of the whole state ([`AdamW::save`]).
    Whole,
    /// One file per rank of this many ranks ([`crate::zero::ShardedAdamW::save`]).
    Shards(usize),
}

#[derive(Debug)]
pub struct GrpoTrainer {
    cfg: GrpoConfig,
    /// The whole optimiser, or a stateless one when `sharded` holds this rank's share.
    opt: AdamW,
    sharded: Option<crate::zero::ShardedAdamW>,
    reference: Option<Policy>,
}

impl GrpoTrainer {
    /// AdamW over `policy`'s variables; a frozen copy of it as the KL reference when
    /// `kl_coef > 0`.
    pub fn new(policy: &Policy, cfg: GrpoConfig) -> Result<Self> {
        Self::build(policy, cfg, None)
    }

    fn build(
        policy: &Policy,
        cfg: GrpoConfig,
        shard: Option<(usize, usize, ZeroStage)>,
    ) -> Result<Self> {
        if cfg.micro_batch_tokens == 0 || cfg.logprob_chunk_tokens == 0 {
            return Err(PolicyError::InvalidInput(
                "micro_batch_tokens and logprob_chunk_tokens must be >= 1".into(),
            ));
        }
        if matches!(shard, Some((_, _, ZeroStage::Three))) && !cfg.recompute {
            return Err(PolicyError::InvalidInput(
                "ZeRO-3 gathers each layer again for its backward pass, so it needs recompute \
                 (grpo.recompute = true)"
                    .into(),
            ));
        }
        let reference = if cfg.kl_coef > 0.0 {
            Some(policy.frozen_copy()?)
        } else {
            None
        };
        // A sharded trainer never holds the whole optimiser state, not even for a moment.
        let (opt, sharded) = match shard {
            Some((rank, world, stage)) => (
                AdamW::without_state(&cfg.optim),
                Some(crate::zero::ShardedAdamW::with_stage(
                    policy.var_store(),
                    &cfg.optim,
                    rank,
                    world,
                    stage,
                )?),
            ),
            None => (train::adamw(policy.var_store(), &cfg.optim)?, None),
        };
        Ok(Self {
            opt,
            sharded,
            cfg,
            reference,
        })
    }

    /// A trainer for rank `rank` of `world` data-parallel ranks whose optimiser state is
    /// sharded (ZeRO-2, [`crate::zero`]): its steps need the group ([`GrpoTrainer::step_synced`]
    /// with `Some`), and its state is not saved yet.
    pub fn new_sharded(
        policy: &Policy,
        cfg: GrpoConfig,
        rank: usize,
        world: usize,
    ) -> Result<Self> {
        Self::build(policy, cfg, Some((rank, world, ZeroStage::Two)))
    }

    /// [`GrpoTrainer::new_sharded`] of ZeRO stage `stage`; ZeRO-3 ([`crate::zero`]'s stage 3)
    /// needs `cfg.recompute`.
    pub fn new_sharded_stage(
        policy: &Policy,
        cfg: GrpoConfig,
        rank: usize,
        world: usize,
        stage: ZeroStage,
    ) -> Result<Self> {
        Self::build(policy, cfg, Some((rank, world, stage)))
    }

    /// This rank's sharded optimiser, when the trainer was made with
    /// [`GrpoTrainer::new_sharded`].
    pub fn sharded_optimizer(&self) -> Option<&crate::zero::ShardedAdamW> {
        self.sharded.as_ref()
    }

    /// [`GrpoTrainer::sharded_optimizer`], to change (its bucket size).
    pub fn sharded_optimizer_mut(&mut self) -> Option<&mut crate::zero::ShardedAdamW> {
        self.sharded.as_mut()
    }

    fn zero_grad(&mut self) {
        self.opt.zero_grad();
        if let Some(z) = &mut self.sharded {
            z.zero_grad();
        }
    }

    fn refuse_sharded(&self, what: &str) -> Result<()> {
        match self.sharded {
            Some(_) => Err(PolicyError::InvalidInput(format!(
                "{what}: a sharded (ZeRO-2) trainer loads its rank's file with load_optimizer \
                 (its masters always come from that file)"
            ))),
            None => Ok(()),
        }
    }

    /// The settings.
    pub fn config(&self) -> &GrpoConfig {
        &self.cfg
    }

    /// The optimiser (its step count and moments).
    pub fn optimizer(&self) -> &AdamW {
        &self.opt
    }

    /// Writes the optimiser's state to `path` (see [`AdamW::save`]).
    /// A sharded trainer writes its rank's file beside `path` ([`crate::zero::shard_file`]).
    pub fn save_optimizer(&self, path: &Path) -> Result<()> {
        if let Some(z) = &self.sharded {
            return z.save(&crate::zero::shard_file(path, z.rank(), z.world_size()));
        }
        self.opt.save(path)
    }

    /// Restores the optimiser's state from `path` (see [`AdamW::load`]).
    /// A sharded trainer reads its rank's file beside `path` and refuses another rank count's
    /// ([`GrpoTrainer::load_optimizer_from`] re-shards).
    pub fn load_optimizer(&mut self, path: &Path) -> Result<()> {
        if let Some(z) = &mut self.sharded {
            let file = crate::zero::shard_file(path, z.rank(), z.world_size());
            return z.load(&file);
        }
        self.opt.load(path)
    }

    /// Restores the optimiser's state from what another layout saved beside `path`: a whole
    /// state (one process) or `Shards(world)` (every rank's shard file), whatever this
    /// trainer's layout is, re-sharding as needed (see [`crate::zero`]). `masters` false keeps
    /// the current weights as the masters (the state is older than the weights).
    pub fn load_optimizer_from(
        &mut self,
        path: &Path,
        saved: SavedOptimizer,
        masters: bool,
    ) -> Result<()> {
        match (&mut self.sharded, saved) {
            (Some(z), SavedOptimizer::Whole) => z.load_whole(path, masters),
            (Some(z), SavedOptimizer::Shards(world)) if masters => {
                if world == z.world_size() {
                    let file = crate::zero::shard_file(path, z.rank(), world);
                    return z.load(&file);
                }
                z.load_resharded(path, world)
            }
            (Some(_), SavedOptimizer::Shards(_)) => Err(PolicyError::InvalidInput(
                "a sharded trainer takes the masters of a sharded state (shards are written with \
                 the weights)"
                    .into(),
            )),
            (None, SavedOptimizer::Whole) => self.opt.load_with(path, masters),
            (None, SavedOptimizer::Shards(world)) => self.opt.load_shards(path, world, masters),
        }
    }

    /// [`AdamW::load_with`]: `masters` false keeps the current weights as the masters.
    pub fn load_optimizer_with(&mut self, path: &Path, masters: bool) -> Result<()> {
        self.refuse_sharded("load_optimizer_with")?;
        self.opt.load_with(path, masters)
    }

    /// One optimiser step over all `samples` (see the module doc).
    pub fn step(&mut self, policy: &Policy, samples: &[GrpoSample]) -> Result<GrpoStats> {
        self.step_synced(policy, samples, None)
    }

    /// [`GrpoTrainer::step`] as one rank of a data-parallel group: every rank passes the same
    /// `samples`, runs the backward passes of its share of the micro-batches (every
    /// `world`-th, from its rank), and the gradients and statistics are summed over the group
    /// before clipping and the update, so every rank takes the step one rank would have taken
    /// (up to the order of float sums) and the weights stay equal without being sent.
    pub fn step_synced(
        &mut self,
        policy: &Policy,
        samples: &[GrpoSample],
        sync: Option<&dyn crate::optim::GradientSync>,
    ) -> Result<GrpoStats> {
        self.zero_grad();
        let mut st = self.backward_shard(policy, samples, sync)?;
        if st.tokens == 0 {
            // Every sample had a zero advantage: no gradient, so no step (AdamW's momentum and
            // weight decay would still move the weights on a step that carries no signal).
            // Every rank sees the same samples, so every rank returns here.
            return Ok(st);
        }
        if let Some(sync) = sync {
            if self.sharded.is_none() {
                self.opt.sync_gradients(sync)?;
            }
            let mut sums = Tensor::from_slice(&[
                st.loss,
                st.clip_frac,
                st.mean_ratio,
                st.mean_kl,
                st.mean_tis,
                st.router_aux,
                st.entropy,
            ]);
            sync.sum(&mut sums)?;
            let v: Vec<f64> = Vec::<f64>::try_from(&sums)?;
            if let [loss, clip, ratio, kl, tis, aux, entropy] = v[..] {
                (st.loss, st.clip_frac, st.mean_ratio, st.mean_kl) = (loss, clip, ratio, kl);
                (st.mean_tis, st.router_aux, st.entropy) = (tis, aux, entropy);
            }
        }
        match (&mut self.sharded, sync) {
            (Some(z), Some(sync)) => st.grad_norm = z.step(sync)?,
            (Some(_), None) => {
                return Err(PolicyError::InvalidInput(
                    "a sharded (ZeRO-2) trainer steps with its group".into(),
                ));
            }
            (None, _) => {
                st.grad_norm = self.opt.clip_grad_norm(self.cfg.optim.max_grad_norm)?;
                self.opt.step()?;
            }
        }
        self.zero_grad();
        Ok(st)
    }

    /// Accumulates the gradient of the step's loss `L` over `samples` into the policy's
    /// variables (without zeroing them first, clipping or stepping): [`GrpoTrainer::step`]
    /// without the update. `grad_norm` is left 0.
    pub fn backward(&mut self, policy: &Policy, samples: &[GrpoSample]) -> Result<GrpoStats> {
        self.backward_shard(policy, samples, None)
    }

    /// [`GrpoTrainer::backward`] over the micro-batches `i` with `i % world == rank` of the
    /// group `sync`; the loss is normalised over all `samples` as on one rank. Under ZeRO-3
    /// the passes gather each layer from the group, so every rank makes as many as the rank
    /// with the most (a rank out of micro-batches makes idle ones).
    fn backward_shard(
        &mut self,
        policy: &Policy,
        samples: &[GrpoSample],
        sync: Option<&dyn crate::optim::GradientSync>,
    ) -> Result<GrpoStats> {
        let (rank, world) = sync.map_or((0, 1), |s| (s.rank(), s.world_size().max(1)));
        for s in samples {
            s.check()?;
        }
        let trained = |s: &GrpoSample| s.seq.loss_mask[1..].iter().filter(|&&m| m).count();
        let all_tokens: usize = samples.iter().map(trained).sum();
        if all_tokens == 0 {
            return Err(PolicyError::InvalidInput(
                "no trainable tokens in the step".into(),
            ));
        }
        let c = &self.cfg;
        // A zero-advantage sample's surrogate is 0 whatever the ratio: only a KL term or the
        // router loss could give its pass a gradient.
        let skip_zero = c.kl_coef == 0.0 && c.router_aux_coef == 0.0;
        let computed: Vec<&GrpoSample> = samples
            .iter()
            .filter(|s| !(skip_zero && s.advantage == 0.0) && trained(s) > 0)
            .collect();
        let tokens: usize = computed.iter().map(|s| trained(s)).sum();
        let mut st = GrpoStats {
            tokens,
            samples: samples.len(),
            skipped: samples.len() - computed.len(),
            ..Default::default()
        };
        if tokens == 0 {
            return Ok(st);
        }
        // Each token's share of L, by sample.
        let norm = |s: &GrpoSample| -> f32 {
            match c.loss_norm {
                LossNorm::SampleMean => 1.0 / (samples.len() as f64 * trained(s) as f64) as f32,
                LossNorm::TokenMean => 1.0 / all_tokens as f32,
            }
        };
        let dev = policy.device();
        let n = tokens as f64;
        let lens: Vec<usize> = computed.iter().map(|s| s.seq.ids.len()).collect();
        let positions: usize = lens.iter().map(|l| l - 1).sum();
        let batches = train::micro_batches(&lens, c.micro_batch_tokens);
        let layer_wise = match (&mut self.sharded, sync) {
            (Some(z), Some(sync)) if z.stage() == ZeroStage::Three => {
                z.release_layers()?;
                Some(sync)
            }
            (Some(z), None) if z.stage() == ZeroStage::Three => {
                return Err(PolicyError::InvalidInput(
                    "a ZeRO-3 trainer's passes need its group".into(),
                ));
            }
            _ => None,
        };
        let passes = match layer_wise {
            Some(_) => batches.len().div_ceil(world) * world,
            None => batches.len(),
        };
        for i in (rank..passes).step_by(world) {
            let Some(range) = batches.get(i).cloned() else {
                if let (Some(z), Some(sync)) = (&mut self.sharded, layer_wise) {
                    z.idle_pass(sync)?;
                }
                continue;
            };
            let chunk = &computed[range];
            // The pass's share of the step's positions weights its router loss.
            let share = chunk.iter().map(|s| s.seq.ids.len() - 1).sum::<usize>() as f64
                / positions.max(1) as f64;
            let pass = PassOptions {
                temperature: c.temperature,
                chunk_tokens: c.logprob_chunk_tokens,
                recompute: c.recompute,
                router_aux: c.router_aux_coef * share,
                entropy: true,
            };
            let seqs: Vec<&MaskedSeq> = chunk.iter().map(|s| &s.seq).collect();
            let packed = train::pack(&seqs, dev)?;
            // Per predicted token, [N] (the loss broadcasts [N, 1] against them).
            let per_token = |f: &dyn Fn(&GrpoSample) -> Vec<f32>| -> Tensor {
                let flat: Vec<f32> = chunk.iter().flat_map(|s| f(s)).collect();
                Tensor::from_slice(&flat).to_device(dev)
            };
            let repeat = |s: &GrpoSample, v: f32| vec![v; s.seq.ids.len() - 1];
            let old = per_token(&|s| s.old_logprobs[1..].to_vec()).unsqueeze(1);
            let behavior = per_token(&|s| {
                s.behavior_logprobs.as_ref().unwrap_or(&s.old_logprobs)[1..].to_vec()
            })
            .unsqueeze(1);
            let adv = per_token(&|s| repeat(s, s.advantage));
            let weight = per_token(&|s| repeat(s, s.weight * norm(s)));
            let mask = packed.mask.unsqueeze(1);
            let reference = match &self.reference {
                Some(r) => Some(r.model().packed_logprobs(&packed.ids, &pass)?.unsqueeze(1)),
                None => None,
            };
            let mut units = match (&mut self.sharded, layer_wise) {
                (Some(z), Some(sync)) => Some(z.units(sync)),
                _ => None,
            };
            let report = policy.model().backward_packed_units(
                &packed.ids,
                &pass,
                units
                    .as_mut()
                    .map(|u| u as &mut dyn crate::qwen3::WeightUnits),
                |logp, start| {
                    let len = logp.size()[0];
                    let at = |t: &Tensor| t.narrow(0, start, len);
                    let (sum, parts) = grpo_loss_sum(
                        logp,
                        &at(&old),
                        &at(&behavior),
                        reference.as_ref().map(at).as_ref(),
                        &at(&adv),
                        &at(&weight),
                        &at(&mask),
                        c,
                    );
                    let loss = sum;
                    st.loss += loss.double_value(&[]);
                    st.clip_frac += parts[0] / n;
                    st.mean_ratio += parts[1] / n;
                    st.mean_kl += parts[2] / n;
                    st.mean_tis += parts[3] / n;
                    Ok(loss)
                },
            )?;
            st.router_aux += report.router_aux * share;
            if let Some(h) = report.entropy {
                st.entropy += (h * packed.mask.to_kind(Kind::Float))
                    .sum(Kind::Float)
                    .double_value(&[])
                    / n;
            }
            // Float32 sums across micro-batches for a half-precision model (fields, not
            // `self.accumulate()`: `c` still borrows the settings).
            match &mut self.sharded {
                Some(z) => z.accumulate()?,
                None => self.opt.accumulate()?,
            }
        }
        Ok(st)
    }
}

#[cfg(test)]
mod tests;
