//! `spade model init | import | forward | generate | bench*`: create (from a preset or a GGUF
//! file), inspect and sample from policy checkpoints (Hugging Face layout), and time a training
//! step of a random-init Qwen3 shape (`model_bench`). Errors are usage errors (exit 2) with the
//! library's precise message.

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use spade_policy::chat::Role;
use spade_policy::preset::{self, BUILTIN_TEXT, PRESETS};
use spade_policy::sample::{SamplingParams, generate};
use spade_policy::tokenizer::IM_END;
use spade_policy::{Policy, default_device};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Create a model from a preset (the tiny CPU demo model), with a BPE tokenizer trained on
    /// --corpus; with --shape, random weights at a Qwen3 shape (`qwen3-0.6b`, `qwen3-4b`, ...)
    /// with that tokenizer, for GPU checks and benchmarks of a real model's size.
    Init {
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// A shape of `spade model bench` instead of the preset (random weights).
        #[arg(long, conflicts_with = "preset")]
        shape: Option<String>,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Text for the tokenizer: files, or directories read recursively (.py .txt .md .json
        /// .jsonl; JSONL lines contribute their `text` / `orig_doc` field). Repeatable. Default:
        /// a built-in sample of the environment contract.
        #[arg(long = "corpus")]
        corpus: Vec<PathBuf>,
        /// Overwrite a checkpoint already in --out.
        #[arg(long)]
        force: bool,
        /// Write the weights in bfloat16 instead of float32: half the disk and the load time
        /// (16 GB -> 8 GB at the 4B shape), and what a CUDA run trains in anyway; a CPU run
        /// loads them back as float32.
        #[arg(long)]
        bf16: bool,
    },
    /// Convert a GGUF file (llama.cpp's format: llama or qwen2 models in F32, F16, BF16, Q8_0,
    /// Q4_0 or Q4_1) into a Hugging Face checkpoint directory: config.json, model.safetensors
    /// (dequantised to float32), tokenizer.json, tokenizer_config.json (with the chat template)
    /// and generation_config.json. The directory appears only once complete.
    Import {
        /// The .gguf file.
        #[arg(long)]
        gguf: PathBuf,
        /// The checkpoint directory to create (absent or empty unless --force).
        #[arg(long)]
        out: PathBuf,
        /// Replace what --out holds (only after the new checkpoint is complete).
        #[arg(long)]
        force: bool,
    },
    /// Print the last position's logits for the given token ids.
    Forward {
        #[arg(long)]
        checkpoint: PathBuf,
        /// Comma-separated token ids, e.g. 1,2,3.
        #[arg(long)]
        ids: String,
        /// Print all logits as a JSON array of floats (default: a summary of the top tokens).
        #[arg(long)]
        json: bool,
    },
    /// Sample a continuation of a prompt.
    Generate {
        #[arg(long)]
        checkpoint: PathBuf,
        #[arg(long)]
        prompt: String,
        #[arg(long, default_value_t = 64)]
        max_new_tokens: usize,
        /// 0 is greedy.
        #[arg(long, default_value_t = 0.6)]
        temperature: f64,
        /// Nucleus: sample among the most likely tokens whose probabilities sum to this.
        #[arg(long, default_value_t = 1.0)]
        top_p: f64,
        /// Sample among this many most likely tokens; 0 = no cut.
        #[arg(long, default_value_t = 0)]
        top_k: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Wrap the prompt in this role's chat template (system prompt + user message).
        #[arg(long, value_enum)]
        role: Option<RoleArg>,
    },
    /// Time one training step (GRPO, packed, mixed precision on CUDA) of a random-init Qwen3
    /// shape and print tokens trained per second and peak memory (a benchmark, not a test).
    Bench(crate::model_bench::BenchArgs),
    /// Time one SPADE step's generation (designer, hints, hint plays, plays; synthetic
    /// environments, random weights) on the batch sampler and on the engine, side by side, or
    /// on the engine and vLLM servers (`--path engine-vllm`, with a weight-sync time).
    BenchRollout(Box<crate::rollout_bench::RolloutBenchArgs>),
    /// Time greedy decoding of a real checkpoint (SmolLM2-135M-Instruct by default) through the
    /// engine at each --batch size, in tokens per second (scripts/policy/bench-generate puts
    /// transformers' `generate` beside it).
    BenchGenerate(crate::generate_bench::GenerateBenchArgs),
    /// The memory plan of model shapes on GPU nodes, one rank's share with N data-parallel
    /// ranks (ZeRO-2), and whether each card holds it with room for a KV cache.
    Plan(crate::model_plan::PlanArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    Designer,
    Hint,
    Agent,
}

pub fn run(cmd: ModelCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ModelCommand::Init {
            preset,
            shape,
            out,
            seed,
            corpus,
            force,
            bf16,
        } => init(&preset, shape.as_deref(), &out, seed, &corpus, force, bf16),
        ModelCommand::Import { gguf, out, force } => import(&gguf, &out, force),
        ModelCommand::Forward {
            checkpoint,
            ids,
            json,
        } => forward(&checkpoint, &ids, json),
        ModelCommand::Generate {
            checkpoint,
            prompt,
            max_new_tokens,
            temperature,
            top_p,
            top_k,
            seed,
            role,
        } => {
            let params = SamplingParams {
                temperature,
                top_p,
                top_k,
                max_new_tokens,
                ..Default::default()
            };
            sample(&checkpoint, &prompt, params, seed, role)
        }
        ModelCommand::Bench(args) => crate::model_bench::run(&args),
        ModelCommand::BenchRollout(args) => {
            spade_policy::qwen3::set_share_reads_default(args.share_reads == "on");
            spade_policy::qwen3::set_read_in_place_default(args.read_in_place == "on");
            if args.path == "seed-envs" {
                crate::rollout_bench_envs::run(&args)
            } else {
                crate::rollout_bench::run(&args)
            }
        }
        ModelCommand::BenchGenerate(args) => crate::generate_bench::run(&args),
        ModelCommand::Plan(args) => crate::model_plan::run(&args),
    }?;
    Ok(ExitCode::SUCCESS)
}

