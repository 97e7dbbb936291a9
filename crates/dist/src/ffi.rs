//! The only unsafe code of the crate: calls into src/bridge.cpp. Each function there catches
//! every C++ exception and returns its message (malloc'd, freed here) or NULL.
#![allow(unsafe_code)]

use crate::{DistError, ReduceOp, Result};
use std::ffi::{CStr, CString, c_char, c_int, c_long};
use std::time::Duration;
use tch::Tensor;
use torch_sys::C_tensor;

#[repr(C)]
struct SpadePg {
    _opaque: [u8; 0],
}

#[repr(C)]
struct SpadePending {
    _opaque: [u8; 0],
}

#[repr(C)]
struct SpadeNccl {
    _opaque: [u8; 0],
}

unsafe extern "C" {
    fn spade_pg_new(
        host: *const c_char,
        local: *const c_char,
        port: c_int,
        rank: c_int,
        world: c_int,
        timeout_ms: c_long,
        out: *mut *mut SpadePg,
    ) -> *mut c_char;
    fn spade_nccl_built() -> c_int;
    fn spade_pg_new_nccl(
        host: *const c_char,
        port: c_int,
        rank: c_int,
        world: c_int,
        timeout_ms: c_long,
        device: c_int,
        out: *mut *mut SpadePg,
    ) -> *mut c_char;
    fn spade_pg_new_nccl_beside(
        base: *mut SpadePg,
        device: c_int,
        out: *mut *mut SpadePg,
    ) -> *mut c_char;
    fn spade_pg_free(g: *mut SpadePg);
    fn spade_message_free(m: *mut c_char);
    fn spade_pg_all_reduce(g: *mut SpadePg, t: *mut C_tensor, op: c_int) -> *mut c_char;
    fn spade_pg_reduce_start(
        g: *mut SpadePg,
        t: *mut C_tensor,
        root: c_int,
        out: *mut *mut SpadePending,
    ) -> *mut c_char;
    fn spade_pg_broadcast_start(
        g: *mut SpadePg,
        t: *mut C_tensor,
        root: c_int,
        out: *mut *mut SpadePending,
    ) -> *mut c_char;
    fn spade_pending_wait(p: *mut SpadePending) -> *mut c_char;
    fn spade_pending_free(p: *mut SpadePending);
    fn spade_pg_broadcast(
        g: *mut SpadePg,
        t: *mut C_tensor,
        root: c_int,
        timeout_ms: c_long,
    ) -> *mut c_char;
    fn spade_pg_all_gather(
        g: *mut SpadePg,
        out: *mut C_tensor,
        input: *mut C_tensor,
    ) -> *mut c_char;
    fn spade_pg_reduce_scatter(
        g: *mut SpadePg,
        out: *mut C_tensor,
        input: *mut C_tensor,
    ) -> *mut c_char;
    fn spade_pg_barrier(g: *mut SpadePg) -> *mut c_char;
    fn spade_nccl_unique_id(out: *mut u8) -> *mut c_char;
    fn spade_nccl_join(
        id: *const u8,
        world: c_int,
        rank: c_int,
        device: c_int,
        timeout_ms: c_long,
        out: *mut *mut SpadeNccl,
    ) -> *mut c_char;
    fn spade_nccl_all_reduce_sum(c: *mut SpadeNccl, t: *mut C_tensor) -> *mut c_char;
    fn spade_nccl_broadcast(c: *mut SpadeNccl, t: *mut C_tensor, root: c_int) -> *mut c_char;
    fn spade_nccl_free(c: *mut SpadeNccl);
}

/// The message of a bridge call, freeing it.
fn checked(m: *mut c_char) -> Result<()> {
    if m.is_null() {
        return Ok(());
    }
    // SAFETY: a non-NULL return is a NUL-terminated string malloc'd by the bridge, owned here.
    let text = unsafe { CStr::from_ptr(m) }.to_string_lossy().into_owned();
    // SAFETY: freed once, by the allocator that made it.
    unsafe { spade_message_free(m) };
    Err(DistError(text))
}

fn int(v: usize, what: &str) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| DistError(format!("{what} {v} is too large")))
}

/// Whether the bridge was built with ProcessGroupNCCL (the CUDA build).
pub(crate) fn nccl_built() -> bool {
    // SAFETY: a constant of the bridge, no arguments.
    unsafe { spade_nccl_built() != 0 }
}

/// The bridge's process group; freed on drop.
#[derive(Debug)]
pub(crate) struct Group(*mut SpadePg);

