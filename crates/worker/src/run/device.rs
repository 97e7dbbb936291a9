//! The device a run computes on and the memory it plans for there, both settled before
//! anything is loaded or trained: a run that asks for a GPU this worker cannot give fails in
//! seconds with the reason (never training on the CPU instead), and a CUDA run whose weights,
//! optimizer state, activations and KV cache exceed the device is refused with the table
//! (`spade_policy::memplan`), before the first designer round runs out of memory.

use super::Event;
use crate::WorkerError;
use spade::config::RunConfig;
use spade_policy::memplan::{self, Line, MemoryPlan, Recipe};
use spade_policy::{Device, Policy};

/// `model.device`, resolved. `auto` on a node whose GPUs this binary cannot use says so.
pub(crate) fn run_device(
    cfg: &RunConfig,
    on: &mut dyn FnMut(Event),
) -> Result<Device, WorkerError> {
    on(Event::Log(format!(
        "system: {}",
        spade_policy::device::SystemFacts::probe().summary()
    )));
    let device =
        spade_policy::device::resolve(&cfg.model.device).map_err(|e| WorkerError::Config(e.0))?;
    let nodes = spade_policy::device::gpu_nodes();
    if device == Device::Cpu && cfg.model.device == "auto" && !nodes.is_empty() {
        on(Event::Log(format!(
            "warning: model.device = \"auto\" picked the CPU, though this node has {} ({} \
             cannot use them: `spade doctor` says why); set model.device = \"cuda\" to make \
             that an error",
            nodes.join(", "),
            spade_policy::device::binary_name()
        )));
    }
    on(Event::Log(format!(
        "device: {} (model.device = \"{}\", {} libtorch threads)",
        name(device),
        cfg.model.device,
        spade_policy::device::threads()
    )));
    Ok(device)
}

