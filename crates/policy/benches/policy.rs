//! Side-by-side benchmark of spade-policy against PyTorch / transformers on the same weights,
//! inputs and thread count (not a timed test; `scripts/policy/bench_torch.py` is the other side):
//!
//! - greedy generation with a KV cache: batch 8 (`--batch`), 32-token prompts, 128 new tokens
//!   -> tokens/s;
//! - one GRPO step: forward + backward + gradient clipping + AdamW over 8 x 256 tokens (64
//!   prompt tokens and 192 trained ones per row) -> seconds.
//!
//! Each side runs `--repeats` timed runs after one warm-up, `--rounds` times, the two sides
//! alternating so that a busy machine slows both alike; medians (and minima) over all runs.
//! Run:
//!
//! ```text
//! cargo bench -p spade-policy --bench policy -- [--threads 1] [--repeats 5] [--rounds 3]
//!     [--size tiny|small|smollm2] [--batch N] [--device cpu|cuda] [--python PATH]
//!     [--script PATH] [--dir DIR]
//! ```
//!
//! `--size smollm2` runs the real SmolLM2-135M-Instruct of the `smollm2-135m` preset (its
//! trained weights, imported from the GGUF scripts/setup installs) instead of random weights.
//!
//! The Python side needs torch + transformers: `--python`, else `$SPADE_TORCH_PYTHON`, else
//! `~/.cache/spade-studio/venv-torch/bin/python`; without one only the Rust side runs.

use spade_policy::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
use spade_policy::policy::default_kind;
use spade_policy::qwen3::{Config, WeightInit};
use spade_policy::sample::{SamplingParams, SplitMix64, generate};
use spade_policy::train::{MaskedSeq, token_logprobs};
use spade_policy::{Policy, Result};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;
use tch::Device;

const BATCH: usize = 8;
const PROMPT: usize = 32;
const NEW_TOKENS: usize = 128;
const SEQ: usize = 256;
const TRAIN_PROMPT: usize = 64;

#[derive(Debug)]
struct Args {
    threads: i32,
    repeats: usize,
    rounds: usize,
    size: String,
    batch: usize,
    device: Device,
    python: Option<PathBuf>,
    script: PathBuf,
    dir: PathBuf,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        threads: 1,
        repeats: 5,
        rounds: 3,
        size: "tiny".into(),
        batch: BATCH,
        device: Device::Cpu,
        python: std::env::var_os("SPADE_TORCH_PYTHON")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(".cache/spade-studio/venv-torch/bin/python"))
            }),
        script: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts/policy/bench_torch.py"),
        dir: std::env::temp_dir().join("spade-policy-bench"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue; // cargo bench passes this to harness = false targets
        }
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--threads" => a.threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--repeats" => a.repeats = value()?.parse().map_err(|e| format!("--repeats: {e}"))?,
            "--rounds" => a.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--size" => a.size = value()?,
            "--batch" => a.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--device" => {
                a.device = match value()?.as_str() {
                    "cpu" => Device::Cpu,
                    "cuda" => Device::Cuda(0),
                    d => return Err(format!("--device {d}: expected cpu or cuda")),
                }
            }
            "--python" => a.python = Some(value()?.into()),
            "--script" => a.script = value()?.into(),
            "--dir" => a.dir = value()?.into(),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn config(size: &str) -> std::result::Result<Config, String> {
    // The CPU-sized shapes of `spade model bench` (preset::shape).
    match size {
        "tiny" | "small" => spade_policy::preset::shape(size).map_err(|e| e.to_string()),
        s => Err(format!("--size {s}: expected tiny, small or smollm2")),
    }
}

/// Median and minimum.
fn stats(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0])
}

fn timed(repeats: usize, device: Device, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    let sync = || {
        if let Device::Cuda(i) = device {
            tch::Cuda::synchronize(i as i64);
        }
    };
    f()?; // warm-up
    (0..repeats)
        .map(|_| {
            sync();
            let t = Instant::now();
            f()?;
            sync();
            Ok(t.elapsed().as_secs_f64())
        })
        .collect()
}

fn random_ids(rng: &mut SplitMix64, n: usize, vocab: i64) -> Vec<i64> {
    (0..n)
        .map(|_| 3 + (rng.next_u64() % (vocab as u64 - 3)) as i64)
        .collect()
}

