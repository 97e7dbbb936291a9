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
//!
//! The parts: [`setup`] loads what a run needs and returns its [`Loop`]; each step's phases
//! ([`generate`], [`score`], [`agent`], [`designer_batch`], [`fixed`], [`spice`]) return what
//! they made and measured, which the step applies and names in its [`metrics::StepMetrics`];
//! [`report`] delivers and commits.

mod agent;
mod designer_batch;
mod device;
mod fixed;
mod follower;
mod generate;
mod metrics;
mod report;
mod score;
mod setup;
mod spice;
mod system;

use crate::sink::Sink;
use crate::state::{self, RunState, StateStore};
use crate::warmstart;
use crate::{WorkerError, play, seeds};
use designer_batch::PendingDesigner;
use metrics::{StepMetrics, StepObservations};
use spade::EnvKind;
use spade::config::RunConfig;
use spade::report::{FinishStatus, Message, PlayRecord};
use spade_policy::Policy;
use spade_policy::grpo::GrpoTrainer;
use spade_sandbox::Pool;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

pub use device::recipe;
pub(crate) use setup::{backend, concurrency};
pub use setup::{prepare_base_model, prepare_warm_start};

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
    /// This process's rank when the run has several ([`crate::ranks`]); None = one process.
    pub ranks: Option<std::sync::Arc<crate::ranks::Ranks>>,
    /// Write checkpoints (resume points and snapshots). False (`spade train --no-checkpoints`,
    /// for benchmarks and smoke runs): nothing is written but the reports, which are delivered
    /// at each would-be commit; the run cannot be resumed and its disk is not checked.
    pub checkpoints: bool,
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
            ranks: None,
            checkpoints: true,
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

/// What lives across the steps of a run: its settings, models, sandbox, state and the
/// messages waiting for the next commit. A step's own results are values its phases return.
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
    /// Seconds of each phase of the step so far (`time/<phase>_s`).
    pub phase_clock: metrics::PhaseClock,
    pub cancel: bool,
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
    /// KV-cache slots the engine may take: `model.kv_cache_tokens`, or what the memory plan
    /// left for `"auto"` ([`device::memory_plan`]).
    pub kv_tokens: usize,
    /// The device's memory (and GPU utilisation) during each step (`system/*` metrics).
    pub system: system::Sampler,
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
            None => setup::backend(self.cfg, self.kv_tokens),
        }
    }

    /// What generates for the designer: a frozen designer is not what the servers serve.
    pub fn designer_backend(&self) -> play::Backend {
        if self.designer.is_some() {
            setup::backend(self.cfg, self.kv_tokens)
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
    if let Some(ranks) = opts.ranks.as_deref().filter(|r| r.rank() > 0) {
        return follow(cfg, opts, ranks, on);
    }
    let setup::Setup {
        mut lp,
        fixed_pool,
        seed_memory,
        warm_start,
        designer_print,
    } = setup::setup(cfg, opts, store, sink, on)?;
    lp.start(fixed_pool, seed_memory, warm_start.as_ref())?;
    let mut last = BTreeMap::new();
    while lp.state.step < cfg.run.steps && !lp.cancel {
        last = lp.step()?;
    }
    let status = if lp.cancel {
        FinishStatus::Cancelled
    } else {
        FinishStatus::Succeeded
    };
    lp.check_frozen_designer(designer_print.as_deref())?;
    lp.finish(status)?;
    if let Some(r) = &opts.ranks {
        r.send(&crate::ranks::FollowerCommand::Finish)?;
    }
    Ok(Outcome {
        status,
        steps: lp.state.step,
        last_metrics: last,
        warm_start,
    })
}

/// A follower rank's run (rank > 0 of [`RunOptions::ranks`]): it plays and trains what rank 0
/// sends and reports nothing itself.
pub fn follow(
    cfg: &RunConfig,
    opts: &RunOptions,
    ranks: &crate::ranks::Ranks,
    on: &mut dyn FnMut(Event),
) -> Result<Outcome, WorkerError> {
    setup::validated(cfg)?;
    let device = ranks.device_for(device::run_device(cfg, &mut |_| {})?)?;
    let pool = setup::sandbox_pool(cfg, opts)?;
    let done = follower::follow(cfg, ranks, device, &pool)?;
    on(Event::Log(format!(
        "rank {} of {}: played {} episodes, trained {} updates, made {} designer attempts and \
         {} hints",
        ranks.rank(),
        ranks.world_size(),
        done.episodes,
        done.updates,
        done.designer_attempts,
        done.hints
    )));
    Ok(Outcome {
        status: FinishStatus::Succeeded,
        steps: cfg.run.steps,
        last_metrics: BTreeMap::new(),
        warm_start: None,
    })
}

/// What trains the run, one step at a time over the same loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    /// Designer and agent by self-play (also the frozen-designer and EMA variants).
    Spade,
    /// The agent alone on a fixed pool (fixed-env GRPO, RLVE).
    FixedEnv,
    /// SPICE's challenger and reasoner on corpus documents.
    Spice,
}

