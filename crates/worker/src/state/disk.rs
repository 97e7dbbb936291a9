//! A checkpoint's files on disk: the optimiser state in it, hard links between checkpoints,
//! and the disk a run's checkpoints need, checked before it starts ([`checkpoint_need`],
//! [`check_disk`]).

use crate::WorkerError;
use std::path::Path;

/// The optimiser state's file in a checkpoint directory (see `spade_policy::optim`).
pub const OPTIMIZER: &str = spade_policy::optim::OPTIMIZER_FILE;

/// Restores `trainer`'s optimiser from the checkpoint `dir`; false when the checkpoint predates
/// optimiser states (no file). `masters`: also take its float32 masters (only when they are of
/// the checkpoint's own step; older masters would undo the steps since). A file that does not
/// fit the model is an error.
pub fn load_optimizer(
    trainer: &mut spade_policy::grpo::GrpoTrainer,
    dir: &Path,
    masters: bool,
) -> Result<bool, WorkerError> {
    let path = dir.join(OPTIMIZER);
    if !path.exists() {
        if let Some(world) = shard_world(dir) {
            return Err(WorkerError::Config(format!(
                "{}: the optimizer state was written by {world} ranks (optimizer.rankR-of-{world}\
                 .safetensors); resume with --ranks {world}",
                dir.display()
            )));
        }
        return Ok(false);
    }
    trainer.load_optimizer_with(&path, masters)?;
    Ok(true)
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

/// Restores a sharded (ZeRO-2) trainer's optimiser from the checkpoint `dir`: its rank's shard,
/// written at the checkpoint's own step (a run on several ranks writes its shards at every
/// commit). A checkpoint written by another rank count, or by one process, is refused with
/// the count that resumes it.
pub fn load_sharded_optimizer(
    trainer: &mut spade_policy::grpo::GrpoTrainer,
    dir: &Path,
    state: &super::RunState,
) -> Result<(), WorkerError> {
    let Some(z) = trainer.sharded_optimizer() else {
        return Err(WorkerError::Config(
            "load_sharded_optimizer: the trainer is not sharded".into(),
        ));
    };
    let (rank, world) = (z.rank(), z.world_size());
    let whole = dir.join(OPTIMIZER);
    let mine = spade_policy::zero::shard_file(&whole, rank, world);
    if !mine.exists() {
        let why = match shard_world(dir) {
            Some(w) => format!("it was written by {w} ranks: resume with --ranks {w}"),
            None if whole.exists() => {
                "it was written by one process (optimizer.safetensors): resume without --ranks"
                    .into()
            }
            None => "it holds no optimizer state".into(),
        };
        return Err(WorkerError::Config(format!(
            "{}: no {} for rank {rank} of {world}; {why}",
            dir.display(),
            mine.file_name().unwrap_or_default().to_string_lossy()
        )));
    }
    if state.optimizer_step != Some(state.step) {
        return Err(WorkerError::Corrupt {
            path: mine.display().to_string(),
            message: format!(
                "optimizer shards of step {:?} beside weights of step {}",
                state.optimizer_step, state.step
            ),
        });
    }
    trainer.load_optimizer(&whole)?;
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
