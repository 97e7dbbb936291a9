//! A raw NCCL communicator joined by an `ncclUniqueId` shared out of band, for peers that are
//! not c10d ranks: vLLM servers' weight-transfer engine (`nccl_unique_id_b64`, vLLM 0.32) joins
//! the trainer this way, so the worker can broadcast the policy's weights GPU to GPU instead of
//! through safetensors on disk (issue 42, item 4).
//!
//! Only the CUDA build (scripts/build-cuda) has NCCL; elsewhere every call says so. Joining and
//! every collective give up after the link's timeout rather than waiting for a peer that never
//! comes; a link that failed is aborted when dropped.

use crate::{DistError, Result, ffi};
use std::time::Duration;
use tch::Tensor;

/// Bytes of an `ncclUniqueId` (`NCCL_UNIQUE_ID_BYTES`).
pub const NCCL_ID_BYTES: usize = ffi::NCCL_ID_BYTES;

/// This process's rank of an NCCL communicator on one of its GPUs.
#[derive(Debug)]
pub struct NcclLink {
    comm: ffi::Comm,
    rank: usize,
    world_size: usize,
    gpu: usize,
}

impl NcclLink {
    /// A fresh id for [`NcclLink::join`], to be handed to every other rank (the CUDA build
    /// only).
    pub fn unique_id() -> Result<[u8; NCCL_ID_BYTES]> {
        ffi::nccl_unique_id()
    }

    /// Joins rank `rank` of `world_size` on `cuda:gpu`. Blocks until every rank has called
    /// `ncclCommInitRank` with the same `id`, or fails after `timeout` (which also bounds each
    /// collective of the link).
    pub fn join(
        id: &[u8; NCCL_ID_BYTES],
        rank: usize,
        world_size: usize,
        gpu: usize,
        timeout: Duration,
    ) -> Result<Self> {
        if world_size == 0 || rank >= world_size {
            return Err(DistError(format!(
                "rank {rank} is not below the world size {world_size}"
            )));
        }
        let comm = ffi::Comm::join(id, world_size, rank, gpu, timeout)?;
        Ok(NcclLink {
            comm,
            rank,
            world_size,
            gpu,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The link's GPU.
    pub fn device(&self) -> tch::Device {
        tch::Device::Cuda(self.gpu)
    }

    /// The sum over ranks into every rank's `t` (on the link's GPU, contiguous: the bridge
    /// refuses others before NCCL sees their memory).
    pub fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<()> {
        self.comm.all_reduce_sum(t)
    }

    /// `root`'s `t` into every rank's `t`; returns once it has left (root) or arrived.
    pub fn broadcast(&mut self, t: &mut Tensor, root: usize) -> Result<()> {
        if root >= self.world_size {
            return Err(DistError(format!(
                "root {root} is not below the world size {}",
                self.world_size
            )));
        }
        self.comm.broadcast(t, root)
    }

    /// The one-element all-reduce every rank of a vLLM weight-transfer group makes right
    /// after joining (`PyNcclCommunicator`'s warm-up): a peer that skips it deadlocks the
    /// group's next collective.
    pub fn warm_up(&mut self) -> Result<()> {
        let mut one = Tensor::zeros([1], (tch::Kind::Float, self.device()));
        self.all_reduce_sum(&mut one)
    }

    /// Broadcasts `weights` from `root`, one collective per tensor in their order (vLLM's
    /// unpacked weight transfer: the receivers expect the names, dtypes and shapes they were
    /// given, in the same order).
    pub fn broadcast_weights(
        &mut self,
        weights: &mut [spade_policy::NamedWeight],
        root: usize,
    ) -> Result<()> {
        for w in weights.iter_mut() {
            self.broadcast(&mut w.tensor, root)
                .map_err(|e| DistError(format!("{}: {e}", w.name)))?;
        }
        Ok(())
    }
}
