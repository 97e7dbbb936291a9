//! Data-parallel GRPO across two real processes equals one rank: the same three steps on a
//! tiny model with `--ranks 1` (in this process) and two ranks (two child processes, each the
//! backward passes of half the micro-batches, gradients summed through the Gloo group) give the
//! same losses (relative 1e-5) and the same weights (1e-5), and the two ranks' weights are
//! bit-identical; with ZeRO-2 (each rank holding half of the optimiser state, gradients
//! reduce-scattered and weights all-gathered in small buckets) as well, and with ZeRO-3 (each decoder layer's
//! weights made whole from its owner ranks just before its forward and its recomputed backward,
//! its gradients summed at once into the owners' slices), on the dense model and on a tiny
//! Qwen3-MoE (eight experts, top-2, untied head). The control: the same two ranks without
//! summing their gradients end with other weights, so the comparison can fail.

use spade_dist::{ProcessGroup, Rendezvous};
use spade_policy::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
use spade_policy::optim::{GradientSync, OptimConfig};
use spade_policy::qwen3::{Config, WeightInit};
use spade_policy::train::{MaskedSeq, token_logprobs};
use spade_policy::zero::ZeroStage;
use spade_policy::{Policy, PolicyError};
use std::process::Command;
use std::time::Duration;
use tch::{Device, Kind, Tensor};

const STEPS: usize = 3;

/// The dense model, or (`moe`) a Qwen3-MoE of eight experts, top-2, in every layer.
fn policy(moe: bool) -> spade_policy::Result<Policy> {
    // The seed is global: the tests of this binary draw their weights one at a time.
    static DRAW: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = DRAW
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    tch::set_num_threads(1);
    tch::manual_seed(7);
    let shape = if moe {
        serde_json::json!({
            "model_type": "qwen3_moe", "vocab_size": 32, "hidden_size": 32,
            "intermediate_size": 64, "moe_intermediate_size": 16, "num_experts": 8,
            "num_experts_per_tok": 2, "norm_topk_prob": true, "decoder_sparse_step": 1,
            "mlp_only_layers": [], "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 8, "tie_word_embeddings": false,
            "rope_theta": 10000.0
        })
    } else {
        serde_json::json!({
            "model_type": "qwen3", "vocab_size": 32, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "tie_word_embeddings": true, "rope_theta": 10000.0
        })
    };
    let serde_json::Value::Object(map) = shape else {
        return Err(PolicyError::InvalidInput("not a map".into()));
    };
    let cfg = Config::from_map(map)?;
    Policy::new(
        &cfg,
        Device::Cpu,
        Kind::Float,
        WeightInit::Normal { std: 0.1 },
        None,
    )
}

/// `n` samples of different lengths and advantages, log-probs from the current weights.
fn samples(p: &Policy, n: i64) -> spade_policy::Result<Vec<GrpoSample>> {
    (0..n)
        .map(|i| {
            let prompt: Vec<i64> = (0..3 + i % 3).map(|k| 1 + (i + k) % 30).collect();
            let completion: Vec<i64> = (0..2 + i % 4).map(|k| 2 + (3 * i + k) % 29).collect();
            let seq = MaskedSeq::prompt_completion(&prompt, &completion);
            let old = token_logprobs(p.model(), std::slice::from_ref(&seq.ids), 1.0)?.remove(0);
            Ok(GrpoSample {
                seq,
                old_logprobs: old,
                behavior_logprobs: None,
                advantage: [1.0, -1.0, 0.5, -0.5][i as usize % 4],
                weight: 1.0,
            })
        })
        .collect()
}