fn init(
    preset: &str,
    shape: Option<&str>,
    out: &Path,
    seed: u64,
    corpus: &[PathBuf],
    force: bool,
    bf16: bool,
) -> anyhow::Result<()> {
    if !PRESETS.contains(&preset) {
        bail!("unknown preset `{preset}`; presets: {}", PRESETS.join(", "));
    }
    if out.join("config.json").exists() && !force {
        bail!(
            "{} already holds a checkpoint; pass --force to overwrite it",
            out.display()
        );
    }
    let started = Instant::now();
    let texts = if corpus.is_empty() {
        eprintln!(
            "spade model init: no --corpus given; training the tokenizer on the built-in sample"
        );
        vec![BUILTIN_TEXT.to_string()]
    } else {
        read_corpus(corpus)?
    };
    let say = |line: &str| eprintln!("spade model init: {line}");
    let policy = match shape {
        Some(s) => preset::shaped(s, &texts, seed, say)?,
        None => preset::tiny(&texts, seed, say)?,
    };
    if bf16 {
        policy.save_bf16(out)
    } else {
        policy.save(out)
    }
    .with_context(|| format!("cannot write the checkpoint to {}", out.display()))?;
    eprintln!(
        "spade model init: wrote {} ({} parameters) in {:.1} s",
        out.display(),
        policy.config().num_parameters(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn import(gguf: &Path, out: &Path, force: bool) -> anyhow::Result<()> {
    let occupied = std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some());
    if occupied && !force {
        bail!(
            "{} exists and is not empty; pass --force to replace it",
            out.display()
        );
    }
    let progress = |k: usize, n: usize| {
        // One line per tensor would be 270 lines for a small model; every tenth and the last.
        if k.is_multiple_of(10) || k == n {
            eprintln!("spade model import: tensor {k}/{n}");
        }
    };
    let summary = if force {
        spade_policy::gguf::import_replacing(gguf, out, progress)
    } else {
        spade_policy::gguf::import(gguf, out, progress)
    }
    .with_context(|| format!("cannot import {}", gguf.display()))?;
    eprintln!(
        "spade model import: wrote {} ({}, {} tensors, {} parameters) in {:.1} s",
        out.display(),
        summary.architecture,
        summary.tensors,
        summary.parameters,
        summary.seconds
    );
    Ok(())
}

/// Texts from files and directories (recursively, in sorted order so the tokenizer does not
/// depend on directory listing order).
fn read_corpus(paths: &[PathBuf]) -> anyhow::Result<Vec<String>> {
    const EXTS: &[&str] = &["py", "txt", "md", "json", "jsonl"];
    let mut files = vec![];
    let mut stack: Vec<PathBuf> = paths.to_vec();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            let entries =
                std::fs::read_dir(&p).with_context(|| format!("cannot list {}", p.display()))?;
            for e in entries {
                stack.push(
                    e.with_context(|| format!("cannot list {}", p.display()))?
                        .path(),
                );
            }
        } else if paths.contains(&p)
            || p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| EXTS.contains(&e))
        {
            files.push(p);
        }
    }
    files.sort();
    let mut texts = vec![];
    for f in &files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        if f.extension().is_some_and(|e| e == "jsonl") {
            texts.extend(text.lines().map(|line| {
                let v: Option<serde_json::Value> = serde_json::from_str(line).ok();
                v.and_then(|v| {
                    ["text", "orig_doc"]
                        .iter()
                        .find_map(|k| v.get(*k).and_then(|t| t.as_str()).map(str::to_string))
                })
                .unwrap_or_else(|| line.to_string())
            }));
        } else {
            texts.push(text);
        }
    }
    if texts.iter().all(|t| t.trim().is_empty()) {
        bail!("the corpus ({} files) holds no text", files.len());
    }
    eprintln!("spade model init: corpus of {} files", files.len());
    Ok(texts)
}

