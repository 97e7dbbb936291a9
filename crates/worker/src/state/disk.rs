//! A checkpoint's files on disk: the optimiser state in it, hard links between checkpoints,
//! and the disk a run's checkpoints need, checked before it starts ([`checkpoint_need`],
//! [`check_disk`]).

use crate::WorkerError;
use spade_policy::grpo::{GrpoTrainer, SavedOptimizer};
use std::path::{Path, PathBuf};

/// The optimiser state's file in a checkpoint directory (see `spade_policy::optim`).
pub const OPTIMIZER: &str = spade_policy::optim::OPTIMIZER_FILE;

/// Restores `trainer`'s optimiser from the checkpoint `dir` and says how it was saved; None
/// when the checkpoint predates optimiser states (no file). `masters`: also take its float32
/// masters (only when they are of the checkpoint's own step; older masters would undo the
/// steps since). A checkpoint written by data-parallel ranks is re-sharded into this one
/// process. A file that does not fit the model is an error.
pub fn load_optimizer(
    trainer: &mut GrpoTrainer,
    dir: &Path,
    masters: bool,
) -> Result<Option<SavedOptimizer>, WorkerError> {
    let path = dir.join(OPTIMIZER);
    let saved = if path.exists() {
        SavedOptimizer::Whole
    } else if let Some(world) = shard_world(dir) {
        SavedOptimizer::Shards(world)
    } else {
        return Ok(None);
    };
    trainer.load_optimizer_from(&path, saved, masters)?;
    Ok(Some(saved))
}

/// Whether `name` is a checkpoint's optimiser state: the whole of it, or a rank's shard
/// (`spade_policy::zero::shard_file`).
pub fn is_optimizer_file(name: &str) -> bool {
    name == OPTIMIZER || spade_policy::zero::shard_of(Path::new(OPTIMIZER), name).is_some()
}

/// The rank count whose shards `dir` holds, if any.
fn shard_world(dir: &Path) -> Option<usize> {
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        spade_policy::zero::shard_of(Path::new(OPTIMIZER), &name).map(|(_, world)| world)
    })
}

/// Where every rank of a sharded (ZeRO-2) run takes its optimiser state from on resume: rank 0
/// decides ([`shard_source`]) and sends it to the others, so all of them read the same files
/// the same way.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardSource {
    /// The checkpoint's `optimizer.safetensors` path (shards are named beside it).
    pub path: PathBuf,
    pub saved: SavedOptimizer,
    /// Take the saved masters (false: the state is older than the weights).
    pub masters: bool,
}

impl ShardSource {
    /// What resuming from it means for `world` ranks, for the log.
    pub fn describe(&self, world: usize) -> String {
        match self.saved {
            SavedOptimizer::Shards(w) if w == world => {
                format!("restored the optimizer state of {world} ranks")
            }
            SavedOptimizer::Shards(w) => {
                format!("re-sharded the optimizer state of {w} ranks for {world} ranks")
            }
            SavedOptimizer::Whole if self.masters => {
                format!("re-sharded one process's optimizer state for {world} ranks")
            }
            SavedOptimizer::Whole => format!(
                "re-sharded one process's optimizer state (its moments; the masters are the \
                 newer weights) for {world} ranks"
            ),
        }
    }
}

/// How a sharded run resumes from the checkpoint `dir`: its ranks' shards (of any rank
/// count: re-sharded when another), or one process's whole state. Shards are written at every
/// commit, so shards of another step than the weights are corrupt; a whole state may be older
/// than the weights and then gives its moments only.
pub fn shard_source(dir: &Path, state: &super::RunState) -> Result<ShardSource, WorkerError> {
    let path = dir.join(OPTIMIZER);
    if let Some(world) = shard_world(dir) {
        if state.optimizer_step != Some(state.step) {
            return Err(WorkerError::Corrupt {
                path: path.display().to_string(),
                message: format!(
                    "optimizer shards of step {:?} beside weights of step {}",
                    state.optimizer_step, state.step
                ),
            });
        }
        return Ok(ShardSource {
            path,
            saved: SavedOptimizer::Shards(world),
            masters: true,
        });
    }
    if path.exists() {
        return Ok(ShardSource {
            masters: state.optimizer_step.is_none_or(|s| s == state.step),
            path,
            saved: SavedOptimizer::Whole,
        });
    }
    Err(WorkerError::Config(format!(
        "{}: it holds no optimizer state (neither {OPTIMIZER} nor rank shards) to resume a \
         run on ranks from",
        dir.display()
    )))
}

