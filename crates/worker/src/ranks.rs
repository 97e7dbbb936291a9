//! One run on several ranks (issue 41, items 2, 4 and 5): N processes of the same command,
//! torchrun-style (`MASTER_ADDR`, `MASTER_PORT`, `RANK`, `LOCAL_RANK`, `WORLD_SIZE`), joined in
//! a Gloo process group ([`spade_dist`]). On GPUs each rank takes its own GPU (`LOCAL_RANK`, or
//! the one GPU a launcher such as Ray left it) and the trainer's tensors go through an NCCL
//! group made beside the Gloo one ([`Ranks::on_gpu`]); that path has not run on a GPU yet.
//!
//! Rank 0 runs the loop as one rank would: it plays every rollout, reports to the sink and
//! writes the checkpoints. At each update it sends the step's samples to the other ranks, the
//! followers, and every rank runs the backward passes of its share of the micro-batches
//! (`GrpoTrainer::step_synced`); the gradients are reduce-scattered, each rank keeps only its
//! shard of the float32 masters and AdamW moments (ZeRO-2) and the updated weights are
//! all-gathered, so every rank holds the whole model and no weights are sent between the
//! update and the next rollouts. At each commit every rank writes its own optimiser shard into
//! the checkpoint directory (`optimizer.rankR-of-W.safetensors`) before rank 0 makes it the
//! resume point. A checkpoint resumes on any rank count: rank 0 decides where the state comes
//! from (`state::shard_source`: the shards of the same count, or of another one, re-sharded,
//! or one process's whole state) and sends it with the start, so every rank reads its slice
//! the same way.
//!
//! Every rank plays its share of a step's agent and hint episodes ([`Ranks::play_shared`]),
//! and designs its share of a regeneration's slots and writes its share of the hints
//! (`ranks/design.rs`); rank 0 alone keeps the run's state and reports.
//! The followers' wait for rank 0's next command is the call's own ([`FOLLOWER_WAIT`]), longer
//! than a step's rollouts; every collective has the group's timeout. [`launch`] starts the
//! ranks and stops the others as soon as one fails, so a dead rank fails the run at once.

use crate::WorkerError;
use crate::play::{Backend, EngineLimits, Episode, PlayJob, PlayMeasures, PlayOptions};
use serde::{Deserialize, Serialize};
use spade_dist::{ProcessGroup, Rendezvous};
use spade_policy::grpo::{GrpoSample, GrpoStats, GrpoTrainer, SavedOptimizer};

mod design;
mod gpu;
mod wire;
pub use gpu::rank_gpu;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;
use wire::{Reader, decode_sample, encode_sample, put_u64};

/// How long a follower waits for rank 0's next command: a step's rollouts, on rank 0 alone.
/// A rank 0 that died is noticed sooner (its connections close, or [`launch`] stops the
/// followers).
pub const FOLLOWER_WAIT: Duration = Duration::from_secs(24 * 3600);

/// This process's rank of a run and its group.
#[derive(Debug)]
pub struct Ranks {
    /// Gloo: the host's messages (commands, samples, episodes, barriers), and the trainer's
    /// tensors on the CPU.
    group: ProcessGroup,
    /// On GPUs, the NCCL group the trainer's tensors go through ([`Ranks::on_gpu`]); the host's
    /// messages stay on Gloo, whose waits (a step's rollouts) outlast NCCL's watchdog.
    tensors: std::sync::OnceLock<ProcessGroup>,
}

impl Ranks {
    /// Joins the group the torchrun-style environment describes, which must have `expected`
    /// ranks (`--ranks`); `timeout` bounds the rendezvous and every collective.
    pub fn join_from_env(expected: usize, timeout: Duration) -> Result<Self, WorkerError> {
        let r = Rendezvous::from_env(timeout).map_err(|e| dist_error("rendezvous", e))?;
        if r.world_size != expected {
            return Err(WorkerError::Config(format!(
                "WORLD_SIZE is {} but --ranks is {expected}",
                r.world_size
            )));
        }
        Self::join(&r)
    }

    /// Joins the group `r` describes.
    pub fn join(r: &Rendezvous) -> Result<Self, WorkerError> {
        let group = ProcessGroup::join(r).map_err(|e| dist_error("joining the group", e))?;
        Ok(Self {
            group,
            tensors: std::sync::OnceLock::new(),
        })
    }

    pub fn rank(&self) -> usize {
        self.group.rank()
    }

