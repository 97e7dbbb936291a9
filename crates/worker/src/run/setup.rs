//! A run's start: the configuration checked, the pools validated and the models loaded
//! (the frozen designer, the policy from its checkpoint, the warm start or the configured
//! model), the optimizer restored on a resume and the disk checked, all before the first step
//! and before anything expensive where that can fail in seconds instead. [`setup`] returns the
//! [`Loop`] and what the start reports ([`super::report`]).

use super::fixed::{self, FixedPool};
use super::{Event, Loop, RunOptions, generate, spice};
use crate::sink::Sink;
use crate::state::{self, RunState, StateStore};
use crate::warmstart::{self, WarmStartOptions, WarmStartReport};
use crate::{WorkerError, play};
use spade::config::RunConfig;
use spade::memory::MemoryRecord;
use spade::pool::PoolProblem;
use spade_policy::Policy;
use spade_policy::grpo::{GrpoConfig, GrpoTrainer, LossNorm, SavedOptimizer};
use spade_policy::train::OptimConfig;
use spade_sandbox::{Pool, PoolConfig, RunnerConfig};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A run ready for its first step, and what its start reports.
pub(super) struct Setup<'a> {
    pub lp: Loop<'a>,
    /// A new fixed-env run's pool, validated (a resumed run has it in its state).
    pub fixed_pool: Option<FixedPool>,
    /// A new run's memory seed pool: the records and what was left out.
    pub seed_memory: Option<(Vec<MemoryRecord>, Vec<PoolProblem>)>,
    /// The tiny preset's warm start, when this start trained or found one.
    pub warm_start: Option<WarmStartReport>,
    /// The frozen designer's weights fingerprint at the start ([`Loop::check_frozen_designer`]).
    pub designer_print: Option<String>,
}

/// Loads everything a run needs, in the order that fails fastest.
pub(super) fn setup<'a>(
    cfg: &'a RunConfig,
    opts: &'a RunOptions,
    store: &'a StateStore,
    sink: &'a mut dyn Sink,
    on: &'a mut dyn FnMut(Event),
) -> Result<Setup<'a>, WorkerError> {
    validated(cfg)?;
    // Before anything is loaded: a GPU this worker cannot give fails the run in seconds.
    let mut device = super::device::run_device(cfg, on)?;
    if let Some(r) = &opts.ranks {
        device = r.device_for(device)?;
    }
    let pool = sandbox_pool(cfg, opts)?;
    let corpus = generate::load_corpus(cfg)?;
    // Before the warm start, so a wrong encoder path fails in seconds, not after it.
    let encoder = generate::load_encoder(cfg, device, on)?;
    let (designer, designer_print) = load_designer(cfg, device, on)?.unzip();

    let existing = store.load()?;
    // Pools (fixed-env GRPO's, the memory's seed) are read and validated before anything
    // expensive (the warm start, loading weights), so one that cannot be used is refused in
    // seconds. A resumed run has both in its state.
    let fresh = !(opts.resume && existing.is_some());
    let fixed_pool = if cfg.is_fixed_env() && fresh {
        (on)(Event::Log("validating the fixed environment pool".into()));
        Some(fixed::load_fixed_pool(cfg, &pool)?)
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
    let (mut policy, state, resumed_from, model_dir) = match (existing, opts.resume) {
        (Some((dir, st)), true) => {
            (on)(Event::Log(format!(
                "resuming at step {} from {}",
                st.step,
                dir.display()
            )));
            (Policy::load(&dir, device)?, st, Some(dir.clone()), dir)
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
            let p = Policy::load(&dir, device)?;
            (p, RunState::new(dir.display().to_string(), cfg), None, dir)
        }
    };
    speaks_chatml(&policy)?;
    thinking(&mut policy, cfg, on)?;
    let mut trainer = match &opts.ranks {
        Some(r) => sharded_trainer(&policy, cfg, r.rank(), r.world_size())?,
        None => GrpoTrainer::new(&policy, grpo_config(cfg))?,
    };
    let world = opts.ranks.as_ref().map_or(1, |r| r.world_size());
    let kv_tokens = super::device::memory_plan(cfg, world, &policy, designer.as_ref(), on)?;
    if !opts.checkpoints {
        (on)(Event::Log(
            "checkpoints: none (--no-checkpoints): no resume point or snapshot is written, \
             so the run cannot be resumed"
                .into(),
        ));
    } else if opts.ranks.is_some() {
        // Shards hold float32 masters whatever the weights' kind, and are written at every
        // commit (see `report::commit`).
        let mut every = cfg.clone();
        every.run.optimizer_every = 1;
        check_checkpoint_disk(&every, &policy, true, store, on)?;
    } else {
        check_checkpoint_disk(cfg, &policy, trainer.optimizer().is_mixed(), store, on)?;
    }
    let vllm = crate::vllm::for_run(cfg, &policy, store.root(), state.step, &mut |l| {
        on(Event::Log(l))
    })?;
    let mut shard_source = None;
    if let (Some(dir), Some(r)) = (&resumed_from, &opts.ranks) {
        let src = state::shard_source(dir, &state)?;
        state::load_sharded_optimizer(&mut trainer, &src)?;
        (on)(Event::Log(src.describe(r.world_size())));
        shard_source = Some(src);
    } else if let Some(dir) = resumed_from.clone() {
        // An optimiser state older than the weights (written every `run.optimizer_every`
        // steps) gives its moments, not its masters: those would undo the steps since.
        let own_step = state.optimizer_step.is_none_or(|s| s == state.step);
        match state::load_optimizer(&mut trainer, &dir, own_step)? {
            Some(SavedOptimizer::Shards(world)) => (on)(Event::Log(format!(
                "re-sharded the optimizer state of {world} ranks into one process ({} AdamW \
                 steps)",
                trainer.optimizer().step_count()
            ))),
            Some(_) if own_step => (on)(Event::Log(format!(
                "restored the optimizer state ({} AdamW steps)",
                trainer.optimizer().step_count()
            ))),
            Some(_) => (on)(Event::Log(format!(
                "restored the optimizer state of step {} (written every {} steps) for weights \
                 of step {}",
                state.optimizer_step.unwrap_or_default(),
                cfg.run.optimizer_every,
                state.step
            ))),
            None => (on)(Event::Log(format!(
                "{} has no {}: an older checkpoint; AdamW restarts with zero moments",
                dir.display(),
                state::OPTIMIZER
            ))),
        }
    }
    if let Some(r) = &opts.ranks {
        // The followers load the same weights (checked by fingerprint) and their own shards.
        r.send(&crate::ranks::FollowerCommand::Start {
            model_dir,
            fingerprint: policy.weights_fingerprint(),
            optimizer: shard_source,
        })?;
        let sharded = match cfg.run.zero_stage {
            3 => {
                "ZeRO-3: each holds 1/{n} of the optimizer state, and of the layers' weights and \
                  gradients during an update"
            }
            _ => "ZeRO-2: each holds 1/{n} of the optimizer state",
        }
        .replace("{n}", &r.world_size().to_string());
        (on)(Event::Log(format!(
            "{} ranks: every rank designs, plays and trains its share of each step; rank 0 \
             keeps the run's state and reports ({sharded})",
            r.world_size(),
        )));
    }
    let lp = Loop {
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
        phase_clock: super::metrics::PhaseClock::default(),
        cancel: false,
        encoder,
        designer,
        retire: vec![],
        vllm,
        kv_tokens,
        system: super::system::Sampler::start(device),
    };
    Ok(Setup {
        lp,
        fixed_pool,
        seed_memory,
        warm_start: warm_report,
        designer_print,
    })
}