fn main() -> Result<()> {
    let args = match parse_args() {
        Ok(a) if a.repeats > 0 && a.rounds > 0 => a,
        Ok(_) => {
            eprintln!("policy bench: --repeats and --rounds must be at least 1");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("policy bench: {e}");
            std::process::exit(2);
        }
    };
    tch::set_num_threads(args.threads);
    let kind = default_kind(args.device);
    tch::manual_seed(0);
    let policy = if args.size == "smollm2" {
        let dir = spade_policy::preset::smollm2(&spade_policy::preset::cache_root(), &mut |l| {
            eprintln!("policy bench: {l}")
        })?;
        Policy::load_as(&dir, args.device, kind)?
    } else {
        let cfg = config(&args.size).map_err(spade_policy::PolicyError::InvalidInput)?;
        Policy::new(
            &cfg,
            args.device,
            kind,
            WeightInit::Normal { std: 0.02 },
            None,
        )?
    };
    let cfg = policy.config().clone();
    policy.save(&args.dir)?;

    let mut rng = SplitMix64::new(0);
    let prompts: Vec<Vec<i64>> = (0..args.batch)
        .map(|_| random_ids(&mut rng, PROMPT, cfg.vocab_size))
        .collect();
    let gen_params = SamplingParams {
        temperature: 0.0,
        max_new_tokens: NEW_TOKENS,
        ..Default::default()
    };
    let seeds: Vec<u64> = (0..args.batch as u64).collect();
    let gcfg = GrpoConfig::default();
    let seqs: Vec<Vec<i64>> = (0..BATCH)
        .map(|_| random_ids(&mut rng, SEQ, cfg.vocab_size))
        .collect();
    let old = token_logprobs(policy.model(), &seqs, gcfg.temperature)?;
    let samples: Vec<GrpoSample> = seqs
        .iter()
        .zip(&old)
        .enumerate()
        .map(|(i, (ids, old))| GrpoSample {
            seq: MaskedSeq {
                ids: ids.clone(),
                loss_mask: (0..SEQ).map(|t| t >= TRAIN_PROMPT).collect(),
            },
            old_logprobs: old.clone(),
            behavior_logprobs: None,
            advantage: if i % 2 == 0 { 1.0 } else { -1.0 },
            weight: 1.0,
        })
        .collect();
    let inputs = serde_json::json!({
        "gen_prompts": prompts, "new_tokens": NEW_TOKENS,
        "train_ids": seqs, "train_mask": samples.iter().map(|s| &s.seq.loss_mask).collect::<Vec<_>>(),
        "advantages": samples.iter().map(|s| s.advantage).collect::<Vec<_>>(),
        "old_logprobs": old, "temperature": gcfg.temperature,
        "clip_low": gcfg.clip_low, "clip_high": gcfg.clip_high, "lr": gcfg.optim.lr,
    });
    spade_policy::checkpoint::write_json(&args.dir.join("bench_inputs.json"), &inputs)?;
    let mut trainer = GrpoTrainer::new(&policy, gcfg)?;
    let python = args.python.clone().filter(|p| p.exists());

    let (mut rust_gen, mut rust_step, mut torch_gen, mut torch_step) =
        (vec![], vec![], vec![], vec![]);
    let mut torch_version = String::from("?");
    for round in 0..args.rounds {
        eprintln!("policy bench: round {} of {}", round + 1, args.rounds);
        rust_gen.extend(timed(args.repeats, args.device, || {
            generate(policy.model(), &prompts, &seeds, &gen_params, None).map(|_| ())
        })?);
        rust_step.extend(timed(args.repeats, args.device, || {
            trainer.step(&policy, &samples).map(|_| ())
        })?);
        let Some(python) = &python else { continue };
        match run_torch(&args, python) {
            Ok(r) => {
                let list = |k: &str| -> Vec<f64> {
                    r[k].as_array()
                        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                        .unwrap_or_default()
                };
                torch_gen.extend(list("gen_s"));
                torch_step.extend(list("step_s"));
                torch_version = format!("torch {} threads {}", r["torch"], r["threads"]);
            }
            Err(e) => println!("torch  FAILED: {e}"),
        }
    }

    let tokens = (args.batch * NEW_TOKENS) as f64;
    let (rg, rg_min) = stats(&rust_gen);
    let (rs, rs_min) = stats(&rust_step);
    println!(
        "model: `{}` ({:?}), {} parameters, {:?} {:?}; libtorch threads {}; {} runs a side",
        args.size,
        cfg.family,
        cfg.num_parameters(),
        args.device,
        kind,
        tch::get_num_threads(),
        rust_gen.len()
    );
    println!(
        "generation (batch {}, {PROMPT}-token prompts, {NEW_TOKENS} new tokens, greedy, KV cache): tokens/s, median (best)",
        args.batch
    );
    println!("  rust   {:>9.1} ({:.1})", tokens / rg, tokens / rg_min);
    println!(
        "grpo step (batch {BATCH} x {SEQ} tokens, forward + backward + clip + AdamW): seconds, median (best)"
    );
    println!("  rust   {rs:>9.4} ({rs_min:.4})");
    if torch_gen.is_empty() || torch_step.is_empty() {
        println!("torch  SKIPPED: no Python with torch (pass --python or set SPADE_TORCH_PYTHON)");
        return Ok(());
    }
    let (tg, tg_min) = stats(&torch_gen);
    let (ts, ts_min) = stats(&torch_step);
    println!(
        "  torch  generation {:>9.1} ({:.1}) tokens/s; grpo step {ts:.4} ({ts_min:.4}) s  [{torch_version}]",
        tokens / tg,
        tokens / tg_min
    );
    println!(
        "ratio  generation rust/torch = {:.2}x median, {:.2}x best (target >= 1.5); grpo step rust/torch = {:.2}x median, {:.2}x best (target <= 1.1)",
        tg / rg,
        tg_min / rg_min,
        rs / ts,
        rs_min / ts_min
    );
    Ok(())
}

/// Runs the PyTorch side once (`--repeats` timed runs after a warm-up) and returns its report.
fn run_torch(
    args: &Args,
    python: &std::path::Path,
) -> std::result::Result<serde_json::Value, String> {
    let device = if args.device.is_cuda() { "cuda" } else { "cpu" };
    let out = Command::new(python)
        .arg(&args.script)
        .arg(&args.dir)
        .args([
            "--threads",
            &args.threads.to_string(),
            "--repeats",
            &args.repeats.to_string(),
        ])
        .args(["--device", device])
        .env("OMP_NUM_THREADS", args.threads.to_string())
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)))
}
