//! GRPO's loss against hand-computed values, its masks and clip boundaries, and a few real
//! steps on a tiny model.

use super::*;
use crate::qwen3::{Config, WeightInit};
use crate::train::token_logprobs;
use tch::Device;

fn t2(rows: &[&[f32]]) -> Tensor {
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_slice(&flat).view([rows.len() as i64, rows[0].len() as i64])
}

fn t1(v: &[f32]) -> Tensor {
    Tensor::from_slice(v)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-5
}

/// logp = 0 everywhere and `old = -ln r`, so the ratios are exactly `r`.
fn with_ratios(r: &[&[f32]]) -> (Tensor, Tensor) {
    let logp = t2(r).zeros_like().set_requires_grad(true);
    let old = -t2(r).log();
    (logp, old)
}

#[test]
fn loss_equals_the_hand_computed_value_and_masked_tokens_get_no_gradient() {
    let c = GrpoConfig::default();
    let (logp, old) = with_ratios(&[&[1.5, 0.5, 1.0], &[0.5, 1.5, 1.1]]);
    let mask = t2(&[&[1.0, 1.0, 0.0], &[1.0, 1.0, 1.0]]);
    let (adv, weight) = (t1(&[1.0, -1.0]), t1(&[1.0, 2.0]));
    let (sum, parts) = grpo_loss_sum(&logp, &old, &old, None, &adv, &weight, &mask, &c);
    // Row 0 (A = +1): min(1.5, 1.28) = 1.28 and min(0.5, 0.8) = 0.5, so -1.28 - 0.5; the
    // third token is masked. Row 1 (A = -1, weight 2): min(-0.5, -0.8) = -0.8,
    // min(-1.5, -1.28) = -1.5, min(-1.1, -1.1) = -1.1, so 2 * (0.8 + 1.5 + 1.1).
    let loss = sum / 5.0;
    assert!(close(
        loss.double_value(&[]),
        (-1.28 - 0.5 + 2.0 * 3.4) / 5.0
    ));
    assert_eq!(parts[0], 2.0, "two tokens are clipped");
    loss.backward();
    // d/dlogp of the unclipped branch is -w A r; clipped and masked tokens give 0.
    let want = t2(&[&[0.0, -0.5, 0.0], &[0.0, 3.0, 2.2]]) / 5.0;
    let got = logp.grad();
    assert!(
        got.allclose(&want, 1e-6, 1e-6, false),
        "gradient {got} != {want}"
    );
}

#[test]
fn clipping_switches_off_the_gradient_exactly_past_each_boundary() {
    let c = GrpoConfig::default();
    let grad_at = |r: f32, a: f32| {
        let (logp, old) = with_ratios(&[&[r]]);
        let (sum, _) = grpo_loss_sum(
            &logp,
            &old,
            &old,
            None,
            &t1(&[a]),
            &t1(&[1.0]),
            &t2(&[&[1.0]]),
            &c,
        );
        sum.backward();
        logp.grad().double_value(&[0, 0])
    };
    // A > 0: the upper bound 1 + 0.28 clips.
    assert!(close(grad_at(1.27, 1.0), -1.27));
    assert_eq!(grad_at(1.29, 1.0), 0.0);
    // Below 1 - 0.2 nothing clips for A > 0 ...
    assert!(close(grad_at(0.5, 1.0), -0.5));
    // ... but for A < 0 the lower bound 0.8 does, and the upper one does not.
    assert!(close(grad_at(0.81, -1.0), 0.81));
    assert_eq!(grad_at(0.79, -1.0), 0.0);
    assert!(close(grad_at(1.5, -1.0), 1.5));
}

