//! Where a rank of a run on GPUs computes: its own GPU, and the ranks' NCCL group on it.

use super::Ranks;
use crate::WorkerError;

impl Ranks {
    /// The device this rank trains and samples on, given the run's (`device`): the CPU, or on
    /// CUDA this rank's own GPU ([`rank_gpu`]) with the ranks' NCCL group made on it. Refused
    /// before anything is loaded where ranks cannot run on that device.
    pub fn device_for(
        &self,
        device: spade_policy::Device,
    ) -> Result<spade_policy::Device, WorkerError> {
        match device {
            spade_policy::Device::Cpu => Ok(device),
            spade_policy::Device::Cuda(index) => {
                if !spade_dist::nccl_built() {
                    return Err(WorkerError::Config(format!(
                        "--ranks {} on cuda:{index}: ranks on GPUs train through NCCL, which \
                         this binary's spade-dist lacks (build the CUDA worker with \
                         scripts/build-cuda --fetch, or set model.device = \"cpu\", or run one \
                         rank)",
                        self.world_size()
                    )));
                }
                let local = std::env::var("LOCAL_RANK").ok();
                let gpu = rank_gpu(
                    self.rank(),
                    local.as_deref(),
                    spade_policy::device::cuda_devices(),
                )?;
                self.on_gpu(gpu)?;
                Ok(spade_policy::Device::Cuda(gpu))
            }
            other => Err(WorkerError::Config(format!(
                "--ranks {}: ranks run on the CPU or on CUDA GPUs, not on {other:?}",
                self.world_size()
            ))),
        }
    }
}

/// This rank's GPU among the `visible` ones: its `LOCAL_RANK` (the rank itself when unset), as
/// the local launcher gives a job one GPU per rank; or the only GPU, where a launcher gave each
/// rank its own (Ray's GPU bundles). Two ranks of one node never share a GPU (NCCL refuses
/// it), so a rank past the node's GPUs is an error naming both.
pub fn rank_gpu(
    rank: usize,
    local_rank: Option<&str>,
    visible: usize,
) -> Result<usize, WorkerError> {
    let local = match local_rank.map(str::trim) {
        None | Some("") => rank,
        Some(v) => v
            .parse()
            .map_err(|_| WorkerError::Config(format!("LOCAL_RANK = {v:?} is not a rank number")))?,
    };
    if local < visible {
        Ok(local)
    } else if visible == 1 {
        Ok(0)
    } else {
        Err(WorkerError::Config(format!(
            "rank {rank} (LOCAL_RANK {local}) needs a GPU of its own, but this node shows \
             {visible} GPU(s): give the job one GPU per rank on the node (a run asks for \
             run.ranks GPUs), or run fewer ranks"
        )))
    }
}