    pub fn world_size(&self) -> usize {
        self.group.world_size()
    }

    /// The group the trainer's tensors go through (its gradient sync): NCCL once
    /// [`Ranks::on_gpu`] made one, else Gloo.
    pub fn group(&self) -> &ProcessGroup {
        self.tensors.get().unwrap_or(&self.group)
    }

    /// Makes this rank's NCCL group on `cuda:gpu` beside the Gloo one; every rank calls it at
    /// the same point of its start, and it returns once all have (or fails after the group's
    /// timeout). Needs the CUDA build (its spade-dist has NCCL).
    pub(crate) fn on_gpu(&self, gpu: usize) -> Result<(), WorkerError> {
        if let Some(g) = self.tensors.get() {
            return if g.device() == spade_policy::Device::Cuda(gpu) {
                Ok(())
            } else {
                Err(WorkerError::Ranks(format!(
                    "rank {} is on {:?} already, not cuda:{gpu}",
                    self.rank(),
                    g.device()
                )))
            };
        }
        let nccl = self
            .group
            .nccl_beside(gpu)
            .map_err(|e| dist_error(&format!("joining the NCCL group on cuda:{gpu}"), e))?;
        // Only this thread sets it (the start, before anything trains).
        let _ = self.tensors.set(nccl);
        Ok(())
    }

    /// Rank 0: sends `cmd` to the followers.
    pub(crate) fn send(&self, cmd: &FollowerCommand) -> Result<(), WorkerError> {
        let bytes = cmd.encode()?;
        self.group
            .broadcast_bytes(0, Some(&bytes), None)
            .map_err(|e| dist_error("sending to the other ranks", e))?;
        Ok(())
    }

    /// A follower: the next command from rank 0.
    pub(crate) fn receive(&self) -> Result<FollowerCommand, WorkerError> {
        let bytes = self
            .group
            .broadcast_bytes(0, None, Some(FOLLOWER_WAIT))
            .map_err(|e| dist_error("waiting for rank 0", e))?;
        FollowerCommand::decode(&bytes)
    }

    /// Rank 0: one GRPO step of the whole group on `batch` (every rank its share of the
    /// micro-batches).
    pub(crate) fn step(
        &self,
        trainer: &mut GrpoTrainer,
        policy: &spade_policy::Policy,
        batch: &[GrpoSample],
    ) -> Result<GrpoStats, WorkerError> {
        self.send(&FollowerCommand::Train(batch.to_vec()))?;
        Ok(trainer.step_synced(policy, batch, Some(self.group()))?)
    }

    /// Rank 0: every rank writes its optimiser shard beside `path` (rank 0's with `own`, while
    /// the followers write theirs); returns once all have.
    pub(crate) fn save_optimizers(
        &self,
        path: &Path,
        own: impl FnOnce() -> Result<(), WorkerError>,
    ) -> Result<(), WorkerError> {
        self.send(&FollowerCommand::SaveOptimizer(path.to_path_buf()))?;
        own()?;
        self.barrier()
    }