// SAFETY: c10d process groups are used from any thread (their work runs on Gloo's own
// threads); this handle is only reached through &self methods of one owner at a time.
unsafe impl Send for Group {}
// SAFETY: ProcessGroupGloo enqueues every collective under its own mutex and TCPStore's
// client locks its socket, so calls from several threads are memory-safe; the order of
// collectives across ranks stays the callers' business (the worker makes them from one thread).
unsafe impl Sync for Group {}

impl Group {
    pub(crate) fn new(
        host: &str,
        local: &str,
        port: u16,
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<Self> {
        let host = CString::new(host).map_err(|_| DistError("host holds a NUL byte".into()))?;
        let local =
            CString::new(local).map_err(|_| DistError("local address holds a NUL byte".into()))?;
        let ms = c_long::try_from(timeout.as_millis()).unwrap_or(c_long::MAX);
        let mut out: *mut SpadePg = std::ptr::null_mut();
        // SAFETY: host and local outlive the call; out is written only on success.
        checked(unsafe {
            spade_pg_new(
                host.as_ptr(),
                local.as_ptr(),
                c_int::from(port),
                int(rank, "rank")?,
                int(world, "world size")?,
                ms,
                &mut out,
            )
        })?;
        Group::made(out)
    }

    /// An NCCL group over this process's GPU `device` (the CUDA build only: elsewhere the
    /// bridge says it was built without NCCL).
    pub(crate) fn new_nccl(
        host: &str,
        port: u16,
        rank: usize,
        world: usize,
        timeout: Duration,
        device: usize,
    ) -> Result<Self> {
        let host = CString::new(host).map_err(|_| DistError("host holds a NUL byte".into()))?;
        let ms = c_long::try_from(timeout.as_millis()).unwrap_or(c_long::MAX);
        let mut out: *mut SpadePg = std::ptr::null_mut();
        // SAFETY: host outlives the call; out is written only on success.
        checked(unsafe {
            spade_pg_new_nccl(
                host.as_ptr(),
                c_int::from(port),
                int(rank, "rank")?,
                int(world, "world size")?,
                ms,
                int(device, "GPU")?,
                &mut out,
            )
        })?;
        Group::made(out)
    }

    /// An NCCL group of this group's ranks on GPU `device`, through this group's store.
    pub(crate) fn new_nccl_beside(&self, device: usize) -> Result<Self> {
        let mut out: *mut SpadePg = std::ptr::null_mut();
        // SAFETY: self.0 is a live group (its store outlives the call: the new group holds
        // its own reference); out is written only on success.
        checked(unsafe { spade_pg_new_nccl_beside(self.0, int(device, "GPU")?, &mut out) })?;
        Group::made(out)
    }

    fn made(out: *mut SpadePg) -> Result<Self> {
        if out.is_null() {
            return Err(DistError("the process group was not created".into()));
        }
        Ok(Group(out))
    }

    pub(crate) fn all_reduce(&self, t: &mut Tensor, op: ReduceOp) -> Result<()> {
        let op = match op {
            ReduceOp::Sum => 0,
            ReduceOp::Max => 1,
            ReduceOp::Min => 2,
        };
        // SAFETY: self.0 is a live group; t is a live tensor handle borrowed mutably.
        checked(unsafe { spade_pg_all_reduce(self.0, t.as_mut_ptr(), op) })
    }

    /// Starts the sum into `root`'s `t`; `t` must stay untouched until the wait.
    pub(crate) fn reduce_start(&self, t: &mut Tensor, root: usize) -> Result<Pending> {
        let root = int(root, "root")?;
        let mut out: *mut SpadePending = std::ptr::null_mut();
        // SAFETY: as in all_reduce; out is written only on success. The pending collective
        // holds its own references to the tensors it reads and writes.
        checked(unsafe { spade_pg_reduce_start(self.0, t.as_mut_ptr(), root, &mut out) })?;
        Pending::new(out)
    }

    /// Starts the broadcast of `root`'s `t`; `t` must stay untouched until the wait.
    pub(crate) fn broadcast_start(&self, t: &mut Tensor, root: usize) -> Result<Pending> {
        let root = int(root, "root")?;
        let mut out: *mut SpadePending = std::ptr::null_mut();
        // SAFETY: as in reduce_start.
        checked(unsafe { spade_pg_broadcast_start(self.0, t.as_mut_ptr(), root, &mut out) })?;
        Pending::new(out)
    }

    /// `timeout` None: the group's.
    pub(crate) fn broadcast(
        &self,
        t: &mut Tensor,
        root: usize,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let root = int(root, "root")?;
        let ms = timeout.map_or(0, |t| {
            c_long::try_from(t.as_millis().max(1)).unwrap_or(c_long::MAX)
        });
        // SAFETY: as in all_reduce.
        checked(unsafe { spade_pg_broadcast(self.0, t.as_mut_ptr(), root, ms) })
    }

    pub(crate) fn all_gather(&self, out: &mut Tensor, input: &Tensor) -> Result<()> {
        // SAFETY: live handles; the bridge only reads `input`.
        checked(unsafe {
            spade_pg_all_gather(self.0, out.as_mut_ptr(), input.as_ptr() as *mut C_tensor)
        })
    }

    pub(crate) fn reduce_scatter(&self, out: &mut Tensor, input: &Tensor) -> Result<()> {
        // SAFETY: live handles; the bridge only reads `input`.
        checked(unsafe {
            spade_pg_reduce_scatter(self.0, out.as_mut_ptr(), input.as_ptr() as *mut C_tensor)
        })
    }

    pub(crate) fn barrier(&self) -> Result<()> {
        // SAFETY: a live group.
        checked(unsafe { spade_pg_barrier(self.0) })
    }
}

/// A collective the bridge started: [`Pending::wait`] finishes it; dropped unwaited, it is
/// abandoned (see src/bridge.cpp).
#[derive(Debug)]
pub struct Pending(*mut SpadePending);

// SAFETY: the pending collective's works are c10d objects waited for from any thread; the
// handle is owned by one value at a time.
unsafe impl Send for Pending {}

impl Pending {
    fn new(p: *mut SpadePending) -> Result<Self> {
        if p.is_null() {
            return Err(DistError("the collective was not started".into()));
        }
        Ok(Pending(p))
    }

