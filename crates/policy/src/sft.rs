//! Supervised fine-tuning on (prompt, completion) text pairs: next-token cross-entropy on the
//! completion tokens only (token-level mean over the batch), AdamW, gradient clipping. The CPU
//! demo model learns to write environments from the seed library this way before self-play.

use crate::error::{PolicyError, Result};
use crate::optim::AdamW;
use crate::policy::Policy;
use crate::tokenizer::{IM_END, Tokenizer};
use crate::train::{self, MaskedSeq, OptimConfig};
use std::path::Path;
use tch::Kind;

/// Settings for [`SftTrainer`].
#[derive(Debug, Clone, PartialEq)]
pub struct SftConfig {
    pub optim: OptimConfig,
    /// Samples per forward/backward pass.
    pub micro_batch: usize,
    /// Longer sequences are cut to this many tokens (the completion's tail is dropped).
    pub max_len: usize,
}

impl Default for SftConfig {
    fn default() -> Self {
        Self {
            // A tiny model from scratch needs a far larger rate than the paper's 1e-6.
            optim: OptimConfig {
                lr: 1e-3,
                weight_decay: 0.0,
                ..OptimConfig::default()
            },
            micro_batch: 8,
            max_len: 1024,
        }
    }
}

/// Encodes pairs as masked sequences: the prompt, then the completion closed by `<|im_end|>`
/// when the tokenizer has it (so the model learns to stop), with only the completion trained.
pub fn encode_pairs(
    tok: &Tokenizer,
    pairs: &[(String, String)],
    max_len: usize,
) -> Result<Vec<MaskedSeq>> {
    let end = tok.token_id(IM_END);
    pairs
        .iter()
        .map(|(prompt, completion)| {
            let p = tok.encode(prompt)?;
            let mut c = tok.encode(completion)?;
            c.extend(end);
            if p.is_empty() || c.is_empty() {
                return Err(PolicyError::InvalidInput(
                    "a pair needs a non-empty prompt and completion".into(),
                ));
            }
            let mut s = MaskedSeq::prompt_completion(&p, &c);
            s.ids.truncate(max_len);
            s.loss_mask.truncate(max_len);
            Ok(s)
        })
        .collect()
}

/// Runs SFT steps on a policy.
#[derive(Debug)]
pub struct SftTrainer {
    cfg: SftConfig,
    opt: AdamW,
}

impl SftTrainer {
    pub fn new(policy: &Policy, cfg: SftConfig) -> Result<Self> {
        if cfg.micro_batch == 0 {
            return Err(PolicyError::InvalidInput("micro_batch must be >= 1".into()));
        }
        Ok(Self {
            opt: train::adamw(policy.var_store(), &cfg.optim)?,
            cfg,
        })
    }

    /// The optimiser (its step count and moments).
    pub fn optimizer(&self) -> &AdamW {
        &self.opt
    }

    /// Writes the optimiser's state to `path` (see [`AdamW::save`]).
    pub fn save_optimizer(&self, path: &Path) -> Result<()> {
        self.opt.save(path)
    }

    /// Restores the optimiser's state from `path` (see [`AdamW::load`]).
    pub fn load_optimizer(&mut self, path: &Path) -> Result<()> {
        self.opt.load(path)
    }

    /// [`AdamW::load_with`]: `masters` false keeps the current weights as the masters.
    pub fn load_optimizer_with(&mut self, path: &Path, masters: bool) -> Result<()> {
        self.opt.load_with(path, masters)
    }

    /// One optimiser step on `batch`; returns the mean negative log-likelihood per trained token.
    pub fn step(&mut self, policy: &Policy, batch: &[MaskedSeq]) -> Result<f64> {
        let tokens: usize = batch
            .iter()
            .map(|s| s.loss_mask.iter().skip(1).filter(|&&m| m).count())
            .sum();
        if tokens == 0 {
            return Err(PolicyError::InvalidInput(
                "no completion tokens to train".into(),
            ));
        }
        self.opt.zero_grad();
        let mut total = 0.0;
        for chunk in batch.chunks(self.cfg.micro_batch) {
            let seqs: Vec<&MaskedSeq> = chunk.iter().collect();
            let b = train::pad_right(&seqs, policy.device())?;
            let logp = train::shifted_logprobs(policy.model(), &b.ids, 1.0)?;
            let loss = -(logp * &b.mask).sum(Kind::Float) / tokens as f64;
            loss.backward();
            total += loss.double_value(&[]);
        }
        train::clip_grad_norm(policy.var_store(), self.cfg.optim.max_grad_norm)?;
        self.opt.step()?;
        self.opt.zero_grad();
        Ok(total)
    }

    /// `epochs` passes over `data` in batches of `batch_size`, in a fixed order rotated by
    /// epoch (deterministic); `progress(epoch, step, loss)` after every step. Returns the losses.
    pub fn fit(
        &mut self,
        policy: &Policy,
        data: &[MaskedSeq],
        epochs: usize,
        batch_size: usize,
        mut progress: impl FnMut(usize, usize, f64),
    ) -> Result<Vec<f64>> {
        if data.is_empty() || batch_size == 0 {
            return Err(PolicyError::InvalidInput(
                "no data or a zero batch size".into(),
            ));
        }
        let mut losses = vec![];
        for epoch in 0..epochs {
            let mut order: Vec<&MaskedSeq> = data.iter().collect();
            order.rotate_left(epoch % data.len());
            for (step, chunk) in order.chunks(batch_size).enumerate() {
                let owned: Vec<MaskedSeq> = chunk.iter().map(|s| (*s).clone()).collect();
                let loss = self.step(policy, &owned)?;
                progress(epoch, step, loss);
                losses.push(loss);
            }
        }
        Ok(losses)
    }
}
