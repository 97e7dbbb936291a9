//! ZeRO-2's two collectives a bucket at a time, so no rank builds a flat float32 vector of the
//! whole model (16 GB for a 4B model) at the step: the gradient slice is reduce-scattered and
//! the updated masters are all-gathered in buckets of about [`BUCKET_BYTES`] over all ranks.
//! The layout stays the flat one of the module doc (rank r owns `[r S, (r + 1) S)`): bucket k
//! stacks, for every rank r, the stretch `[r S + k n, r S + (k + 1) n)` of the flat vector, so
//! a reduce-scatter of it hands each rank the k-th piece of its own slice and an all-gather of
//! every rank's k-th piece gives each stretch back. The sums are the same elementwise sums over
//! the ranks as one whole reduce-scatter's.

use super::ShardedAdamW;
use crate::error::{PolicyError, Result};
use crate::optim::GradientSync;
use tch::{Kind, Tensor};

/// Bytes of float32 one bucket carries over all ranks (DDP's default bucket, 25 MB).
pub const BUCKET_BYTES: i64 = 25 << 20;

impl ShardedAdamW {
    /// Elements of this rank's slice per bucket.
    fn bucket_elements(&self) -> i64 {
        (self.bucket_bytes / 4 / self.world as i64).clamp(1, self.shard.max(1))
    }

    /// Sets the bytes one bucket carries over all ranks (tests make it small to cut variables
    /// across buckets); at least one element a rank.
    pub fn set_bucket_bytes(&mut self, bytes: i64) {
        self.bucket_bytes = bytes.max(4 * self.world as i64);
    }

    /// The variables the flat stretch `[lo, hi)` covers: (index, the variable's start, the
    /// covered `[a, b)` of the flat layout), in order.
    fn spans(&self, lo: i64, hi: i64) -> impl Iterator<Item = (usize, i64, i64, i64)> + '_ {
        let first = self.offsets.partition_point(|&o| o <= lo).saturating_sub(1);
        self.offsets
            .iter()
            .zip(&self.vars)
            .enumerate()
            .skip(first)
            .take_while(move |(_, (o, _))| **o < hi)
            .map(move |(i, (&o, (_, _, len)))| (i, o, lo.max(o), hi.min(o + len)))
            .filter(|&(_, _, a, b)| a < b)
    }

    /// The step's gradients of the flat stretch `[start, start + dst.len)` into `dst` (zeros
    /// past the model's end, where the layout pads).
    fn fill_gradients(&self, start: i64, dst: &Tensor) -> Result<()> {
        for (i, o, a, b) in self.spans(start, start + dst.size()[0]) {
            let g = self.flat_grad(i)?;
            dst.f_narrow(0, a - start, b - a)?
                .f_copy_(&g.f_narrow(0, a - o, b - a)?)?;
        }
        Ok(())
    }

    /// This rank's slice of the gradients summed over the ranks (ZeRO-2), a bucket at a time.
    pub(super) fn reduce_scatter_buckets(&self, sync: &dyn GradientSync) -> Result<Tensor> {
        let (w, s, n) = (self.world as i64, self.shard, self.bucket_elements());
        let device = self.master.device();
        let out = Tensor::f_zeros([s], (Kind::Float, device))?;
        for start in (0..s).step_by(n as usize) {
            let k = n.min(s - start);
            let input = Tensor::f_zeros([w * k], (Kind::Float, device))?;
            for r in 0..w {
                self.fill_gradients(r * s + start, &input.f_narrow(0, r * k, k)?)?;
            }
            let part = sync.reduce_scatter(&input)?;
            out.f_narrow(0, start, k)?.f_copy_(&part)?;
        }
        Ok(out)
    }

    /// Every rank's updated masters into every variable (cast to its kind), a bucket at a time.
    pub(super) fn all_gather_buckets(&self, sync: &dyn GradientSync) -> Result<()> {
        let (w, s, n) = (self.world as i64, self.shard, self.bucket_elements());
        let flats = self
            .vars
            .iter()
            .map(|(name, v, _)| {
                if !v.is_contiguous() {
                    return Err(PolicyError::InvalidInput(format!(
                        "variable `{name}` is not contiguous: its weights cannot be written in place"
                    )));
                }
                Ok(v.f_reshape([-1])?)
            })
            .collect::<Result<Vec<Tensor>>>()?;
        for start in (0..s).step_by(n as usize) {
            let k = n.min(s - start);
            let piece = self.master.f_narrow(0, start, k)?.f_contiguous()?;
            let all = sync.all_gather(&piece)?;
            for r in 0..w {
                let lo = r * s + start;
                for (i, o, a, b) in self.spans(lo, lo + k) {
                    let src = all.f_narrow(0, r * k + a - lo, b - a)?;
                    flats[i]
                        .f_narrow(0, a - o, b - a)?
                        .f_copy_(&src.f_to_kind(flats[i].kind())?)?;
                }
            }
        }
        Ok(())
    }
}