    /// Rank 0: plays `jobs` shared out over the ranks, each job's seeds cut into contiguous
    /// parts (rank r the r-th), every episode sampled with the seed it has in the whole job;
    /// returns the episodes per job in the jobs' order, as `play::play_envs_measured` does,
    /// and what rank 0's own part measured.
    pub(crate) fn play_shared(
        &self,
        policy: &spade_policy::Policy,
        pool: &spade_sandbox::Pool,
        jobs: &[PlayJob<'_>],
        options: &PlayOptions,
        concurrency: usize,
    ) -> Result<(Vec<Vec<Episode>>, PlayMeasures), WorkerError> {
        let world = self.world_size();
        let engine = match options.backend {
            Backend::Engine(limits) => Some(limits),
            Backend::Sampler => None,
            // The servers are the rollouts' parallelism: rank 0 sends them every episode's
            // requests at once, and the other ranks only train.
            Backend::Vllm(_) => {
                return crate::play::play_envs_measured(policy, pool, jobs, options, concurrency);
            }
        };
        let parts: Vec<Vec<JobPart>> = (0..world)
            .map(|r| {
                jobs.iter()
                    .map(|j| {
                        let n = j.seeds.len();
                        let (lo, hi) = (n * r / world, n * (r + 1) / world);
                        JobPart {
                            code: j.code.to_owned(),
                            kind: j.kind,
                            hint: j.hint.map(str::to_owned),
                            seeds: j.seeds[lo..hi].to_vec(),
                            sample_seed: j.sample_seed,
                            first_index: j.first_index + lo,
                        }
                    })
                    .collect()
            })
            .collect();
        let order = PlayOrder {
            parts,
            options: options.clone(),
            engine,
            concurrency,
        };
        self.send(&FollowerCommand::Play(Box::new(order.clone())))?;
        let mine: Vec<PlayJob<'_>> = order.parts[0].iter().map(JobPart::job).collect();
        let (own, measures) =
            crate::play::play_envs_measured(policy, pool, &mine, options, concurrency)?;
        let gathered = self.gather_episodes(own)?;
        let mut all: Vec<Vec<Episode>> = vec![Vec::new(); jobs.len()];
        for (rank, per_job) in gathered.into_iter().enumerate() {
            if per_job.len() != jobs.len() {
                return Err(WorkerError::Ranks(format!(
                    "rank {rank} played {} jobs of {}",
                    per_job.len(),
                    jobs.len()
                )));
            }
            for (slot, eps) in all.iter_mut().zip(per_job) {
                slot.extend(eps);
            }
        }
        Ok((all, measures))
    }

    /// Every rank's episodes, in rank order, on every rank (each rank's in turn from it).
    fn gather_episodes(
        &self,
        own: Vec<Vec<Episode>>,
    ) -> Result<Vec<Vec<Vec<Episode>>>, WorkerError> {
        self.gather(own, "episodes")
    }

    /// Every rank's `own` (as JSON), in rank order, on every rank (each rank's in turn from
    /// it); `what` names them in errors.
    pub(crate) fn gather<T: Serialize + serde::de::DeserializeOwned>(
        &self,
        own: T,
        what: &str,
    ) -> Result<Vec<T>, WorkerError> {
        let bytes = serde_json::to_vec(&own)
            .map_err(|e| WorkerError::Ranks(format!("encoding {what}: {e}")))?;
        let mut out = Vec::with_capacity(self.world_size());
        let mut mine = Some(own);
        for root in 0..self.world_size() {
            if root == self.rank() {
                // Ranks finish their parts at different times: wait as long as plays take.
                self.group
                    .broadcast_bytes(root, Some(&bytes), Some(FOLLOWER_WAIT))
                    .map_err(|e| dist_error(&format!("sending {what}"), e))?;
                if let Some(m) = mine.take() {
                    out.push(m);
                }
                continue;
            }
            let theirs = self
                .group
                .broadcast_bytes(root, None, Some(FOLLOWER_WAIT))
                .map_err(|e| dist_error(&format!("{what} from rank {root}"), e))?;
            out.push(serde_json::from_slice(&theirs).map_err(|e| {
                WorkerError::Ranks(format!("malformed {what} from rank {root}: {e}"))
            })?);
        }
        Ok(out)
    }

    /// A follower: plays its part of `order` ([`Ranks::play_shared`] on rank 0) and sends the
    /// episodes back; returns how many it played.
    pub(crate) fn play_part(
        &self,
        order: PlayOrder,
        policy: &spade_policy::Policy,
        pool: &spade_sandbox::Pool,
    ) -> Result<usize, WorkerError> {
        let PlayOrder {
            parts,
            mut options,
            engine,
            concurrency,
        } = order;
        options.backend = engine.map_or(Backend::Sampler, Backend::Engine);
        let mine = parts
            .get(self.rank())
            .ok_or_else(|| WorkerError::Ranks(format!("no part for rank {}", self.rank())))?;
        let jobs: Vec<PlayJob<'_>> = mine.iter().map(JobPart::job).collect();
        let (own, _) = crate::play::play_envs_measured(policy, pool, &jobs, &options, concurrency)?;
        let played = own.iter().map(Vec::len).sum();
        self.gather_episodes(own)?;
        Ok(played)
    }

    pub(crate) fn barrier(&self) -> Result<(), WorkerError> {
        self.group
            .barrier()
            .map_err(|e| dist_error("waiting for the other ranks", e))
    }
}

fn dist_error(what: &str, e: spade_dist::DistError) -> WorkerError {
    WorkerError::Ranks(format!("{what}: {e}"))
}

/// A rank's part of one environment's episodes ([`crate::play::PlayJob`], owned).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobPart {
    code: String,
    kind: spade::EnvKind,
    hint: Option<String>,
    seeds: Vec<i64>,
    sample_seed: u64,
    first_index: usize,
}

