//! One run on several ranks (issue 41, items 2, 4 and 5): N processes of the same command,
//! torchrun-style (`MASTER_ADDR`, `MASTER_PORT`, `RANK`, `WORLD_SIZE`), joined in a Gloo
//! process group ([`spade_dist`]).
//!
//! Rank 0 runs the loop as one rank would: it plays every rollout, reports to the sink and
//! writes the checkpoints. At each update it sends the step's samples to the other ranks, the
//! followers, and every rank runs the backward passes of its share of the micro-batches
//! (`GrpoTrainer::step_synced`); the gradients are reduce-scattered, each rank keeps only its
//! shard of the float32 masters and AdamW moments (ZeRO-2) and the updated weights are
//! all-gathered, so every rank holds the whole model and no weights are sent between the
//! update and the next rollouts. At each commit every rank writes its own optimiser shard into
//! the checkpoint directory (`optimizer.rankR-of-W.safetensors`) before rank 0 makes it the
//! resume point; a checkpoint resumes with the rank count that wrote it (another is refused
//! with the reason).
//!
//! Rollouts are not yet shared out (item 3): rank 0 plays them all while the followers wait.
//! The followers' wait for rank 0's next command is the call's own ([`FOLLOWER_WAIT`]), longer
//! than a step's rollouts; every collective has the group's timeout. [`launch`] starts the
//! ranks and stops the others as soon as one fails, so a dead rank fails the run at once.

use crate::WorkerError;
use crate::play::{Backend, Episode, PlayJob, PlayMeasures, PlayOptions};
use serde::{Deserialize, Serialize};
use spade_dist::{ProcessGroup, Rendezvous};
use spade_policy::grpo::{GrpoSample, GrpoStats, GrpoTrainer};
use spade_policy::train::MaskedSeq;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// How long a follower waits for rank 0's next command: a step's rollouts, on rank 0 alone.
/// A rank 0 that died is noticed sooner (its connections close, or [`launch`] stops the
/// followers).
pub const FOLLOWER_WAIT: Duration = Duration::from_secs(24 * 3600);

/// This process's rank of a run and its group.
#[derive(Debug)]
pub struct Ranks {
    group: ProcessGroup,
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
        let group = ProcessGroup::join(&r).map_err(|e| dist_error("joining the group", e))?;
        Ok(Self { group })
    }

    pub fn rank(&self) -> usize {
        self.group.rank()
    }

    pub fn world_size(&self) -> usize {
        self.group.world_size()
    }

    /// The group, as the trainer's gradient sync.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
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
    fn receive(&self) -> Result<FollowerCommand, WorkerError> {
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
        Ok(trainer.step_synced(policy, batch, Some(&self.group))?)
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
            Backend::Engine {
                kv_tokens,
                max_batch,
            } => Some((kv_tokens, max_batch)),
            Backend::Sampler => None,
            Backend::Vllm(_) => {
                return Err(WorkerError::Config(
                    "ranks play on their own engines, not vLLM".into(),
                ));
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
        let bytes = serde_json::to_vec(&own)
            .map_err(|e| WorkerError::Ranks(format!("encoding episodes: {e}")))?;
        let mut out = Vec::with_capacity(self.world_size());
        for root in 0..self.world_size() {
            if root == self.rank() {
                // Ranks finish their parts at different times: wait as long as plays take.
                self.group
                    .broadcast_bytes(root, Some(&bytes), Some(FOLLOWER_WAIT))
                    .map_err(|e| dist_error("sending episodes", e))?;
                out.push(Vec::new());
                continue;
            }
            let theirs = self
                .group
                .broadcast_bytes(root, None, Some(FOLLOWER_WAIT))
                .map_err(|e| dist_error(&format!("episodes from rank {root}"), e))?;
            out.push(serde_json::from_slice(&theirs).map_err(|e| {
                WorkerError::Ranks(format!("malformed episodes from rank {root}: {e}"))
            })?);
        }
        out[self.rank()] = own;
        Ok(out)
    }

    fn barrier(&self) -> Result<(), WorkerError> {
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
    /// The engine's KV slots and batch; None = the sampler.
    engine: Option<(usize, usize)>,
    concurrency: usize,
}

/// What rank 0 tells the followers.
#[derive(Debug, Clone)]
pub(crate) enum FollowerCommand {
    /// Load the weights rank 0 loaded (its fingerprint, to check) and, on a resume, each
    /// rank's optimiser shard beside `optimizer`.
    Start {
        model_dir: PathBuf,
        fingerprint: String,
        optimizer: Option<PathBuf>,
    },
    /// Play this rank's part of the episodes, then send them back ([`Ranks::play_shared`]).
    Play(Box<PlayOrder>),
    /// One GRPO step on these samples.
    Train(Vec<GrpoSample>),
    /// Write this rank's optimiser shard beside this path, then meet at a barrier.
    SaveOptimizer(PathBuf),
    /// The run is over.
    Finish,
}

const START: u8 = 0;
const TRAIN: u8 = 1;
const SAVE: u8 = 2;
const FINISH: u8 = 3;
const PLAY: u8 = 4;

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
                    "optimizer": optimizer,
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
            Self::Play(order) => {
                let mut out = vec![PLAY];
                out.extend(
                    serde_json::to_vec(order)
                        .map_err(|e| WorkerError::Ranks(format!("encoding: {e}")))?,
                );
                out
            }
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
                    optimizer: text("optimizer").map(PathBuf::from),
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
            FINISH if body.is_empty() => Ok(Self::Finish),
            t => Err(bad(format!("tag {t} with {} bytes", body.len()))),
        }
    }
}

