//! PyTorch's distributed engine (c10d) for the trainer's ranks: rendezvous through c10d's
//! `TCPStore` on rank 0, a Gloo process group, and the collectives sharded training needs
//! (all-reduce, reduce-scatter, all-gather, broadcast, barrier, and a reduce to one rank) on
//! `tch` tensors; broadcast and reduce can also be started and waited for later
//! ([`Pending`]), so they run on Gloo's threads beside the caller's compute. Every call and
//! every wait has the group's timeout: a rank that died or went silent makes the others' next
//! collective fail with an error instead of hanging (issue 41's first item). The collectives
//! are libtorch's own (`libtorch_cpu.so` holds c10d and Gloo; the reduce is its point-to-point
//! send and receive); this crate only bridges them (`src/bridge.cpp`).
//!
//! Gloo runs on CPU tensors. NCCL runs on CUDA tensors of one GPU per rank
//! ([`ProcessGroup::join_nccl`]); it needs the CUDA build's `ProcessGroupNCCL`, which the bridge
//! compiles in only when scripts/build-cuda builds it against real CUDA libraries
//! ([`nccl_built`]). The NCCL group has been built and refused on a CPU-only machine; it has
//! not run on a GPU (`PROBE=nccl` of spade-dist-probe is the check for when one is lent). The
//! trainer's ranks on GPUs train through an NCCL group made beside their Gloo group
//! ([`ProcessGroup::nccl_beside`]), each rank on its own GPU; that too has not run on a GPU.

use spade_policy::optim::Started;
use std::time::Duration;
use tch::Tensor;

mod ffi;
mod link;

pub use ffi::Pending;
pub use link::{NCCL_ID_BYTES, NcclLink};

/// A c10d call that failed, with libtorch's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DistError(pub String);

pub type Result<T> = std::result::Result<T, DistError>;

/// How one rank joins the group (torchrun's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    pub master_addr: String,
    pub master_port: u16,
    pub rank: usize,
    pub world_size: usize,
    /// Joining and every collective fail after this long.
    pub timeout: Duration,
    /// The address of this rank's own interface, which Gloo's connections use
    /// (`SPADE_RANK_ADDR`; on a cluster each node's own, as scripts/ray-ranks sets it); None =
    /// `master_addr`, right when every rank runs on rank 0's machine.
    pub local_addr: Option<String>,
}

impl Rendezvous {
    /// From the torchrun-style environment (`MASTER_ADDR`, `MASTER_PORT`, `RANK`,
    /// `WORLD_SIZE`), naming the variable that is missing or malformed.
    pub fn from_env(timeout: Duration) -> Result<Self> {
        fn var(name: &str) -> Result<String> {
            std::env::var(name).map_err(|_| DistError(format!("{name} is not set")))
        }
        fn number<T: std::str::FromStr>(name: &str) -> Result<T> {
            let v = var(name)?;
            v.trim()
                .parse()
                .map_err(|_| DistError(format!("{name} = {v:?} is not a number")))
        }
        let r = Rendezvous {
            master_addr: var("MASTER_ADDR")?,
            master_port: number("MASTER_PORT")?,
            rank: number("RANK")?,
            world_size: number("WORLD_SIZE")?,
            timeout,
            local_addr: std::env::var("SPADE_RANK_ADDR")
                .ok()
                .filter(|a| !a.trim().is_empty()),
        };
        r.check()?;
        Ok(r)
    }

    fn check(&self) -> Result<()> {
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err(DistError(format!(
                "RANK {} is not below WORLD_SIZE {}",
                self.rank, self.world_size
            )));
        }
        if self.master_addr.contains('\0') {
            return Err(DistError("MASTER_ADDR holds a NUL byte".into()));
        }
        Ok(())
    }
}

/// A reduction of [`ProcessGroup::all_reduce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

/// Whether this binary's bridge has ProcessGroupNCCL (the CUDA build, scripts/build-cuda).
pub fn nccl_built() -> bool {
    ffi::nccl_built()
}

/// One rank's membership of a process group: Gloo over CPU tensors or NCCL over one GPU's.
#[derive(Debug)]
pub struct ProcessGroup {
    inner: ffi::Group,
    rank: usize,
    world_size: usize,
    /// Where the group's tensors must be: the CPU (Gloo) or this rank's GPU (NCCL).
    device: tch::Device,
}

impl ProcessGroup {
    /// Joins the group: rank 0 serves the store at `master_addr:master_port`, the others
    /// connect to it; returns once every rank has joined, or fails after the timeout.
    pub fn join(r: &Rendezvous) -> Result<Self> {
        r.check()?;
        let inner = ffi::Group::new(
            &r.master_addr,
            r.local_addr.as_deref().unwrap_or(&r.master_addr),
            r.master_port,
            r.rank,
            r.world_size,
            r.timeout,
        )?;
        Ok(ProcessGroup {
            inner,
            rank: r.rank,
            world_size: r.world_size,
            device: tch::Device::Cpu,
        })
    }

