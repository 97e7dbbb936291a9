//! The training loop (spec, "One training step"), one step at a time:
//!
//! 1. for each environment kind whose window ends now (every k steps: 4 games, 8 tool use):
//!    score the closing window's environments (regret, plateau, blend, penalties), report them,
//!    update the memory, and set the window's designer samples aside for this step's batch (k
//!    steps after they were sampled: truncated importance sampling against the stored
//!    log-probs); then regenerate: rotate the active skills, sample up to N attempts per slot,
//!    validate, write a hint per accepted environment (temperature 0.3, not trained) and play
//!    the hint plays once;
//! 2. play ceil(global_batch / n_envs) no-hint episodes per live environment and add them to the
//!    window's tallies; in the run's last step, close the open windows too (the reference
//!    flushes its buffer at the final rollout, `spade/slime/spade_rollout.py`); then take one
//!    GRPO step on the agent samples (z-score advantages per environment group) together with
//!    the designer samples of the windows closed this step (one batch, one optimizer update, as
//!    the reference mixes them);
//! 3. compute the step's metrics;
//! 4. commit, every `run.weights_every` steps, at every kept checkpoint and at the end: the
//!    messages of the steps since the last commit go into the state's outbox, the weights and
//!    state are written atomically, then the outbox is delivered to the sink (see
//!    [`crate::state`]). Between commits a step's messages wait in memory, so nothing reaches
//!    the sink that a resume point on disk does not include: a crash costs the steps since the
//!    last commit, which the resumed run plays again and reports for the first time.
//!
//! Baselines and ablations come from the configuration: fixed-env GRPO loads a pool of
//! environments once, validated before the warm start ([`crate::pool`]), and never generates;
//! a frozen designer generates but never trains; no memory / no corpus leave those parts out of
//! the designer prompt; the two-skill curriculum pins two game skills; the EMA reward replaces
//! regret + plateau.

mod generate;
mod metrics;
mod score;
mod spice;

use crate::sink::Sink;
use crate::state::{self, RunState, StateStore};
use crate::warmstart::{self, WarmStartOptions};
use crate::{WorkerError, play, seeds};
use spade::config::RunConfig;
use spade::report::{Envelope, FinishStatus, Message, PlayRecord};
use spade_policy::Policy;
use spade_policy::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
use spade_policy::train::{MaskedSeq, OptimConfig};
use spade_sandbox::{Pool, PoolConfig, RunnerConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Worker-side settings that are not part of the run configuration (where files are, how much
/// to run at once, the warm start of the tiny model).
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub run_id: String,
    pub code_version: String,
    /// The seed library (warm start of the tiny model).
    pub seed_dir: PathBuf,
    /// Where warm-started checkpoints are cached.
    pub cache_dir: PathBuf,
    /// Episodes (runner processes) played at once, overriding the run configuration's
    /// `agent.concurrency` (`--concurrency`); None = the configuration's.
    pub concurrency: Option<usize>,
    /// Epochs of the seed-library warm start before its criterion is first checked (a family's
    /// warm start uses `warmstart::families::EPOCHS`); the bound is twice this.
    pub warm_epochs: usize,
    pub warm_lr: f64,
    /// Designer samples validated at each check of the warm start's criterion.
    pub warm_measure: usize,
    /// The warm start's criterion: the share of `warm_measure` samples the sandbox must accept.
    pub warm_min_acceptance: f64,
    /// Continue from the last checkpoint.
    pub resume: bool,
}

/// Epochs of the tiny model's warm start (see [`crate::warmstart`]).
pub const DEFAULT_WARM_EPOCHS: usize = 70;
/// Designer samples validated at each check of the warm start's criterion.
pub const DEFAULT_WARM_MEASURE: usize = 12;
/// The warm start's criterion: half of its designer samples accepted. Above the CPU demo's own
/// target (acceptance >= 0.3 over the run), since a run samples at the same temperature from
/// prompts with memory parents the warm start never showed.
pub const DEFAULT_WARM_MIN_ACCEPTANCE: f64 = 0.5;

impl RunOptions {
    /// The defaults `spade train` uses (tests use them too, so they share its cached warm start).
    pub fn new(run_id: impl Into<String>, seed_dir: PathBuf, cache_dir: PathBuf) -> Self {
        Self {
            run_id: run_id.into(),
            code_version: env!("CARGO_PKG_VERSION").to_string(),
            seed_dir,
            cache_dir,
            concurrency: None,
            warm_epochs: DEFAULT_WARM_EPOCHS,
            warm_lr: 3e-3,
            warm_measure: DEFAULT_WARM_MEASURE,
            warm_min_acceptance: DEFAULT_WARM_MIN_ACCEPTANCE,
            resume: false,
        }
    }
}

/// What the loop tells its caller while it runs (for progress bars and logs).
#[derive(Debug, Clone)]
pub enum Event {
    /// A phase of a step began.
    Phase {
        step: u64,
        total: u64,
        phase: &'static str,
    },
    /// A step was done.
    Step {
        step: u64,
        total: u64,
        metrics: BTreeMap<String, f64>,
        /// Its resume point was written and its reports delivered (every `run.weights_every`
        /// steps, see [`spade::config::RunSection`]); otherwise they wait for the next commit.
        committed: bool,
    },
    /// A line worth showing.
    Log(String),
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: FinishStatus,
    /// Steps completed in all (including before a resume).
    pub steps: u64,
    pub last_metrics: BTreeMap<String, f64>,
    /// Acceptance of the warm-started designer (tiny preset only).
    pub warm_start: Option<warmstart::WarmStartReport>,
}

pub(crate) struct Loop<'a> {
    pub cfg: &'a RunConfig,
    pub opts: &'a RunOptions,
    pub policy: Policy,
    pub pool: Pool,
    pub trainer: GrpoTrainer,
    pub state: RunState,
    pub store: &'a StateStore,
    pub sink: &'a mut dyn Sink,
    pub on: &'a mut dyn FnMut(Event),
    /// Messages of the steps since the last commit (delivered at the next one).
    pub pending: Vec<Message>,
    pub corpus: Option<spade::corpus::Corpus>,
    pub step_started: Instant,
    pub cancel: bool,
    /// What the step in flight observed, for its metrics.
    pub obs: metrics::StepObservations,
    /// Designer samples of the windows closed in the step in flight, trained with its agent
    /// samples.
    pub designer_pending: Vec<score::PendingDesigner>,
    /// Fixed-env GRPO: the pool environments the step in flight plays (None: all live ones).
    pub fixed_selection: Option<std::collections::BTreeSet<String>>,
    /// The Vendi score's sentence encoder (`metrics.vendi_kernel = "sentence"`).
    pub encoder: Option<spade_policy::encoder::Encoder>,
    /// The frozen designer of `designer.model_path`: it writes the environments, hints and
    /// verdicts; None when the policy plays both roles.
    pub designer: Option<Policy>,
    /// Environments reviewers retired, as the service said in its last replies; applied before
    /// the next plays.
    pub retire: Vec<spade::report::Retire>,
    /// `model.rollout = "vllm"`: the servers, synced after every update.
    pub vllm: Option<std::sync::Arc<crate::vllm::Fleet>>,
}

