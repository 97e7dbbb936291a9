//! `spade eval`: a checkpoint on a held-out suite (reasoning-gym hard categories, a boxed-answer
//! QA file, a multiple-choice file, HumanEval or a file of code problems run by execution, or a
//! pool of environments), with a progress bar on stderr, a table or JSON on stdout, and
//! optionally the JSON written to a file. Usage errors (a missing checkpoint, an unknown suite, a
//! malformed JSONL line) exit 2 before the model is loaded.

use anyhow::{Context, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use spade_eval::{EvalOptions, Progress, Sampling, Suite, SuiteResult};
use spade_policy::{Policy, default_device};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Checkpoint directory (config.json, *.safetensors, tokenizer.json).
    #[arg(long)]
    checkpoint: PathBuf,
    /// rg-algorithmic | rg-arithmetic | rg-cognition | rg-logic | rg-hard (all four) |
    /// qa:PATH.jsonl (boxed answers, math-verify) | mc:PATH.jsonl (multiple choice, options
    /// shuffled per sample) | humaneval (164 problems, run) | code:PATH.jsonl (stdin/stdout or
    /// function tests, run) | bfcl-multi-turn-base | bfcl-multi-turn-miss-func |
    /// bfcl-multi-turn-miss-param | bfcl-multi-turn-long-context | bfcl-multi-turn (all four;
    /// BFCL v4 tool use, 200 entries each) | envs (envs/seed) | envs:DIR (*.py files, or a pool:
    /// a directory with pool.jsonl, or the pool.jsonl itself). File formats:
    /// docs/evaluation.md.
    #[arg(long)]
    suite: String,
    /// Items per task at most: questions per reasoning-gym dataset (default 50) or QA task
    /// (default all); environments at most for envs suites; entries per BFCL category.
    #[arg(long)]
    limit: Option<usize>,
    /// Seed of the generated questions, environment episodes and sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the result as JSON on stdout (and hide the progress bar).
    #[arg(long)]
    json: bool,
    /// Also write the JSON result (with its BenchmarkResult messages) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Replies per question: the score becomes Avg@k (each question's mean over its k
    /// replies) and pass@k (unbiased estimator) is reported for k = 1, 2, 4, ... and k itself.
    /// Needs --temperature above 0; for envs suites it sets the episodes per environment.
    #[arg(long, default_value_t = 1)]
    samples: u32,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// Tokens per reply (per turn in environments).
    #[arg(long, default_value_t = 1024)]
    max_new_tokens: usize,
    /// Prompts per forward batch.
    #[arg(long, default_value_t = 8)]
    batch_size: usize,
    /// Episodes per environment (envs suites).
    #[arg(long, default_value_t = 4)]
    episodes: u32,
    /// Turns per episode at most (envs suites).
    #[arg(long, default_value_t = 25)]
    max_turns: u32,
    /// The checkpoint's training step (default: from its directory name, e.g. checkpoint-120).
    #[arg(long)]
    step: Option<u64>,
    /// Keep every item's score and answer in the JSON.
    #[arg(long)]
    items: bool,
    /// Post the results to this URL of the service (an evaluation job's
    /// `/api/v1/evaluations/JOB/results`) with the token in SPADE_WORKER_TOKEN; the scheduler
    /// starts evaluation jobs this way. Retries with backoff; a refusal fails the command.
    #[arg(long, value_name = "URL")]
    report: Option<String>,
}

