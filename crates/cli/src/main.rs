//! `spade`: a thin binary over the library crates. Subcommands that belong to later milestones
//! are listed so `--help` shows the whole surface, and say so when run.

mod env_cmd;
mod model_cmd;
mod vendi_cmd;

use clap::{Args, Parser, Subcommand, ValueEnum};
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
    /// Validate and play environment files (Python source) in the sandbox.
    #[command(subcommand)]
    Env(EnvCommand),
    /// Create, inspect and sample from policy checkpoints (Hugging Face layout).
    #[command(subcommand)]
    Model(model_cmd::ModelCommand),
    /// Run a training worker for a run scheduled by the service.
    Worker(WorkerArgs),
    /// Run SPADE training standalone into a run directory.
    Train(TrainArgs),
    /// Print the Vendi score of a square similarity matrix given as JSON.
    Vendi(vendi_cmd::VendiArgs),
    /// Evaluate a checkpoint on a held-out suite.
    Eval(EvalArgs),
}

#[derive(Debug, Subcommand)]
enum EnvCommand {
    /// Validate FILE.py in the sandbox; exit 0 if accepted, 1 if rejected, 2 on usage or I/O
    /// errors.
    Check {
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Contract to check against (default: tool use if the class subclasses ToolUseEnv).
        #[arg(long, value_enum)]
        kind: Option<KindArg>,
        /// Time budget for the whole validation, in seconds.
        #[arg(long, default_value_t = 60)]
        budget: u64,
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
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KindArg {
    Game,
    ToolUse,
}

#[derive(Debug, Args)]
struct WorkerArgs {
    /// Run id assigned by the service.
    #[arg(long)]
    run: i64,
    /// Base URL of the service.
    #[arg(long)]
    server: String,
    /// The run's worker token.
    #[arg(long, env = "SPADE_WORKER_TOKEN", hide_env_values = true)]
    token: String,
}

#[derive(Debug, Args)]
struct TrainArgs {
    /// Run configuration (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Run directory for outputs.
    #[arg(long)]
    out: PathBuf,
    /// Continue from the last checkpoint in --out.
    #[arg(long)]
    resume: bool,
}

#[derive(Debug, Args)]
struct EvalArgs {
    #[arg(long)]
    checkpoint: PathBuf,
    #[arg(long)]
    suite: String,
    #[arg(long)]
    limit: Option<usize>,
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Env(EnvCommand::Check {
            file,
            json,
            kind,
            budget,
        }) => {
            let kind = kind.map(|k| match k {
                KindArg::Game => spade_sandbox::EnvKind::Game,
                KindArg::ToolUse => spade_sandbox::EnvKind::ToolUse,
            });
            env_cmd::check(&file, json, kind, budget)
        }
        Command::Env(EnvCommand::Play {
            file,
            seed,
            actions,
            json,
        }) => env_cmd::play(&file, seed, &actions, json),
        Command::Model(cmd) => model_cmd::run(cmd),
        Command::Vendi(args) => vendi_cmd::run(&args),
        other => return not_yet(&other),
    };
    result.unwrap_or_else(|e| {
        eprintln!("spade: {e:#}");
        ExitCode::from(2)
    })
}

fn not_yet(command: &Command) -> ExitCode {
    let (name, milestone) = match command {
        Command::Env(_) => ("env", "the sandbox milestone (issue 3)"),
        Command::Model(_) => ("model", "the policy milestone (issue 4)"),
        Command::Worker(_) | Command::Train(_) | Command::Vendi(_) => {
            ("worker/train/vendi", "the SPADE loop milestone (issue 5)")
        }
        Command::Eval(_) => ("eval", "the evaluation milestone (issue 8)"),
    };
    eprintln!("spade {name}: not available in this build yet; it arrives with {milestone}");
    ExitCode::from(2)
}