/// The configuration's problems, all of them in one error.
pub(crate) fn validated(cfg: &RunConfig) -> Result<(), WorkerError> {
    let issues = cfg.validate();
    if issues.is_empty() {
        return Ok(());
    }
    let text: Vec<String> = issues.iter().map(ToString::to_string).collect();
    Err(WorkerError::Config(text.join("; ")))
}

/// The run's sandbox pool (every rank that plays has one), after one runner has started: a
/// runner that cannot start or isolate itself (a missing binary, another protocol version, a
/// kernel without the sandbox's layers) fails the run here, in seconds, instead of failing
/// every environment of the run as if its code were at fault.
pub(crate) fn sandbox_pool(cfg: &RunConfig, opts: &RunOptions) -> Result<Pool, WorkerError> {
    let mut pool_cfg = PoolConfig::new(RunnerConfig::new(spade_sandbox::default_runner_path()));
    pool_cfg.max_runners = concurrency(cfg, opts);
    pool_cfg.warm = 1;
    pool_cfg.call_timeout = Duration::from_secs_f64(cfg.sandbox.step_timeout_s);
    pool_cfg.runner.limits.max_observation_chars = cfg.sandbox.max_observation_chars;
    let pool = Pool::new(pool_cfg);
    drop(pool.checkout()?);
    Ok(pool)
}

/// The GRPO update as the configuration sets it.
/// Rank `rank` of `world`'s trainer, of the run's ZeRO stage (`run.zero_stage`).
pub(crate) fn sharded_trainer(
    policy: &Policy,
    cfg: &RunConfig,
    rank: usize,
    world: usize,
) -> Result<GrpoTrainer, WorkerError> {
    let stage = match cfg.run.zero_stage {
        3 => spade_policy::zero::ZeroStage::Three,
        _ => spade_policy::zero::ZeroStage::Two,
    };
    Ok(GrpoTrainer::new_sharded_stage(
        policy,
        grpo_config(cfg),
        rank,
        world,
        stage,
    )?)
}

