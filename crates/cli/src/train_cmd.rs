//! `spade train`: a SPADE run standalone, into a run directory (`config.toml`,
//! `environments.jsonl`, `plays.jsonl`, `metrics.jsonl`, `events.jsonl`, `checkpoints/`), with a
//! progress bar. `--resume` continues a killed or finished-early run from its last checkpoint.

use anyhow::{Context, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use spade::config::RunConfig;
use spade_worker::run::{self, Event, RunOptions};
use spade_worker::sink::FileSink;
use spade_worker::state::StateStore;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Run configuration (TOML; every key of `spade::config::RunConfig`, omitted keys take the
    /// paper's defaults).
    #[arg(long)]
    pub config: PathBuf,
    /// Run directory for the outputs; must be empty or absent unless --resume.
    #[arg(long)]
    pub out: PathBuf,
    /// Continue from the last checkpoint in --out (its config.toml must match --config).
    #[arg(long)]
    pub resume: bool,
    /// Write no checkpoint, not even at the end: no resume point, no snapshot, no optimizer
    /// state (a 4B model's is 48 GB), and no disk check; the reports and logs are written as
    /// always. For benchmarks and smoke runs (scripts/gpu-check); such a run cannot be
    /// resumed. Refused with --resume and with eval.every_steps > 0 (evaluations read
    /// checkpoints).
    #[arg(long, conflicts_with = "resume")]
    pub no_checkpoints: bool,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Settings shared by `spade train` and `spade worker`.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// The seed environment library (warm start of the tiny model). Relative paths are read
    /// from the working directory, which for a scheduled worker is its job directory: the
    /// server's environment sets SPADE_SEEDS to an absolute path (scripts/serve does).
    #[arg(long, env = "SPADE_SEEDS", default_value = "envs/seed")]
    pub seeds: PathBuf,
    /// Environment episodes (sandbox runners) played at once; overrides the run
    /// configuration's `agent.concurrency`.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// libtorch threads (1 is fastest for the tiny model on a small machine).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Epochs of the tiny model's warm start on the seed library before its criterion is first
    /// checked; it trains on, one epoch at a time, until the criterion is met or twice this
    /// many (cached by content hash and CPU kernels in $SPADE_CACHE). A
    /// `model.warm_start = "families"` run checks after the family's own 12, up to 24; a
    /// pretrained preset's warm start (`smollm2-135m`) after 1, up to 4.
    #[arg(long, default_value_t = run::DEFAULT_WARM_EPOCHS)]
    pub warm_epochs: usize,
    /// Processes that train the run together (CPU: Gloo; model.device = "cuda" with the CUDA
    /// build: a GPU each, NCCL, not yet run on GPUs), overriding the configuration's
    /// `run.ranks`: each plays its share of the agent's and hint episodes, trains its share of
    /// each update's micro-batches and holds 1/N of the optimizer state (ZeRO-2); rank 0
    /// reports and writes the checkpoints. Started torchrun-style on this machine; a rank that
    /// fails stops the others. A checkpoint resumes on any rank count (its optimizer state re-sharded).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub ranks: Option<u16>,
    /// Seconds the ranks' rendezvous and each collective may take before the run fails.
    #[arg(long, default_value_t = 600)]
    pub rank_timeout: u64,
    /// Where the ranks run: `local` (processes of this machine) or `ray` (one per bundle of a
    /// Ray placement group, one rank per node: scripts/ray-ranks with the Python that has
    /// Ray, SPADE_RAY_PYTHON; the binary, the seeds and the output directory must be at the
    /// same paths on every node).
    /// The dashboard's Ray executor sets SPADE_LAUNCHER=ray for its jobs.
    #[arg(long, value_enum, env = "SPADE_LAUNCHER", default_value_t = Launcher::Local)]
    pub launcher: Launcher,
    /// The Ray cluster's GCS address for `--launcher ray` (default: RAY_ADDRESS, as inside a
    /// Ray job, else `auto`).
    #[arg(long, env = "RAY_ADDRESS")]
    pub ray_address: Option<String>,
    /// Designer samples, on prompts held back from training, validated at each check of the
    /// warm start's criterion.
    #[arg(long, default_value_t = run::DEFAULT_WARM_MEASURE)]
    pub warm_measure: usize,
    /// The warm start's criterion: the share of --warm-measure samples the sandbox must accept.
    #[arg(long, default_value_t = run::DEFAULT_WARM_MIN_ACCEPTANCE)]
    pub warm_min_acceptance: f64,
}

/// Where warm starts are cached: `$SPADE_CACHE/warmstart`, else `~/.cache/spade-studio/warmstart`.
pub fn cache_dir() -> PathBuf {
    spade_policy::preset::cache_root().join("warmstart")
}

impl CommonArgs {
    pub fn options(&self, run_id: String, resume: bool) -> anyhow::Result<RunOptions> {
        spade_policy::embed::set_threads(self.threads);
        if !self.seeds.is_dir() {
            bail!(
                "--seeds {}: not a directory (the seed library, envs/seed in the repository)",
                self.seeds.display()
            );
        }
        let mut o = RunOptions::new(run_id, self.seeds.clone(), cache_dir());
        o.concurrency = self.concurrency.map(|n| n.max(1));
        o.warm_epochs = self.warm_epochs;
        o.warm_measure = self.warm_measure;
        if !(0.0..=1.0).contains(&self.warm_min_acceptance) {
            bail!(
                "--warm-min-acceptance {}: a share, from 0 to 1",
                self.warm_min_acceptance
            );
        }
        o.warm_min_acceptance = self.warm_min_acceptance;
        o.resume = resume;
        Ok(o)
    }
}

/// A progress bar fed by the loop's events.
pub fn progress(total: u64) -> (ProgressBar, impl FnMut(Event)) {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] step {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let b = bar.clone();
    let mut acceptance = String::from("-");
    let on = move |e: Event| match e {
        Event::Phase { phase, step, .. } => {
            b.set_position(step);
            b.set_message(format!("{phase} | acceptance {acceptance}"));
        }
        Event::Step {
            step,
            metrics,
            total,
            ..
        } => {
            if let Some(a) = metrics.get("acceptance_rate_run") {
                acceptance = format!("{a:.2}");
            }
            if b.is_hidden() {
                let get = |k: &str| metrics.get(k).map_or("-".into(), |v| format!("{v:.3}"));
                eprintln!(
                    "step {}/{total}: acceptance {acceptance} ({} accepted, {} rejected; {} distinct \
                     in the run), envs {}, win rate no hint {} / hint {}, mean regret {}, \
                     learnable share {}, designer reward {}",
                    step + 1,
                    get("accepted"),
                    get("rejected"),
                    get("distinct_accepted_run"),
                    get("envs"),
                    get("r_no_hint"),
                    get("r_hint"),
                    get("regret_mean"),
                    get("learnable_share"),
                    get("designer_reward_mean"),
                );
            }
            b.set_position(step + 1);
            let regret = metrics
                .get("regret_mean")
                .map_or("-".into(), |r| format!("{r:.3}"));
            b.set_message(format!("done | acceptance {acceptance} | regret {regret}"));
        }
        // Without a terminal the bar draws nothing (and println with it): log to stderr.
        Event::Log(line) if b.is_hidden() => eprintln!("{line}"),
        Event::Log(line) => b.println(line),
    };
    (bar, on)
}

/// This process's part of a run on several ranks: the launcher (no `RANK` in the
/// environment) starts one copy of this command per rank; each copy is one rank.
pub enum Part {
    Alone,
    Launcher(usize),
    Rank(std::sync::Arc<spade_worker::ranks::Ranks>),
}

impl CommonArgs {
    /// The part of `cfg`'s run this process plays (`--ranks`, else `run.ranks`).
    pub fn part(&self, cfg: &RunConfig) -> anyhow::Result<Part> {
        let n = self.ranks.map_or(cfg.run.ranks as usize, usize::from);
        if n <= 1 {
            return Ok(Part::Alone);
        }
        if std::env::var_os("RANK").is_none() {
            return Ok(Part::Launcher(n));
        }
        let timeout = std::time::Duration::from_secs(self.rank_timeout.max(1));
        let r = spade_worker::ranks::Ranks::join_from_env(n, timeout)?;
        Ok(Part::Rank(std::sync::Arc::new(r)))
    }
}

/// Where a run's ranks run (`--launcher`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Launcher {
    Local,
    Ray,
}