fn load(checkpoint: &Path) -> anyhow::Result<Policy> {
    Policy::load(checkpoint, default_device())
        .with_context(|| format!("cannot load the checkpoint {}", checkpoint.display()))
}

fn parse_ids(ids: &str) -> anyhow::Result<Vec<i64>> {
    let ids: Vec<i64> = ids
        .split(',')
        .map(|s| {
            let s = s.trim();
            s.parse::<i64>().map_err(|_| {
                anyhow::anyhow!("--ids: `{s}` is not a token id (expected e.g. 1,2,3)")
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(ids)
}

fn forward(checkpoint: &Path, ids: &str, json: bool) -> anyhow::Result<()> {
    let ids = parse_ids(ids)?;
    let policy = load(checkpoint)?;
    let logits = policy.last_logits(&ids)?;
    if json {
        println!("{}", serde_json::to_string(&logits)?);
        return Ok(());
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    println!(
        "{} logits at position {}; top tokens:",
        logits.len(),
        ids.len() - 1
    );
    for &i in order.iter().take(10) {
        let text = policy
            .tokenizer()
            .and_then(|t| t.decode(&[i as i64], false).ok())
            .map(|s| format!(" {s:?}"))
            .unwrap_or_default();
        println!("{i:>8} {:>10.4}{text}", logits[i]);
    }
    Ok(())
}

fn sample(
    checkpoint: &Path,
    prompt: &str,
    mut params: SamplingParams,
    seed: u64,
    role: Option<RoleArg>,
) -> anyhow::Result<()> {
    if !params.temperature.is_finite() || params.temperature < 0.0 {
        bail!(
            "--temperature must be >= 0 (0 is greedy), got {}",
            params.temperature
        );
    }
    if !(params.top_p > 0.0 && params.top_p <= 1.0) {
        bail!("--top-p must be in (0, 1], got {}", params.top_p);
    }
    if params.max_new_tokens == 0 {
        bail!("--max-new-tokens must be at least 1");
    }
    let policy = load(checkpoint)?;
    let tok = policy.require_tokenizer()?;
    let text = match role {
        None => prompt.to_string(),
        Some(r) => {
            let role = match r {
                RoleArg::Designer => Role::Designer,
                RoleArg::Hint => Role::Hint,
                RoleArg::Agent => Role::Agent,
            };
            role.prompt(None, prompt)
        }
    };
    let ids = tok.encode(&text)?;
    if ids.is_empty() {
        bail!("--prompt encodes to no tokens");
    }
    params.stop_token_ids = policy.config().eos_token_ids.clone();
    params.stop_token_ids.extend(tok.token_id(IM_END));
    let out = generate(policy.model(), &[ids], &[seed], &params, Some(tok))?;
    let completion = out.into_iter().next().context("no completion")?;
    println!("{}", completion.text.unwrap_or_default());
    Ok(())
}
