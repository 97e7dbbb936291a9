//! The policy, and the only crate that knows libtorch. For now: device selection and a minimal
//! trainable block used to prove the libtorch build; the Qwen3-compatible transformer, sampling
//! and GRPO arrive with the policy milestone.

use tch::{Device, Kind, Tensor, nn, nn::Module, nn::OptimizerConfig};

/// Errors from the policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// libtorch reported an error.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// CUDA when libtorch sees a GPU, else CPU.
pub fn default_device() -> Device {
    Device::cuda_if_available()
}

/// Fits a two-layer MLP to `y = sum(x)` for `steps` AdamW steps and returns the first and last
/// losses: a forward and backward pass through libtorch end to end.
pub fn smoke_train(device: Device, steps: usize, seed: i64) -> Result<(f64, f64), PolicyError> {
    tch::manual_seed(seed);
    let vs = nn::VarStore::new(device);
    let root = vs.root();
    let net = nn::seq()
        .add(nn::linear(&root / "fc1", 8, 32, Default::default()))
        .add_fn(|x| x.gelu("none"))
        .add(nn::linear(&root / "fc2", 32, 1, Default::default()));
    let mut opt = nn::AdamW::default().build(&vs, 1e-2)?;
    let x = Tensor::randn([256, 8], (Kind::Float, device));
    let y = x.sum_dim_intlist(-1, true, Kind::Float);
    let mut first = None;
    let mut last = f64::NAN;
    for _ in 0..steps {
        let loss = net.forward(&x).mse_loss(&y, tch::Reduction::Mean);
        opt.backward_step(&loss);
        last = loss.double_value(&[]);
        first.get_or_insert(last);
    }
    Ok((first.unwrap_or(f64::NAN), last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_and_backward_run_on_cpu_and_learn() -> Result<(), PolicyError> {
        // One thread: libtorch's default pool thrashes a 2-core machine (see shared/toolchain.md).
        tch::set_num_threads(1);
        let (first, last) = smoke_train(Device::Cpu, 200, 0)?;
        assert!(first.is_finite() && last.is_finite());
        assert!(last < first / 20.0, "loss {first} -> {last} did not fall");
        Ok(())
    }

    #[test]
    fn gradients_flow_to_every_parameter() {
        let vs = nn::VarStore::new(Device::Cpu);
        let lin = nn::linear(vs.root() / "l", 4, 3, Default::default());
        let loss = lin
            .forward(&Tensor::ones([2, 4], (Kind::Float, Device::Cpu)))
            .sum(Kind::Float);
        loss.backward();
        for (name, p) in vs.variables() {
            let g = p.grad();
            assert!(g.defined(), "{name} has no gradient");
            assert!(
                g.abs().sum(Kind::Float).double_value(&[]) > 0.0,
                "{name}: zero gradient"
            );
        }
    }
}