/// scripts/ray-ranks, carried in the binary so it needs no checkout beside it.
const RAY_RANKS: &str = include_str!("../../../scripts/ray-ranks");

/// Runs `n` ranks of this very command (same arguments) and waits for them; on Ray a run on
/// CUDA gets a GPU in each rank's bundle.
pub fn launch_ranks(n: usize, common: &CommonArgs, cfg: &RunConfig) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("the spade binary's own path")?;
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if common.launcher == Launcher::Ray {
        let gpus = spade::config::device_gpus(&cfg.model.device).is_some_and(|g| g > 0);
        return launch_on_ray(n, common, &exe, &argv, gpus);
    }
    eprintln!("starting {n} ranks");
    spade_worker::ranks::launch(
        |_| {
            let mut c = std::process::Command::new(&exe);
            c.args(&argv);
            c
        },
        n,
    )?;
    Ok(())
}

/// `--launcher ray`: scripts/ray-ranks places the ranks (one per node) and runs this command
/// in each with the torchrun-style environment; `gpus`: one GPU in each rank's bundle (Ray
/// then shows each rank only its own, which the rank takes).
fn launch_on_ray(
    n: usize,
    common: &CommonArgs,
    exe: &std::path::Path,
    argv: &[std::ffi::OsString],
    gpus: bool,
) -> anyhow::Result<()> {
    let script = std::env::temp_dir().join(format!("spade-ray-ranks-{}.py", std::process::id()));
    std::fs::write(&script, RAY_RANKS)
        .with_context(|| format!("cannot write {}", script.display()))?;
    let python = std::env::var_os("SPADE_RAY_PYTHON").unwrap_or_else(|| "python3".into());
    let address = common.ray_address.clone().unwrap_or_else(|| "auto".into());
    eprintln!("starting {n} ranks on the Ray cluster at {address}");
    let status = std::process::Command::new(&python)
        .arg(&script)
        .args(["--address", &address, "--ranks", &n.to_string()])
        .args(if gpus { &["--gpus", "1"][..] } else { &[][..] })
        .arg("--")
        .arg(exe)
        .args(argv)
        .status()
        .with_context(|| format!("cannot run {} (SPADE_RAY_PYTHON)", python.to_string_lossy()));
    let _ = std::fs::remove_file(&script);
    let status = status?;
    if !status.success() {
        anyhow::bail!("the ranks on Ray failed ({status}); ray-ranks said why above");
    }
    Ok(())
}