impl Algorithm {
    fn of(cfg: &RunConfig) -> Self {
        if cfg.is_spice() {
            Self::Spice
        } else if cfg.is_fixed_env() {
            Self::FixedEnv
        } else {
            Self::Spade
        }
    }
}

impl Loop<'_> {
    /// One whole step: the algorithm's phases, then its metrics reported and the step counter
    /// advanced (a commit when due); returns the metrics as reported.
    fn step(&mut self) -> Result<BTreeMap<String, f64>, WorkerError> {
        self.step_started = Instant::now();
        let step = self.state.step;
        let m = match Algorithm::of(self.cfg) {
            Algorithm::Spade => self.spade_step()?,
            Algorithm::FixedEnv => self.fixed_env_step()?,
            Algorithm::Spice => self.spice_step()?,
        };
        self.end_step(step, m.values())
    }

    /// Windows that end now close and regenerate (each kind every k steps), the live
    /// environments play, the last step closes what is open, and one update trains the agent
    /// samples with the designer samples of the closed windows.
    fn spade_step(&mut self) -> Result<StepMetrics, WorkerError> {
        let step = self.state.step;
        let mut m = StepMetrics::default();
        let mut obs = StepObservations::default();
        let mut designer = Vec::new();
        for kind in self.cfg.curriculum.kinds.clone() {
            if !step.is_multiple_of(self.cfg.regenerate_every(kind)) {
                continue;
            }
            if step > 0 {
                self.phase("designer rewards")?;
                designer.extend(self.close_window(kind, &mut m)?);
            }
            self.phase("generate")?;
            if let Some(r) = generate::regenerate(self, kind)? {
                m.attempts.insert(kind, r.attempts);
                obs.absorb(r.obs);
                self.pending.extend(r.messages);
                self.state.windows.insert(state::window_key(kind), r.window);
            }
        }
        let played = self.play_phase(None, &mut obs, &mut m)?;
        if flushes_at(step, self.cfg.run.steps) {
            // The last step trains what is left of the windows (scored with this step's plays).
            self.phase("designer rewards")?;
            for kind in self.cfg.curriculum.kinds.clone() {
                designer.extend(self.close_window(kind, &mut m)?);
            }
        }
        self.train_phase(played, designer, obs, &mut m)?;
        Ok(m)
    }

    /// The step's draw from the pool plays and trains the agent.
    fn fixed_env_step(&mut self) -> Result<StepMetrics, WorkerError> {
        let mut m = StepMetrics::default();
        let mut obs = StepObservations::default();
        if self.state.windows.is_empty() {
            // A resume of a run that stopped before its pool was in a checkpoint.
            self.phase("load fixed pool")?;
            let pool = fixed::load_fixed_pool(self.cfg, &self.pool)?;
            self.install_fixed_pool(pool)?;
        }
        let selection = self.select_fixed();
        let played = self.play_phase(selection.as_ref(), &mut obs, &mut m)?;
        self.train_phase(played, vec![], obs, &mut m)?;
        Ok(m)
    }

    /// SPICE's challenger writes tasks, its reasoner answers them, one update trains both.
    fn spice_step(&mut self) -> Result<StepMetrics, WorkerError> {
        let s = spice::step(self)?;
        self.pending.extend(s.messages);
        Ok(StepMetrics {
            spice: Some(s.stats),
            update: self.train(s.samples, &BTreeMap::new(), vec![])?,
            ..StepMetrics::default()
        })
    }

    /// Closes the window of `kind` and applies what it gave: its reports wait for the commit,
    /// its records join the memory; returns its designer samples for the step's update.
    fn close_window(
        &mut self,
        kind: EnvKind,
        m: &mut StepMetrics,
    ) -> Result<Option<PendingDesigner>, WorkerError> {
        let Some(closed) = score::close_window(self, kind)? else {
            return Ok(None);
        };
        self.pending.extend(closed.messages);
        for r in closed.memory {
            self.state.memory.push(r);
        }
        m.closed.absorb(closed.stats);
        Ok(closed.designer)
    }

    fn play_phase(
        &mut self,
        selection: Option<&std::collections::BTreeSet<String>>,
        obs: &mut StepObservations,
        m: &mut StepMetrics,
    ) -> Result<agent::Played, WorkerError> {
        self.phase("play")?;
        let mut played = self.play(selection)?;
        self.pending.append(&mut played.messages);
        obs.absorb(std::mem::take(&mut played.obs));
        m.play = played.stats.take();
        Ok(played)
    }

    fn train_phase(
        &mut self,
        played: agent::Played,
        designer: Vec<PendingDesigner>,
        obs: StepObservations,
        m: &mut StepMetrics,
    ) -> Result<(), WorkerError> {
        m.update = self.train(played.samples, &played.plays, designer)?;
        m.live = Some(score::live_stats(self, obs));
        Ok(())
    }
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