fn put_u64(out: &mut Vec<u8>, v: usize) {
    out.extend((v as u64).to_le_bytes());
}

fn encode_sample(out: &mut Vec<u8>, s: &GrpoSample) {
    put_u64(out, s.seq.ids.len());
    for id in &s.seq.ids {
        out.extend(id.to_le_bytes());
    }
    put_u64(out, s.seq.loss_mask.len());
    out.extend(s.seq.loss_mask.iter().map(|&m| u8::from(m)));
    let floats = |out: &mut Vec<u8>, v: &[f32]| {
        put_u64(out, v.len());
        for x in v {
            out.extend(x.to_le_bytes());
        }
    };
    floats(out, &s.old_logprobs);
    match &s.behavior_logprobs {
        Some(b) => {
            out.push(1);
            floats(out, b);
        }
        None => out.push(0),
    }
    out.extend(s.advantage.to_le_bytes());
    out.extend(s.weight.to_le_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!(
                "{n} bytes wanted at offset {} of {}",
                self.at,
                self.bytes.len()
            ));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// A count, checked against the bytes left (each element at least one byte).
    fn len(&mut self) -> Result<usize, String> {
        let n = u64::from_le_bytes(self.array()?);
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            return Err(format!("a count of {n} with {left} bytes left"));
        }
        Ok(n as usize)
    }

    fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.array()?))
    }

    fn floats(&mut self) -> Result<Vec<f32>, String> {
        let n = self.len()?;
        (0..n).map(|_| self.f32()).collect()
    }
}

