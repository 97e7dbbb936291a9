//! `spade worker`: runs one run scheduled by the service. It fetches the run's configuration
//! from `GET /api/v1/ingest/{run}/config`, reports to `POST /api/v1/ingest/{run}` (spooling on
//! disk while the service is unreachable), keeps checkpoints in --data-dir and resumes from them
//! automatically when restarted, and stops cleanly when the service asks it to.

use crate::train_cmd::{CommonArgs, Part, follow, launch_ranks, progress};
use anyhow::Context;
use clap::Args;
use spade::config::RunConfig;
use spade::report::{Envelope, FinishStatus, Message};
use spade_worker::run;
use spade_worker::sink::{HttpSink, Sink, fetch_config};
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
    /// ./spade-worker/<run>). A restarted worker resumes from what it finds here. The local
    /// executor sets SPADE_WORKER_DATA_DIR to one directory per run, shared by its attempts, so a
    /// resumed run continues from its last checkpoint.
    #[arg(long, env = "SPADE_WORKER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Seconds the run's end waits for the service to take every spooled report (retrying with
    /// growing pauses) before the worker exits as failed, leaving them in the spool for a
    /// resumed attempt. A run is never reported succeeded with reports unsent.
    #[arg(
        long,
        env = "SPADE_FINAL_FLUSH_SECS",
        default_value_t = spade_worker::sink::FINAL_PATIENCE.as_secs()
    )]
    pub final_flush_secs: u64,
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
    let ranks = match args.common.part(&cfg)? {
        Part::Launcher(n) => {
            return match launch_ranks(n, &args.common, &cfg) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(e) => {
                    // A rank that died took the others down with it (rank 0 among them,
                    // which could not say so): the launcher tells the service.
                    let mut sink = HttpSink::new(&args.server, &args.run, &args.token, &data)?;
                    report_failure(&store, &mut sink, &args.run, &format!("{e:#}"));
                    Err(e)
                }
            };
        }
        Part::Rank(r) if r.rank() > 0 => return follow(&cfg, &args.common, resume, r),
        Part::Rank(r) => Some(r),
        Part::Alone => None,
    };
    let mut opts = args.common.options(args.run.clone(), resume)?;
    opts.ranks = ranks;
    let mut sink = HttpSink::new(&args.server, &args.run, &args.token, &data)?;
    sink.final_patience = std::time::Duration::from_secs(args.final_flush_secs);
    let (bar, mut on) = progress(cfg.run.steps);
    let outcome = run::run(&cfg, &opts, &store, &mut sink, &mut on);
    bar.finish_and_clear();
    let outcome = match outcome {
        Ok(o) => o,
        // The run finished and its end is spooled behind everything else: only the service
        // did not take it in time. A failure report now would contradict that end, which the
        // server stores when it takes the spool (or a resumed attempt sends it).
        Err(e @ spade_worker::WorkerError::Unsent { .. }) => return Err(e.into()),
        Err(e) => {
            report_failure(&store, &mut sink, &args.run, &e.to_string());
            return Err(e.into());
        }
    };
    eprintln!(
        "spade worker: run {} {:?} after {} steps",
        args.run, outcome.status, outcome.steps
    );
    Ok(match outcome.status {
        FinishStatus::Succeeded | FinishStatus::Cancelled => ExitCode::SUCCESS,
        FinishStatus::Failed => ExitCode::from(1),
    })
}

/// Tells the service the run failed (best effort: the error itself is what the caller sees).
/// The message takes a sequence number no earlier message can have used.
fn report_failure(store: &StateStore, sink: &mut HttpSink, run_id: &str, message: &str) {
    let seq = store.seq_floor();
    if store.reserve(seq).is_err() {
        return;
    }
    let env = Envelope::new(
        run_id,
        seq,
        Message::Finished {
            status: FinishStatus::Failed,
            message: message.chars().take(2000).collect(),
        },
    );
    if sink.deliver(&[env]).is_ok() {
        let _ = sink.flush(std::time::Duration::from_secs(10));
    }
}