impl Loop<'_> {
    /// The model that plays the designer (and hint writer and judge).
    pub fn designer_policy(&self) -> &Policy {
        self.designer.as_ref().unwrap_or(&self.policy)
    }

    /// What generates for the policy: the vLLM servers when the run has them.
    pub fn backend(&self) -> play::Backend {
        match &self.vllm {
            Some(f) => play::Backend::Vllm(f.clone()),
            None => backend(self.cfg),
        }
    }

    /// What generates for the designer: a frozen designer is not what the servers serve.
    pub fn designer_backend(&self) -> play::Backend {
        if self.designer.is_some() {
            backend(self.cfg)
        } else {
            self.backend()
        }
    }
}

/// Runs (or resumes) a run to its last step.
pub fn run(
    cfg: &RunConfig,
    opts: &RunOptions,
    store: &StateStore,
    sink: &mut dyn Sink,
    on: &mut dyn FnMut(Event),
) -> Result<Outcome, WorkerError> {
    let issues = cfg.validate();
    if !issues.is_empty() {
        let text: Vec<String> = issues.iter().map(ToString::to_string).collect();
        return Err(WorkerError::Config(text.join("; ")));
    }
    let mut pool_cfg = PoolConfig::new(RunnerConfig::new(spade_sandbox::default_runner_path()));
    pool_cfg.max_runners = concurrency(cfg, opts);
    pool_cfg.warm = 1;
    pool_cfg.call_timeout = Duration::from_secs_f64(cfg.sandbox.step_timeout_s);
    pool_cfg.runner.limits.max_observation_chars = cfg.sandbox.max_observation_chars;
    let pool = Pool::new(pool_cfg);
    let corpus = generate::load_corpus(cfg)?;
    // Before the warm start, so a wrong encoder path fails in seconds, not after it.
    let encoder = generate::load_encoder(cfg, on)?;
    let (designer, designer_print) = load_designer(cfg, on)?.unzip();

    let existing = store.load()?;
    // Pools (fixed-env GRPO's, the memory's seed) are read and validated before anything
    // expensive (the warm start, loading weights), so one that cannot be used is refused in
    // seconds. A resumed run has both in its state.
    let fresh = !(opts.resume && existing.is_some());
    let fixed_pool = if cfg.is_fixed_env() && fresh {
        (on)(Event::Log("validating the fixed environment pool".into()));
        Some(generate::load_fixed_pool(cfg, &pool)?)
    } else {
        None
    };
    let seed_memory = if cfg.memory.seed_pool.is_some() && fresh {
        (on)(Event::Log("validating the memory seed pool".into()));
        Some(crate::pool::seed_memory(cfg, &pool)?)
    } else {
        None
    };
    let mut warm_report = None;
    let (policy, state, resumed_from) = match (existing, opts.resume) {
        (Some((dir, st)), true) => {
            (on)(Event::Log(format!(
                "resuming at step {} from {}",
                st.step,
                dir.display()
            )));
            (
                Policy::load(&dir, spade_policy::default_device())?,
                st,
                Some(dir),
            )
        }
        (Some((dir, _)), false) => {
            return Err(WorkerError::Config(format!(
                "{} already holds a checkpoint; resume it or choose another output directory",
                dir.display()
            )));
        }
        (None, _) => {
            let (dir, report) = base_model(cfg, opts, &pool, &corpus, on)?;
            warm_report = report;
            let p = Policy::load(&dir, spade_policy::default_device())?;
            (p, RunState::new(dir.display().to_string(), cfg), None)
        }
    };
    speaks_chatml(&policy)?;
    let grpo = GrpoConfig {
        clip_low: cfg.grpo.clip_low,
        clip_high: cfg.grpo.clip_high,
        kl_coef: cfg.grpo.kl_coef,
        tis_cap: cfg.grpo.tis_cap,
        temperature: cfg.train_temperature(),
        micro_batch_tokens: cfg.grpo.micro_batch_tokens as usize,
        logprob_chunk_tokens: cfg.grpo.logprob_chunk_tokens as usize,
        recompute: cfg.grpo.activation_recompute,
        router_aux_coef: cfg.grpo.router_aux_coef,
        optim: OptimConfig {
            lr: cfg.grpo.lr,
            ..OptimConfig::default()
        },
    };
    let mut trainer = GrpoTrainer::new(&policy, grpo)?;
    check_checkpoint_disk(cfg, &policy, trainer.optimizer().is_mixed(), store, on)?;
    let vllm = crate::vllm::for_run(cfg, &policy, store.root(), state.step, &mut |l| {
        on(Event::Log(l))
    })?;
    if let Some(dir) = resumed_from {
        // An optimiser state older than the weights (written every `run.optimizer_every`
        // steps) gives its moments, not its masters: those would undo the steps since.
        let own_step = state.optimizer_step.is_none_or(|s| s == state.step);
        match state::load_optimizer(&mut trainer, &dir, own_step)? {
            true if own_step => (on)(Event::Log(format!(
                "restored the optimizer state ({} AdamW steps)",
                trainer.optimizer().step_count()
            ))),
            true => (on)(Event::Log(format!(
                "restored the optimizer state of step {} (written every {} steps) for weights \
                 of step {}",
                state.optimizer_step.unwrap_or_default(),
                cfg.run.optimizer_every,
                state.step
            ))),
            false => (on)(Event::Log(format!(
                "{} has no {}: an older checkpoint; AdamW restarts with zero moments",
                dir.display(),
                state::OPTIMIZER
            ))),
        }
    }
    let mut lp = Loop {
        cfg,
        opts,
        policy,
        pool,
        trainer,
        state,
        store,
        sink,
        on,
        pending: vec![],
        corpus,
        step_started: Instant::now(),
        cancel: false,
        obs: metrics::StepObservations::default(),
        designer_pending: vec![],
        fixed_selection: None,
        encoder,
        designer,
        retire: vec![],
        vllm,
    };
    lp.state.next_seq = lp.state.next_seq.max(store.seq_floor());
    // Whatever the last commit did not get to deliver goes first.
    let outbox = std::mem::take(&mut lp.state.outbox);
    lp.deliver(&outbox)?;
    lp.live(Message::RunStarted {
        config: cfg.to_json(),
        code_version: opts.code_version.clone(),
        total_steps: cfg.run.steps,
    })?;
    if let Some(fixed) = fixed_pool {
        lp.install_fixed_pool(fixed)?;
    } else {
        // A resumed fixed-env run: its pool came back with the state; report it again, since
        // a checkpoint taken before fixed pools were reported holds plays of unreported envs.
        lp.report_fixed_envs()?;
    }
    if let Some((records, problems)) = seed_memory {
        lp.install_seed_memory(records, &problems)?;
    }
    // The starting weights are checkpoint 0, so that evaluations can put the base model beside
    // the trained ones (the row is replaced on every start: a resume reports the same path).
    let base = PathBuf::from(&lp.state.base_model);
    // A configured `model.path` lies in the service's model roots; a warm start lies in the
    // shared cache, outside anything the service accepts as this run's, so it is reported
    // through a link in the run's own directory.
    let (base, bytes) = if cfg.model.path.is_some() {
        let bytes = state::dir_bytes(&base);
        (base, bytes)
    } else {
        store.base_snapshot(&base)?
    };
    lp.live(Message::Checkpoint {
        step: 0,
        path: reported_path(&base),
        bytes,
    })?;
    if let Some(r) = &warm_report {
        // A warm start with a criterion says whether it met it, in the run's own log (what its
        // page shows): a designer that writes nothing valid means a run without a curriculum.
        let (level, line) = if r.needed > 0 {
            let level = if r.designer_ready() {
                spade::report::LogLevel::Info
            } else {
                spade::report::LogLevel::Warn
            };
            (
                level,
                format!(
                    "{}; SFT loss {:.3} -> {:.3}",
                    r.verdict(),
                    r.first_loss,
                    r.last_loss
                ),
            )
        } else {
            (
                spade::report::LogLevel::Info,
                format!(
                    "warm start: designer acceptance {}/{} ({:.2}), SFT loss {:.3} -> {:.3}",
                    r.accepted, r.measured, r.acceptance_rate, r.first_loss, r.last_loss
                ),
            )
        };
        lp.live(Message::Log { level, line })?;
    }
    let mut last = BTreeMap::new();
    while lp.state.step < cfg.run.steps && !lp.cancel {
        last = lp.step()?;
    }
    let status = if lp.cancel {
        FinishStatus::Cancelled
    } else {
        FinishStatus::Succeeded
    };
    if let (Some(d), Some(before)) = (&lp.designer, &designer_print) {
        let after = d.weights_fingerprint();
        if &after != before {
            return Err(WorkerError::Model(format!(
                "the frozen designer's weights changed during the run ({before} -> {after})"
            )));
        }
        (lp.on)(Event::Log(format!(
            "frozen designer unchanged: weights fingerprint {after}"
        )));
    }
    lp.finish(status)?;
    Ok(Outcome {
        status,
        steps: lp.state.step,
        last_metrics: last,
        warm_start: warm_report,
    })
}