/// A follower rank: it plays and trains what rank 0 sends; rank 0 checks the outputs and
/// writes everything but the followers' optimiser shards.
pub fn follow(
    cfg: &RunConfig,
    common: &CommonArgs,
    resume: bool,
    ranks: std::sync::Arc<spade_worker::ranks::Ranks>,
) -> anyhow::Result<ExitCode> {
    let rank = ranks.rank();
    let opts = common.options(format!("rank-{rank}"), resume)?;
    run::follow(cfg, &opts, &ranks, &mut |e| {
        if let Event::Log(l) = e {
            eprintln!("rank {rank}: {l}");
        }
    })
    .with_context(|| format!("rank {rank}"))?;
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("cannot read {}", args.config.display()))?;
    let cfg = RunConfig::from_toml_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    let ranks = match args.common.part(&cfg)? {
        Part::Launcher(n) => {
            launch_ranks(n, &args.common, &cfg)?;
            return Ok(ExitCode::SUCCESS);
        }
        Part::Rank(r) if r.rank() > 0 => return follow(&cfg, &args.common, args.resume, r),
        Part::Rank(r) => Some(r),
        Part::Alone => None,
    };
    if args.no_checkpoints && cfg.eval.every_steps > 0 {
        bail!(
            "--no-checkpoints: eval.every_steps = {} evaluates checkpoints; set it to 0 or \
             keep the checkpoints",
            cfg.eval.every_steps
        );
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let stored = args.out.join("config.toml");
    if args.resume {
        let before = std::fs::read_to_string(&stored)
            .with_context(|| format!("--resume: cannot read {}", stored.display()))?;
        let before = RunConfig::from_toml_str(&before)
            .map_err(|e| anyhow::anyhow!("{}: {e}", stored.display()))?;
        if before != cfg {
            bail!(
                "--resume: {} differs from {}; a run resumes with its own configuration",
                args.config.display(),
                stored.display()
            );
        }
    } else {
        let busy = std::fs::read_dir(&args.out)
            .with_context(|| format!("cannot read {}", args.out.display()))?
            .next()
            .is_some();
        if busy {
            bail!(
                "--out {} is not empty; pass --resume to continue the run in it",
                args.out.display()
            );
        }
        std::fs::write(&stored, cfg.to_toml())
            .with_context(|| format!("cannot write {}", stored.display()))?;
    }
    let run_id = args
        .out
        .file_name()
        .map_or("run".into(), |n| n.to_string_lossy().into_owned());
    let mut opts = args.common.options(run_id, args.resume)?;
    opts.ranks = ranks;
    opts.checkpoints = !args.no_checkpoints;
    let mut sink = FileSink::open(&args.out)?;
    let store = StateStore::new(&args.out);
    let started = Instant::now();
    let (bar, mut on) = progress(cfg.run.steps);
    let outcome = run::run(&cfg, &opts, &store, &mut sink, &mut on);
    bar.finish_and_clear();
    let outcome = outcome?;
    let m = &outcome.last_metrics;
    let get = |k: &str| m.get(k).map_or("-".to_string(), |v| format!("{v:.3}"));
    println!(
        "{:?} after {} steps in {:.0} s: acceptance {}, mean regret {}, learnable share {}, vendi/n {}",
        outcome.status,
        outcome.steps,
        started.elapsed().as_secs_f64(),
        get("acceptance_rate_run"),
        get("regret_mean"),
        get("learnable_share"),
        get("vendi_per_n"),
    );
    if let Some(w) = &outcome.warm_start {
        println!(
            "warm start: designer acceptance {}/{} ({:.2})",
            w.accepted, w.measured, w.acceptance_rate
        );
        if w.needed > 0 {
            println!("{}", w.verdict());
        }
    }
    println!("outputs in {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}
