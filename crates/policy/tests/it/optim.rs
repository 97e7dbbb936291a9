//! The Rust AdamW: torch.optim.AdamW's update (checked against the closed form), a save/load
//! round trip that continues training exactly, and precise errors for bad state files.

use spade_policy::optim::{AdamW, OPTIMIZER_FILE};
use spade_policy::preset::{self, BUILTIN_TEXT};
use spade_policy::sft::{SftConfig, SftTrainer, encode_pairs};
use spade_policy::train::OptimConfig;
use spade_policy::{PolicyError, Result};
use tch::{Device, Kind, Tensor, nn};

fn cfg() -> OptimConfig {
    OptimConfig {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.1,
        max_grad_norm: 0.0,
    }
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(
        t.to_device(Device::Cpu)
            .to_kind(Kind::Double)
            .flatten(0, -1),
    )
    .unwrap_or_default()
}

/// A store with `w` [2, 3] and `b` [3], deterministic values.
fn store(dev: Device) -> nn::VarStore {
    let vs = nn::VarStore::new(dev);
    let root = vs.root();
    let w = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25, 0.0, -0.75]).view([2, 3]);
    let _ = root.var_copy("w", &w);
    let _ = root.var_copy("b", &Tensor::from_slice(&[0.1f32, -0.2, 0.3]));
    vs
}

/// A loss with gradients that change from step to step.
fn loss(vs: &nn::VarStore, step: usize) -> Tensor {
    let vars = vs.variables();
    let x = Tensor::from_slice(&[1.0f32, -2.0, 0.5, 3.0])
        .view([2, 2])
        .to_device(vs.device())
        * (1.0 + step as f64 * 0.5);
    let y = x.matmul(&vars["w"]) + &vars["b"];
    (y.square() - y.sin()).sum(Kind::Float)
}

fn train(vs: &nn::VarStore, opt: &mut AdamW, steps: std::ops::Range<usize>) -> Result<()> {
    for step in steps {
        opt.zero_grad();
        loss(vs, step).backward();
        opt.step()?;
    }
    Ok(())
}

#[test]
fn adamw_matches_the_closed_form_update() -> Result<()> {
    for dev in crate::devices() {
        let c = cfg();
        let vs = nn::VarStore::new(dev);
        let p0 = [1.0f64, -2.0, 0.5, 0.0];
        let p = vs
            .root()
            .var_copy("p", &Tensor::from_slice(&p0.map(|v| v as f32)));
        let grads = [
            [0.3f64, -1.0, 2.0, 0.0],
            [-0.5, 0.25, 1.5, 1e-3],
            [0.1, 0.1, -3.0, 0.0],
        ];
        let mut opt = AdamW::new(&vs, &c)?;
        let (mut want, mut m, mut v) = (p0, [0.0f64; 4], [0.0f64; 4]);
        for (k, g) in grads.iter().enumerate() {
            let t = (k + 1) as i32;
            opt.zero_grad();
            // d/dp sum(p * g) = g
            (&p * Tensor::from_slice(&g.map(|x| x as f32)).to_device(dev))
                .sum(Kind::Float)
                .backward();
            opt.step()?;
            for i in 0..4 {
                want[i] *= 1.0 - c.lr * c.weight_decay;
                m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * g[i];
                v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * g[i] * g[i];
                let mhat = m[i] / (1.0 - c.beta1.powi(t));
                let vhat = v[i] / (1.0 - c.beta2.powi(t));
                want[i] -= c.lr * mhat / (vhat.sqrt() + c.eps);
            }
            let got = values(&p);
            for i in 0..4 {
                assert!(
                    (got[i] - want[i]).abs() < 1e-6,
                    "{dev:?} step {t} p[{i}]: {} vs {}",
                    got[i],
                    want[i]
                );
            }
            let (em, ev) = opt
                .moments("p")
                .ok_or(PolicyError::InvalidInput("p".into()))?;
            for i in 0..4 {
                assert!((values(em)[i] - m[i]).abs() < 1e-6, "{dev:?} exp_avg[{i}]");
                assert!(
                    (values(ev)[i] - v[i]).abs() < 1e-7,
                    "{dev:?} exp_avg_sq[{i}]"
                );
            }
        }
        assert_eq!(opt.step_count(), 3);
    }
    Ok(())
}