pub(crate) fn grpo_config(cfg: &RunConfig) -> GrpoConfig {
    GrpoConfig {
        loss_norm: match cfg.grpo.loss_norm {
            spade::config::LossNorm::SampleMean => LossNorm::SampleMean,
            spade::config::LossNorm::TokenMean => LossNorm::TokenMean,
        },
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
            weight_decay: cfg.grpo.weight_decay,
            beta2: cfg.grpo.adam_beta2,
            ..OptimConfig::default()
        },
    }
}

impl Loop<'_> {
    /// A frozen designer must end the run with the weights it started with.
    pub(super) fn check_frozen_designer(
        &mut self,
        before: Option<&str>,
    ) -> Result<(), WorkerError> {
        let (Some(d), Some(before)) = (&self.designer, before) else {
            return Ok(());
        };
        let after = d.weights_fingerprint();
        if after != before {
            return Err(WorkerError::Model(format!(
                "the frozen designer's weights changed during the run ({before} -> {after})"
            )));
        }
        (self.on)(Event::Log(format!(
            "frozen designer unchanged: weights fingerprint {after}"
        )));
        Ok(())
    }
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

/// Applies `model.thinking` to a loaded model and says when it changes the prompts.
fn thinking(p: &mut Policy, cfg: &RunConfig, on: &mut dyn FnMut(Event)) -> Result<(), WorkerError> {
    p.set_thinking(cfg.model.thinking)
        .map_err(|e| WorkerError::Config(format!("model: {e}")))?;
    if !p.generation_suffix().is_empty() {
        on(Event::Log(format!(
            "thinking off (model.thinking = false): every generation prompt ends with {:?}",
            p.generation_suffix()
        )));
    }
    Ok(())
}

/// The frozen designer of `designer.model_path`, loaded before anything expensive starts, and
/// its weights fingerprint (one pass over the weights; the run's end compares against it).
fn load_designer(
    cfg: &RunConfig,
    device: spade_policy::Device,
    on: &mut dyn FnMut(Event),
) -> Result<Option<(Policy, String)>, WorkerError> {
    let Some(dir) = cfg.designer.model_path.as_deref() else {
        return Ok(None);
    };
    let mut p = Policy::load(Path::new(dir), device)
        .map_err(|e| WorkerError::Config(format!("designer.model_path = {dir:?}: {e}")))?;
    p.require_tokenizer()
        .map_err(|e| WorkerError::Config(format!("designer.model_path = {dir:?}: {e}")))?;
    speaks_chatml(&p)?;
    thinking(&mut p, cfg, on)?;
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
/// `kv_tokens`: the KV-cache slots the memory plan settled (`Loop::kv_tokens`).
pub(crate) fn backend(cfg: &RunConfig, kv_tokens: usize) -> play::Backend {
    use spade::config::RolloutBackend as R;
    match cfg.model.rollout {
        R::Sampler => play::Backend::Sampler,
        R::Engine | R::Vllm => play::Backend::Engine(play::EngineLimits {
            kv_tokens,
            max_batch: cfg.model.max_batch as usize,
            prefill_tokens: cfg.model.prefill_tokens as usize,
            decode_window: cfg.model.decode_window as usize,
        }),
    }
}

/// Episodes played at once: `--concurrency` when given, else `agent.concurrency` (0 =
/// `model.max_batch`).
pub(crate) fn concurrency(cfg: &RunConfig, opts: &RunOptions) -> usize {
    let configured = match cfg.agent.concurrency {
        0 => cfg.model.max_batch as usize,
        n => n as usize,
    };
    opts.concurrency.unwrap_or(configured).max(1)
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
        if cfg.model.warm_start.resolve(&cfg.model.preset) == spade::config::WarmStartData::None
            || cfg.is_spice()
        {
            return Ok((dir, None));
        }
        let w = pretrained_warm_start_options(cfg, opts, corpus, dir);
        let (dir, report) =
            warmstart::warm_start(&opts.seed_dir, &opts.cache_dir, pool, &w, |l| {
                on(Event::Log(l.to_string()))
            })?;
        return Ok((dir, Some(report)));
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

/// What a pretrained preset's warm start trains: the tiny model's data, fine-tuning the
/// checkpoint in `base` at the pretrained budget and rate, its agent on hinted episodes only.
pub(crate) fn pretrained_warm_start_options(
    cfg: &RunConfig,
    opts: &RunOptions,
    corpus: &Option<spade::corpus::Corpus>,
    base: PathBuf,
) -> WarmStartOptions {
    WarmStartOptions {
        base: Some(base),
        epochs: warmstart::PRETRAINED_EPOCHS,
        max_epochs: warmstart::PRETRAINED_MAX_EPOCHS,
        lr: warmstart::PRETRAINED_LR,
        agent_hint_only: true,
        ..warm_start_options(cfg, opts, corpus)
    }
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
    let kinds = cfg.curriculum.kinds.to_vec();
    let families =
        cfg.model.warm_start.resolve(&cfg.model.preset) == spade::config::WarmStartData::Families;
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
        base: None,
        agent_hint_only: false,
    }
}

#[cfg(test)]
#[path = "setup_tests.rs"]
mod tests;