    /// Joins an NCCL group whose tensors live on this process's GPU `gpu` (`cuda:gpu`), its
    /// ranks meeting through rank 0's store as [`ProcessGroup::join`]'s do. Fails with the
    /// reason on a binary built without NCCL ([`nccl_built`]) or where libtorch sees no such
    /// GPU.
    pub fn join_nccl(r: &Rendezvous, gpu: usize) -> Result<Self> {
        r.check()?;
        let inner = ffi::Group::new_nccl(
            &r.master_addr,
            r.master_port,
            r.rank,
            r.world_size,
            r.timeout,
            gpu,
        )?;
        Ok(ProcessGroup {
            inner,
            rank: r.rank,
            world_size: r.world_size,
            device: tch::Device::Cuda(gpu),
        })
    }

    /// An NCCL group of this group's ranks whose tensors live on this process's GPU `gpu`,
    /// meeting through this group's store (no second rendezvous port). Every rank calls it at
    /// the same point of its run; it returns once all have. The trainer's ranks on GPUs keep
    /// this group (Gloo) for the host's messages and train through the NCCL one.
    pub fn nccl_beside(&self, gpu: usize) -> Result<Self> {
        let inner = self.inner.new_nccl_beside(gpu)?;
        Ok(ProcessGroup {
            inner,
            rank: self.rank,
            world_size: self.world_size,
            device: tch::Device::Cuda(gpu),
        })
    }

