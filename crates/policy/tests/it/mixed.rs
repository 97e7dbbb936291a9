//! Mixed precision: bf16 compute weights with float32 master weights and float32 AdamW moments.
//! At the paper's learning rate (1e-6) an update is far below half a bf16 ulp of a typical
//! weight, so training the bf16 weights in place would leave almost all of them unchanged.
//! These run on CPU with bf16 compute weights (CPU runs themselves stay float32), and on CUDA
//! when there is one.

use spade_policy::optim::AdamW;
use spade_policy::qwen3::{Config, WeightInit};
use spade_policy::sft::{SftConfig, SftTrainer};
use spade_policy::train::{MaskedSeq, OptimConfig, shifted_logprobs};
use spade_policy::{Policy, PolicyError, Result};
use tch::{Device, Kind, Tensor};

/// A 2-layer Qwen3 small enough for 50 bf16 steps on one CPU thread.
pub fn small_config(vocab: i64) -> Config {
    let mut c = spade_policy::preset::tiny_config(vocab, None, None);
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 32;
    c
}

/// A float32 model with N(0, 0.02) weights, and a bf16 copy of it.
fn models(dev: Device, seed: i64) -> Result<(Policy, Policy)> {
    tch::manual_seed(seed);
    let p32 = Policy::new(
        &small_config(96),
        dev,
        Kind::Float,
        WeightInit::Normal { std: 0.02 },
        None,
    )?;
    let p16 = p32.copy_to(dev, Kind::BFloat16)?;
    // Both start from the same (bf16-representable) weights.
    let p32 = p16.copy_to(dev, Kind::Float)?;
    Ok((p32, p16))
}

fn data() -> Vec<MaskedSeq> {
    (0..3i64)
        .map(|r| {
            let ids: Vec<i64> = (0..24).map(|i| (i * 7 + r * 13 + i * i) % 96).collect();
            MaskedSeq::prompt_completion(&ids[..8], &ids[8..])
        })
        .collect()
}

fn lr_1e6() -> OptimConfig {
    OptimConfig {
        lr: 1e-6,
        ..OptimConfig::default()
    }
}

/// Every trainable variable's float32 weights as the optimiser holds them, by name.
fn weights(opt: &AdamW) -> Result<Vec<(String, Tensor)>> {
    opt.names()
        .map(|n| {
            let t = opt
                .master(n)
                .ok_or_else(|| PolicyError::InvalidInput(n.into()))?;
            Ok((
                n.to_string(),
                t.to_kind(Kind::Float).to_device(Device::Cpu).copy(),
            ))
        })
        .collect()
}

fn doubles(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap_or_default()
}

#[test]
fn one_bf16_step_updates_float32_masters_as_a_float32_adamw_step() -> Result<()> {
    for dev in crate::devices() {
        let (_, p16) = models(dev, 3)?;
        let c = OptimConfig {
            max_grad_norm: 0.0,
            ..lr_1e6()
        };
        let mut opt = AdamW::new(p16.var_store(), &c)?;
        let before = weights(&opt)?;
        let seqs = data();
        let refs: Vec<&MaskedSeq> = seqs.iter().collect();
        let batch = spade_policy::train::pad_right(&refs, dev)?;
        opt.zero_grad();
        let loss =
            -(shifted_logprobs(p16.model(), &batch.ids, 1.0)? * &batch.mask).sum(Kind::Float);
        loss.backward();
        let vars = p16.var_store().variables();
        let grads: Vec<Vec<f64>> = before
            .iter()
            .map(|(n, _)| doubles(&vars[n].grad().to_kind(Kind::Float).to_device(Device::Cpu)))
            .collect();
        opt.step()?;
        let after = weights(&opt)?;
        let (mut moved, mut total) = (0usize, 0usize);
        for (((name, w0), (_, w1)), g) in before.iter().zip(&after).zip(&grads) {
            let (w0, w1) = (doubles(w0), doubles(w1));
            for ((&p, &got), &g) in w0.iter().zip(&w1).zip(g) {
                // torch.optim.AdamW, step 1: m = (1-b1) g, v = (1-b2) g^2, bias-corrected.
                let m = (1.0 - c.beta1) * g / (1.0 - c.beta1);
                let v = (1.0 - c.beta2) * g * g / (1.0 - c.beta2);
                let want = p * (1.0 - c.lr * c.weight_decay) - c.lr * m / (v.sqrt() + c.eps);
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs().max(1e-3),
                    "{dev:?} {name}: {got} vs {want} (from {p}, grad {g})"
                );
                moved += usize::from(got != p);
                total += 1;
            }
        }
        assert!(
            moved * 10 >= total * 9,
            "{dev:?}: only {moved} of {total} weights moved"
        );
        // The compute weights are the masters rounded to bf16.
        for (name, w1) in &after {
            let w = vars[name].to_kind(Kind::Float).to_device(Device::Cpu);
            let want = w1.to_kind(Kind::BFloat16).to_kind(Kind::Float);
            assert!(
                w.equal(&want),
                "{dev:?} {name}: compute weights not refreshed"
            );
        }
    }
    Ok(())
}