/// What a run that designed environments but had none accepted says at its end (issue 35: a
/// run whose designer wrote nothing valid finished "succeeded" with flat curves and no word
/// why); `None` when something was accepted or nothing was designed (fixed-environment runs).
pub(crate) fn nothing_usable(st: &state::RunState) -> Option<String> {
    (st.attempts_total > 0 && st.accepted_total == 0).then(|| {
        format!(
            "nothing usable: the sandbox accepted none of the {} environments the designer \
             wrote, so there was no curriculum to play or train on",
            st.attempts_total
        )
    })
}

/// `broken_seed` of an environment a review retired (no episode broke it).
pub const RETIRED_SEED: i64 = -1;

/// Marks the live environments named in `retire` retired (see [`Loop::apply_retirements`])
/// and returns their reports; names that are not live, or already broken, are passed over.
pub(crate) fn retire_live(
    windows: &mut BTreeMap<String, state::Window>,
    retire: Vec<spade::report::Retire>,
    step: u64,
) -> Vec<Message> {
    let mut out = vec![];
    for r in retire {
        let Some(env) = windows
            .values_mut()
            .flat_map(|w| w.envs.iter_mut())
            .find(|e| e.env_id == r.env_id)
        else {
            continue; // not live (an older window's, or not this worker's)
        };
        if env.broken_seed.is_some() {
            continue;
        }
        env.failed = Some(format!("retired_by_review: {}", r.message));
        // No episode broke it: the sentinel seed says so (the service stores no seed).
        env.broken_seed = Some(RETIRED_SEED);
        out.push(Message::EnvironmentBroken {
            env_id: r.env_id,
            step,
            seed: RETIRED_SEED,
            reason: "retired_by_review".into(),
            message: r.message,
        });
    }
    out
}

/// The roles' transcripts are ChatML token by token (`play::observation_frame`); a model
/// whose own template lays conversations out otherwise would be prompted in a format it never
/// saw, so it is refused with both renderings.
fn speaks_chatml(p: &Policy) -> Result<(), WorkerError> {
    match p.chat_template().chatml_mismatch() {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(WorkerError::Config(format!(
            "model: the worker speaks ChatML (Qwen2/2.5/3, SmolLM2); {why}"
        ))),
        Err(e) => Err(WorkerError::Config(format!("model: {e}"))),
    }
}

/// The frozen designer of `designer.model_path`, loaded before anything expensive starts, and
/// its weights fingerprint (one pass over the weights; the run's end compares against it).
fn load_designer(
    cfg: &RunConfig,
    on: &mut dyn FnMut(Event),
) -> Result<Option<(Policy, String)>, WorkerError> {
    let Some(dir) = cfg.designer.model_path.as_deref() else {
        return Ok(None);
    };
    let p = Policy::load(Path::new(dir), spade_policy::default_device())
        .map_err(|e| WorkerError::Config(format!("designer.model_path = {dir:?}: {e}")))?;
    p.require_tokenizer()
        .map_err(|e| WorkerError::Config(format!("designer.model_path = {dir:?}: {e}")))?;
    speaks_chatml(&p)?;
    let print = p.weights_fingerprint();
    on(Event::Log(format!(
        "frozen designer from {dir} ({} parameters), weights fingerprint {print}; the agent \
         trains alone",
        p.config().num_parameters()
    )));
    Ok(Some((p, print)))
}

/// The local generation backend `model.rollout` names, with its limits (`"vllm"`: the engine,
/// for what the servers do not serve; [`Loop::backend`] gives the servers).
pub(crate) fn backend(cfg: &RunConfig) -> play::Backend {
    use spade::config::RolloutBackend as R;
    match cfg.model.rollout {
        R::Sampler => play::Backend::Sampler,
        R::Engine | R::Vllm => play::Backend::Engine {
            kv_tokens: cfg.model.kv_cache_tokens as usize,
            max_batch: cfg.model.max_batch as usize,
        },
    }
}

/// Episodes played at once: `--concurrency` when given, else `agent.concurrency`.
pub(crate) fn concurrency(cfg: &RunConfig, opts: &RunOptions) -> usize {
    opts.concurrency
        .unwrap_or(cfg.agent.concurrency as usize)
        .max(1)
}

/// Says how much disk the run's checkpoints need and refuses to start when the checkpoint
/// directory's file system has less free (see [`state::checkpoint_need`]).
fn check_checkpoint_disk(
    cfg: &RunConfig,
    policy: &Policy,
    mixed: bool,
    store: &StateStore,
    on: &mut dyn FnMut(Event),
) -> Result<(), WorkerError> {
    let params = policy.config().num_parameters().max(0) as u64;
    let weights = params * policy.kind().elt_size_in_bytes() as u64;
    // AdamW's two float32 moments, and float32 masters for half-kind weights.
    let optimizer = params * if mixed { 12 } else { 8 };
    let need = state::checkpoint_need(&cfg.run, weights, optimizer);
    let dir = store.checkpoints();
    let used = state::tree_bytes(&dir);
    let free = state::free_bytes(&dir)?;
    (on)(Event::Log(format!(
        "checkpoints need about {} in all ({} snapshots of {} weights, {} with a {} optimizer \
         state, two resume points); {} free in {}",
        state::gib(need.total),
        need.snapshots,
        state::gib(need.weights),
        need.snapshots_with_optimizer,
        state::gib(need.optimizer),
        state::gib(free),
        dir.display()
    )));
    state::check_disk(&need, used, free, &dir)
}