pub(super) fn name(d: Device) -> String {
    match d {
        Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

/// Free and total bytes of `device` (the CPU's: available and total RAM).
fn device_memory(device: Device) -> Option<(u64, u64)> {
    match device {
        Device::Cuda(i) => memplan::cuda_memory(i),
        _ => Some((
            spade_policy::device::meminfo("MemAvailable")?,
            spade_policy::device::meminfo("MemTotal")?,
        )),
    }
}

/// What `cfg`'s update adds to a model's shape in the memory plan: its micro-batches, logit
/// chunks, recompute and KL reference, for weights of `weight_bytes` and one rank of `ranks`.
pub fn recipe(cfg: &RunConfig, weight_bytes: u64, ranks: u64) -> Recipe {
    Recipe {
        weight_bytes,
        micro_batch_tokens: cfg.grpo.micro_batch_tokens.into(),
        logprob_chunk_tokens: cfg.grpo.logprob_chunk_tokens.into(),
        recompute: cfg.grpo.activation_recompute,
        kl_reference: cfg.grpo.kl_coef > 0.0,
        ranks,
        zero3: ranks > 1 && cfg.run.zero_stage == 3,
    }
}

/// The run's memory plan for `policy` (and a frozen `designer`), printed; returns the KV-cache
/// slots the engine may take (`model.kv_cache_tokens`, or for `"auto"` what the device has
/// left, at most what `model.max_batch` full contexts could use). Refuses a CUDA plan that
/// does not fit the device's budget, and an `"auto"` cache below one context anywhere.
pub(crate) fn memory_plan(
    cfg: &RunConfig,
    ranks: usize,
    policy: &Policy,
    designer: Option<&Policy>,
    on: &mut dyn FnMut(Event),
) -> Result<usize, WorkerError> {
    let weight_bytes = policy.kind().elt_size_in_bytes() as u64;
    let recipe = recipe(cfg, weight_bytes, ranks as u64);
    let mut plan = MemoryPlan::new(policy.config(), &recipe);
    if let Some(d) = designer {
        plan.lines.push(Line::always(
            "frozen designer",
            d.config().num_parameters().max(0) as u64 * d.kind().elt_size_in_bytes() as u64,
        ));
    }
    let device = policy.device();
    let budget = device_memory(device)
        .map(|(free, total)| memplan::budget(free, total, cfg.model.gpu_memory_fraction));
    let context = u64::from(cfg.model.max_context);
    let kv = match cfg.model.kv_cache_tokens.slots() {
        Some(n) => u64::from(n),
        None => {
            let Some(b) = budget else {
                return Err(WorkerError::Config(format!(
                    "model.kv_cache_tokens = \"auto\" needs the free memory of {}, which \
                     nvidia-smi did not give (missing from PATH, or failing); put it on PATH \
                     or set model.kv_cache_tokens to a number of slots",
                    name(device)
                )));
            };
            let most = u64::from(cfg.model.max_batch) * context;
            let left = plan.kv_slots_within(b).unwrap_or(0);
            let kv = left.min(most).min(1 << 26);
            if kv < context {
                return Err(WorkerError::Config(format!(
                    "model.kv_cache_tokens = \"auto\": after everything else the device has \
                     room for {kv} KV-cache slots, fewer than one {context}-token context \
                     (model.max_context); {}. Lower grpo.micro_batch_tokens or turn on \
                     grpo.activation_recompute, or use a device with more memory",
                    plan.table(kv, budget)
                )));
            }
            kv
        }
    };
    on(Event::Log(format!(
        "{} on {}",
        plan.table(kv, budget),
        name(device)
    )));
    if let Some(b) = budget {
        let total = plan.total(kv);
        if total > b {
            let what = format!(
                "the memory plan needs {} but {} can give {} (model.gpu_memory_fraction = {})",
                memplan::gib(total),
                name(device),
                memplan::gib(b),
                cfg.model.gpu_memory_fraction
            );
            if device.is_cuda() {
                return Err(WorkerError::Config(format!(
                    "{what}; {}. Lower model.kv_cache_tokens (or \"auto\"), \
                     grpo.micro_batch_tokens or grpo.logprob_chunk_tokens, turn on \
                     grpo.activation_recompute, or use a device with more memory",
                    plan.table(kv, Some(b))
                )));
            }
            // On the CPU the KV cache grows only as used and the OS may swap: advice only.
            on(Event::Log(format!("warning: {what}")));
        }
    }
    Ok(kv as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spade::config::KvCacheTokens;

    fn tiny() -> Policy {
        spade_policy::preset::tiny(&[spade_policy::preset::BUILTIN_TEXT], 1, |_| {})
            .expect("tiny model")
    }

    #[test]
    fn a_fixed_cache_is_kept_and_auto_takes_what_the_plan_leaves() {
        let p = tiny();
        let mut cfg = RunConfig::tiny_cpu_demo();
        let mut logs = Vec::new();
        let mut on = |e: Event| {
            if let Event::Log(l) = e {
                logs.push(l)
            }
        };
        cfg.model.kv_cache_tokens = KvCacheTokens::Slots(65_536);
        assert_eq!(
            memory_plan(&cfg, 1, &p, None, &mut on).expect("plan"),
            65_536
        );
        // "auto" on the CPU: at most max_batch full contexts (the machine has more memory
        // than the tiny model's 8 x 4,096 slots need).
        cfg.model.kv_cache_tokens = KvCacheTokens::Auto;
        cfg.model.max_batch = 8;
        assert_eq!(
            memory_plan(&cfg, 1, &p, None, &mut on).expect("plan"),
            8 * cfg.model.max_context as usize
        );
        // Nothing left for a cache: refused, naming the key.
        cfg.model.gpu_memory_fraction = 1e-9;
        let e = memory_plan(&cfg, 1, &p, None, &mut on).expect_err("no room");
        assert!(
            logs.iter()
                .any(|l| l.contains("memory plan") && l.contains("KV cache"))
        );
        let e = e.to_string();
        assert!(e.contains("model.kv_cache_tokens = \"auto\""), "{e}");
        assert!(e.contains("fewer than one"), "{e}");
    }
}