#[test]
fn fifty_bf16_steps_move_the_weights_as_float32_training_does() -> Result<()> {
    for dev in crate::devices() {
        let (p32, p16) = models(dev, 5)?;
        let cfg = SftConfig {
            optim: lr_1e6(),
            micro_batch: 8,
            max_len: 64,
        };
        let seqs = data();
        let mut total_update = vec![];
        for p in [&p32, &p16] {
            let mut t = SftTrainer::new(p, cfg.clone())?;
            let w0 = weights(t.optimizer())?;
            for _ in 0..50 {
                t.step(p, &seqs)?;
            }
            let w1 = weights(t.optimizer())?;
            let sq: f64 = w0
                .iter()
                .zip(&w1)
                .map(|((_, a), (_, b))| (b - a).square().sum(Kind::Double).double_value(&[]))
                .sum();
            total_update.push(sq.sqrt());
        }
        let (f32_run, bf16_run) = (total_update[0], total_update[1]);
        assert!(f32_run > 0.0, "{dev:?}: the float32 run did not move");
        assert!(
            (bf16_run - f32_run).abs() <= 0.05 * f32_run,
            "{dev:?}: total update {bf16_run:.3e} with bf16 compute weights vs {f32_run:.3e} in float32"
        );
    }
    Ok(())
}

#[test]
fn saved_masters_resume_a_bf16_run_exactly_and_older_ones_can_be_left_out() -> Result<()> {
    let dir = crate::tempdir("mixed-resume");
    for dev in crate::devices() {
        let (_, p16) = models(dev, 7)?;
        let cfg = SftConfig {
            optim: lr_1e6(),
            micro_batch: 8,
            max_len: 64,
        };
        let seqs = data();
        let mut t = SftTrainer::new(&p16, cfg.clone())?;
        for _ in 0..3 {
            t.step(&p16, &seqs)?;
        }
        let path = dir.join(format!("{dev:?}.safetensors"));
        t.save_optimizer(&path)?;
        let want = weights(t.optimizer())?;
        // A resume loads the bf16 weights (the masters rounded) and then the saved masters.
        let resumed = p16.copy_to(dev, Kind::BFloat16)?;
        let mut r = SftTrainer::new(&resumed, cfg.clone())?;
        assert!(r.optimizer().is_mixed());
        r.load_optimizer(&path)?;
        for ((name, a), (_, b)) in want.iter().zip(&weights(r.optimizer())?) {
            assert!(a.equal(b), "{dev:?} {name}: masters not restored");
        }
        // Without the masters (an optimizer state older than the weights), the masters are
        // the compute weights.
        let mut m = SftTrainer::new(&resumed, cfg)?;
        m.load_optimizer_with(&path, false)?;
        let vars = resumed.var_store().variables();
        for (name, w) in weights(m.optimizer())? {
            let bf = vars[&name].to_kind(Kind::Float).to_device(Device::Cpu);
            assert!(w.equal(&bf), "{dev:?} {name}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Micro-batch gradients of a bf16 variable sum in float32 (the reference's
/// `--accumulate-allreduce-grads-in-fp32`): 1 + 2^-9 survives in the accumulator, while the same
/// sum in bf16 (8 bits of mantissa: half an ulp at 1 is 2^-8) rounds back to 1. Clipping and the
/// step read the float32 sum.
#[test]
fn micro_batch_gradients_of_bf16_weights_sum_in_float32() -> Result<()> {
    for dev in crate::devices() {
        let vs = tch::nn::VarStore::new(dev);
        let p = vs.root().var_copy(
            "p",
            &Tensor::from_slice(&[0.5f32, -0.25]).to_kind(Kind::BFloat16),
        );
        let mut opt = AdamW::new(&vs, &lr_1e6())?;
        let small = 2f64.powi(-9);
        opt.zero_grad();
        for g in [[1.0, 4.0], [small, small]] {
            (&p * Tensor::from_slice(&g)
                .to_kind(Kind::BFloat16)
                .to_device(dev))
            .sum(Kind::Float)
            .backward();
            opt.accumulate()?;
        }
        let sum = opt
            .gradient("p")?
            .ok_or(PolicyError::InvalidInput("no gradient".into()))?;
        assert_eq!(sum.kind(), Kind::Float);
        let got = doubles(&sum.to_device(Device::Cpu));
        assert_eq!(got, vec![1.0 + small, 4.0 + small], "{dev:?}");
        // The negative control: the same two micro-batches summed in bf16.
        let bf16 = Tensor::from_slice(&[1.0f64]).to_kind(Kind::BFloat16)
            + Tensor::from_slice(&[small]).to_kind(Kind::BFloat16);
        assert_eq!(
            doubles(&bf16),
            vec![1.0],
            "bf16 keeps 1 + 2^-9 apart from 1"
        );
        // Clipping scales the float32 sum: norm of (1 + 2^-9, 4 + 2^-9).
        let norm = opt.clip_grad_norm(1.0)?;
        let want = ((1.0 + small).powi(2) + (4.0 + small).powi(2)).sqrt();
        assert!((norm - want).abs() < 1e-6, "{dev:?}: {norm} vs {want}");
        let clipped = doubles(
            &opt.gradient("p")?
                .ok_or(PolicyError::InvalidInput("no gradient".into()))?
                .to_device(Device::Cpu),
        );
        assert!(
            (clipped[0] - (1.0 + small) / want).abs() < 1e-6,
            "{clipped:?}"
        );
        opt.step()?;
        opt.zero_grad();
        let cleared = opt
            .gradient("p")?
            .map(|g| doubles(&g.to_device(Device::Cpu)));
        assert!(
            cleared.as_ref().is_none_or(|g| g.iter().all(|&x| x == 0.0)),
            "zero_grad clears the accumulator: {cleared:?}"
        );
    }
    Ok(())
}