/// A checkpoint's path as reported: absolute, because whoever reads it (an evaluation job)
/// runs in another working directory than this worker.
fn reported_path(path: &std::path::Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The checkpoint a new run starts from: the configured model, or the warm-started tiny one.
/// The starting checkpoint a run of `cfg` would use (`model.path`, or the tiny preset's warm
/// start, trained now or found in `opts.cache_dir`), without running anything else: for tools
/// and tests that need the same model a run gets.
pub fn prepare_base_model(
    cfg: &RunConfig,
    opts: &RunOptions,
    on: &mut dyn FnMut(Event),
) -> Result<PathBuf, WorkerError> {
    Ok(prepare_warm_start(cfg, opts, on)?.0)
}

/// [`prepare_base_model`] with the warm start's report (`None` for a `model.path`): a test that
/// needs a working tiny designer checks [`warmstart::WarmStartReport::designer_ready`] first and
/// fails with its verdict, not later with a vaguer message.
pub fn prepare_warm_start(
    cfg: &RunConfig,
    opts: &RunOptions,
    on: &mut dyn FnMut(Event),
) -> Result<(PathBuf, Option<warmstart::WarmStartReport>), WorkerError> {
    let mut pool_cfg = PoolConfig::new(RunnerConfig::new(spade_sandbox::default_runner_path()));
    pool_cfg.max_runners = concurrency(cfg, opts);
    let pool = Pool::new(pool_cfg);
    let corpus = generate::load_corpus(cfg)?;
    base_model(cfg, opts, &pool, &corpus, on)
}

fn base_model(
    cfg: &RunConfig,
    opts: &RunOptions,
    pool: &Pool,
    corpus: &Option<spade::corpus::Corpus>,
    on: &mut dyn FnMut(Event),
) -> Result<(PathBuf, Option<warmstart::WarmStartReport>), WorkerError> {
    if let Some(path) = &cfg.model.path {
        return Ok((PathBuf::from(path), None));
    }
    if cfg.model.preset == spade_policy::preset::SMOLLM2 {
        let dir = spade_policy::preset::smollm2(&spade_policy::preset::cache_root(), &mut |l| {
            on(Event::Log(l.to_string()))
        })
        .map_err(|e| WorkerError::Config(format!("model.preset = \"smollm2-135m\": {e}")))?;
        return Ok((dir, None));
    }
    if cfg.model.preset != "tiny" {
        return Err(WorkerError::Config(format!(
            "model.path is required for model.preset = \"{}\" (\"tiny\" and \"smollm2-135m\" \
             are built here)",
            cfg.model.preset
        )));
    }
    if cfg.is_spice() {
        let corpus = corpus.as_ref().ok_or_else(|| {
            WorkerError::Config("run.algorithm = \"spice\" needs a corpus".into())
        })?;
        let (dir, report) = spice::warm_start(cfg, opts, corpus, on)?;
        return Ok((dir, Some(report)));
    }
    let w = warm_start_options(cfg, opts, corpus);
    let (dir, report) = warmstart::warm_start(&opts.seed_dir, &opts.cache_dir, pool, &w, |l| {
        on(Event::Log(l.to_string()))
    })?;
    Ok((dir, Some(report)))
}

/// What the tiny model's warm start trains. A fixed-env run trains no designer pairs and
/// measures no designer: it never generates an environment (the reference's fixed-env baseline
/// loads its checkpoint and plays the pool).
pub(crate) fn warm_start_options(
    cfg: &RunConfig,
    opts: &RunOptions,
    corpus: &Option<spade::corpus::Corpus>,
) -> WarmStartOptions {
    let fixed = cfg.is_fixed_env();
    let kinds = cfg
        .curriculum
        .kinds
        .iter()
        .map(|&k| spade_sandbox::EnvKind::from(k))
        .collect();
    let families = cfg.model.warm_start == spade::config::WarmStartData::Families;
    // A family's variants are dozens of designer pairs an epoch (see `families::EPOCHS`).
    let epochs = if families {
        warmstart::families::EPOCHS
    } else {
        opts.warm_epochs
    };
    WarmStartOptions {
        kinds,
        seed: cfg.run.seed,
        epochs,
        // Up to as many epochs again to meet the criterion (see `warmstart`'s module doc).
        max_epochs: if families {
            warmstart::families::MAX_EPOCHS
        } else {
            2 * epochs
        },
        min_acceptance: opts.warm_min_acceptance,
        batch_size: 1,
        lr: opts.warm_lr,
        // Fixed-env GRPO never uses a designer: no designer pairs, no acceptance measurement.
        // A family's variants are one designer pair each: each is another program.
        designer_variants: match (fixed, families) {
            (true, _) => 0,
            (false, true) => 1,
            (false, false) => 4,
        },
        designer_files: if families { usize::MAX } else { 1 },
        agent_episodes: 2,
        hint_code_chars: cfg.hint_code_limit(),
        memory_positives: if cfg.ablation.no_memory {
            0
        } else {
            cfg.memory.positives
        },
        memory_negatives: if cfg.ablation.no_memory {
            0
        } else {
            cfg.memory.negatives
        },
        memory_code_chars: cfg.memory.code_chars,
        corpus_docs: corpus
            .iter()
            .flat_map(|c| c.documents().iter().take(16))
            .map(|d| spade::corpus::truncate_words(&d.text, cfg.corpus.game_max_words))
            .collect(),
        measure_samples: if fixed { 0 } else { opts.warm_measure },
        designer_max_new_tokens: cfg.model.designer_max_new_tokens as usize,
        max_turns: cfg.agent.max_turns,
        family: families.then(|| warmstart::families::FAMILIES[0].to_string()),
    }
}

impl Loop<'_> {
    fn phase(&mut self, phase: &'static str) -> Result<(), WorkerError> {
        let (step, total) = (self.state.step, self.cfg.run.steps);
        (self.on)(Event::Phase { step, total, phase });
        self.live(Message::Progress {
            step,
            total_steps: total,
            phase: phase.to_string(),
        })
    }

    fn next_envelope(&mut self, message: Message) -> Result<Envelope, WorkerError> {
        let seq = self.state.next_seq;
        self.store.reserve(seq)?;
        self.state.next_seq += 1;
        Ok(Envelope::new(self.opts.run_id.clone(), seq, message))
    }

    /// Sends a message now (progress, logs): not part of any step's commit.
    fn live(&mut self, message: Message) -> Result<(), WorkerError> {
        let env = self.next_envelope(message)?;
        self.deliver(&[env])
    }

    fn deliver(&mut self, envs: &[Envelope]) -> Result<(), WorkerError> {
        if envs.is_empty() {
            return Ok(());
        }
        let d = self.sink.deliver(envs)?;
        self.cancel |= d.cancel_requested;
        for r in d.retire {
            if !self.retire.contains(&r) {
                self.retire.push(r);
            }
        }
        Ok(())
    }

    /// Retires the live environments reviewers marked broken or reward-hackable: never played
    /// again, reported broken (reason `retired_by_review`, the reviewer and comment in the
    /// message) so their status and page say so, and scored with the designer's invalid reward
    /// when their window closes (as an environment broken in play is).
    pub(crate) fn apply_retirements(&mut self) {
        let retire = std::mem::take(&mut self.retire);
        for m in retire_live(&mut self.state.windows, retire, self.state.step) {
            if let Message::EnvironmentBroken {
                env_id, message, ..
            } = &m
            {
                (self.on)(Event::Log(format!("{env_id} retired from play: {message}")));
            }
            self.pending.push(m);
        }
    }

    /// Makes the validated pool the run's one window and reports what it refused, one line per
    /// problem, so a rejected environment is never left out silently.
    fn install_fixed_pool(&mut self, fixed: generate::FixedPool) -> Result<(), WorkerError> {
        let n = fixed.window.envs.len();
        self.state.windows.insert("fixed".into(), fixed.window);
        self.report_fixed_envs()?;
        if fixed.rlve.is_some() {
            self.state.rlve = fixed.rlve;
            let line = format!("ablation.rlve: {n} RLVE environments, at their initial difficulty");
            (self.on)(Event::Log(line.clone()));
            return self.live(Message::Log {
                level: spade::report::LogLevel::Info,
                line,
            });
        }
        let summary = format!(
            "fixed_env_pool: {n} environments valid, {} left out",
            fixed.problems.len()
        );
        self.report_pool("fixed_env_pool", &fixed.problems, summary)
    }

    /// Reports every environment of a fixed pool (fixed-env GRPO, RLVE) as accepted at step 0,
    /// in one delivery: the service stores plays only for environments the run reported, and a
    /// reviewer sees the pool the agent trains on. Reporting again (a resume) overwrites.
    fn report_fixed_envs(&mut self) -> Result<(), WorkerError> {
        let Some(window) = self.state.windows.get("fixed") else {
            return Ok(());
        };
        let records: Vec<Message> = window
            .envs
            .iter()
            .map(|env| Message::Environment {
                record: spade::report::EnvironmentRecord {
                    env_id: env.env_id.clone(),
                    step: 0,
                    skill: env.skill.clone(),
                    kind: env.kind,
                    status: spade::report::EnvStatus::Accepted,
                    rejection_reason: None,
                    rejection_message: None,
                    code: env.code.clone(),
                    // Fixed pools play without hints (see `generate::load_fixed_pool`).
                    hint: None,
                    parent_env_id: None,
                    regret: None,
                    win_rate_hint: None,
                    win_rate_no_hint: None,
                    designer_reward: None,
                    reward_levels: None,
                    attempts: 0,
                },
            })
            .collect();
        let envelopes = records
            .into_iter()
            .map(|m| self.next_envelope(m))
            .collect::<Result<Vec<_>, _>>()?;
        self.deliver(&envelopes)
    }

    /// One warning per problem of a pool, then `summary`: to the caller and to the run's log.
    fn report_pool(
        &mut self,
        key: &str,
        problems: &[spade::pool::PoolProblem],
        summary: String,
    ) -> Result<(), WorkerError> {
        use spade::report::LogLevel;
        let lines = problems
            .iter()
            .map(|p| (LogLevel::Warn, format!("{key}: left out {p}")))
            .chain([(LogLevel::Info, summary)]);
        for (level, line) in lines {
            (self.on)(Event::Log(line.clone()));
            self.live(Message::Log { level, line })?;
        }
        Ok(())
    }

    /// Starts the memory with a seed pool's records and reports what it left out, one line each.
    fn install_seed_memory(
        &mut self,
        records: Vec<spade::memory::MemoryRecord>,
        problems: &[spade::pool::PoolProblem],
    ) -> Result<(), WorkerError> {
        let n = records.len();
        for r in records {
            self.state.memory.push(r);
        }
        let summary = format!(
            "memory.seed_pool: {n} records seeded ({} kept), {} left out",
            self.state.memory.len(),
            problems.len()
        );
        self.report_pool("memory.seed_pool", problems, summary)
    }

    /// One whole step; returns its metrics.
    fn step(&mut self) -> Result<BTreeMap<String, f64>, WorkerError> {
        self.step_started = Instant::now();
        let step = self.state.step;
        let mut m = BTreeMap::new();
        if self.cfg.is_spice() {
            let st = spice::step(self, &mut m)?;
            let played = Played {
                samples: st.samples,
                plays: BTreeMap::new(),
            };
            self.train(played, &mut m)?;
            return self.end_step(step, m);
        }
        if self.cfg.is_fixed_env() {
            if self.state.windows.is_empty() {
                // A resume of a run that stopped before its pool was in a checkpoint.
                self.phase("load fixed pool")?;
                let fixed = generate::load_fixed_pool(self.cfg, &self.pool)?;
                self.install_fixed_pool(fixed)?;
            }
            self.select_fixed();
        } else {
            for kind in self.cfg.curriculum.kinds.clone() {
                let k = self.cfg.regenerate_every(kind);
                if step.is_multiple_of(k) {
                    if step > 0 {
                        self.phase("designer rewards")?;
                        score::close_window(self, kind, &mut m)?;
                    }
                    self.phase("generate")?;
                    generate::regenerate(self, kind, &mut m)?;
                }
            }
        }
        self.phase("play")?;
        let played = self.play(&mut m)?;
        if flushes_at(step, self.cfg.run.steps) && !self.cfg.is_fixed_env() {
            // The last step trains what is left of the windows (scored with this step's plays).
            self.phase("designer rewards")?;
            for kind in self.cfg.curriculum.kinds.clone() {
                score::close_window(self, kind, &mut m)?;
            }
        }
        self.train(played, &mut m)?;
        let obs = std::mem::take(&mut self.obs);
        metrics::step_metrics(self, obs, &mut m)?;
        self.end_step(step, m)
    }

    /// Reports the step's metrics, advances the step counter and commits when due.
    fn end_step(
        &mut self,
        step: u64,
        m: BTreeMap<String, f64>,
    ) -> Result<BTreeMap<String, f64>, WorkerError> {
        // JSON has no NaN or infinity (serde_json writes `null`, which no reader takes as a
        // number), so a diverged value would make the whole report unreadable and fail the run:
        // it is left out of the step's metrics and named in the log instead.
        let (values, skipped) = metrics::finite_only(&m);
        for name in skipped {
            self.pending.push(Message::Log {
                level: spade::report::LogLevel::Warn,
                line: format!(
                    "metric {name} at step {step} is {}; not reported",
                    m.get(&name).copied().unwrap_or(f64::NAN)
                ),
            });
        }
        self.pending.push(Message::Metrics {
            step,
            elapsed_s: self.state.elapsed_s + self.step_started.elapsed().as_secs_f64(),
            values,
        });
        self.state.step = step + 1;
        self.state.elapsed_s += self.step_started.elapsed().as_secs_f64();
        self.step_started = Instant::now();
        let (snapshot, commit) = commits_after(&self.cfg.run, step);
        if commit {
            self.commit(snapshot, false)?;
        }
        let total = self.cfg.run.steps;
        (self.on)(Event::Step {
            step,
            total,
            metrics: m.clone(),
            committed: commit,
        });
        Ok(m)
    }

    /// Makes the state of the steps run so far durable (weights, optimiser, `state.json`), then
    /// delivers their messages. Only here does anything a step reported leave the worker, so
    /// whatever the sink holds is covered by a resume point on disk (see [`crate::state`]).
    /// `end`: the run's last commit (also of a cancelled run), which always writes the
    /// optimiser state.
    fn commit(&mut self, snapshot: bool, end: bool) -> Result<(), WorkerError> {
        self.state.elapsed_s += self.step_started.elapsed().as_secs_f64();
        self.step_started = Instant::now();
        let next_step = self.state.step;
        let msgs = std::mem::take(&mut self.pending);
        let mut outbox = Vec::with_capacity(msgs.len());
        for msg in msgs {
            outbox.push(self.next_envelope(msg)?);
        }
        self.state.outbox = outbox;
        // The optimiser state every `optimizer_every` steps (with the first commit at or after
        // each multiple: commits come every `weights_every` steps) and at the end; in between
        // the previous one is linked into the new directory.
        let previous = self.store.latest().join(state::OPTIMIZER);
        let opt_every = self.cfg.run.optimizer_every.max(1);
        let last_written = self.state.optimizer_step.unwrap_or(0);
        let write_optimizer =
            next_step / opt_every > last_written / opt_every || end || !previous.exists();
        if write_optimizer {
            self.state.optimizer_step = Some(next_step);
        }
        let (policy, trainer) = (&self.policy, &self.trainer);
        self.store.commit(&self.state, |dir| {
            policy.save(dir)?;
            let path = dir.join(state::OPTIMIZER);
            if write_optimizer {
                trainer.save_optimizer(&path)?;
            } else {
                state::link_or_copy(&previous, &path)?;
            }
            Ok(())
        })?;
        let outbox = std::mem::take(&mut self.state.outbox);
        self.deliver(&outbox)?;
        if snapshot {
            let with_optimizer = self.state.optimizer_step == Some(next_step);
            let (path, bytes) = self.store.snapshot(next_step, with_optimizer)?;
            for gone in self.store.prune(self.cfg.run.checkpoint_keep)? {
                (self.on)(Event::Log(format!(
                    "removed checkpoint step-{gone} (run.checkpoint_keep = {})",
                    self.cfg.run.checkpoint_keep
                )));
            }
            self.live(Message::Checkpoint {
                step: next_step,
                path: reported_path(&path),
                bytes,
            })?;
        }
        Ok(())
    }

    /// Reports the end (the last step already scored and trained the open windows).
    fn finish(&mut self, status: FinishStatus) -> Result<(), WorkerError> {
        // The end's checkpoint (also of a cancelled run: it resumes from here).
        self.commit(true, true)?;
        // The last progress names the steps completed, so a finished run shows 6/6, not the
        // index of its last step.
        self.phase("done")?;
        let mut message = format!("{} of {} steps", self.state.step, self.cfg.run.steps);
        if let Some(nothing) = nothing_usable(&self.state) {
            (self.on)(Event::Log(nothing.clone()));
            self.live(Message::Log {
                level: spade::report::LogLevel::Warn,
                line: nothing.clone(),
            })?;
            message = format!("{message}; {nothing}");
        }
        // The end is spooled behind every report before it, and the sink sends in seq order,
        // a batch per transaction: the service hears of the end only once everything before it
        // is stored, so a run never counts as succeeded with reports left in its spool. When
        // the service does not take them in time this fails, ending the worker as failed with
        // the end still spooled; a server that takes the spool then (the backend's `spool`
        // module) stores everything and records the success the end reports.
        self.live(Message::Finished { status, message })?;
        self.sink.finish()?;
        Ok(())
    }

    /// Fixed-env GRPO: restarts the pool's tallies where a SPADE run's window would close (every
    /// k steps of the first configured kind), so the metrics cover the same windows, and draws
    /// the environments of this step (`ablation.fixed_env_envs_per_step`, the reference's 24).
    fn select_fixed(&mut self) {
        let step = self.state.step;
        let k = self
            .cfg
            .curriculum
            .kinds
            .first()
            .map_or(1, |kind| self.cfg.regenerate_every(*kind))
            .max(1);
        let seed = self.cfg.run.seed;
        let n = self.cfg.ablation.fixed_env_envs_per_step;
        let st = &mut self.state;
        let Some(window) = st.windows.get_mut("fixed") else {
            self.fixed_selection = None;
            return;
        };
        if step > 0 && step.is_multiple_of(k) {
            window.envs.iter_mut().for_each(generate::restart_tallies);
        }
        let picks = generate::draw_fixed(
            &mut st.fixed_remaining,
            &mut st.fixed_passes,
            window.envs.len(),
            n,
            seed,
        );
        // The RLVE baseline plays each drawn environment at a difficulty of its window.
        if let Some(d) = &st.rlve {
            for &i in &picks {
                let Some(env) = window.envs.get_mut(i) else {
                    continue;
                };
                let level = generate::rlve_level(d, seed, step, &env.env_id);
                let id = env.env_id.strip_prefix(generate::RLVE_PREFIX);
                if let (Some(level), Some(id)) = (level, id) {
                    env.code = generate::rlve_code(id, level);
                }
            }
        }
        self.fixed_selection = Some(
            picks
                .into_iter()
                .filter_map(|i| window.envs.get(i).map(|e| e.env_id.clone()))
                .collect(),
        );
    }

    /// No-hint plays of every live environment (of the step's draw, for fixed-env GRPO): the
    /// agent samples of the step.
    fn play(&mut self, m: &mut BTreeMap<String, f64>) -> Result<Played, WorkerError> {
        self.apply_retirements();
        let step = self.state.step;
        let n_envs: usize = match &self.fixed_selection {
            Some(sel) => sel.len(),
            None => self.state.windows.values().map(|w| w.envs.len()).sum(),
        };
        let mut played = Played::default();
        if n_envs == 0 {
            return Ok(played);
        }
        // spec 5: ceil(global_batch / n_envs) no-hint plays per environment per step.
        let per_env = spade::reward::no_hint_plays_per_env(
            u64::from(self.cfg.agent.global_batch),
            n_envs as u64,
        ) as usize;
        let popts = self.play_options();
        let mut samples = Vec::new();
        let mut records = Vec::new();
        // Every live environment's plays go to the rollout backend at once; their results are
        // scored below in the windows' order.
        let mut picked: Vec<(String, usize, crate::state::LiveEnv, Vec<i64>)> = vec![];
        for (key, window) in &self.state.windows {
            for (e, env) in window.envs.iter().enumerate() {
                // A broken environment is never played again (its window still scores it).
                if env.broken_seed.is_some() {
                    continue;
                }
                if self
                    .fixed_selection
                    .as_ref()
                    .is_some_and(|sel| !sel.contains(&env.env_id))
                {
                    continue;
                }
                let env_seeds: Vec<i64> = (0..per_env)
                    .map(|i| env_seed(self.cfg.run.seed, step, &env.env_id, i))
                    .collect();
                picked.push((key.clone(), e, env.clone(), env_seeds));
            }
        }
        let jobs: Vec<play::PlayJob<'_>> = picked
            .iter()
            .map(|(_, _, env, env_seeds)| play::PlayJob {
                code: &env.code,
                kind: env.kind.into(),
                hint: None,
                seeds: env_seeds.clone(),
                sample_seed: seeds::derive(
                    self.cfg.run.seed,
                    &[seeds::tag::PLAY, step, fnv(&env.env_id)],
                ),
            })
            .collect();
        let all = play::play_envs(
            &self.policy,
            &self.pool,
            &jobs,
            &popts,
            concurrency(self.cfg, self.opts),
        )?;
        drop(jobs);
        let mut rlve_wins: Vec<(String, Vec<bool>)> = Vec::new();
        for ((key, e, env, _), eps) in picked.into_iter().zip(all) {
            self.obs.note_plays(&eps);
            if self.state.rlve.is_some() {
                // A play that failed (the environment's fault, or generation's) is no answer.
                let wins = eps
                    .iter()
                    .filter(|x| x.failure.is_none() && x.error.is_none());
                rlve_wins.push((env.env_id.clone(), wins.map(|x| x.won).collect()));
            }
            let w = self
                .state
                .windows
                .get_mut(&key)
                .and_then(|w| w.envs.get_mut(e))
                .ok_or_else(|| WorkerError::Config("window changed during play".into()))?;
            score::tally(w, &eps, false, step);
            *played.plays.entry(env.kind).or_default() += eps.len() as u64;
            records.extend(eps.iter().map(|ep| play_record(&env.env_id, step, ep)));
            // Plays of an environment that broke the contract are kept (reported) but do
            // not train the agent.
            if let Some(msg) = score::broken_in_play(w, &eps, step) {
                self.pending.push(msg);
                continue;
            }
            let returns: Vec<f64> = eps.iter().map(|x| x.episode_return).collect();
            let g = spade::reward::group_advantages(&returns);
            self.obs.zero_std.push(g.zero_std);
            let adv = g.advantages;
            for (ep, a) in eps.iter().zip(&adv) {
                if *a != 0.0 && ep.loss_mask.iter().skip(1).any(|&x| x) {
                    samples.push(GrpoSample {
                        seq: MaskedSeq {
                            ids: ep.ids.clone(),
                            loss_mask: ep.loss_mask.clone(),
                        },
                        old_logprobs: ep.logprobs.clone(),
                        behavior_logprobs: None,
                        advantage: *a as f32,
                        weight: 1.0,
                    });
                }
            }
        }
        if self.vllm.is_some() {
            crate::vllm::rescore(&self.policy, &mut samples, self.cfg.agent.temperature, m)?;
        }
        m.insert("plays_no_hint".into(), records.len() as f64);
        m.insert("plays_per_env".into(), per_env as f64);
        if let Some(d) = self.state.rlve.as_mut() {
            rlve_update(d, self.cfg.run.seed, step, &rlve_wins, m);
        }
        self.pending.push(Message::Plays { records });
        played.samples = samples;
        Ok(played)
    }

    /// One GRPO step on the step's agent samples and the designer samples of the windows closed
    /// in it: one batch, one optimizer update (the reference, `spade_rollout.py`, puts the
    /// delayed designer samples first in the step's batch). Reports `loss`, `clip_frac`,
    /// `grad_norm`, `tis_mean` of that update, `agent_samples`, `designer_samples` and
    /// `designer_loss_weight`.
    fn train(&mut self, played: Played, m: &mut BTreeMap<String, f64>) -> Result<(), WorkerError> {
        let pending = std::mem::take(&mut self.designer_pending);
        let (designer, weights) =
            score::weigh_designer(pending, &played.plays, self.cfg.designer.loss_weight_cap);
        m.insert("agent_samples".into(), played.samples.len() as f64);
        if !weights.is_empty() {
            m.insert("designer_samples".into(), designer.len() as f64);
            for (kind, w) in &weights {
                m.insert("designer_loss_weight".into(), *w);
                if weights.len() > 1 {
                    m.insert(format!("{}/designer_loss_weight", kind.as_str()), *w);
                }
            }
        }
        let mut batch = designer;
        batch.extend(played.samples);
        if batch.is_empty() {
            return Ok(());
        }
        self.phase("update")?;
        let st = self.trainer.step(&self.policy, &batch)?;
        if let Some(f) = &self.vllm {
            let on = &mut *self.on;
            let log = &mut |l| on(Event::Log(l));
            crate::vllm::sync_after_update(f, &self.policy, self.state.step + 1, m, log)?;
        }
        m.insert("loss".into(), st.loss);
        m.insert("clip_frac".into(), st.clip_frac);
        m.insert("grad_norm".into(), st.grad_norm);
        m.insert("tis_mean".into(), st.mean_tis);
        Ok(())
    }

    pub(crate) fn play_options(&self) -> play::PlayOptions {
        play::PlayOptions {
            max_turns: self.cfg.agent.max_turns,
            max_new_tokens: self.cfg.model.agent_max_new_tokens as usize,
            temperature: self.cfg.agent.temperature,
            max_context: self.cfg.model.max_context as usize,
            max_episode_tokens: self.cfg.agent.max_episode_tokens as usize,
            max_hint_chars: 2000,
            backend: self.backend(),
        }
    }
}