fn trainer_config(recompute: bool) -> GrpoConfig {
    GrpoConfig {
        temperature: 1.0,
        recompute,
        // About one sample a pass: eight micro-batches to share out.
        micro_batch_tokens: 8,
        optim: OptimConfig {
            lr: 1e-2,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// STEPS steps; the losses, and the weights flattened in name order. `zero`: the ZeRO stage
/// of the sharded optimiser over the group (None: the whole optimiser on every rank).
fn train(
    sync: Option<&dyn GradientSync>,
    zero: Option<ZeroStage>,
    moe: bool,
) -> spade_policy::Result<(Vec<f64>, Vec<f64>)> {
    let p = policy(moe)?;
    let mut tr = match (zero, sync) {
        (Some(stage), Some(s)) => {
            // ZeRO-3 needs recompute; the one-process run it is compared with has none.
            let cfg = trainer_config(stage == ZeroStage::Three);
            let mut t = GrpoTrainer::new_sharded_stage(&p, cfg, s.rank(), s.world_size(), stage)?;
            if let Some(z) = t.sharded_optimizer_mut() {
                // Buckets of 1,000 elements a rank: the model's ~26,000 cut into many, across
                // variables.
                z.set_bucket_bytes(8_000);
            }
            if let Some(z) = t.sharded_optimizer() {
                // Half the state each (rounded up), not all of it.
                let (shard, total) = (z.shard_len(), z.total_len());
                assert_eq!(shard, (total + 1) / 2, "shard {shard} of {total}");
            }
            t
        }
        _ => GrpoTrainer::new(&p, trainer_config(false))?,
    };
    let mut losses = vec![];
    for _ in 0..STEPS {
        // Seven micro-batches for the MoE: its rank 1 makes an idle pass under ZeRO-3.
        let batch = samples(&p, if moe { 7 } else { 8 })?;
        losses.push(tr.step_synced(&p, &batch, sync)?.loss);
    }
    let mut vars = p.var_store().variables().into_iter().collect::<Vec<_>>();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    let flat = Tensor::cat(
        &vars
            .iter()
            .map(|(_, t)| t.detach().reshape([-1]).to_kind(Kind::Double))
            .collect::<Vec<_>>(),
        0,
    );
    Ok((losses, Vec::<f64>::try_from(&flat)?))
}

/// A child process: one rank (RANK, WORLD_SIZE, MASTER_*), printing its losses and weights
/// as JSON.
#[test]
#[ignore = "run by two_ranks_take_the_steps_one_rank_takes as a rank of its group"]
fn grpo_rank() {
    let Ok(r) = Rendezvous::from_env(Duration::from_secs(60)) else {
        return;
    };
    let group = ProcessGroup::join(&r).expect("joined");
    let alone = Alone(r.rank, r.world_size);
    let moe = std::env::var("MOE").is_ok_and(|v| v == "1");
    let (losses, weights) = match std::env::var("SYNC").as_deref() {
        // Without summing, a rank still trains on its share only.
        Ok("off") => train(Some(&alone), None, moe),
        Ok("zero2") => train(Some(&group), Some(ZeroStage::Two), moe),
        Ok("zero3") => train(Some(&group), Some(ZeroStage::Three), moe),
        _ => train(Some(&group), None, moe),
    }
    .expect("trained");
    println!(
        "RESULT {}",
        serde_json::json!({ "losses": losses, "weights": weights })
    );
}

/// A rank's share without the sum: the control.
struct Alone(usize, usize);

impl GradientSync for Alone {
    fn rank(&self) -> usize {
        self.0
    }
    fn world_size(&self) -> usize {
        self.1
    }
    fn sum(&self, _: &mut Tensor) -> spade_policy::Result<()> {
        Ok(())
    }
}

fn two_ranks(sync: &str, moe: bool) -> Vec<(Vec<f64>, Vec<f64>)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(29_541);
    let exe = std::env::current_exe().expect("the test binary");
    let children: Vec<_> = (0..2)
        .map(|rank| {
            Command::new(&exe)
                .args(["grpo_rank", "--exact", "--ignored", "--nocapture"])
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "2")
                .env("SYNC", sync)
                .env("MOE", if moe { "1" } else { "0" })
                .env("OMP_NUM_THREADS", "1")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("a rank starts")
        })
        .collect();
    children
        .into_iter()
        .enumerate()
        .map(|(rank, c)| {
            let o = c.wait_with_output().expect("the rank ran");
            let out = String::from_utf8_lossy(&o.stdout);
            let line = out
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .unwrap_or_else(|| {
                    panic!(
                        "rank {rank} printed no result:\n{out}\n{}",
                        String::from_utf8_lossy(&o.stderr)
                    )
                });
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
            let nums = |k: &str| -> Vec<f64> {
                v[k].as_array()
                    .expect("an array")
                    .iter()
                    .filter_map(serde_json::Value::as_f64)
                    .collect()
            };
            (nums("losses"), nums("weights"))
        })
        .collect()
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Every mode's two ranks against one process on the model `moe` picks.
fn ranks_match_one(modes: &[&str], moe: bool) -> spade_policy::Result<Vec<f64>> {
    let (losses, weights) = train(None, None, moe)?;
    for &mode in modes {
        let ranks = two_ranks(mode, moe);
        for (rank, (l, w)) in ranks.iter().enumerate() {
            for (a, b) in losses.iter().zip(l) {
                assert!(
                    (a - b).abs() <= 1e-5 * a.abs().max(1e-3),
                    "{mode} rank {rank}: loss {b} vs one rank's {a}"
                );
            }
            let d = max_diff(&weights, w);
            eprintln!("{mode} (moe {moe}) rank {rank}: weights {d:e} from one process's");
            assert!(d < 1e-5, "{mode} rank {rank}: weights differ by {d}");
        }
        assert_eq!(
            ranks[0].1, ranks[1].1,
            "{mode}: the ranks' weights are not identical"
        );
    }
    Ok(weights)
}

#[test]
fn two_ranks_take_the_steps_one_rank_takes() -> spade_policy::Result<()> {
    let weights = ranks_match_one(&["on", "zero2", "zero3"], false)?;
    // The control: without the sum each rank steps on half the gradient.
    let apart = two_ranks("off", false);
    let d = max_diff(&weights, &apart[0].1);
    assert!(d > 1e-4, "unsynced ranks matched one rank ({d})");
    Ok(())
}

#[test]
fn two_moe_ranks_take_the_steps_one_rank_takes_under_zero_2_and_3() -> spade_policy::Result<()> {
    ranks_match_one(&["zero2", "zero3"], true)?;
    Ok(())
}