fn decode_sample(r: &mut Reader<'_>) -> Result<GrpoSample, String> {
    let n = r.len()?;
    let ids = (0..n)
        .map(|_| r.array().map(i64::from_le_bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let m = r.len()?;
    let loss_mask = r.take(m)?.iter().map(|&b| b != 0).collect();
    let old_logprobs = r.floats()?;
    let behavior_logprobs = match r.array::<1>()? {
        [0] => None,
        [1] => Some(r.floats()?),
        [b] => return Err(format!("behaviour flag {b}")),
    };
    Ok(GrpoSample {
        seq: MaskedSeq { ids, loss_mask },
        old_logprobs,
        behavior_logprobs,
        advantage: r.f32()?,
        weight: r.f32()?,
    })
}

/// A follower rank's part of a run: load what rank 0 loaded, then play and train what it
/// sends until it says the run is over. Returns (episodes played, updates taken).
pub(crate) fn follow(
    cfg: &spade::config::RunConfig,
    ranks: &Ranks,
    device: spade_policy::Device,
    pool: &spade_sandbox::Pool,
) -> Result<(usize, u64), WorkerError> {
    let FollowerCommand::Start {
        model_dir,
        fingerprint,
        optimizer,
    } = ranks.receive()?
    else {
        return Err(WorkerError::Ranks(
            "rank 0's first command was not the start".into(),
        ));
    };
    let policy = spade_policy::Policy::load(&model_dir, device)?;
    let mine = policy.weights_fingerprint();
    if mine != fingerprint {
        return Err(WorkerError::Ranks(format!(
            "rank {} loaded {} with weights {mine}, rank 0 has {fingerprint}",
            ranks.rank(),
            model_dir.display()
        )));
    }
    let mut trainer = GrpoTrainer::new_sharded(
        &policy,
        crate::run::grpo_config(cfg),
        ranks.rank(),
        ranks.world_size(),
    )?;
    if let Some(path) = optimizer {
        trainer.load_optimizer(&path)?;
    }
    let (mut episodes, mut updates) = (0, 0);
    loop {
        match ranks.receive()? {
            FollowerCommand::Train(batch) => {
                trainer.step_synced(&policy, &batch, Some(ranks.group()))?;
                updates += 1;
            }
            FollowerCommand::SaveOptimizer(path) => {
                trainer.save_optimizer(&path)?;
                ranks.barrier()?;
            }
            FollowerCommand::Play(order) => {
                let PlayOrder {
                    parts,
                    mut options,
                    engine,
                    concurrency,
                } = *order;
                options.backend = match engine {
                    Some((kv_tokens, max_batch)) => Backend::Engine {
                        kv_tokens,
                        max_batch,
                    },
                    None => Backend::Sampler,
                };
                let mine = parts.get(ranks.rank()).ok_or_else(|| {
                    WorkerError::Ranks(format!("no part for rank {}", ranks.rank()))
                })?;
                let jobs: Vec<PlayJob<'_>> = mine.iter().map(JobPart::job).collect();
                let (own, _) =
                    crate::play::play_envs_measured(&policy, pool, &jobs, &options, concurrency)?;
                episodes += own.iter().map(Vec::len).sum::<usize>();
                ranks.gather_episodes(own)?;
            }
            FollowerCommand::Finish => return Ok((episodes, updates)),
            FollowerCommand::Start { .. } => {
                return Err(WorkerError::Ranks("a second start from rank 0".into()));
            }
        }
    }
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
mod tests {
    use super::*;

    fn sample(i: i64, behavior: bool) -> GrpoSample {
        GrpoSample {
            seq: MaskedSeq {
                ids: vec![1, i, 300 + i],
                loss_mask: vec![false, false, true],
            },
            old_logprobs: vec![0.0, -1.25, -0.1 * i as f32],
            behavior_logprobs: behavior.then(|| vec![0.0, -1.5, f32::MIN_POSITIVE]),
            advantage: -0.75,
            weight: 0.5,
        }
    }

    #[test]
    fn what_ranks_cannot_do_yet_is_refused_before_the_run() -> Result<(), WorkerError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| WorkerError::Ranks(e.to_string()))?
            .port();
        let r = Rendezvous {
            master_addr: "127.0.0.1".into(),
            master_port: port,
            rank: 0,
            world_size: 1,
            timeout: Duration::from_secs(20),
        };
        let ranks = Ranks {
            group: ProcessGroup::join(&r).map_err(|e| dist_error("join", e))?,
        };
        let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
        crate::run::check_ranks(&cfg, spade_policy::Device::Cpu, &ranks)?;
        cfg.model.rollout = spade::config::RolloutBackend::Vllm;
        let e = crate::run::check_ranks(&cfg, spade_policy::Device::Cpu, &ranks)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("model.rollout = \"vllm\""), "{e}");
        cfg.model.rollout = spade::config::RolloutBackend::Engine;
        let e = crate::run::check_ranks(&cfg, spade_policy::Device::Cuda(0), &ranks)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("NCCL") && e.contains("cuda:0"), "{e}");
        Ok(())
    }

    #[test]
    fn commands_round_trip_bit_for_bit() -> Result<(), WorkerError> {
        let cmds = [
            FollowerCommand::Start {
                model_dir: "/runs/a/checkpoints/latest".into(),
                fingerprint: "abc".into(),
                optimizer: None,
            },
            FollowerCommand::Start {
                model_dir: "m".into(),
                fingerprint: "f".into(),
                optimizer: Some("m/optimizer.safetensors".into()),
            },
            FollowerCommand::Train(vec![sample(3, false), sample(4, true)]),
            FollowerCommand::Train(vec![]),
            FollowerCommand::SaveOptimizer("/x/optimizer.safetensors".into()),
            FollowerCommand::Finish,
        ];
        for c in cmds {
            let bytes = c.encode()?;
            assert_eq!(FollowerCommand::decode(&bytes)?.encode()?, bytes);
        }
        // The samples themselves, bit for bit (the encoding is the check above otherwise).
        let samples = vec![sample(3, false), sample(4, true)];
        match FollowerCommand::decode(&FollowerCommand::Train(samples.clone()).encode()?)? {
            FollowerCommand::Train(back) => assert_eq!(back, samples),
            other => panic!("decoded {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn a_truncated_or_unknown_command_is_an_error_not_a_panic() -> Result<(), WorkerError> {
        let bytes = FollowerCommand::Train(vec![sample(3, true)]).encode()?;
        for cut in 0..bytes.len() {
            let e = FollowerCommand::decode(&bytes[..cut]);
            assert!(e.is_err(), "{cut} of {} bytes decoded", bytes.len());
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(FollowerCommand::decode(&long).is_err());
        // A count larger than the message.
        let mut huge = vec![TRAIN];
        huge.extend(u64::MAX.to_le_bytes());
        let e = FollowerCommand::decode(&huge).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("count")));
        assert!(FollowerCommand::decode(&[9]).is_err());
        assert!(FollowerCommand::decode(&[FINISH, 0]).is_err());
        Ok(())
    }
}