/// What a step's no-hint plays gave the update.
#[derive(Default)]
struct Played {
    /// Agent samples with a non-zero advantage.
    samples: Vec<GrpoSample>,
    /// No-hint plays of the step per environment kind (the designer loss weight's agent
    /// samples).
    plays: BTreeMap<spade::EnvKind, u64>,
}

/// What follows step `step` (0-based): (a kept snapshot `checkpoints/step-N`, a commit of the
/// resume point). Commits come every `run.weights_every` steps and with every snapshot (every
/// `run.checkpoint_every`); after the last step neither, since `finish` commits and snapshots
/// the end once the run's last messages are in.
pub(crate) fn commits_after(run: &spade::config::RunSection, step: u64) -> (bool, bool) {
    let done = step + 1;
    if done >= run.steps {
        return (false, false);
    }
    let snapshot = done.is_multiple_of(run.checkpoint_every.max(1));
    (
        snapshot,
        snapshot || done.is_multiple_of(run.weights_every.max(1)),
    )
}

/// Whether `step` (0-based) is the last of a run of `total` steps, which also closes and trains
/// the open windows (the reference flushes its designer buffer at the final rollout,
/// `spade_rollout.py`: `rollout_id == args.num_rollout - 1`).
pub(crate) fn flushes_at(step: u64, total: u64) -> bool {
    step + 1 == total
}