#[test]
fn saved_state_continues_training_exactly() -> Result<()> {
    let dir = crate::tempdir("optim-resume");
    for dev in crate::devices() {
        let (n, m) = (4, 3);
        let straight = store(dev);
        let mut opt = AdamW::new(&straight, &cfg())?;
        train(&straight, &mut opt, 0..n + m)?;

        let first = store(dev);
        let mut opt = AdamW::new(&first, &cfg())?;
        train(&first, &mut opt, 0..n)?;
        let path = dir.join(format!("{dev:?}.safetensors"));
        opt.save(&path)?;

        let mut resumed = store(dev);
        resumed.copy(&first)?;
        let mut opt = AdamW::new(&resumed, &cfg())?;
        opt.load(&path)?;
        assert_eq!(opt.step_count(), n as u64);
        train(&resumed, &mut opt, n..n + m)?;

        // Fresh moments (the old resume) end somewhere else.
        let mut fresh_vs = store(dev);
        fresh_vs.copy(&first)?;
        let mut fresh = AdamW::new(&fresh_vs, &cfg())?;
        train(&fresh_vs, &mut fresh, n..n + m)?;

        let (a, b, f) = (
            straight.variables(),
            resumed.variables(),
            fresh_vs.variables(),
        );
        for name in ["w", "b"] {
            let (x, y) = (values(&a[name]), values(&b[name]));
            for (i, (x, y)) in x.iter().zip(&y).enumerate() {
                assert!((x - y).abs() <= 1e-6, "{dev:?} {name}[{i}]: {x} vs {y}");
            }
            let z = values(&f[name]);
            assert!(
                x.iter().zip(&z).any(|(x, z)| (x - z).abs() > 1e-4),
                "{dev:?} {name}: fresh moments should differ"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn sft_trainer_resumes_its_optimizer() -> Result<()> {
    tch::set_num_threads(1);
    let dir = crate::tempdir("optim-sft");
    let p = preset::tiny(&[BUILTIN_TEXT], 1, |_| {})?;
    let ask = |s: &str| format!("<|im_start|>user\n{s}<|im_end|>\n<|im_start|>assistant\n");
    let pairs = vec![
        (ask("Write a game."), "class Env:".to_string()),
        (ask("What is reset?"), "an observation".to_string()),
    ];
    let data = encode_pairs(p.require_tokenizer()?, &pairs, 64)?;
    let cfg = SftConfig {
        optim: OptimConfig {
            lr: 1e-3,
            ..Default::default()
        },
        ..Default::default()
    };
    let straight = p.copy_to(Device::Cpu, Kind::Float)?;
    let mut t = SftTrainer::new(&straight, cfg.clone())?;
    for _ in 0..3 {
        t.step(&straight, &data)?;
    }

    let first = p.copy_to(Device::Cpu, Kind::Float)?;
    let mut t = SftTrainer::new(&first, cfg.clone())?;
    for _ in 0..2 {
        t.step(&first, &data)?;
    }
    t.save_optimizer(&dir.join(OPTIMIZER_FILE))?;
    let resumed = first.copy_to(Device::Cpu, Kind::Float)?;
    let mut t = SftTrainer::new(&resumed, cfg)?;
    t.load_optimizer(&dir.join(OPTIMIZER_FILE))?;
    assert_eq!(t.optimizer().step_count(), 2);
    t.step(&resumed, &data)?;

    let (a, b) = (
        straight.var_store().variables(),
        resumed.var_store().variables(),
    );
    for (name, x) in &a {
        let d = (x - &b[name]).abs().max().double_value(&[]);
        assert!(d <= 1e-6, "{name}: max difference {d}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn bad_state_files_are_precise_errors() -> Result<()> {
    tch::set_num_threads(1);
    let dir = crate::tempdir("optim-bad");
    let vs = store(Device::Cpu);
    let mut opt = AdamW::new(&vs, &cfg())?;
    train(&vs, &mut opt, 0..1)?;

    // Not a safetensors file at all.
    let garbage = dir.join("garbage.safetensors");
    std::fs::write(&garbage, b"\x05\x00\x00\x00\x00\x00\x00\x00hello")
        .map_err(|e| PolicyError::io(&garbage, e))?;
    let e = opt
        .load(&garbage)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("bad optimizer state") && e.contains("garbage.safetensors"),
        "{e}"
    );

    // A missing file names it.
    let e = opt
        .load(&dir.join("absent.safetensors"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("absent.safetensors"), "{e}");

    // Model weights are not an optimiser state.
    let weights = dir.join("weights.safetensors");
    Tensor::write_safetensors(
        &[("w", Tensor::zeros([2, 3], (Kind::Float, Device::Cpu)))],
        &weights,
    )?;
    let e = opt
        .load(&weights)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("format"), "{e}");

    // A state of another model: a shape differs.
    let other = nn::VarStore::new(Device::Cpu);
    let _ = other
        .root()
        .var_copy("w", &Tensor::zeros([3, 3], (Kind::Float, Device::Cpu)));
    let _ = other
        .root()
        .var_copy("b", &Tensor::zeros([3], (Kind::Float, Device::Cpu)));
    let other_path = dir.join("other.safetensors");
    AdamW::new(&other, &cfg())?.save(&other_path)?;
    let e = opt
        .load(&other_path)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("`exp_avg.w` has shape [3, 3] but variable `w` has shape [2, 3]"),
        "{e}"
    );

    // A variable is missing from the file.
    let only_b = nn::VarStore::new(Device::Cpu);
    let _ = only_b
        .root()
        .var_copy("b", &Tensor::zeros([3], (Kind::Float, Device::Cpu)));
    let only_b_path = dir.join("only_b.safetensors");
    AdamW::new(&only_b, &cfg())?.save(&only_b_path)?;
    match opt.load(&only_b_path) {
        Err(PolicyError::MissingTensor { name, .. }) => assert_eq!(name, "exp_avg.w"),
        other => panic!("expected a missing tensor, got {other:?}"),
    }

    // The file has a variable this model lacks.
    let extra = store(Device::Cpu);
    let _ = extra
        .root()
        .var_copy("c", &Tensor::zeros([1], (Kind::Float, Device::Cpu)));
    let extra_path = dir.join("extra.safetensors");
    AdamW::new(&extra, &cfg())?.save(&extra_path)?;
    let e = opt
        .load(&extra_path)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("`exp_avg.c` matches no trainable variable"),
        "{e}"
    );

    // Truncated file.
    let good = dir.join("good.safetensors");
    opt.save(&good)?;
    let bytes = std::fs::read(&good).map_err(|e| PolicyError::io(&good, e))?;
    let cut = dir.join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).map_err(|e| PolicyError::io(&cut, e))?;
    let e = opt
        .load(&cut)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("bad optimizer state") && e.contains("cut.safetensors"),
        "{e}"
    );

    // None of the failures changed the state; the good file still loads.
    assert_eq!(opt.step_count(), 1);
    opt.load(&good)?;
    assert_eq!(opt.step_count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The reference's AdamW settings (`--weight-decay 0.1 --adam-beta2 0.98`, lr 0.1 here so the
/// numbers are visible): p = 1, gradients 0.5 then -0.25. Worked by hand:
///   step 1: p = 1 x (1 - 0.1 x 0.1) = 0.99; m = 0.05, v = 0.005; m^ = 0.5, v^ = 0.25;
///           p = 0.99 - 0.1 x 0.5 / 0.5 = 0.89
///   step 2: p = 0.89 x 0.99 = 0.8811; m = 0.02, v = 0.98 x 0.005 + 0.02 x 0.0625 = 0.00615;
///           m^ = 0.02 / 0.19, v^ = 0.00615 / 0.0396; p = 0.8811 - 0.1 x m^ / sqrt(v^)
///           = 0.854389231
/// (torch's defaults, weight decay 0.01 and beta2 0.999, give 0.871390 and 0.854466).
#[test]
fn the_reference_adamw_settings_by_hand() -> Result<()> {
    let c = OptimConfig {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.98,
        eps: 1e-8,
        weight_decay: 0.1,
        max_grad_norm: 0.0,
    };
    let vs = nn::VarStore::new(Device::Cpu);
    let p = vs.root().var_copy("p", &Tensor::from_slice(&[1.0f32]));
    let mut opt = AdamW::new(&vs, &c)?;
    let mut seen = vec![];
    for g in [0.5f32, -0.25] {
        opt.zero_grad();
        (&p * f64::from(g)).sum(Kind::Float).backward();
        opt.step()?;
        seen.push(values(&p)[0]);
    }
    assert!((seen[0] - 0.89).abs() < 1e-6, "{seen:?}");
    assert!((seen[1] - 0.854_389_231).abs() < 1e-6, "{seen:?}");
    Ok(())
}