/// The JSON document of `--json` and `--out`.
#[derive(Serialize)]
struct Document<'a> {
    #[serde(flatten)]
    result: &'a SuiteResult,
    /// The result as the reporting contract's messages, for the worker/backend path.
    messages: Vec<spade::report::Message>,
}

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let suite = Suite::parse(&args.suite)?;
    check_checkpoint(&args.checkpoint)?;
    // Bad suite inputs fail before the model loads.
    suite.check_data()?;
    if args.limit == Some(0) {
        bail!("--limit must be at least 1");
    }
    if args.samples == 0 {
        bail!("--samples must be at least 1");
    }
    if spade::suites::repeats_greedy_reply(&suite.name(), args.samples, args.temperature) {
        bail!(
            "--samples {} at --temperature 0 would score the same greedy reply {} times; give \
             a temperature above 0 (e.g. --temperature 0.6)",
            args.samples,
            args.samples
        );
    }
    let report_to = match &args.report {
        Some(url) => Some(Reporter::new(url)?),
        None => None,
    };
    let mut opts = EvalOptions::new(&args.checkpoint);
    opts.limit = args.limit;
    opts.seed = args.seed;
    opts.sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        max_new_tokens: args.max_new_tokens,
        batch_size: args.batch_size,
    };
    opts.sampling.validate()?;
    opts.samples = args.samples;
    opts.episodes = args.episodes;
    opts.max_turns = args.max_turns;
    if args.step.is_some() {
        opts.checkpoint_step = args.step;
    }
    let policy = Policy::load(&args.checkpoint, default_device())
        .with_context(|| format!("cannot load the checkpoint {}", args.checkpoint.display()))?;
    let visible = !args.json && std::io::stderr().is_terminal();
    // A job's log has no terminal: name each task there instead of drawing a bar.
    let mut bar = Bar::new(visible, !visible && report_to.is_some());
    let mut result = spade_eval::evaluate(&policy, &suite, &opts, &mut bar)?;
    bar.0.finish_and_clear();
    if !args.items {
        for t in &mut result.tasks {
            t.items.clear();
        }
    }
    let doc = Document {
        result: &result,
        messages: result.to_messages(),
    };
    let json = serde_json::to_string_pretty(&doc)?;
    if let Some(out) = &args.out {
        std::fs::write(out, format!("{json}\n"))
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    if args.json {
        println!("{json}");
    } else {
        print_table(&result);
    }
    if let Some(r) = &report_to {
        r.post(&doc.messages)?;
        eprintln!(
            "spade eval: {} results posted to {}",
            doc.messages.len(),
            r.url
        );
    }
    let failed: Vec<&str> = result
        .tasks
        .iter()
        .filter(|t| t.error.is_some())
        .map(|t| t.task.as_str())
        .collect();
    for t in result.tasks.iter().filter(|t| t.error.is_some()) {
        eprintln!(
            "spade eval: task {} failed: {}",
            t.task,
            t.error.as_deref().unwrap_or_default()
        );
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn check_checkpoint(dir: &Path) -> anyhow::Result<()> {
    if !dir.exists() {
        bail!("--checkpoint {}: no such directory", dir.display());
    }
    if !dir.is_dir() {
        bail!(
            "--checkpoint {}: not a directory (expected a checkpoint directory with config.json)",
            dir.display()
        );
    }
    if !dir.join("config.json").is_file() {
        bail!(
            "--checkpoint {}: not a checkpoint (no config.json in it)",
            dir.display()
        );
    }
    Ok(())
}

fn print_table(r: &SuiteResult) {
    let width = r
        .tasks
        .iter()
        .map(|t| t.task.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<width$}  {:>6}  {:>7}  {:>7}  {:>8}  {:>6}",
        "task", "n", "score", "stderr", "s/item", "errors"
    );
    for t in &r.tasks {
        if let Some(e) = &t.error {
            println!("{:<width$}  failed: {e}", t.task);
            continue;
        }
        println!(
            "{:<width$}  {:>6}  {:>7.4}  {:>7}  {:>8.3}  {:>6}",
            t.task,
            t.n,
            t.mean,
            fmt_se(t.stderr),
            t.elapsed_s / f64::from(t.n.max(1)),
            t.item_errors
        );
    }
    let a = &r.aggregate;
    let errors: u32 = r.tasks.iter().map(|t| t.item_errors).sum();
    println!(
        "{:<width$}  {:>6}  {:>7.4}  {:>7}  {:>8.3}  {:>6}",
        format!("{} (mean of {} tasks)", r.suite, a.tasks),
        a.n,
        a.mean,
        fmt_se(a.stderr),
        r.elapsed_s / f64::from(a.n.max(1)),
        errors
    );
    let samples = r.tasks.iter().map(|t| t.samples).max().unwrap_or(1);
    if samples > 1 {
        println!("score: Avg@{samples} (each question's mean over {samples} samples)");
    }
    if !a.pass_at_k.is_empty() {
        let ks: Vec<String> = a
            .pass_at_k
            .iter()
            .map(|p| format!("pass@{} {:.4} (se {})", p.k, p.mean, fmt_se(p.stderr)))
            .collect();
        println!("{}", ks.join(", "));
    }
    if errors > 0 {
        println!(
            "(items with errors score 0: e.g. a prompt longer than the model's context; \
             --json --items shows each error)"
        );
    }
}

fn fmt_se(se: Option<f64>) -> String {
    se.map_or_else(|| "-".into(), |s| format!("{s:.4}"))
}

/// Posts results to the service (`--report`).
struct Reporter {
    url: String,
    token: String,
    client: reqwest::blocking::Client,
}

impl Reporter {
    /// Checks the URL and the token before any work, so a misconfigured job fails at once.
    fn new(url: &str) -> anyhow::Result<Self> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("--report {url:?}: expected an http:// or https:// URL");
        }
        let token = std::env::var("SPADE_WORKER_TOKEN")
            .ok()
            .filter(|t| !t.trim().is_empty())
            .context("--report needs the job's token in SPADE_WORKER_TOKEN")?;
        let client = reqwest::blocking::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()?;
        Ok(Self {
            url: url.to_owned(),
            token,
            client,
        })
    }

    /// Five tries, 1 s doubling between them, classified as the worker's sink does
    /// (`spade_worker::http`: network errors, 5xx, 408 and 429 retried; other statuses final).
    fn post(&self, messages: &[spade::report::Message]) -> anyhow::Result<()> {
        let body = spade::report::EvaluationResults {
            messages: messages.to_vec(),
        };
        let backoff = spade_worker::http::Backoff {
            tries: 5,
            first: std::time::Duration::from_secs(1),
            max: std::time::Duration::from_secs(16),
        };
        spade_worker::http::post_json_retrying(
            &self.client,
            &self.url,
            &self.token,
            &body,
            backoff,
            |why, pause| {
                eprintln!("spade eval: posting results failed ({why}); retrying in {pause:?}")
            },
        )
        .map(drop)
        .map_err(|m| anyhow::anyhow!("the results were not stored: {m}"))
    }
}

/// The progress bar on stderr; hidden when asked or when stderr is not a terminal, and then
/// optionally one line per task (`log`).
struct Bar(ProgressBar, bool);

impl Bar {
    fn new(visible: bool, log: bool) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some(0),
            if visible {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} items, eta {eta}  {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Self(bar, log)
    }
}

impl Progress for Bar {
    fn start(&mut self, total: u64) {
        self.0.set_length(total);
    }
    fn task(&mut self, name: &str) {
        if self.1 {
            eprintln!("spade eval: task {name}");
        }
        self.0.set_message(name.to_string());
    }
    fn advance(&mut self, n: u64) {
        self.0.inc(n);
    }
}