/// The play record of an episode as reported.
pub(crate) fn play_record(env_id: &str, step: u64, ep: &play::Episode) -> PlayRecord {
    PlayRecord {
        env_id: env_id.to_string(),
        step,
        with_hint: ep.with_hint,
        episode_return: ep.episode_return,
        won: ep.won,
        turns: ep.turns,
        transcript: ep.transcript.clone(),
    }
}

/// A stable 64-bit hash of a string (FNV-1a), for seeds keyed by environment id.
pub(crate) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The environment seed of play `i` of `env_id` at `step` (a non-negative i64).
/// RLVE's difficulty rule after a step's plays: each answer counts at the difficulty its
/// environment was played at this step; the metrics say where the difficulties stand.
fn rlve_update(
    d: &mut spade::rlve::AdaptiveDifficulty,
    run_seed: u64,
    step: u64,
    wins: &[(String, Vec<bool>)],
    m: &mut BTreeMap<String, f64>,
) {
    let mut samples = Vec::new();
    for (env_id, won) in wins {
        let (Some(id), Some(level)) = (
            env_id.strip_prefix(generate::RLVE_PREFIX),
            generate::rlve_level(d, run_seed, step, env_id),
        ) else {
            continue;
        };
        samples.extend(won.iter().map(|&correct| spade::rlve::Sample {
            env: id,
            difficulty: level,
            correct,
        }));
    }
    let checks = d.update(samples);
    let raised = checks.iter().filter(|c| c.raised).count();
    m.insert("rlve_checks".into(), checks.len() as f64);
    m.insert("rlve_raised".into(), raised as f64);
    let levels: Vec<f64> = d.difficulties().map(f64::from).collect();
    let n = levels.len().max(1) as f64;
    m.insert(
        "rlve_difficulty_mean".into(),
        levels.iter().sum::<f64>() / n,
    );
    m.insert(
        "rlve_difficulty_max".into(),
        levels.iter().copied().fold(0.0, f64::max),
    );
}