impl JobPart {
    fn job(&self) -> PlayJob<'_> {
        PlayJob {
            code: &self.code,
            kind: self.kind,
            hint: self.hint.as_deref(),
            seeds: self.seeds.clone(),
            sample_seed: self.sample_seed,
            first_index: self.first_index,
        }
    }
}

/// What every rank plays of a step's episodes: `parts[r]` is rank r's, with rank 0's play
/// options (the backend aside: each rank serves its own turns with its own engine).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PlayOrder {
    parts: Vec<Vec<JobPart>>,
    options: PlayOptions,
    /// The engine's limits; None = the sampler.
    engine: Option<EngineLimits>,
    concurrency: usize,
}

/// What rank 0 tells the followers.
#[derive(Debug, Clone)]
pub(crate) enum FollowerCommand {
    /// Load the weights rank 0 loaded (its fingerprint, to check) and, on a resume, each
    /// rank's slice of the optimiser state `optimizer` names.
    Start {
        model_dir: PathBuf,
        fingerprint: String,
        /// Where every rank's optimiser state comes from (a resume), re-sharded as needed.
        optimizer: Option<crate::state::ShardSource>,
    },
    /// Play this rank's part of the episodes, then send them back ([`Ranks::play_shared`]).
    Play(Box<PlayOrder>),
    /// One GRPO step on these samples.
    Train(Vec<GrpoSample>),
    /// Write this rank's optimiser shard beside this path, then meet at a barrier.
    SaveOptimizer(PathBuf),
    /// Design this rank's slots, then send the attempts back ([`Ranks::design_shared`]).
    Design(Box<design::DesignOrder>),
    /// Write this rank's hints, then send them back ([`Ranks::hints_shared`]).
    Hints(Box<design::HintOrder>),
    /// The run is over.
    Finish,
}

const START: u8 = 0;
const TRAIN: u8 = 1;
const SAVE: u8 = 2;
const FINISH: u8 = 3;
const PLAY: u8 = 4;
const DESIGN: u8 = 5;
const HINTS: u8 = 6;

impl FollowerCommand {
    /// A tag byte, then the command: paths and text as JSON; samples in binary, little-endian,
    /// so the followers train on exactly the floats rank 0 does.
    fn encode(&self) -> Result<Vec<u8>, WorkerError> {
        let json = |v: serde_json::Value| {
            serde_json::to_vec(&v).map_err(|e| WorkerError::Ranks(format!("encoding: {e}")))
        };
        Ok(match self {
            Self::Start {
                model_dir,
                fingerprint,
                optimizer,
            } => {
                let mut out = vec![START];
                out.extend(json(serde_json::json!({
                    "model_dir": model_dir,
                    "fingerprint": fingerprint,
                    "optimizer": optimizer.as_ref().map(|o| serde_json::json!({
                        "path": o.path,
                        "saved_world": match o.saved {
                            SavedOptimizer::Whole => None,
                            SavedOptimizer::Shards(w) => Some(w),
                        },
                        "masters": o.masters,
                    })),
                }))?);
                out
            }
            Self::Train(samples) => {
                let mut out = vec![TRAIN];
                put_u64(&mut out, samples.len());
                for s in samples {
                    encode_sample(&mut out, s);
                }
                out
            }
            Self::SaveOptimizer(path) => {
                let mut out = vec![SAVE];
                out.extend(json(serde_json::json!(path))?);
                out
            }
            Self::Play(order) => tagged(PLAY, order)?,
            Self::Design(order) => tagged(DESIGN, order)?,
            Self::Hints(order) => tagged(HINTS, order)?,
            Self::Finish => vec![FINISH],
        })
    }