#[test]
fn delayed_samples_are_weighted_by_truncated_importance_ratios() {
    let c = GrpoConfig::default();
    let old = t2(&[&[-1.0, -1.0]]);
    let logp = old.copy();
    // old/behaviour ratios 3 (capped at 2) and 0.5.
    let behavior = &old - t2(&[&[3f32.ln(), 0.5f32.ln()]]);
    let (sum, parts) = grpo_loss_sum(
        &logp,
        &old,
        &behavior,
        None,
        &t1(&[1.0]),
        &t1(&[1.0]),
        &t2(&[&[1.0, 1.0]]),
        &c,
    );
    assert!(close(sum.double_value(&[]), -(2.0 + 0.5)));
    assert!(close(parts[3], 2.5));
}

#[test]
fn kl_uses_the_k3_estimator_and_its_coefficient() {
    let c = GrpoConfig {
        kl_coef: 0.005,
        ..Default::default()
    };
    let logp = t2(&[&[-2.0]]);
    let reference = &logp + 2f64.ln();
    let (sum, parts) = grpo_loss_sum(
        &logp,
        &logp,
        &logp,
        Some(&reference),
        &t1(&[0.0]),
        &t1(&[3.0]),
        &t2(&[&[1.0]]),
        &c,
    );
    // exp(ln 2) - ln 2 - 1
    let k3 = 1.0 - 2f64.ln();
    assert!(close(parts[2], k3));
    assert!(close(sum.double_value(&[]), 3.0 * 0.005 * k3));
}

fn tiny_policy(seed: i64) -> Result<Policy> {
    tch::set_num_threads(1);
    let _rng = crate::seeded_draws();
    tch::manual_seed(seed);
    let mut cfg = Config::from_map(
        match serde_json::json!({
            "model_type": "qwen3", "vocab_size": 32, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "tie_word_embeddings": true
        }) {
            serde_json::Value::Object(m) => m,
            _ => unreachable!(),
        },
    )?;
    cfg.rope_theta = 10_000.0;
    Policy::new(
        &cfg,
        Device::Cpu,
        Kind::Float,
        WeightInit::Normal { std: 0.1 },
        None,
    )
}

fn sample(prompt: &[i64], completion: &[i64], model: &Policy, adv: f32) -> Result<GrpoSample> {
    let seq = MaskedSeq::prompt_completion(prompt, completion);
    let old = token_logprobs(model.model(), std::slice::from_ref(&seq.ids), 1.0)?.remove(0);
    Ok(GrpoSample {
        seq,
        old_logprobs: old,
        behavior_logprobs: None,
        advantage: adv,
        weight: 1.0,
    })
}

fn completion_logprob(p: &Policy, s: &GrpoSample) -> Result<f64> {
    let lp = token_logprobs(p.model(), std::slice::from_ref(&s.seq.ids), 1.0)?.remove(0);
    Ok(lp
        .iter()
        .zip(&s.seq.loss_mask)
        .filter(|(_, m)| **m)
        .map(|(l, _)| f64::from(*l))
        .sum())
}

