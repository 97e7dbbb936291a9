//! `spade model bench-rollout`: one SPADE step's generation (designer attempts, hints, hint
//! plays, no-hint plays) with synthetic environments, on the batch sampler and on the engine
//! in the same run, side by side (`spade_policy::rollout_bench` describes the workload).

use anyhow::Context;
use clap::Args;
use spade_policy::rollout_bench::{self, Path, RolloutBenchOptions, RolloutReport};

#[derive(Debug, Args)]
pub struct RolloutBenchArgs {
    /// `tiny`, `tiny-moe` or a Qwen3 shape (qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b,
    /// qwen3-30b-a3b-4l), random weights.
    #[arg(long, default_value = "tiny")]
    pub shape: String,
    /// Environments of the step (the paper: 24 games).
    #[arg(long, default_value_t = 24)]
    pub envs: usize,
    /// No-hint plays per environment.
    #[arg(long, default_value_t = 8)]
    pub plays: usize,
    /// Hint plays per new environment (0: no regeneration phases' plays).
    #[arg(long, default_value_t = 16)]
    pub hint_plays: usize,
    /// Turns per episode at most (each episode draws 1..=N from its seed).
    #[arg(long, default_value_t = 6)]
    pub max_turns: usize,
    /// Agent tokens per turn at most; turns stop after about --mean-turn-tokens.
    #[arg(long, default_value_t = 40)]
    pub turn_tokens: usize,
    #[arg(long, default_value_t = 20)]
    pub mean_turn_tokens: usize,
    /// Designer reply budget (hints get --hint-tokens).
    #[arg(long, default_value_t = 256)]
    pub designer_tokens: usize,
    #[arg(long, default_value_t = 64)]
    pub hint_tokens: usize,
    /// Context of an episode (prompt and everything after it).
    #[arg(long, default_value_t = 4096)]
    pub context: usize,
    /// The sampler's plays per batch (the worker's agent.concurrency before the engine).
    #[arg(long, default_value_t = 8)]
    pub chunk: usize,
    /// The engine's batch width and KV-cache slots.
    #[arg(long, default_value_t = 256)]
    pub max_batch: usize,
    #[arg(long, default_value_t = 1 << 19)]
    pub kv_tokens: usize,
    /// sampler, engine or both (both: the same step on each, then the ratio).
    #[arg(long, default_value = "both")]
    pub path: String,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// libtorch threads (CPU).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Timed repetitions of each path (the median step is reported).
    #[arg(long, default_value_t = 1)]
    pub repeats: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn run(a: &RolloutBenchArgs) -> anyhow::Result<()> {
    let paths: Vec<Path> = match a.path.as_str() {
        "both" => vec![Path::Sampler, Path::Engine],
        "sampler" => vec![Path::Sampler],
        "engine" => vec![Path::Engine],
        other => anyhow::bail!("--path `{other}`: expected sampler, engine or both"),
    };
    spade_policy::embed::set_threads(a.threads);
    let device = spade_policy::device_named(&a.device)?;
    let o = RolloutBenchOptions {
        shape: a.shape.clone(),
        envs: a.envs,
        plays: a.plays,
        hint_plays: a.hint_plays,
        max_turns: a.max_turns,
        turn_tokens: a.turn_tokens,
        mean_turn_tokens: a.mean_turn_tokens,
        designer_tokens: a.designer_tokens,
        hint_tokens: a.hint_tokens,
        context: a.context,
        chunk: a.chunk,
        max_batch: a.max_batch,
        kv_tokens: a.kv_tokens,
        device,
        seed: a.seed,
        ..RolloutBenchOptions::default()
    };
    let policy = rollout_bench::model(&o).with_context(|| format!("model of shape {}", a.shape))?;
    println!(
        "bench-rollout: {} on {device:?} ({} threads), {} envs x {} plays (+{} hint plays), up \
         to {} turns of <= {} tokens",
        a.shape, a.threads, a.envs, a.plays, a.hint_plays, a.max_turns, a.turn_tokens
    );
    let mut best: Vec<RolloutReport> = vec![];
    for &path in &paths {
        let mut runs = vec![];
        for rep in 0..a.repeats.max(1) {
            let r = rollout_bench::run(&policy, &o, path, |p| {
                eprintln!(
                    "  {} #{}: {:<10} {:>8.2} s  {:>7} tokens  {:>5} calls",
                    path.as_str(),
                    rep + 1,
                    p.phase,
                    p.wall_s,
                    p.generated,
                    p.calls
                );
            })?;
            runs.push(r);
        }
        runs.sort_by(|x, y| x.wall_s().total_cmp(&y.wall_s()));
        let median = runs.swap_remove(runs.len() / 2);
        println!(
            "{:<8} step {:>8.2} s  {:>8} tokens  {:>8.1} tokens/s  (median of {})",
            path.as_str(),
            median.wall_s(),
            median.generated(),
            median.tokens_per_s(),
            a.repeats.max(1)
        );
        best.push(median);
    }
    if let [s, e] = best.as_slice() {
        let (same, all) = rollout_bench::agreement(s, e);
        println!(
            "engine / sampler: {:.2}x tokens/s, step time {:.2}x; {same} of {all} turns sampled \
             the same tokens on both paths",
            e.tokens_per_s() / s.tokens_per_s().max(1e-9),
            e.wall_s() / s.wall_s().max(1e-9),
        );
    }
    Ok(())
}
