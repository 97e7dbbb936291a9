//! CPU kernels that libtorch does not offer, on `tch` tensors.
//!
//! [`paged_decode_attention`]: one query token per sequence over the keys and values a paged
//! KV cache holds for it, read from the pool's blocks where they lie. With libtorch's own
//! operators the engine had to gather every row's blocks into a contiguous copy first (an
//! `index_select` per layer and pass) and then run the fused attention over the copy: three
//! passes over the keys where one suffices, on a step that is memory-bound on long contexts.
//!
//! The kernels are plain Rust over slices, compiled three times (AVX-512, AVX2 with FMA, and
//! the baseline) and dispatched on the same kernel set ATen picks for its own operators
//! ([`aten_cpu_capability`]), so `ATEN_CPU_CAPABILITY` selects ours too and the set in a
//! trained-weights fingerprint names both. Unsafe code is confined to two places: the views of
//! tensor memory ([`floats`], [`floats_mut`]) and the calls into the feature-compiled copies.

mod attention;
mod capability;

pub use attention::{Reads, paged_decode_attention};
pub use capability::aten_cpu_capability;

use tch::{Device, Kind, Tensor};

/// A contiguous float32 CPU tensor's elements. Callers check those three properties first
/// ([`plain_floats`]).
#[allow(unsafe_code)]
fn floats(t: &Tensor) -> &[f32] {
    let n = t.numel();
    if n == 0 {
        return &[];
    }
    // SAFETY: `t` is a contiguous float32 tensor on the CPU (checked by every caller through
    // `plain_floats`), so its storage from `data_ptr` on holds `numel` initialised f32 in a
    // row. The slice borrows `t`, so the tensor outlives it; nothing writes the storage while
    // a kernel reads it (the engine's passes are single-threaded over tensors they own, and
    // the kernels' own threads only read it).
    unsafe { std::slice::from_raw_parts(t.data_ptr() as *const f32, n) }
}

/// [`floats`], writable: for tensors a kernel has just allocated and nothing else holds.
#[allow(unsafe_code)]
fn floats_mut(t: &mut Tensor) -> &mut [f32] {
    let n = t.numel();
    if n == 0 {
        return &mut [];
    }
    // SAFETY: as in `floats`; the tensor was allocated by the kernel itself (contiguous float32
    // on the CPU) and no other handle to its storage exists while the slice lives.
    unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, n) }
}

/// Whether `t` is what [`floats`] may view.
fn plain_floats(t: &Tensor) -> bool {
    t.device() == Device::Cpu && t.kind() == Kind::Float && t.is_contiguous()
}
