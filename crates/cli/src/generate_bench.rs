//! `spade model bench-generate`: greedy decoding of a real checkpoint (SmolLM2-135M-Instruct
//! by default) through the engine, `--batch` requests at a time, in tokens per second.
//! `scripts/policy/bench_generate_hf.py` decodes the same prompt ids with transformers'
//! `generate`, and `scripts/policy/bench-generate` runs the two side by side on the same
//! thread count and prints the ratio.
//!
//! Every row decodes exactly `--new-tokens` tokens (no stop token), so both sides do the same
//! work whatever the model writes.

use anyhow::{Context, bail};
use clap::Args;
use spade_policy::chat::{Message, Speaker};
use spade_policy::engine::{Engine, EngineConfig, generate_all};
use spade_policy::sample::SamplingParams;
use spade_policy::{Policy, default_device};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct GenerateBenchArgs {
    /// A checkpoint directory; default: the `smollm2-135m` preset's (imported from the GGUF
    /// that scripts/setup installs, once).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Batch sizes: requests decoding together, each timed on its own (comma-separated).
    #[arg(long, default_value = "1,32", value_delimiter = ',')]
    pub batch: Vec<usize>,
    /// Tokens each request decodes.
    #[arg(long, default_value_t = 64)]
    pub new_tokens: usize,
    /// libtorch threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Timed repetitions per batch size (the median is reported), after one untimed.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Write the prompts' token ids here (JSON), for the transformers side.
    #[arg(long)]
    pub prompts_out: Option<PathBuf>,
    /// One JSON line per batch size instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The user messages, one per request: short instructions of the kinds the roles see (write
/// code, answer in a box, give a hint), of different lengths.
const TASKS: [&str; 8] = [
    "Write a Python function that returns the larger of two numbers.",
    "What is 17 + 26? Put the answer in \\boxed{}.",
    "Give a one-sentence hint for a puzzle where you must guess a hidden number between 1 and 100.",
    "Write a Python class for a text game in which the player must sort three words alphabetically. It needs reset(seed) and step(action).",
    "Explain in two sentences why the sky is blue.",
    "List three prime numbers larger than 50.",
    "You are playing a game: the board is 3 by 3 and you must say which cell to mark next. Answer with \\boxed{row,col}.",
    "Summarise the rules of tic-tac-toe.",
];

/// The `n`-th prompt's text: a task, numbered so that no two prompts are the same.
fn task(n: usize) -> String {
    format!("Request {}. {}", n + 1, TASKS[n % TASKS.len()])
}

pub fn run(a: &GenerateBenchArgs) -> anyhow::Result<()> {
    if a.batch.is_empty() || a.batch.contains(&0) {
        bail!("--batch: expected positive sizes such as 1,32");
    }
    if a.new_tokens == 0 || a.repeats == 0 {
        bail!("--new-tokens and --repeats must be at least 1");
    }
    spade_policy::embed::set_threads(a.threads);
    let dir = match &a.checkpoint {
        Some(d) => d.clone(),
        None => spade_policy::preset::smollm2(&spade_policy::preset::cache_root(), &mut |m| {
            eprintln!("bench-generate: {m}")
        })?,
    };
    let policy = Policy::load(&dir, default_device())
        .with_context(|| format!("cannot load the checkpoint {}", dir.display()))?;
    let tok = policy.require_tokenizer()?;
    let most = a.batch.iter().copied().max().unwrap_or(1);
    let prompts: Vec<Vec<i64>> = (0..most)
        .map(|n| {
            let text = policy
                .chat_template()
                .render(&[Message::new(Speaker::User, task(n))], true)?;
            Ok(tok.encode(&text)?)
        })
        .collect::<anyhow::Result<_>>()?;
    if let Some(path) = &a.prompts_out {
        let json = serde_json::json!({ "checkpoint": dir, "prompts": prompts });
        std::fs::write(path, json.to_string())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let params = SamplingParams {
        temperature: 0.0,
        max_new_tokens: a.new_tokens,
        ..Default::default()
    };
    for &b in &a.batch {
        let batch = &prompts[..b];
        let seeds = vec![0; b];
        let cfg = EngineConfig::new(longest + a.new_tokens, b * (longest + a.new_tokens), b);
        let mut times = Vec::with_capacity(a.repeats);
        for i in 0..=a.repeats {
            // A new engine each time: nothing cached from the last repetition.
            let mut engine = Engine::new(policy.model(), Some(tok), cfg.clone())?;
            let t0 = Instant::now();
            let out = generate_all(&mut engine, batch, &seeds, &params)?;
            let s = t0.elapsed().as_secs_f64();
            let generated: usize = out.iter().map(|c| c.tokens.len()).sum();
            if generated != b * a.new_tokens {
                bail!(
                    "batch {b}: {generated} tokens decoded, expected {}",
                    b * a.new_tokens
                );
            }
            if i > 0 {
                times.push(s);
            }
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let tps = (b * a.new_tokens) as f64 / median;
        if a.json {
            println!(
                "{}",
                serde_json::json!({
                    "side": "engine", "batch": b, "threads": a.threads,
                    "new_tokens": a.new_tokens, "median_s": median, "tokens_per_s": tps,
                    "times_s": times,
                })
            );
        } else {
            println!(
                "engine: batch {b}, {} threads: {} x {} tokens, median {median:.3} s ({} runs): \
                 {tps:.1} tokens/s",
                a.threads, b, a.new_tokens, a.repeats
            );
        }
    }
    Ok(())
}