/// Restores a sharded (ZeRO-2) trainer's optimiser from `src` ([`shard_source`]).
pub fn load_sharded_optimizer(
    trainer: &mut GrpoTrainer,
    src: &ShardSource,
) -> Result<(), WorkerError> {
    if trainer.sharded_optimizer().is_none() {
        return Err(WorkerError::Config(
            "load_sharded_optimizer: the trainer is not sharded".into(),
        ));
    }
    trainer.load_optimizer_from(&src.path, src.saved, src.masters)?;
    Ok(())
}

/// Hard-links `from` to `to`, or copies it where links are not possible; returns the bytes.
pub fn link_or_copy(from: &Path, to: &Path) -> Result<u64, WorkerError> {
    let bytes = std::fs::metadata(from)
        .map_err(|e| WorkerError::io(from, e))?
        .len();
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).map_err(|e| WorkerError::io(to, e))?;
    }
    Ok(bytes)
}

/// What a run's checkpoints take on disk, estimated before it starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskNeed {
    /// Weights of one checkpoint (parameters x bytes of their kind).
    pub weights: u64,
    /// One optimiser state.
    pub optimizer: u64,
    /// Snapshots kept, and how many of them hold an optimiser state.
    pub snapshots: u64,
    pub snapshots_with_optimizer: u64,
    /// All of it: the snapshots, plus `latest` and the new directory a commit writes beside it.
    pub total: u64,
}

/// The disk a run's checkpoints need: the kept snapshots (`run.checkpoint_every`,
/// `run.checkpoint_keep`, the optimiser in those at multiples of `run.optimizer_every` and the
/// last), plus two resume points at once (a commit writes the new one before it drops the old).
/// `weight_bytes` and `optimizer_bytes` are one checkpoint's.
pub fn checkpoint_need(
    run: &spade::config::RunSection,
    weight_bytes: u64,
    optimizer_bytes: u64,
) -> DiskNeed {
    let every = run.checkpoint_every.max(1);
    let mut steps: Vec<u64> = (1..)
        .map(|k| k * every)
        .take_while(|&s| s < run.steps)
        .collect();
    steps.push(run.steps);
    if run.checkpoint_keep > 0 {
        let keep = run.checkpoint_keep as usize;
        steps = steps.split_off(steps.len().saturating_sub(keep));
    }
    let opt_every = run.optimizer_every.max(1);
    let with_opt = steps
        .iter()
        .filter(|&&s| s.is_multiple_of(opt_every) || s == run.steps)
        .count() as u64;
    let n = steps.len() as u64;
    DiskNeed {
        weights: weight_bytes,
        optimizer: optimizer_bytes,
        snapshots: n,
        snapshots_with_optimizer: with_opt,
        total: (n + 2) * weight_bytes + (with_opt + 2) * optimizer_bytes,
    }
}

/// Gibibytes, for messages.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Refuses a run whose checkpoints need more than `free` bytes (`used`: what its checkpoints
/// already take, for a resumed run).
pub fn check_disk(need: &DiskNeed, used: u64, free: u64, dir: &Path) -> Result<(), WorkerError> {
    let more = need.total.saturating_sub(used);
    if more <= free {
        return Ok(());
    }
    Err(WorkerError::Config(format!(
        "the checkpoints of this run need about {} more ({} snapshots of {} weights, {} of them \
         with a {} optimizer state, plus two resume points), but the file system of {} has {} \
         free; free space, or lower run.checkpoint_keep, or raise run.checkpoint_every / \
         run.optimizer_every",
        gib(more),
        need.snapshots,
        gib(need.weights),
        need.snapshots_with_optimizer,
        gib(need.optimizer),
        dir.display(),
        gib(free)
    )))
}

/// Free bytes for an unprivileged user on the file system of `dir` (or of its nearest existing
/// ancestor).
pub fn free_bytes(dir: &Path) -> Result<u64, WorkerError> {
    let mut at = dir;
    while !at.exists() {
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            _ => {
                at = Path::new(".");
                break;
            }
        }
    }
    let st = rustix::fs::statvfs(at).map_err(|e| WorkerError::io(at, e.into()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Bytes of all files under `dir`, recursively (0 when it does not exist).
pub fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => tree_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
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
