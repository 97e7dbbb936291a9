//! What a checkpoint holds, and how it is written so a killed worker loses at most the step in
//! flight.
//!
//! Layout under the state directory (the run directory, or the worker's `--data-dir`):
//! `checkpoints/latest/` = the policy's weights (Hugging Face layout, `Policy::save`) plus
//! `state.json` ([`RunState`]), replaced atomically after every step (written to a temporary
//! directory, then renamed); `checkpoints/step-N/` = retained snapshots every `checkpoint_every`
//! steps and at the end; `seq.json` = the sequence-number reservation.
//!
//! Resume invariant: a step's messages live in [`RunState::outbox`] and are delivered only after
//! the state that includes the step is on disk; a resumed worker first re-delivers that outbox
//! (sinks are idempotent by `seq`/key), then continues with the next step. Sequence numbers are
//! reserved in blocks persisted in `seq.json` before use, so messages sent outside a step's
//! commit (progress, logs) never share a `seq` with anything sent after a resume.
//! The optimiser's state (AdamW's step count and moment estimates, [`OPTIMIZER`]) is written
//! into the same directory as the weights and restored with them, so a resumed run continues
//! the update it was making. A checkpoint written before the optimiser state was saved has no
//! such file; it resumes with fresh moments (and says so).

use crate::WorkerError;
use crate::designer::DesignerSample;
use serde::{Deserialize, Serialize};
use spade::report::Envelope;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The optimiser state's file in a checkpoint directory (see `spade_policy::optim`).
pub const OPTIMIZER: &str = spade_policy::optim::OPTIMIZER_FILE;

/// Restores `trainer`'s optimiser from the checkpoint `dir`; false when the checkpoint predates
/// optimiser states (no file). A file that does not fit the model is an error.
pub fn load_optimizer(
    trainer: &mut spade_policy::grpo::GrpoTrainer,
    dir: &Path,
) -> Result<bool, WorkerError> {
    let path = dir.join(OPTIMIZER);
    if !path.exists() {
        return Ok(false);
    }
    trainer.load_optimizer(&path)?;
    Ok(true)
}

/// Bumped when [`RunState`] changes incompatibly.
pub const STATE_VERSION: u32 = 1;
/// Sequence numbers reserved per write of `seq.json`.
const SEQ_BLOCK: u64 = 1000;

/// One environment of a current window, with everything its delayed reward needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveEnv {
    pub env_id: String,
    pub skill: String,
    pub kind: spade::EnvKind,
    pub code: String,
    pub hint: String,
    pub generated_step: u64,
    pub parent_env_id: Option<String>,
    pub hint_returns: Vec<f64>,
    pub hint_wins: u32,
    pub no_hint_returns: Vec<f64>,
    pub no_hint_wins: u32,
    /// Distinct rewards seen in plays (as text, for exact comparison).
    pub reward_levels: Vec<String>,
    /// A step timed out or the environment failed while played (spec 7: reward -0.5).
    pub failed: Option<String>,
    /// The first observation states the solution (formula-reveal check).
    pub reveals_solution: bool,
}

impl LiveEnv {
    /// No-hint win rate over the window so far.
    pub fn win_rate(&self) -> Option<f64> {
        (!self.no_hint_returns.is_empty())
            .then(|| f64::from(self.no_hint_wins) / self.no_hint_returns.len() as f64)
    }
}

/// A designer sample waiting for its delayed reward, with what decides it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Buffered {
    pub sample: DesignerSample,
    pub accepted: bool,
    pub generated_step: u64,
}

/// A window of one environment kind: its environments and its designer samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub started_step: u64,
    pub envs: Vec<LiveEnv>,
    pub buffer: Vec<Buffered>,
    /// Index of the regeneration that opened it (drives the skill rotation).
    pub round: u64,
}

/// An environment kept for the Vendi window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedded {
    pub step: u64,
    pub vector: Vec<f32>,
}

/// Everything but the weights that a resumed run needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub version: u32,
    /// The next step to run.
    pub step: u64,
    /// The next sequence number to use.
    pub next_seq: u64,
    pub elapsed_s: f64,
    /// Windows by kind (`game`, `tool_use`).
    pub windows: BTreeMap<String, Window>,
    pub memory: spade::memory::Memory,
    /// Per-skill moving averages of the EMA learning-potential reward (that ablation only).
    pub ema: Option<spade::reward::EmaLearningPotential>,
    pub embeddings: Vec<Embedded>,
    /// Designer attempts and acceptances over the run (for the acceptance metric).
    pub attempts_total: u64,
    pub accepted_total: u64,
    /// Messages of the last committed step not yet known to be delivered.
    pub outbox: Vec<Envelope>,
    /// The policy checkpoint the run started from (for the record).
    pub base_model: String,
}