/// Temperature 1 (the samples' log-probs are taken at 1) and a step large enough to see.
fn fast_steps() -> GrpoConfig {
    GrpoConfig {
        temperature: 1.0,
        optim: OptimConfig {
            lr: 1e-2,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn steps_raise_positive_and_lower_negative_completions() -> Result<()> {
    let p = tiny_policy(0)?;
    let mut tr = GrpoTrainer::new(&p, fast_steps())?;
    let good = sample(&[1, 2, 3], &[7, 8, 9], &p, 1.0)?;
    let bad = sample(&[1, 2, 3], &[10, 11, 12], &p, -1.0)?;
    let (g0, b0) = (
        completion_logprob(&p, &good)?,
        completion_logprob(&p, &bad)?,
    );
    for _ in 0..5 {
        // Recompute old log-probs each step, as a fresh on-policy batch would have them.
        let batch = [
            sample(&[1, 2, 3], &[7, 8, 9], &p, 1.0)?,
            sample(&[1, 2, 3], &[10, 11, 12], &p, -1.0)?,
        ];
        let st = tr.step(&p, &batch)?;
        assert_eq!(st.tokens, 6);
        assert!(close(st.mean_ratio, 1.0) && st.grad_norm > 0.0);
    }
    let (g1, b1) = (
        completion_logprob(&p, &good)?,
        completion_logprob(&p, &bad)?,
    );
    assert!(
        g1 > g0 + 0.5 && b1 < b0 - 0.5,
        "good {g0} -> {g1}, bad {b0} -> {b1}"
    );
    Ok(())
}

#[test]
fn a_sample_without_trainable_tokens_changes_no_gradient() -> Result<()> {
    let p = tiny_policy(1)?;
    let c = GrpoConfig::default();
    let a = sample(&[1, 2], &[3, 4, 5], &p, 1.0)?;
    let mut silent = sample(&[6, 7, 8, 9, 10, 11], &[12], &p, 1.0)?;
    silent.seq.loss_mask.iter_mut().for_each(|m| *m = false);
    let grads = |samples: &[&GrpoSample]| -> Result<Vec<Tensor>> {
        let seqs: Vec<&MaskedSeq> = samples.iter().map(|s| &s.seq).collect();
        let b = train::pad_right(&seqs, Device::Cpu)?;
        let w = b.mask.size()[1] as usize;
        let old: Vec<f32> = samples
            .iter()
            .flat_map(|s| {
                let mut r = s.old_logprobs[1..].to_vec();
                r.resize(w, 0.0);
                r
            })
            .collect();
        let old = Tensor::from_slice(&old).view([samples.len() as i64, w as i64]);
        let ones = Tensor::ones([samples.len() as i64], (Kind::Float, Device::Cpu));
        let logp = train::shifted_logprobs(p.model(), &b.ids, c.temperature)?;
        let (sum, _) = grpo_loss_sum(&logp, &old, &old, None, &ones, &ones, &b.mask, &c);
        for mut v in p.var_store().trainable_variables() {
            v.zero_grad();
        }
        sum.backward();
        Ok(p.var_store()
            .trainable_variables()
            .iter()
            .map(|v| v.grad().copy())
            .collect())
    };
    let alone = grads(&[&a])?;
    let with_silent = grads(&[&a, &silent])?;
    for (x, y) in alone.iter().zip(&with_silent) {
        assert!(x.allclose(y, 1e-5, 1e-6, false));
    }
    assert!(
        alone
            .iter()
            .any(|g| g.abs().sum(Kind::Float).double_value(&[]) > 0.0)
    );
    Ok(())
}

/// Samples of different lengths, advantages and weights, with `old` log-probs moved away from
/// the policy's so that ratios differ from 1 and some tokens clip.
fn varied_samples(p: &Policy) -> Result<Vec<GrpoSample>> {
    let specs: [(&[i64], &[i64], f32, f32); 4] = [
        (&[1, 2, 3], &[7, 8, 9, 10], 1.0, 1.0),
        (&[4, 5], &[11, 12], -0.5, 2.0),
        (&[6, 7, 8, 9, 10, 11], &[13, 14, 15, 16, 17], 0.8, 1.0),
        (&[2], &[20, 21, 22], -1.2, 32.0),
    ];
    specs
        .iter()
        .enumerate()
        .map(|(k, (prompt, completion, adv, w))| {
            let mut s = sample(prompt, completion, p, *adv)?;
            s.weight = *w;
            for (i, l) in s.old_logprobs.iter_mut().enumerate() {
                *l += 0.3 * (((i + k) % 3) as f32 - 1.0);
            }
            s.behavior_logprobs = Some(s.old_logprobs.iter().map(|l| l - 0.2).collect());
            Ok(s)
        })
        .collect()
}

fn zero_grads(p: &Policy) {
    for mut v in p.var_store().trainable_variables() {
        v.zero_grad();
    }
}

fn all_grads(p: &Policy) -> Vec<Tensor> {
    p.var_store()
        .trainable_variables()
        .iter()
        .map(|v| v.grad().copy())
        .collect()
}

/// The loss and gradients of one step by the plain path: all samples right-padded into one
/// batch, the whole `[B, T, vocab]` logits at once.
fn padded_reference(
    p: &Policy,
    samples: &[GrpoSample],
    c: &GrpoConfig,
) -> Result<(f64, Vec<Tensor>)> {
    let seqs: Vec<&MaskedSeq> = samples.iter().map(|s| &s.seq).collect();
    let b = train::pad_right(&seqs, Device::Cpu)?;
    let w = b.mask.size()[1] as usize;
    let rows = |f: &dyn Fn(&GrpoSample) -> &[f32]| {
        let flat: Vec<f32> = samples
            .iter()
            .flat_map(|s| {
                let mut r = f(s)[1..].to_vec();
                r.resize(w, 0.0);
                r
            })
            .collect();
        Tensor::from_slice(&flat).view([samples.len() as i64, w as i64])
    };
    let old = rows(&|s| &s.old_logprobs);
    let behavior = rows(&|s| s.behavior_logprobs.as_deref().unwrap_or(&s.old_logprobs));
    let adv = Tensor::from_slice(&samples.iter().map(|s| s.advantage).collect::<Vec<_>>());
    // The normalisation written out: per sample, 1 / (samples x its tokens); or one token mean.
    let all_tokens = b.mask.sum(Kind::Float).double_value(&[]);
    let norm: Vec<f32> = samples
        .iter()
        .map(|s| {
            let t = s.seq.loss_mask[1..].iter().filter(|&&m| m).count() as f64;
            let share = match c.loss_norm {
                LossNorm::SampleMean => 1.0 / (samples.len() as f64 * t),
                LossNorm::TokenMean => 1.0 / all_tokens,
            };
            s.weight * share as f32
        })
        .collect();
    let weight = Tensor::from_slice(&norm);
    zero_grads(p);
    let logp = train::shifted_logprobs(p.model(), &b.ids, c.temperature)?;
    let (loss, _) = grpo_loss_sum(&logp, &old, &behavior, None, &adv, &weight, &b.mask, c);
    loss.backward();
    Ok((loss.double_value(&[]), all_grads(p)))
}

#[test]
fn packed_chunked_and_recomputed_gradients_equal_the_padded_reference() -> Result<()> {
    let p = tiny_policy(2)?;
    let samples = varied_samples(&p)?;
    for loss_norm in [LossNorm::SampleMean, LossNorm::TokenMean] {
        packed_equals_padded(&p, &samples, loss_norm)?;
    }
    Ok(())
}

fn packed_equals_padded(p: &Policy, samples: &[GrpoSample], loss_norm: LossNorm) -> Result<()> {
    let base = GrpoConfig {
        temperature: 0.6,
        loss_norm,
        ..Default::default()
    };
    let (want_loss, want) = padded_reference(p, samples, &base)?;
    assert!(want.iter().any(|g| g.abs().max().double_value(&[]) > 1e-4));
    // (micro-batch tokens, chunk positions, recompute): one packed row in one chunk; chunks of 3
    // (not dividing the row); recompute; one sample per micro-batch; mixed groupings.
    for (mbt, chunk, recompute) in [
        (10_000, 10_000, false),
        (10_000, 3, false),
        (10_000, 5, true),
        (1, 7, true),
        (12, 4, false),
    ] {
        let cfg = GrpoConfig {
            micro_batch_tokens: mbt,
            logprob_chunk_tokens: chunk,
            recompute,
            ..base.clone()
        };
        let mut tr = GrpoTrainer::new(p, cfg)?;
        zero_grads(p);
        let st = tr.backward(p, samples)?;
        let got = all_grads(p);
        let what = format!(
            "{loss_norm:?}, micro_batch_tokens {mbt}, chunk {chunk}, recompute {recompute}"
        );
        assert!(
            (st.loss - want_loss).abs() < 1e-5,
            "{what}: loss {} vs {want_loss}",
            st.loss
        );
        for (g, w) in got.iter().zip(&want) {
            let d = (g - w).abs().max().double_value(&[]);
            let scale = w.abs().max().double_value(&[]);
            assert!(
                d <= 1e-5 * scale.max(1.0),
                "{what}: max gradient difference {d}"
            );
        }
    }
    zero_grads(p);
    Ok(())
}

/// The case, by hand: a batch of 192 samples, 120 of them with advantage 0. With the
/// policy's own log-probs as `old`, every ratio is 1, so a token's loss is `-A` and
///   sample mean: L = -(36 x 1 + 36 x (-0.5)) / 192 = -0.09375 (every sample counts once,
///                whatever its length; the 120 zero-advantage samples count in the 192);
///   token mean over the 72 samples that carry an advantage (what the worker trained before):
///                L = -(36 x 1 x 2 + 36 x (-0.5) x 6) / (36 x 2 + 36 x 6) = 0.125.
/// The two even disagree in sign: the token mean lets the long negative samples dominate.
#[test]
fn sample_mean_counts_every_sample_once_and_zero_advantage_ones_in_the_denominator() -> Result<()> {
    let p = tiny_policy(3)?;
    let mut batch = Vec::new();
    for k in 0..36 {
        let x = 1 + (k % 20) as i64;
        batch.push(sample(&[x, 2], &[3, 4], &p, 1.0)?);
        batch.push(sample(&[x, 5], &[6, 7, 8, 9, 10, 11], &p, -0.5)?);
    }
    for k in 0..120 {
        batch.push(sample(&[1 + (k % 30) as i64], &[12, 13, 14, 15], &p, 0.0)?);
    }
    assert_eq!(batch.len(), 192);
    let cfg = |loss_norm| GrpoConfig {
        temperature: 1.0,
        loss_norm,
        ..Default::default()
    };
    let mut tr = GrpoTrainer::new(&p, cfg(LossNorm::SampleMean))?;
    zero_grads(&p);
    let st = tr.backward(&p, &batch)?;
    assert!(close(st.loss, -0.09375), "sample mean: {}", st.loss);
    assert_eq!((st.samples, st.skipped), (192, 120));
    assert_eq!(
        st.tokens,
        36 * 2 + 36 * 6,
        "the skipped samples are not computed"
    );
    assert!(close(st.mean_ratio, 1.0));
    let mut tr = GrpoTrainer::new(&p, cfg(LossNorm::TokenMean))?;
    zero_grads(&p);
    let signal: Vec<GrpoSample> = batch[..72].to_vec();
    let st = tr.backward(&p, &signal)?;
    assert!(close(st.loss, 0.125), "token mean: {}", st.loss);
    zero_grads(&p);
    Ok(())
}

/// A batch whose samples all have a zero advantage carries no signal: no optimiser step, so
/// momentum from an earlier step and weight decay do not move the weights either.
#[test]
fn a_batch_without_signal_takes_no_step() -> Result<()> {
    let p = tiny_policy(5)?;
    let mut tr = GrpoTrainer::new(&p, fast_steps())?;
    tr.step(&p, &[sample(&[1, 2], &[3, 4], &p, 1.0)?])?;
    let weights = |p: &Policy| -> Vec<Tensor> {
        p.var_store()
            .trainable_variables()
            .iter()
            .map(|v| v.detach().copy())
            .collect()
    };
    let w0 = weights(&p);
    let st = tr.step(&p, &[sample(&[1, 2], &[3, 4], &p, 0.0)?])?;
    assert_eq!((st.tokens, st.skipped, st.samples), (0, 1, 1));
    assert_eq!(tr.optimizer().step_count(), 1);
    for (a, b) in w0.iter().zip(weights(&p)) {
        assert!(a.equal(&b), "a step without signal moved the weights");
    }
    Ok(())
}

/// Skipping a zero-advantage sample's pass changes nothing but the work: the gradient equals
/// the one computed with every sample's pass (a KL coefficient of 1e-12 forces them all).
#[test]
fn skipped_zero_advantage_passes_leave_the_gradient_unchanged() -> Result<()> {
    let p = tiny_policy(4)?;
    let mut batch = varied_samples(&p)?;
    batch.push(sample(&[3, 4, 5], &[6, 7], &p, 0.0)?);
    let mut tr = GrpoTrainer::new(&p, GrpoConfig::default())?;
    zero_grads(&p);
    let skipped = tr.backward(&p, &batch)?;
    let fast = all_grads(&p);
    assert_eq!(skipped.skipped, 1);
    let mut tr = GrpoTrainer::new(
        &p,
        GrpoConfig {
            kl_coef: 1e-12,
            ..Default::default()
        },
    )?;
    zero_grads(&p);
    let full = tr.backward(&p, &batch)?;
    assert_eq!(full.skipped, 0);
    assert!((skipped.loss - full.loss).abs() < 1e-6);
    for (a, b) in fast.iter().zip(all_grads(&p)) {
        let d = (a - &b).abs().max().double_value(&[]);
        assert!(d <= 1e-6 * b.abs().max().double_value(&[]).max(1.0), "{d}");
    }
    zero_grads(&p);
    Ok(())
}

#[test]
fn micro_batches_pack_consecutive_samples_up_to_the_budget() {
    // Predicted tokens: 3, 4, 9, 1, 1.
    let lens = [4, 5, 10, 2, 2];
    assert_eq!(train::micro_batches(&lens, 7), vec![0..2, 2..3, 3..5]);
    assert_eq!(train::micro_batches(&lens, 100), vec![0..5]);
    assert_eq!(
        train::micro_batches(&lens, 1),
        vec![0..1, 1..2, 2..3, 3..4, 4..5]
    );
    assert!(train::micro_batches(&[], 8).is_empty());
}

/// The step's entropy is the mean over the trained tokens of -sum p log p of the sampling
/// distribution at its temperature, computed here from the whole logits of each sequence;
/// a hotter temperature spreads the distribution (higher entropy), and it never passes ln V.
#[test]
fn the_step_reports_the_mean_entropy_of_its_trained_tokens() -> Result<()> {
    let p = tiny_policy(3)?;
    let samples = [
        sample(&[1, 2, 3], &[7, 8, 9], &p, 1.0)?,
        sample(&[4, 5], &[10, 11], &p, -1.0)?,
    ];
    let by_hand = |temperature: f64| -> Result<f64> {
        let mut sum = 0.0;
        let mut tokens = 0.0;
        for s in &samples {
            let ids = Tensor::from_slice(&s.seq.ids).unsqueeze(0);
            let t = s.seq.ids.len() as i64;
            let hidden = p.model().forward(&ids.narrow(1, 0, t - 1))?;
            let logits = p.model().logits(&hidden) / temperature;
            let l = logits.log_softmax(-1, Kind::Float);
            let h = -(l.exp() * &l).sum_dim_intlist(-1, false, Kind::Float);
            let h = Vec::<f32>::try_from(h.view([-1]))?;
            for (x, m) in h.iter().zip(&s.seq.loss_mask[1..]) {
                if *m {
                    sum += f64::from(*x);
                    tokens += 1.0;
                }
            }
        }
        Ok(sum / tokens)
    };
    let at = |temperature: f64| -> Result<f64> {
        let mut tr = GrpoTrainer::new(
            &p,
            GrpoConfig {
                temperature,
                ..fast_steps()
            },
        )?;
        let st = tr.backward(&p, &samples)?;
        let want = by_hand(temperature)?;
        assert!(
            (st.entropy - want).abs() < 1e-4,
            "temperature {temperature}: {} vs {want} by hand",
            st.entropy
        );
        zero_grads(&p);
        Ok(st.entropy)
    };
    let (cool, hot) = (at(0.5)?, at(2.0)?);
    assert!(
        cool > 0.0 && cool < hot && hot <= (32f64).ln(),
        "{cool} {hot}"
    );
    Ok(())
}