pub(crate) fn env_seed(run_seed: u64, step: u64, env_id: &str, i: usize) -> i64 {
    (seeds::derive(
        run_seed,
        &[seeds::tag::ENV_SEED, step, fnv(env_id), i as u64],
    ) >> 33) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_env_run_warm_starts_no_designer() {
        let opts = RunOptions::new("t", PathBuf::from("envs/seed"), PathBuf::from("cache"));
        let mut cfg = RunConfig::tiny_cpu_demo();
        let spade = warm_start_options(&cfg, &opts, &None);
        assert_eq!(spade.designer_variants, 4);
        assert_eq!(spade.measure_samples, DEFAULT_WARM_MEASURE);
        cfg.ablation.fixed_env_pool = Some("envs/seed".into());
        let fixed = warm_start_options(&cfg, &opts, &None);
        assert_eq!((fixed.designer_variants, fixed.measure_samples), (0, 0));
        assert_eq!(
            fixed.agent_episodes, spade.agent_episodes,
            "the agent still learns"
        );
    }

    #[test]
    fn commits_come_every_weights_every_steps_and_with_every_snapshot() {
        let mut run = RunConfig::default().run;
        (run.steps, run.weights_every, run.checkpoint_every) = (10, 3, 4);
        let after: Vec<(u64, (bool, bool))> = (0..10)
            .map(|s| (s + 1, commits_after(&run, s)))
            .filter(|(_, c)| c.1)
            .collect();
        // Steps done 3, 6, 9 (the cadence), 4 and 8 (snapshots, which need the weights of their
        // step); 10 is the end's, which `finish` writes.
        assert_eq!(
            after,
            [
                (3, (false, true)),
                (4, (true, true)),
                (6, (false, true)),
                (8, (true, true)),
                (9, (false, true)),
            ]
        );
        run.weights_every = 1;
        assert_eq!((0..10).filter(|&s| commits_after(&run, s).1).count(), 9);
    }

    #[test]
    fn an_rlve_environment_gets_harder_once_nine_in_ten_answers_at_its_difficulty_win() {
        use spade::rlve::{AdaptiveDifficulty, DifficultyParams};
        let mut d = AdaptiveDifficulty::new(DifficultyParams::default(), ["A", "B"]);
        let mut m = BTreeMap::new();
        // 128 answers (RLVE's 8 prompts x 16) over steps, 120 of them right, all at difficulty 0
        // (the only one of the window at the start).
        let won: Vec<bool> = (0..64).map(|i| i % 16 != 0).collect();
        let wins = vec![("rlve-A".to_string(), won.clone())];
        rlve_update(&mut d, 7, 0, &wins, &mut m);
        assert_eq!((d.difficulty("A"), m["rlve_checks"]), (Some(0), 0.0));
        rlve_update(&mut d, 7, 1, &wins, &mut m);
        assert_eq!(d.difficulty("A"), Some(1));
        assert_eq!((m["rlve_raised"], m["rlve_difficulty_mean"]), (1.0, 0.5));
        // B's answers are mostly wrong: checked, not raised.
        let wins = vec![("rlve-B".to_string(), vec![false; 128])];
        rlve_update(&mut d, 7, 2, &wins, &mut m);
        assert_eq!(
            (d.difficulty("B"), m["rlve_checks"], m["rlve_raised"]),
            (Some(0), 1.0, 0.0)
        );
    }

    #[test]
    fn an_rlve_environment_is_played_within_its_window_reproducibly() {
        use spade::rlve::{AdaptiveDifficulty, DifficultyParams, Sample};
        let mut d = AdaptiveDifficulty::new(DifficultyParams::default(), ["A"]);
        for level in 0..6 {
            let right = std::iter::repeat_n(
                Sample {
                    env: "A",
                    difficulty: level,
                    correct: true,
                },
                128,
            );
            d.update(right);
        }
        assert_eq!(d.difficulty("A"), Some(6));
        let levels: Vec<u32> = (0..200)
            .filter_map(|step| generate::rlve_level(&d, 11, step, "rlve-A"))
            .collect();
        assert_eq!(levels.len(), 200);
        assert!(levels.iter().all(|l| (3..=6).contains(l)), "{levels:?}");
        assert!(
            (3..=6).all(|l| levels.contains(&l)),
            "every level of the window is drawn"
        );
        assert_eq!(
            generate::rlve_level(&d, 11, 5, "rlve-A"),
            generate::rlve_level(&d, 11, 5, "rlve-A")
        );
        assert_eq!(generate::rlve_level(&d, 11, 5, "fixed-0"), None);
    }

    #[test]
    fn the_last_step_flushes_the_open_windows() {
        // A 6-step games run with k = 4: the window of step 0 closes at step 4 (before the
        // regeneration); the window of step 4 is flushed in step 5, the last, instead of being
        // scored after the run and never trained.
        let flushed: Vec<u64> = (0..6).filter(|&s| flushes_at(s, 6)).collect();
        assert_eq!(flushed, vec![5]);
        assert!(flushes_at(0, 1), "a one-step run trains its only window");
        assert!(!flushes_at(6, 6));
    }
}