impl RunState {
    pub fn new(base_model: String, cfg: &spade::config::RunConfig) -> Self {
        Self {
            version: STATE_VERSION,
            step: 0,
            next_seq: 0,
            elapsed_s: 0.0,
            windows: BTreeMap::new(),
            memory: spade::memory::Memory::from_config(&cfg.memory),
            ema: None,
            embeddings: vec![],
            attempts_total: 0,
            accepted_total: 0,
            outbox: vec![],
            base_model,
        }
    }
}

/// Reads and writes checkpoints under one directory.
#[derive(Debug, Clone)]
pub struct StateStore {
    root: PathBuf,
}

impl StateStore {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    pub fn checkpoints(&self) -> PathBuf {
        self.root.join("checkpoints")
    }

    /// The directory of the last committed step (weights + `state.json`).
    pub fn latest(&self) -> PathBuf {
        self.checkpoints().join("latest")
    }

    /// The last committed state, if any (a crash between the two renames of a commit leaves
    /// `latest.old`, which is then the last complete one).
    pub fn load(&self) -> Result<Option<(PathBuf, RunState)>, WorkerError> {
        for dir in [self.latest(), self.checkpoints().join("latest.old")] {
            let path = dir.join("state.json");
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let st: RunState = serde_json::from_str(&text).map_err(|e| WorkerError::Corrupt {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            if st.version != STATE_VERSION {
                return Err(WorkerError::Corrupt {
                    path: path.display().to_string(),
                    message: format!(
                        "state version {} (this worker reads {STATE_VERSION})",
                        st.version
                    ),
                });
            }
            return Ok(Some((dir, st)));
        }
        Ok(None)
    }

    /// Commits `state` and the weights `save_weights` writes into the directory it is given.
    pub fn commit(
        &self,
        state: &RunState,
        save_weights: impl FnOnce(&Path) -> Result<(), WorkerError>,
    ) -> Result<PathBuf, WorkerError> {
        let cp = self.checkpoints();
        std::fs::create_dir_all(&cp).map_err(|e| WorkerError::io(&cp, e))?;
        let tmp = cp.join(format!(".tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        save_weights(&tmp)?;
        let path = tmp.join("state.json");
        let json = serde_json::to_vec(state).map_err(|e| WorkerError::Corrupt {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, json).map_err(|e| WorkerError::io(&path, e))?;
        let latest = self.latest();
        let old = cp.join("latest.old");
        let _ = std::fs::remove_dir_all(&old);
        if latest.exists() {
            std::fs::rename(&latest, &old).map_err(|e| WorkerError::io(&latest, e))?;
        }
        std::fs::rename(&tmp, &latest).map_err(|e| WorkerError::io(&latest, e))?;
        let _ = std::fs::remove_dir_all(&old);
        Ok(latest)
    }

    /// Copies the latest checkpoint to `checkpoints/step-N`; returns its path and size.
    pub fn snapshot(&self, step: u64) -> Result<(PathBuf, u64), WorkerError> {
        let from = self.latest();
        let to = self.checkpoints().join(format!("step-{step}"));
        let _ = std::fs::remove_dir_all(&to);
        std::fs::create_dir_all(&to).map_err(|e| WorkerError::io(&to, e))?;
        let mut bytes = 0;
        let entries = std::fs::read_dir(&from).map_err(|e| WorkerError::io(&from, e))?;
        for e in entries {
            let p = e.map_err(|e| WorkerError::io(&from, e))?.path();
            if p.is_file() {
                let dst = to.join(p.file_name().unwrap_or_default());
                bytes += std::fs::copy(&p, &dst).map_err(|e| WorkerError::io(&dst, e))?;
            }
        }
        Ok((to, bytes))
    }

    /// The first sequence number that is safe to use after a restart: nothing at or above it
    /// was ever used.
    pub fn seq_floor(&self) -> u64 {
        std::fs::read_to_string(self.root.join("seq.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<u64>(&t).ok())
            .unwrap_or(0)
    }

    /// Makes sure `seq` is below the persisted reservation, extending it when needed.
    pub fn reserve(&self, seq: u64) -> Result<(), WorkerError> {
        if seq < self.seq_floor() {
            return Ok(());
        }
        let path = self.root.join("seq.json");
        let tmp = self.root.join("seq.json.tmp");
        std::fs::create_dir_all(&self.root).map_err(|e| WorkerError::io(&self.root, e))?;
        std::fs::write(&tmp, (seq + SEQ_BLOCK).to_string())
            .map_err(|e| WorkerError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| WorkerError::io(&path, e))
    }
}

/// Total size of the files directly in `dir` (a checkpoint directory); 0 when unreadable, since
/// the size is only shown to people.
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_replace_latest_and_reservations_only_grow() -> Result<(), WorkerError> {
        let dir = std::env::temp_dir().join(format!("spade-state-{}", std::process::id()));
        let store = StateStore::new(&dir);
        assert!(store.load()?.is_none());
        let mut st = RunState::new("m".into(), &spade::config::RunConfig::default());
        for step in 1..=2 {
            st.step = step;
            store.commit(&st, |d| {
                std::fs::create_dir_all(d).map_err(|e| WorkerError::io(d, e))
            })?;
        }
        let (_, back) = store
            .load()?
            .ok_or(WorkerError::Config("no state".into()))?;
        assert_eq!(back.step, 2);
        store.reserve(5)?;
        let floor = store.seq_floor();
        assert!(floor > 5);
        store.reserve(3)?;
        assert_eq!(store.seq_floor(), floor);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn the_optimizer_state_is_committed_and_restored() -> Result<(), WorkerError> {
        use spade_policy::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
        use spade_policy::train::{MaskedSeq, OptimConfig, token_logprobs};
        spade_policy::embed::set_threads(1);
        let dir = std::env::temp_dir().join(format!("spade-state-optim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = StateStore::new(&dir);
        let policy = spade_policy::preset::tiny(&[spade_policy::preset::BUILTIN_TEXT], 1, |_| {})?;
        let cfg = GrpoConfig {
            optim: OptimConfig {
                lr: 1e-3,
                ..OptimConfig::default()
            },
            ..GrpoConfig::default()
        };
        let mut trainer = GrpoTrainer::new(&policy, cfg.clone())?;
        let ids: Vec<i64> = (1..12).collect();
        let old = token_logprobs(policy.model(), std::slice::from_ref(&ids), 1.0)?;
        let sample = GrpoSample {
            seq: MaskedSeq::prompt_completion(&ids[..4], &ids[4..]),
            old_logprobs: old.into_iter().next().unwrap_or_default(),
            behavior_logprobs: None,
            advantage: 1.0,
            weight: 1.0,
        };
        for _ in 0..2 {
            trainer.step(&policy, std::slice::from_ref(&sample))?;
        }
        let st = RunState::new("m".into(), &spade::config::RunConfig::default());
        store.commit(&st, |d| {
            policy.save(d)?;
            Ok(trainer.save_optimizer(&d.join(OPTIMIZER))?)
        })?;
        let (latest, _) = store
            .load()?
            .ok_or(WorkerError::Config("no state".into()))?;
        let back = spade_policy::Policy::load(&latest, policy.device())?;
        let mut resumed = GrpoTrainer::new(&back, cfg.clone())?;
        assert!(load_optimizer(&mut resumed, &latest)?);
        assert_eq!(resumed.optimizer().step_count(), 2);
        for name in trainer.optimizer().names() {
            let (a, b) = (
                trainer.optimizer().moments(name),
                resumed.optimizer().moments(name),
            );
            let (Some((m1, v1)), Some((m2, v2))) = (a, b) else {
                panic!("no moments for {name}");
            };
            assert!(m1.equal(m2) && v1.equal(v2), "{name}");
        }
        // A checkpoint from before optimiser states: fresh moments, no error.
        std::fs::remove_file(latest.join(OPTIMIZER)).map_err(|e| WorkerError::io(&latest, e))?;
        let mut fresh = GrpoTrainer::new(&back, cfg.clone())?;
        assert!(!load_optimizer(&mut fresh, &latest)?);
        assert_eq!(fresh.optimizer().step_count(), 0);
        // A corrupt one is an error naming the file.
        std::fs::write(latest.join(OPTIMIZER), b"not safetensors")
            .map_err(|e| WorkerError::io(&latest, e))?;
        let e = load_optimizer(&mut fresh, &latest)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(OPTIMIZER), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
