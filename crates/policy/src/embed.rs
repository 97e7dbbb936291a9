//! Sequence embeddings from the policy itself: the mean of the final hidden states over a
//! sequence's tokens. The worker's Vendi score of generated environments uses them (spec,
//! "Metrics to log each step"), so diversity is measured in the model's own representation.

use crate::error::{PolicyError, Result};
use crate::policy::Policy;
use crate::train::{MaskedSeq, pad_right};
use tch::{Device, Kind};

/// Mean-pooled final hidden states, one vector of `hidden_size` floats per sequence (no
/// gradients). Sequences are right-padded; padding is excluded from the mean.
pub fn mean_hidden(policy: &Policy, seqs: &[Vec<i64>]) -> Result<Vec<Vec<f32>>> {
    if seqs.iter().any(|s| s.len() < 2) {
        return Err(PolicyError::InvalidInput(
            "an embedded sequence needs at least 2 tokens".into(),
        ));
    }
    let mut out = Vec::with_capacity(seqs.len());
    for chunk in seqs.chunks(8) {
        let masked: Vec<MaskedSeq> = chunk
            .iter()
            .map(|s| MaskedSeq {
                ids: s.clone(),
                loss_mask: vec![true; s.len()],
            })
            .collect();
        let refs: Vec<&MaskedSeq> = masked.iter().collect();
        let batch = pad_right(&refs, policy.device())?;
        let pooled = tch::no_grad(|| -> Result<tch::Tensor> {
            let h = policy.model().forward(&batch.ids)?.to_kind(Kind::Float);
            // batch.mask covers positions 1..T; position 0 is always a real token.
            let b = batch.mask.size()[0];
            let first = tch::Tensor::ones([b, 1], (Kind::Float, policy.device()));
            let mask = tch::Tensor::cat(&[first, batch.mask.shallow_clone()], 1).unsqueeze(-1);
            let sum = (h * &mask).sum_dim_intlist(1, false, Kind::Float);
            Ok(sum / mask.sum_dim_intlist(1, false, Kind::Float))
        })?;
        let pooled = pooled.to_device(Device::Cpu);
        for i in 0..chunk.len() {
            out.push(Vec::<f32>::try_from(pooled.get(i as i64))?);
        }
    }
    Ok(out)
}

/// Threads libtorch may use for intra-op parallelism (callers outside this crate never name
/// libtorch themselves).
pub fn set_threads(n: usize) {
    tch::set_num_threads(i32::try_from(n.max(1)).unwrap_or(1));
}
