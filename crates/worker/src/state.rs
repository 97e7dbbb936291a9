//! What a checkpoint holds, and how it is written so a killed worker loses at most the step in
//! flight.
//!
//! Layout under the state directory (the run directory, or the worker's `--data-dir`):
//! `checkpoints/latest/` = the resume point: the policy's weights (Hugging Face layout,
//! `Policy::save`) plus `state.json` ([`RunState`]) of the same step, replaced atomically every
//! `weights_every` steps, at every snapshot and at the end (written to a temporary directory,
//! then renamed); `checkpoints/step-N/` = retained snapshots every `checkpoint_every`
//! steps and at the end, the last `checkpoint_keep` of them (0 = all); `seq.json` = the
//! sequence-number reservation. A snapshot hard-links the files of `latest` (they are never
//! changed in place: each commit writes a new directory), so it costs no space until `latest`
//! moves on.
//!
//! Resume invariant: a step's messages wait in memory until the next commit, go into
//! [`RunState::outbox`] and are delivered only after the state that includes the step is on
//! disk; a resumed worker first re-delivers that outbox (sinks are idempotent by `seq`/key),
//! then continues with the step after the resume point. The weights and the state are always
//! of the same step, so a crash between two commits loses the steps since the last one (none of
//! their messages was delivered; the resumed run runs and reports them afresh). Sequence numbers are
//! reserved in blocks persisted in `seq.json` before use, so messages sent outside a step's
//! commit (progress, logs) never share a `seq` with anything sent after a resume.
//! The optimiser's state (AdamW's step count and moment estimates, and the float32 masters of
//! bf16 weights, [`OPTIMIZER`]) is written every `optimizer_every` steps and at the end; the
//! commits between hard-link the last one into the new directory, and [`RunState`] records the
//! step that wrote it, so a resume knows whether the moments (and masters) are those of its
//! step. A checkpoint written before the optimiser state was saved has no such file; it
//! resumes with fresh moments (and says so).
//!
//! Before a run starts, [`checkpoint_need`] estimates the disk its checkpoints take and
//! [`check_disk`] refuses to start when the file system has less free.

use crate::WorkerError;
use crate::designer::DesignerSample;
use serde::{Deserialize, Serialize};
use spade::report::Envelope;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod disk;
pub use disk::{
    DiskNeed, OPTIMIZER, ShardSource, check_disk, checkpoint_need, dir_bytes, free_bytes, gib,
    is_optimizer_file, link_or_copy, load_optimizer, load_sharded_optimizer, shard_source,
    tree_bytes,
};

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
    /// The first step the environment was played without the hint (its regeneration step,
    /// unless it was not played then), and that step's no-hint returns and wins: the no-hint
    /// arm of the matched-timing regret (`designer.regret_timing = "matched"`).
    #[serde(default)]
    pub first_no_hint_step: Option<u64>,
    #[serde(default)]
    pub first_step_returns: Vec<f64>,
    #[serde(default)]
    pub first_step_wins: u32,
    /// Distinct rewards seen in plays (as text, for exact comparison).
    pub reward_levels: Vec<String>,
    /// A step timed out or the environment failed while played (spec 7: reward -0.5).
    pub failed: Option<String>,
    /// The seed of the play that failed: the environment is `broken_in_play` and is not
    /// played again.
    #[serde(default)]
    pub broken_seed: Option<i64>,
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
    /// The Vendi kernel the vector is for (states written before the kernel was chosen hold
    /// the policy's hidden states).
    #[serde(default = "policy_kernel")]
    pub kernel: spade::config::VendiKernel,
}

