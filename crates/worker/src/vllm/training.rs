//! What a training run does with the fleet: start it with the run's first weights, sync the
//! weights after every update, and rescore the servers' samples with tch's log-probs.

use super::*;

/// The run's fleet when `model.rollout = "vllm"`: started or reached, loaded with `policy`
/// (the weights of step `step`), checked. None for the local backends.
pub fn for_run(
    cfg: &spade::config::RunConfig,
    policy: &Policy,
    state_dir: &Path,
    step: u64,
    log: &mut dyn FnMut(String),
) -> Result<Option<std::sync::Arc<Fleet>>, crate::WorkerError> {
    if cfg.model.rollout != spade::config::RolloutBackend::Vllm {
        return Ok(None);
    }
    let mut opts = FleetOptions::from_config(cfg, state_dir);
    // vLLM refuses a --max-model-len past the checkpoint's positions.
    let positions = usize::try_from(policy.config().max_position_embeddings).unwrap_or(usize::MAX);
    opts.max_model_len = opts.max_model_len.min(positions);
    opts.on_gpu |= policy.device().is_cuda();
    let fleet = Fleet::connect(&opts, policy, &format!("step-{step}"), log)?;
    Ok(Some(std::sync::Arc::new(fleet)))
}

/// What syncing the weights after an update measured (metrics `vllm_restarts`, so far in the
/// run, each restart also a log line; `vllm_sync_s`, write + load; `vllm_probe_gap`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SyncStats {
    pub restarts: u32,
    pub sync_s: f64,
    pub probe_gap: f64,
}

/// After the update of step `step` (0-based): the new weights on every server.
pub fn sync_after_update(
    fleet: &Fleet,
    policy: &Policy,
    step: u64,
    log: &mut dyn FnMut(String),
) -> Result<SyncStats, crate::WorkerError> {
    // Restarts during this step's rollouts, logged once they are behind us.
    for note in fleet.take_notes() {
        log(note);
    }
    let restarts = fleet.restarts();
    let r = fleet.sync(policy, &format!("step-{step}"))?;
    log(format!(
        "vllm: weights {} on {} server(s) through {}: written in {:.2} s, loaded in {:.2} s",
        r.version,
        fleet.servers.len(),
        r.path,
        r.write_s,
        r.load_s
    ));
    Ok(SyncStats {
        restarts,
        sync_s: r.write_s + r.load_s,
        probe_gap: r.probe_gap,
    })
}

/// The servers' log-probs become the behaviour policy of truncated importance sampling and
/// tch's recomputation the "old" policy of the ratio (the two differ by kernels and rounding).
/// Returns |server - tch| over the sampled tokens, (mean, max), when any was sampled (metrics
/// `vllm_logprob_gap_mean` / `_max`).
pub fn rescore(
    policy: &Policy,
    samples: &mut [spade_policy::grpo::GrpoSample],
    temperature: f64,
) -> Result<Option<(f64, f64)>, crate::WorkerError> {
    let (mut sum, mut max, mut n) = (0.0f64, 0.0f64, 0u64);
    for s in samples.iter_mut() {
        let tch = spade_policy::train::token_logprobs(
            policy.model(),
            std::slice::from_ref(&s.seq.ids),
            temperature,
        )?
        .pop()
        .unwrap_or_default();
        if tch.len() != s.old_logprobs.len() {
            return Err(crate::WorkerError::Model(format!(
                "recomputed {} log-probs for a {}-token trace",
                tch.len(),
                s.old_logprobs.len()
            )));
        }
        let mut old = vec![0.0f32; tch.len()];
        for (i, &on) in s.seq.loss_mask.iter().enumerate() {
            if on {
                old[i] = tch[i];
                let d = f64::from((tch[i] - s.old_logprobs[i]).abs());
                sum += d;
                max = max.max(d);
                n += 1;
            }
        }
        s.behavior_logprobs = Some(std::mem::replace(&mut s.old_logprobs, old));
    }
    Ok((n > 0).then(|| (sum / n as f64, max)))
}

/// |a - b| over the positions `mask` sets: (mean, max, count). What the tests and the
/// benchmark measure a trace's agreement with.
pub fn logprob_gap(a: &[f32], b: &[f32], mask: &[bool]) -> (f64, f64, usize) {
    let (mut sum, mut max, mut n) = (0.0f64, 0.0f64, 0usize);
    for ((x, y), &on) in a.iter().zip(b).zip(mask) {
        if on {
            let d = f64::from((x - y).abs());
            sum += d;
            max = max.max(d);
            n += 1;
        }
    }
    (if n > 0 { sum / n as f64 } else { 0.0 }, max, n)
}
