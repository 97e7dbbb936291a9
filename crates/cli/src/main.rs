//! `spade`: a thin binary over the library crates; each subcommand lives in its own `*_cmd.rs`.

mod env_cmd;
mod env_export;
mod eval_cmd;
mod generate_bench;
mod model_bench;
mod model_cmd;
mod model_plan;
mod rollout_bench;
mod rollout_bench_envs;
mod train_cmd;
mod vendi_cmd;
mod worker_cmd;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "spade",
    version,
    about = "SPADE Studio command line: check and play generated environments, create and run \
             models, run training workers, compute metrics.",
    after_help = "Exit codes: 0 success, 1 a check failed (e.g. an environment was rejected), \
                  2 usage or I/O error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate and play environment files (Python source) in the sandbox; export a run's
    /// environments as a pool.
    #[command(subcommand)]
    Env(EnvCommand),
    /// Create (from a preset, or by importing a GGUF file), inspect and sample from policy
    /// checkpoints (Hugging Face layout); time a training step of a Qwen3 shape.
    #[command(subcommand)]
    Model(model_cmd::ModelCommand),
    /// Run a training worker for a run scheduled by the service (reports over HTTP, resumes
    /// from its --data-dir).
    Worker(worker_cmd::WorkerArgs),
    /// Run SPADE training standalone into a run directory (--resume continues it).
    Train(train_cmd::TrainArgs),
    /// Print the Vendi score of a square similarity matrix given as JSON.
    Vendi(vendi_cmd::VendiArgs),
    /// Evaluate a checkpoint on a held-out suite.
    Eval(eval_cmd::EvalArgs),
    /// Say what this binary can compute on: built with CUDA or not, the libtorch version, the
    /// GPUs libtorch and nvidia-smi see (name, memory, compute capability), the driver and
    /// NCCL, the threads, and what `model.device = "auto"` picks here.
    Doctor {
        /// Print the facts as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process; the export's filters make its variant the largest"
)]
enum EnvCommand {
    /// Validate FILE.py in the sandbox; exit 0 if accepted, 1 if rejected, 2 on usage or I/O
    /// errors.
    Check {
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Contract to check against (default: tool use if the class subclasses ToolUseEnv or
        /// ToolUseBaseEnv).
        #[arg(long, value_enum)]
        kind: Option<KindArg>,
        /// Time budget for the whole validation, in seconds.
        #[arg(long, default_value_t = 60)]
        budget: u64,
        /// How many extra seeds to draw from the operating system's randomness (besides the
        /// spec's fixed 0, 1, 2, 42, 123); the report lists them.
        #[arg(long, default_value_t = spade_sandbox::validate::DRAWN_SEEDS)]
        drawn_seeds: usize,
        /// Replay: use these seeds instead of drawing (comma-separated, as a report lists them).
        #[arg(long, value_delimiter = ',', conflicts_with = "replay")]
        seeds: Option<Vec<i64>>,
        /// Replay: use the seeds of a JSON report written by `spade env check --json`.
        #[arg(long, value_name = "REPORT.json")]
        replay: Option<PathBuf>,
    },
    /// Play FILE.py with the given actions (or its own solution() each turn) and print the
    /// trajectory.
    Play {
        file: PathBuf,
        #[arg(long, default_value_t = 0)]
        seed: i64,
        /// An action to send; repeat for several turns.
        #[arg(long = "action")]
        actions: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Export a run's environments as a pool directory: one .py per environment, pool.jsonl
    /// (id, kind, skill, code_file, hint, win rates with and without hint, regret, designer
    /// reward, reward levels, parent id, run, step, status, the team's review marks) and a
    /// README.md dataset card. The directory works as `ablation.fixed_env_pool`.
    Export(env_export::ExportArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KindArg {
    Game,
    ToolUse,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Env(EnvCommand::Check {
            file,
            json,
            kind,
            budget,
            drawn_seeds,
            seeds,
            replay,
        }) => {
            let kind = kind.map(|k| match k {
                KindArg::Game => spade_sandbox::EnvKind::Game,
                KindArg::ToolUse => spade_sandbox::EnvKind::ToolUse,
            });
            let seeds = match (seeds, replay) {
                (Some(s), _) => env_cmd::Seeds::Given(s),
                (None, Some(report)) => env_cmd::Seeds::FromReport(report),
                (None, None) => env_cmd::Seeds::Draw(drawn_seeds),
            };
            env_cmd::check(&file, json, kind, budget, seeds)
        }
        Command::Env(EnvCommand::Play {
            file,
            seed,
            actions,
            json,
        }) => env_cmd::play(&file, seed, &actions, json),
        Command::Env(EnvCommand::Export(args)) => env_export::run(&args),
        Command::Model(cmd) => model_cmd::run(cmd),
        Command::Eval(args) => eval_cmd::run(args),
        Command::Train(args) => train_cmd::run(args),
        Command::Worker(args) => worker_cmd::run(args),
        Command::Vendi(args) => vendi_cmd::run(&args),
        Command::Doctor { json } => doctor(json),
    };
    result.unwrap_or_else(|e| {
        eprintln!("spade: {e:#}");
        ExitCode::from(2)
    })
}

fn doctor(json: bool) -> anyhow::Result<ExitCode> {
    let facts = spade_policy::device::SystemFacts::probe();
    if json {
        println!("{}", serde_json::to_string_pretty(&facts)?);
    } else {
        print!("{}", facts.text());
    }
    Ok(ExitCode::SUCCESS)
}
