//! `spade model bench --shape NAME --tokens N`: one packed GRPO step of a random-init Qwen3
//! shape on the device it runs on, timed, with its peak memory (`spade_policy::bench` says how
//! each is measured). `scripts/policy/bench_train_torch.py` is the same step in PyTorch, and
//! `scripts/policy/bench-train` runs the two side by side.

use anyhow::Context;
use clap::Args;
use spade_policy::bench::{self, BenchOptions};
use spade_policy::preset::SHAPES;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A shape: qwen3-0.6b, qwen3-1.7b, qwen3-4b or qwen3-8b (Qwen3's), qwen3-30b-a3b-4l
    /// (Qwen3-30B-A3B's MoE layers, 4 of them: 3.1 B parameters), or tiny, small or tiny-moe
    /// (CPU-sized: 4 M, 34 M and 6.6 M parameters), or smollm2-135m (SmolLM2-135M-Instruct's
    /// config, random weights).
    #[arg(long)]
    pub shape: String,
    /// Predicted tokens per step (packed into one micro-batch).
    #[arg(long, default_value_t = 16_384)]
    pub tokens: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 2048)]
    pub seq_len: usize,
    /// Timed steps (the median is reported), after --warmup untimed ones.
    #[arg(long, default_value_t = 3)]
    pub steps: usize,
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Keep every activation instead of recomputing them per layer.
    #[arg(long)]
    pub no_recompute: bool,
    /// Positions per chunk of the language-model head.
    #[arg(long, default_value_t = 4096)]
    pub chunk_tokens: usize,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// libtorch threads (CPU).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &BenchArgs) -> anyhow::Result<()> {
    if !SHAPES.contains(&a.shape.as_str()) {
        anyhow::bail!("unknown shape `{}`; shapes: {}", a.shape, SHAPES.join(", "));
    }
    spade_policy::embed::set_threads(a.threads);
    let device = spade_policy::device_named(&a.device)?;
    let o = BenchOptions {
        shape: a.shape.clone(),
        tokens: a.tokens,
        seq_len: a.seq_len,
        warmup: a.warmup,
        steps: a.steps,
        recompute: !a.no_recompute,
        chunk_tokens: a.chunk_tokens,
        device,
    };
    let m = bench::measure(&o, |i, s| {
        if !a.json {
            eprintln!("spade model bench: step {} took {s:.3} s", i + 1);
        }
    })
    .with_context(|| format!("benchmark of {} on {}", a.shape, a.device))?;
    let (report, peak, source) = (&m.report, m.peak_bytes, m.peak_source);
    let gib = peak as f64 / (1u64 << 30) as f64;
    let min = report.step_s.iter().copied().fold(f64::INFINITY, f64::min);
    if a.json {
        println!("{}", m.to_json(&o, a.threads));
    } else {
        println!(
            "{} ({:.2}B parameters, {} on {device:?}, {} threads): {} tokens per step in {} \
             sequences, recompute {}; step median {:.3} s (min {min:.3} s, {} steps): {:.0} \
             tokens/s; peak memory {gib:.2} GiB ({source})",
            a.shape,
            report.parameters as f64 / 1e9,
            report.kind,
            a.threads,
            report.tokens,
            report.sequences,
            !a.no_recompute,
            report.median_s(),
            report.step_s.len(),
            report.tokens_per_s(),
        );
    }
    Ok(())
}
