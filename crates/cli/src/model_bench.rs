//! `spade model bench --shape NAME --tokens N`: one packed GRPO step of a random-init Qwen3
//! shape on the device it runs on, timed, with its peak memory (`spade_policy::bench` says how
//! each is measured). `scripts/policy/bench_train_torch.py` is the same step in PyTorch, and
//! `scripts/policy/bench-train` runs the two side by side.
//!
//! `--ranks N` (CPU: Gloo; CUDA: a GPU per rank, NCCL, not yet run on GPUs) measures
//! data-parallel training: first one process alone, then N
//! rank processes of this command on the same step (each its share of the micro-batches, one
//! sequence apiece in both runs, the optimiser sharded ZeRO-2 as `spade train --ranks` does,
//! or ZeRO-3 with `--zero-stage 3`), and prints each one's tokens/s per rank and their ratio:
//! what the collectives cost; and each rank's seconds a step inside the collectives (moving
//! data and waiting for the others).

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
    /// Data-parallel ranks (CPU processes through Gloo, or with --device cuda a GPU each
    /// through NCCL, not yet run on GPUs): one process alone is measured first, then
    /// N ranks on the same step, each --threads threads; prints tokens/s per rank, the
    /// ratio to one process's, and each rank's seconds a step in each collective.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub ranks: u16,
    /// With --ranks: 2 (ZeRO-2, the optimizer state sharded) or 3 (ZeRO-3: the layers'
    /// weights and gradients sharded too, each layer gathered for its passes; needs recompute).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=3))]
    pub zero_stage: u8,
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
        micro_batch_tokens: None,
        zero3: a.zero_stage == 3,
    };
    if o.zero3 && !o.recompute {
        anyhow::bail!(
            "--zero-stage 3 gathers each layer again for its backward: drop --no-recompute"
        );
    }
    if a.ranks > 1 {
        return ranks(a, o);
    }
    let m = bench::measure(&o, None, |i, s| {
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

/// `--ranks N`: in the launching process, one process alone then N ranks, compared; in a rank
/// (`RANK` set), that rank's steps as one JSON line.
fn ranks(a: &BenchArgs, mut o: BenchOptions) -> anyhow::Result<()> {
    let n = usize::from(a.ranks);
    // One sequence per micro-batch in both runs, so the ranks share out the same passes one
    // process makes.
    o.micro_batch_tokens = Some(o.seq_len.saturating_sub(1).max(1));
    if std::env::var_os("RANK").is_some() {
        let r = spade_worker::ranks::Ranks::join_from_env(n, std::time::Duration::from_secs(600))?;
        // On CUDA: this rank's own GPU and the ranks' NCCL group, as a run's ranks take them.
        o.device = r.device_for(o.device)?;
        let m = bench::measure(&o, Some(r.group()), |_, _| {})
            .with_context(|| format!("rank {}", r.rank()))?;
        println!(
            "{}",
            serde_json::json!({
                "rank": r.rank(),
                "median_s": m.report.median_s(),
                "collective_s": m.report.collective_median_s(),
                "collective_by_op_s": m.report.collective_medians_by_op(),
                "tokens": m.report.tokens,
                "peak_bytes": m.peak_bytes,
            })
        );
        return Ok(());
    }
    let one = bench::measure(&o, None, |i, s| {
        if !a.json {
            eprintln!("one process: step {} took {s:.3} s", i + 1);
        }
    })
    .context("one process")?;
    let dir = std::env::temp_dir().join(format!("spade-bench-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let exe = std::env::current_exe()?;
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let started = std::time::Instant::now();
    spade_worker::ranks::launch(
        |rank| {
            let mut c = std::process::Command::new(&exe);
            c.args(&argv).env("OMP_NUM_THREADS", a.threads.to_string());
            if let Ok(f) = std::fs::File::create(dir.join(format!("rank{rank}.json"))) {
                c.stdout(f);
            }
            c
        },
        n,
    )?;
    let mut medians = vec![];
    let mut collectives = vec![];
    let mut by_op = vec![];
    let mut peaks = vec![];
    for rank in 0..n {
        let path = dir.join(format!("rank{rank}.json"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("rank {rank} left no result"))?;
        let v: serde_json::Value = text
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .with_context(|| format!("rank {rank} printed no JSON: {text}"))?;
        medians.push(v["median_s"].as_f64().unwrap_or(f64::NAN));
        collectives.push(v["collective_s"].as_f64().unwrap_or(f64::NAN));
        by_op.push(v["collective_by_op_s"].clone());
        peaks.push(v["peak_bytes"].as_u64().unwrap_or(0));
    }
    let _ = std::fs::remove_dir_all(&dir);
    // A step ends when its slowest rank's does (they meet in the reduce-scatter).
    let step = medians.iter().copied().fold(0.0, f64::max);
    let tokens = one.report.tokens as f64;
    let one_rate = tokens / one.report.median_s();
    let per_rank = tokens / n as f64 / step;
    let ratio = per_rank / one_rate;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "shape": a.shape, "ranks": n, "zero_stage": a.zero_stage,
                "threads_per_rank": a.threads,
                "tokens_per_step": one.report.tokens,
                "one_process": {"median_s": one.report.median_s(), "tokens_per_s": one_rate,
                                "peak_bytes": one.peak_bytes},
                "ranks_run": {"step_s": step, "rank_median_s": medians,
                              "rank_collective_s": collectives,
                              "rank_collective_by_op_s": by_op,
                              "tokens_per_s_per_rank": per_rank,
                              "tokens_per_s": per_rank * n as f64, "peak_bytes": peaks},
                "per_rank_ratio": ratio,
                "wall_s": started.elapsed().as_secs_f64(),
            })
        );
    } else {
        println!(
            "{} ({} tokens per step, one sequence per micro-batch, {} thread(s) per process): \
             one process {:.3} s a step, {one_rate:.0} tokens/s, peak {:.2} GiB; {n} ranks \
             (ZeRO-{}) {step:.3} s a step ({} s of it in collectives, rank by rank), \
             {per_rank:.0} tokens/s per rank ({:.0} in all), peak {:.2} GiB per rank; per rank \
             {ratio:.2}x one process",
            a.shape,
            one.report.tokens,
            a.threads,
            one.report.median_s(),
            gib(one.peak_bytes),
            a.zero_stage,
            collectives
                .iter()
                .map(|c| format!("{c:.3}"))
                .collect::<Vec<_>>()
                .join(" / "),
            per_rank * n as f64,
            gib(peaks.iter().copied().max().unwrap_or(0)),
        );
        for (rank, ops) in by_op.iter().enumerate() {
            let parts: Vec<String> = ops
                .as_object()
                .into_iter()
                .flatten()
                .map(|(op, s)| format!("{op} {:.3}", s.as_f64().unwrap_or(f64::NAN)))
                .collect();
            println!(
                "rank {rank}, seconds a step in each collective: {}",
                parts.join(", ")
            );
        }
    }
    Ok(())
}