    /// Waits until the collective has finished (or the group's timeout has passed).
    pub fn wait(self) -> Result<()> {
        // SAFETY: a live handle, waited once: `self` is consumed and freed by Drop after.
        checked(unsafe { spade_pending_wait(self.0) })
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // SAFETY: made by a *_start function, freed once.
        unsafe { spade_pending_free(self.0) }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: made by spade_pg_new, freed once.
        unsafe { spade_pg_free(self.0) }
    }
}

/// The bytes of an `ncclUniqueId`.
pub(crate) const NCCL_ID_BYTES: usize = 128;

/// A fresh `ncclUniqueId` (the CUDA build only).
pub(crate) fn nccl_unique_id() -> Result<[u8; NCCL_ID_BYTES]> {
    let mut id = [0u8; NCCL_ID_BYTES];
    // SAFETY: the bridge writes exactly NCCL_ID_BYTES bytes into `id`, and only on success.
    checked(unsafe { spade_nccl_unique_id(id.as_mut_ptr()) })?;
    Ok(id)
}

/// A raw NCCL communicator (src/bridge.cpp, `spade_nccl`); aborted and freed on drop.
#[derive(Debug)]
pub(crate) struct Comm(*mut SpadeNccl);

// SAFETY: an NCCL communicator may be used from any thread as long as its calls are not
// concurrent; every call goes through &mut self of the one owner.
unsafe impl Send for Comm {}

impl Comm {
    pub(crate) fn join(
        id: &[u8; NCCL_ID_BYTES],
        world: usize,
        rank: usize,
        device: usize,
        timeout: Duration,
    ) -> Result<Self> {
        let ms = c_long::try_from(timeout.as_millis().max(1)).unwrap_or(c_long::MAX);
        let mut out: *mut SpadeNccl = std::ptr::null_mut();
        // SAFETY: `id` is NCCL_ID_BYTES long and outlives the call; out is written only on
        // success.
        checked(unsafe {
            spade_nccl_join(
                id.as_ptr(),
                int(world, "world size")?,
                int(rank, "rank")?,
                int(device, "GPU")?,
                ms,
                &mut out,
            )
        })?;
        if out.is_null() {
            return Err(DistError("the NCCL communicator was not created".into()));
        }
        Ok(Comm(out))
    }

    pub(crate) fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<()> {
        // SAFETY: a live communicator and a live tensor handle borrowed mutably; the bridge
        // refuses a tensor that is not contiguous on the communicator's GPU before NCCL reads it.
        checked(unsafe { spade_nccl_all_reduce_sum(self.0, t.as_mut_ptr()) })
    }

    pub(crate) fn broadcast(&mut self, t: &mut Tensor, root: usize) -> Result<()> {
        let root = int(root, "root")?;
        // SAFETY: as in all_reduce_sum.
        checked(unsafe { spade_nccl_broadcast(self.0, t.as_mut_ptr(), root) })
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: made by spade_nccl_join, freed once.
        unsafe { spade_nccl_free(self.0) }
    }
}