fn policy_kernel() -> spade::config::VendiKernel {
    spade::config::VendiKernel::Policy
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
    /// Windows by kind ([`window_key`]: `game`, `tool_use`).
    pub windows: BTreeMap<String, Window>,
    pub memory: spade::memory::Memory,
    /// Per-skill moving averages of the EMA learning-potential reward (that ablation only).
    pub ema: Option<spade::reward::EmaLearningPotential>,
    pub embeddings: Vec<Embedded>,
    /// Designer attempts and acceptances over the run (for the acceptance metric).
    pub attempts_total: u64,
    pub accepted_total: u64,
    /// Short hashes of the distinct programs accepted over the run (`distinct_accepted_run`:
    /// a designer that writes one program again and again shows as 1).
    #[serde(default)]
    pub accepted_code: std::collections::BTreeSet<String>,
    /// Messages of the last committed step not yet known to be delivered.
    pub outbox: Vec<Envelope>,
    /// The policy checkpoint the run started from (for the record).
    pub base_model: String,
    /// Fixed-env GRPO: pool indices not yet drawn in the current pass over the pool, and the
    /// number of passes shuffled so far (0 = none yet), so a resumed run draws what the
    /// uninterrupted one would.
    #[serde(default)]
    pub fixed_remaining: Vec<usize>,
    #[serde(default)]
    pub fixed_passes: u64,
    /// The RLVE baseline (`ablation.rlve`): every RLVE environment's adaptive difficulty and
    /// the samples counted towards its next check.
    #[serde(default)]
    pub rlve: Option<spade::rlve::AdaptiveDifficulty>,
    /// The step whose commit wrote the optimiser state the resume point holds (None before
    /// the first, or in a checkpoint of a version that wrote it every step).
    #[serde(default)]
    pub optimizer_step: Option<u64>,
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
            accepted_code: Default::default(),
            outbox: vec![],
            base_model,
            optimizer_step: None,
            fixed_remaining: vec![],
            fixed_passes: 0,
            rlve: None,
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

    /// The run's state directory.
    pub fn root(&self) -> &Path {
        &self.root
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

    /// Links the latest checkpoint's files into `checkpoints/step-N` (without the optimiser
    /// state unless `with_optimizer`); returns its path and size.
    pub fn snapshot(&self, step: u64, with_optimizer: bool) -> Result<(PathBuf, u64), WorkerError> {
        let from = self.latest();
        let to = self.checkpoints().join(format!("step-{step}"));
        let _ = std::fs::remove_dir_all(&to);
        std::fs::create_dir_all(&to).map_err(|e| WorkerError::io(&to, e))?;
        let mut bytes = 0;
        let entries = std::fs::read_dir(&from).map_err(|e| WorkerError::io(&from, e))?;
        for e in entries {
            let p = e.map_err(|e| WorkerError::io(&from, e))?.path();
            let name = p.file_name().unwrap_or_default();
            if p.is_file() && (with_optimizer || !is_optimizer_file(&name.to_string_lossy())) {
                bytes += link_or_copy(&p, &to.join(name))?;
            }
        }
        Ok((to, bytes))
    }

    /// `checkpoints/base`: the files of a starting model that lies outside the run (a warm
    /// start in the shared cache) linked (or copied) into the run's own directory, so the
    /// checkpoint 0 the run reports lies inside its state directory, where the service's path
    /// rule accepts a run's checkpoints (and no other run's). Replaced on every start.
    pub fn base_snapshot(&self, from: &Path) -> Result<(PathBuf, u64), WorkerError> {
        let to = self.checkpoints().join("base");
        let _ = std::fs::remove_dir_all(&to);
        std::fs::create_dir_all(&to).map_err(|e| WorkerError::io(&to, e))?;
        let mut bytes = 0;
        let entries = std::fs::read_dir(from).map_err(|e| WorkerError::io(from, e))?;
        for e in entries {
            let p = e.map_err(|e| WorkerError::io(from, e))?.path();
            if p.is_file() {
                bytes += link_or_copy(&p, &to.join(p.file_name().unwrap_or_default()))?;
            }
        }
        Ok((to, bytes))
    }

    /// Removes all but the last `keep` snapshots (`keep` = 0 keeps all); returns the steps
    /// removed.
    pub fn prune(&self, keep: u64) -> Result<Vec<u64>, WorkerError> {
        if keep == 0 {
            return Ok(vec![]);
        }
        let cp = self.checkpoints();
        let mut steps: Vec<u64> = std::fs::read_dir(&cp)
            .map_err(|e| WorkerError::io(&cp, e))?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_prefix("step-")?.parse().ok()
            })
            .collect();
        steps.sort_unstable();
        let drop = steps.len().saturating_sub(keep as usize);
        let gone: Vec<u64> = steps.into_iter().take(drop).collect();
        for s in &gone {
            let dir = cp.join(format!("step-{s}"));
            std::fs::remove_dir_all(&dir).map_err(|e| WorkerError::io(&dir, e))?;
        }
        Ok(gone)
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

/// The key of a kind's window in [`RunState::windows`].
pub fn window_key(kind: spade::EnvKind) -> String {
    kind.as_str().to_string()
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
        assert!(load_optimizer(&mut resumed, &latest, true)?.is_some());
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
        assert!(load_optimizer(&mut fresh, &latest, true)?.is_none());
        assert_eq!(fresh.optimizer().step_count(), 0);
        // A corrupt one is an error naming the file.
        std::fs::write(latest.join(OPTIMIZER), b"not safetensors")
            .map_err(|e| WorkerError::io(&latest, e))?;
        let e = load_optimizer(&mut fresh, &latest, true)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(OPTIMIZER), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn the_disk_estimate_counts_kept_snapshots_and_two_resume_points() {
        let mut run = spade::config::RunSection {
            steps: 400,
            seed: 0,
            checkpoint_every: 50,
            weights_every: 1,
            optimizer_every: 100,
            checkpoint_keep: 0,
            ..Default::default()
        };
        // 4B parameters in bf16 (8 GB), optimizer 12 bytes per parameter.
        let (w, o) = (8_000_000_000, 48_000_000_000);
        let n = checkpoint_need(&run, w, o);
        // Snapshots at 50, 100, ..., 400: 8, of which 100, 200, 300, 400 hold the optimizer.
        assert_eq!((n.snapshots, n.snapshots_with_optimizer), (8, 4));
        assert_eq!(n.total, 10 * w + 6 * o);
        run.checkpoint_keep = 3; // 300, 350, 400
        let n = checkpoint_need(&run, w, o);
        assert_eq!((n.snapshots, n.snapshots_with_optimizer), (3, 2));
        assert_eq!(n.total, 5 * w + 4 * o);
        // A run shorter than the cadence still keeps its end.
        run.steps = 7;
        assert_eq!(checkpoint_need(&run, w, o).snapshots, 1);
    }

    #[test]
    fn the_paper_presets_keep_a_4b_runs_checkpoints_under_200_gb() {
        // Qwen3-4B: 4,022,468,096 parameters; bf16 weights 2 bytes each, the optimizer state
        // 12 (float32 masters and two moments).
        let (w, o) = (8_044_936_192u64, 48_269_617_152u64);
        for cfg in [
            spade::config::RunConfig::gpu_qwen3_games(),
            spade::config::RunConfig::gpu_qwen3_tool_use(),
        ] {
            let n = checkpoint_need(&cfg.run, w, o);
            // Kept: 350 and 400; the optimizer in 400 (a multiple of 100, and the last), plus
            // two resume points: 4 w + 3 o = 176,988,596,224 bytes.
            assert_eq!((n.snapshots, n.snapshots_with_optimizer), (2, 1));
            assert_eq!(n.total, 176_988_596_224);
            assert!(n.total < 200_000_000_000);
        }
        // Before: every snapshot with its optimizer, 10 w + 10 o = 563 GB.
        let all = spade::config::RunSection::default();
        assert_eq!(checkpoint_need(&all, w, o).total, 10 * w + 10 * o);
    }

    #[test]
    fn too_little_disk_is_refused_before_the_run_with_the_numbers() {
        let run = spade::config::RunConfig::default().run;
        let need = checkpoint_need(&run, 1 << 30, 3 << 30);
        let dir = Path::new("/data/ckpt");
        assert!(check_disk(&need, 0, need.total, dir).is_ok());
        // What a resumed run already wrote counts as available.
        assert!(check_disk(&need, 1 << 30, need.total - (1 << 30), dir).is_ok());
        let e = check_disk(&need, 0, 2 << 30, dir)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("/data/ckpt")
                && e.contains("2.00 GiB free")
                && e.contains("run.checkpoint_keep"),
            "{e}"
        );
        assert!(free_bytes(&std::env::temp_dir().join("not/there/yet")).is_ok_and(|b| b > 0));
    }

    #[test]
    fn snapshots_link_the_latest_files_and_only_the_last_k_are_kept() -> Result<(), WorkerError> {
        let dir = std::env::temp_dir().join(format!("spade-state-keep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = StateStore::new(&dir);
        let mut st = RunState::new("m".into(), &spade::config::RunConfig::default());
        for step in 1..=4 {
            st.step = step;
            store.commit(&st, |d| {
                std::fs::create_dir_all(d).map_err(|e| WorkerError::io(d, e))?;
                std::fs::write(d.join("model.safetensors"), vec![step as u8; 100])
                    .map_err(|e| WorkerError::io(d, e))?;
                std::fs::write(d.join(OPTIMIZER), [0u8; 10]).map_err(|e| WorkerError::io(d, e))
            })?;
            let (path, bytes) = store.snapshot(step, step % 2 == 0)?;
            assert_eq!(
                bytes,
                if step % 2 == 0 { 100 + 10 } else { 100 } + st_len(&path)
            );
            assert_eq!(path.join(OPTIMIZER).exists(), step % 2 == 0);
            store.prune(2)?;
        }
        let mut left: Vec<String> = std::fs::read_dir(store.checkpoints())
            .map_err(|e| WorkerError::io(&dir, e))?
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("step-"))
            .collect();
        left.sort();
        assert_eq!(left, ["step-3", "step-4"]);
        // The snapshot kept the weights of its own step after latest moved on.
        let w = std::fs::read(store.checkpoints().join("step-3/model.safetensors"))
            .map_err(|e| WorkerError::io(&dir, e))?;
        assert_eq!(w, vec![3u8; 100]);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    fn st_len(snapshot: &Path) -> u64 {
        std::fs::metadata(snapshot.join("state.json")).map_or(0, |m| m.len())
    }
}