    /// Where the group's tensors must be.
    pub fn device(&self) -> tch::Device {
        self.device
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// Reduces `t` over the ranks, in place (every rank passes a tensor of the same shape).
    pub fn all_reduce(&self, t: &mut Tensor, op: ReduceOp) -> Result<()> {
        self.placed(t, "all_reduce")?;
        self.inner.all_reduce(t, op)
    }

    /// The sum over ranks of `t` (same shape on all) into rank `root`'s `t`; the other ranks
    /// send theirs and keep it as it was (point to point: see src/bridge.cpp for why not
    /// Gloo's reduce).
    pub fn reduce(&self, t: &mut Tensor, root: usize) -> Result<()> {
        self.reduce_start(t, root)?.wait()
    }

    /// [`ProcessGroup::reduce`] started: the sum is in root's `t` once the returned
    /// [`Pending`] has been waited for; no rank may touch its `t` before.
    pub fn reduce_start(&self, t: &mut Tensor, root: usize) -> Result<Pending> {
        self.placed(t, "reduce")?;
        self.check_root("reduce to", root)?;
        self.inner.reduce_start(t, root)
    }

    /// [`ProcessGroup::broadcast`] started: root's `t` is in every rank's `t` once the
    /// returned [`Pending`] has been waited for; no rank may touch its `t` before.
    pub fn broadcast_start(&self, t: &mut Tensor, root: usize) -> Result<Pending> {
        self.placed(t, "broadcast")?;
        self.check_root("broadcast from", root)?;
        self.inner.broadcast_start(t, root)
    }

    fn check_root(&self, what: &str, root: usize) -> Result<()> {
        if root >= self.world_size {
            return Err(DistError(format!(
                "{what} rank {root} in a group of {}",
                self.world_size
            )));
        }
        Ok(())
    }

    /// Rank `root`'s `t` into every rank's `t`.
    pub fn broadcast(&self, t: &mut Tensor, root: usize) -> Result<()> {
        self.placed(t, "broadcast")?;
        self.check_root("broadcast from", root)?;
        self.inner.broadcast(t, root, None)
    }

    /// Rank `root`'s bytes to every rank: `root` passes `Some`, the others `None` and get
    /// root's. `wait`: how long a rank may wait for root to send (None: the group's timeout);
    /// a follower waiting for rank 0's next command while rank 0 plays a step's rollouts
    /// waits longer than any collective should.
    pub fn broadcast_bytes(
        &self,
        root: usize,
        bytes: Option<&[u8]>,
        wait: Option<Duration>,
    ) -> Result<Vec<u8>> {
        self.check_root("broadcast from", root)?;
        if (self.rank == root) != bytes.is_some() {
            return Err(DistError(format!(
                "broadcast_bytes: rank {} {} bytes, but root is rank {root}",
                self.rank,
                if bytes.is_some() { "sends" } else { "sends no" }
            )));
        }
        // NCCL moves GPU memory only: the bytes travel through the group's device.
        let mut len =
            Tensor::from_slice(&[bytes.map_or(0, |b| b.len() as i64)]).to_device(self.device);
        self.inner.broadcast(&mut len, root, wait)?;
        let n = len.int64_value(&[0]);
        let n = usize::try_from(n).map_err(|_| DistError(format!("a length of {n} bytes")))?;
        let mut data = match bytes {
            Some(b) => Tensor::from_slice(b).to_device(self.device),
            None => Tensor::zeros([n as i64], (tch::Kind::Uint8, self.device)),
        };
        if n > 0 {
            self.inner.broadcast(&mut data, root, None)?;
        }
        Vec::<u8>::try_from(&data.to_device(tch::Device::Cpu))
            .map_err(|e| DistError(format!("broadcast_bytes: {e}")))
    }

    /// Every rank's `input` (same shape on all), stacked in rank order: `[world, ...shape]`.
    pub fn all_gather(&self, input: &Tensor) -> Result<Tensor> {
        let input = input.contiguous();
        self.placed(&input, "all_gather")?;
        let mut shape = vec![self.world_size as i64];
        shape.extend(input.size());
        let mut out = Tensor::zeros(shape.as_slice(), (input.kind(), input.device()));
        self.inner.all_gather(&mut out, &input)?;
        Ok(out)
    }

    /// `input` (same shape on all ranks, its first dimension divisible by the world size) cut
    /// into `world` equal chunks along dimension 0; returns the sum over ranks of chunk
    /// `rank`: the shard of a gradient this rank keeps (ZeRO).
    pub fn reduce_scatter(&self, input: &Tensor) -> Result<Tensor> {
        let input = input.contiguous();
        self.placed(&input, "reduce_scatter")?;
        let size = input.size();
        let world = self.world_size as i64;
        let Some(&rows) = size.first() else {
            return Err(DistError("reduce_scatter of a scalar".into()));
        };
        if rows % world != 0 {
            return Err(DistError(format!(
                "reduce_scatter: dimension 0 ({rows}) is not divisible by the world size \
                 ({world})"
            )));
        }
        let mut shape = size.clone();
        shape[0] = rows / world;
        let mut out = Tensor::zeros(shape.as_slice(), (input.kind(), input.device()));
        self.inner.reduce_scatter(&mut out, &input)?;
        Ok(out)
    }

    /// Returns once every rank has reached it (or fails after the timeout).
    pub fn barrier(&self) -> Result<()> {
        self.inner.barrier()
    }
}

impl ProcessGroup {
    /// Whether `t` is where the group reads (the CPU for Gloo, its GPU for NCCL) and
    /// contiguous.
    fn placed(&self, t: &Tensor, what: &str) -> Result<()> {
        if t.device() != self.device {
            let group = match self.device {
                tch::Device::Cpu => "the Gloo group takes CPU tensors".to_string(),
                d => format!("the NCCL group takes tensors on {d:?}"),
            };
            return Err(DistError(format!(
                "{what}: a tensor on {:?}; {group}",
                t.device()
            )));
        }
        if !t.is_contiguous() {
            return Err(DistError(format!("{what}: the tensor is not contiguous")));
        }
        Ok(())
    }
}

/// The data-parallel trainer's view of the group: gradients summed with all-reduce,
/// reduce-scattered and all-gathered, and ZeRO-3's weights broadcast, with Gloo's own
/// collectives.
impl spade_policy::optim::GradientSync for ProcessGroup {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world_size
    }
    fn sum(&self, t: &mut Tensor) -> spade_policy::Result<()> {
        self.all_reduce(t, ReduceOp::Sum).map_err(policy_error)
    }
    fn reduce(&self, t: &mut Tensor, root: usize) -> spade_policy::Result<()> {
        ProcessGroup::reduce(self, t, root).map_err(policy_error)
    }
    fn reduce_start(&self, t: &mut Tensor, root: usize) -> spade_policy::Result<Started> {
        started(ProcessGroup::reduce_start(self, t, root))
    }
    fn broadcast_start(&self, t: &mut Tensor, root: usize) -> spade_policy::Result<Started> {
        started(ProcessGroup::broadcast_start(self, t, root))
    }
    fn broadcast(&self, t: &mut Tensor, root: usize) -> spade_policy::Result<()> {
        ProcessGroup::broadcast(self, t, root).map_err(policy_error)
    }
    fn reduce_scatter(&self, t: &Tensor) -> spade_policy::Result<Tensor> {
        ProcessGroup::reduce_scatter(self, t).map_err(policy_error)
    }
    fn all_gather(&self, t: &Tensor) -> spade_policy::Result<Tensor> {
        ProcessGroup::all_gather(self, t)
            .map(|g| g.reshape([-1]))
            .map_err(policy_error)
    }
}

/// The policy's handle on a started collective.
fn started(p: Result<Pending>) -> spade_policy::Result<Started> {
    let p = p.map_err(policy_error)?;
    Ok(Started::new(move || p.wait().map_err(policy_error)))
}

fn policy_error(e: DistError) -> spade_policy::PolicyError {
    spade_policy::PolicyError::InvalidInput(format!("process group: {e}"))
}
