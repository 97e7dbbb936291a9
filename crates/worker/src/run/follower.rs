//! A follower rank's run ([`crate::ranks`]): it loads what rank 0 loaded, then plays and trains
//! what rank 0 sends until the run is over, reporting nothing itself.

use crate::WorkerError;
use crate::ranks::{FollowerCommand, Ranks};

/// What a follower did in a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Followed {
    pub episodes: usize,
    pub updates: u64,
    pub designer_attempts: usize,
    pub hints: usize,
}

/// A follower rank's part of a run: load what rank 0 loaded, then design, play and train what
/// it sends until it says the run is over.
pub(super) fn follow(
    cfg: &spade::config::RunConfig,
    ranks: &Ranks,
    device: spade_policy::Device,
    pool: &spade_sandbox::Pool,
) -> Result<Followed, WorkerError> {
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
    let mut trainer =
        super::setup::sharded_trainer(&policy, cfg, ranks.rank(), ranks.world_size())?;
    if let Some(src) = optimizer {
        crate::state::load_sharded_optimizer(&mut trainer, &src)?;
    }
    let mut done = Followed::default();
    loop {
        match ranks.receive()? {
            FollowerCommand::Train(batch) => {
                trainer.step_synced(&policy, &batch, Some(ranks.group()))?;
                done.updates += 1;
            }
            FollowerCommand::Design(order) => {
                done.designer_attempts += ranks.design_part(*order, cfg, &policy, pool)?;
            }
            FollowerCommand::Hints(order) => {
                done.hints += ranks.hints_part(*order, &policy)?;
            }
            FollowerCommand::SaveOptimizer(path) => {
                trainer.save_optimizer(&path)?;
                ranks.barrier()?;
            }
            FollowerCommand::Play(order) => {
                done.episodes += ranks.play_part(*order, &policy, pool)?;
            }
            FollowerCommand::Finish => return Ok(done),
            FollowerCommand::Start { .. } => {
                return Err(WorkerError::Ranks("a second start from rank 0".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spade_dist::Rendezvous;
    use std::time::Duration;

    #[test]
    fn ranks_on_a_gpu_they_cannot_use_are_refused_before_the_run() -> Result<(), WorkerError> {
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
            local_addr: None,
        };
        let ranks = Ranks::join(&r)?;
        let cpu = ranks.device_for(spade_policy::Device::Cpu)?;
        assert_eq!(cpu, spade_policy::Device::Cpu);
        if spade_policy::device::cuda_devices() > 0 && spade_dist::nccl_built() {
            eprintln!("skipped the refusal: this binary has NCCL and sees a GPU");
            return Ok(());
        }
        let start = std::time::Instant::now();
        let e = ranks
            .device_for(spade_policy::Device::Cuda(0))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        // The CPU build names what it lacks; the CUDA build on a machine without a GPU says
        // libtorch sees none.
        if spade_dist::nccl_built() {
            assert!(e.contains("0 GPU(s)"), "{e}");
        } else {
            assert!(
                e.contains("scripts/build-cuda") && e.contains("cuda:0"),
                "{e}"
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        // The trainer's tensors stay on Gloo.
        assert_eq!(ranks.group().device(), spade_policy::Device::Cpu);
        Ok(())
    }

    #[test]
    fn each_rank_takes_its_own_gpu_or_the_only_one_it_was_given() {
        use crate::ranks::rank_gpu;
        // The local launcher: LOCAL_RANK among the job's GPUs.
        assert_eq!(rank_gpu(3, Some("3"), 8).ok(), Some(3));
        assert_eq!(rank_gpu(1, None, 2).ok(), Some(1));
        // Ray's bundles: each rank sees the one GPU it was given, whatever its LOCAL_RANK.
        assert_eq!(rank_gpu(5, Some("1"), 1).ok(), Some(0));
        // More ranks on a node than its GPUs, or a malformed LOCAL_RANK: named.
        let e = rank_gpu(2, Some("2"), 2)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("LOCAL_RANK 2") && e.contains("2 GPU(s)"), "{e}");
        let e = rank_gpu(0, Some("x"), 2)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("\"x\""), "{e}");
    }
}
