//! `spade worker`: runs one run scheduled by the service. It fetches the run's configuration
//! from `GET /api/v1/ingest/{run}/config`, reports to `POST /api/v1/ingest/{run}` (spooling on
//! disk while the service is unreachable), keeps checkpoints in --data-dir and resumes from them
//! automatically when restarted, and stops cleanly when the service asks it to.

use crate::train_cmd::{CommonArgs, progress};
use anyhow::Context;
use clap::Args;
use spade::config::RunConfig;
use spade::report::FinishStatus;
use spade_worker::run;
use spade_worker::sink::{HttpSink, fetch_config};
use spade_worker::state::StateStore;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Run id assigned by the service.
    #[arg(long)]
    pub run: String,
    /// Base URL of the service, e.g. http://127.0.0.1:3000.
    #[arg(long)]
    pub server: String,
    /// The run's worker token.
    #[arg(long, env = "SPADE_WORKER_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Checkpoints, the report spool and the sequence reservation (default:
    /// ./spade-worker/<run>). A restarted worker resumes from what it finds here.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
}

pub fn run(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let text = fetch_config(&args.server, &args.run, &args.token)?;
    let cfg = RunConfig::from_toml_str(&text)
        .map_err(|e| anyhow::anyhow!("the service's configuration of run {}: {e}", args.run))?;
    let data = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("spade-worker").join(&args.run));
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;
    let store = StateStore::new(&data);
    let resume = store.load()?.is_some();
    let opts = args.common.options(args.run.clone(), resume)?;
    let mut sink = HttpSink::new(&args.server, &args.run, &args.token, &data)?;
    let (bar, mut on) = progress(cfg.run.steps);
    let outcome = run::run(&cfg, &opts, &store, &mut sink, &mut on);
    bar.finish_and_clear();
    let outcome = outcome?;
    eprintln!(
        "spade worker: run {} {:?} after {} steps",
        args.run, outcome.status, outcome.steps
    );
    Ok(match outcome.status {
        FinishStatus::Succeeded | FinishStatus::Cancelled => ExitCode::SUCCESS,
        FinishStatus::Failed => ExitCode::from(1),
    })
}