    fn decode(bytes: &[u8]) -> Result<Self, WorkerError> {
        let bad = |m: String| WorkerError::Ranks(format!("a malformed command from rank 0: {m}"));
        let Some((&tag, body)) = bytes.split_first() else {
            return Err(bad("no bytes".into()));
        };
        let json = |b: &[u8]| -> Result<serde_json::Value, WorkerError> {
            serde_json::from_slice(b).map_err(|e| bad(e.to_string()))
        };
        match tag {
            START => {
                let v = json(body)?;
                let text = |k: &str| v[k].as_str().map(str::to_owned);
                Ok(Self::Start {
                    model_dir: text("model_dir")
                        .ok_or_else(|| bad("start without model_dir".into()))?
                        .into(),
                    fingerprint: text("fingerprint")
                        .ok_or_else(|| bad("start without fingerprint".into()))?,
                    optimizer: decode_source(&v["optimizer"]).map_err(bad)?,
                })
            }
            TRAIN => {
                let mut r = Reader { bytes: body, at: 0 };
                let n = r.len().map_err(bad)?;
                let samples = (0..n)
                    .map(|_| decode_sample(&mut r))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(bad)?;
                if r.at != body.len() {
                    return Err(bad(format!("{} bytes left over", body.len() - r.at)));
                }
                Ok(Self::Train(samples))
            }
            SAVE => json(body)?
                .as_str()
                .map(|p| Self::SaveOptimizer(p.into()))
                .ok_or_else(|| bad("save without a path".into())),
            PLAY => serde_json::from_slice(body)
                .map(Self::Play)
                .map_err(|e| bad(e.to_string())),
            DESIGN => serde_json::from_slice(body)
                .map(Self::Design)
                .map_err(|e| bad(e.to_string())),
            HINTS => serde_json::from_slice(body)
                .map(Self::Hints)
                .map_err(|e| bad(e.to_string())),
            FINISH if body.is_empty() => Ok(Self::Finish),
            t => Err(bad(format!("tag {t} with {} bytes", body.len()))),
        }
    }
}

/// `tag` then `order` as JSON: the orders the followers deserialize whole.
fn tagged(tag: u8, order: &impl Serialize) -> Result<Vec<u8>, WorkerError> {
    let mut out = vec![tag];
    serde_json::to_writer(&mut out, order)
        .map_err(|e| WorkerError::Ranks(format!("encoding: {e}")))?;
    Ok(out)
}

/// A start command's optimiser source: null, or `{path, saved_world (null: one process's
/// whole state), masters}`.
fn decode_source(v: &serde_json::Value) -> Result<Option<crate::state::ShardSource>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let path = v["path"]
        .as_str()
        .ok_or("an optimizer source without a path")?;
    let saved = match &v["saved_world"] {
        serde_json::Value::Null => SavedOptimizer::Whole,
        w => SavedOptimizer::Shards(
            w.as_u64()
                .and_then(|w| usize::try_from(w).ok())
                .filter(|&w| w > 0)
                .ok_or_else(|| format!("saved_world {w} is not a rank count"))?,
        ),
    };
    let masters = v["masters"]
        .as_bool()
        .ok_or("an optimizer source without masters")?;
    Ok(Some(crate::state::ShardSource {
        path: path.into(),
        saved,
        masters,
    }))
}

/// Runs `ranks` copies of `command` (one per rank, with the torchrun-style environment on a
/// free loopback port) and waits for all of them. When one fails, the others are stopped at
/// once and the error names it; `Ok` when every rank exited successfully.
pub fn launch(command: impl Fn(usize) -> Command, ranks: usize) -> Result<(), WorkerError> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| WorkerError::Ranks(format!("no free loopback port: {e}")))?;
    let mut children: Vec<Option<Child>> = Vec::with_capacity(ranks);
    for rank in 0..ranks {
        let mut c = command(rank);
        c.env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", ranks.to_string());
        match c.spawn() {
            Ok(child) => children.push(Some(child)),
            Err(e) => {
                stop(&mut children);
                return Err(WorkerError::Ranks(format!(
                    "rank {rank} did not start: {e}"
                )));
            }
        }
    }
    loop {
        let mut running = 0;
        for (rank, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            match child.try_wait() {
                Ok(None) => running += 1,
                Ok(Some(status)) if status.success() => *slot = None,
                Ok(Some(status)) => {
                    *slot = None;
                    stop(&mut children);
                    return Err(rank_failed(rank, status));
                }
                Err(e) => {
                    stop(&mut children);
                    return Err(WorkerError::Ranks(format!("rank {rank}: {e}")));
                }
            }
        }
        if running == 0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn stop(children: &mut [Option<Child>]) {
    for child in children.iter_mut().flatten() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn rank_failed(rank: usize, status: ExitStatus) -> WorkerError {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended".into(),
    };
    WorkerError::Ranks(format!(
        "rank {rank} {how}; the other ranks were stopped (resume the run from its last \
         checkpoint with the same --ranks)"
    ))
}

#[cfg(test)]
mod tests;
