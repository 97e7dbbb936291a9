//! ZeRO-2 AdamW for data-parallel ranks: every rank keeps the whole model (its engine samples
//! with it) but only its shard of the float32 master weights and AdamW moments. The trainable
//! variables, in name order, are one flat float32 vector padded to a multiple of the world
//! size; rank r owns the r-th equal slice. A step sums the gradients over the ranks with a
//! reduce-scatter (each rank receives its slice's sum, in float32), clips with the global norm
//! (one all-reduce of the slices' squared norms), applies [`crate::optim::AdamW`]'s update to its
//! slice, and all-gathers the updated slices into every rank's variables, so no weights are
//! sent anywhere else. The update is elementwise, so this is the step one rank with the whole
//! optimiser takes, up to the order of float sums (`crates/dist/tests/two_ranks.rs`).
//!
//! Unlike [`crate::optim::AdamW`], a variable with no gradient in a step still decays (its
//! gradient counts as zero); every variable of the models here gets one. The state is not
//! saved yet (sharded checkpoints are to come).

use crate::error::Result;
use crate::optim::{GradientSync, OptimConfig};
use tch::{Kind, Tensor, nn::VarStore};

/// The sharded optimiser of one rank (see the module doc).
#[derive(Debug)]
pub struct ShardedAdamW {
    cfg: OptimConfig,
    step: u64,
    /// Trainable variables in name order, with their element counts.
    vars: Vec<(String, Tensor, i64)>,
    /// Float32 sums of a step's gradients for variables of a half kind.
    acc: Vec<Option<Tensor>>,
    /// Elements of one rank's slice.
    shard: i64,
    rank: usize,
    world: usize,
    master: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
}

impl ShardedAdamW {
    pub fn new(vs: &VarStore, cfg: &OptimConfig, rank: usize, world: usize) -> Result<Self> {
        let world = world.max(1);
        let mut vars: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let vars: Vec<(String, Tensor, i64)> = vars
            .into_iter()
            .map(|(n, t)| {
                let len = t.numel() as i64;
                (n, t, len)
            })
            .collect();
        let total: i64 = vars.iter().map(|v| v.2).sum();
        let shard = (total + world as i64 - 1) / world as i64;
        let master = tch::no_grad(|| -> Result<Tensor> {
            let flat = padded(
                vars.iter()
                    .map(|(_, t, _)| Ok(t.f_detach()?.f_to_kind(Kind::Float)?.f_reshape([-1])?)),
                shard * world as i64,
            )?;
            Ok(flat.f_narrow(0, rank as i64 * shard, shard)?.copy())
        })?;
        let opts = (Kind::Float, master.device());
        Ok(Self {
            cfg: cfg.clone(),
            step: 0,
            acc: (0..vars.len()).map(|_| None).collect(),
            vars,
            shard,
            rank,
            world,
            exp_avg: Tensor::f_zeros([shard], opts)?,
            exp_avg_sq: Tensor::f_zeros([shard], opts)?,
            master,
        })
    }

    /// Elements of this rank's slice of the masters and of each moment.
    pub fn shard_len(&self) -> i64 {
        self.shard
    }

    /// Elements of all trainable variables together.
    pub fn total_len(&self) -> i64 {
        self.vars.iter().map(|v| v.2).sum()
    }

    pub fn step_count(&self) -> u64 {
        self.step
    }

    pub fn zero_grad(&mut self) {
        for ((_, v, _), a) in self.vars.iter_mut().zip(&mut self.acc) {
            v.zero_grad();
            *a = None;
        }
    }

    /// Moves the gradients of variables of a half kind into float32 sums (after each
    /// micro-batch, as [`crate::optim::AdamW::accumulate`]).
    pub fn accumulate(&mut self) -> Result<()> {
        tch::no_grad(|| -> Result<()> {
            for ((_, v, _), a) in self.vars.iter().zip(&mut self.acc) {
                if !matches!(v.kind(), Kind::BFloat16 | Kind::Half) {
                    continue;
                }
                let mut g = v.grad();
                if !g.defined() {
                    continue;
                }
                let g32 = g.f_to_kind(Kind::Float)?;
                match a {
                    Some(sum) => {
                        let _ = sum.f_add_(&g32)?;
                    }
                    None => *a = Some(g32),
                }
                let _ = g.f_zero_()?;
            }
            Ok(())
        })
    }

    /// One step over the ranks of `sync` (see the module doc); returns the gradients' global
    /// norm before clipping to `max_grad_norm`.
    pub fn step(&mut self, sync: &dyn GradientSync) -> Result<f64> {
        self.accumulate()?;
        tch::no_grad(|| -> Result<f64> {
            let grads = self
                .vars
                .iter()
                .zip(&self.acc)
                .map(|((_, v, len), a)| -> Result<Tensor> {
                    Ok(match a {
                        Some(a) => a.shallow_clone(),
                        None => {
                            let g = v.grad();
                            if g.defined() {
                                g.f_to_kind(Kind::Float)?
                            } else {
                                Tensor::f_zeros([*len], (Kind::Float, v.device()))?
                            }
                        }
                    }
                    .f_reshape([-1])?)
                });
            let flat = padded(grads, self.shard * self.world as i64)?;
            let mut g = sync.reduce_scatter(&flat)?;
            let mut norm2 = g.f_square()?.f_sum(Kind::Double)?.f_reshape([1])?;
            sync.sum(&mut norm2)?;
            let total = norm2.f_double_value(&[0])?.sqrt();
            let c = &self.cfg;
            if c.max_grad_norm > 0.0 && total > c.max_grad_norm {
                let _ = g.f_mul_scalar_(c.max_grad_norm / (total + 1e-6))?;
            }
            self.step += 1;
            let t = i32::try_from(self.step).unwrap_or(i32::MAX);
            let bias2_sqrt = (1.0 - c.beta2.powi(t)).sqrt();
            let step_size = c.lr / (1.0 - c.beta1.powi(t));
            let p = &mut self.master;
            if c.weight_decay != 0.0 {
                let _ = p.f_mul_scalar_(1.0 - c.lr * c.weight_decay)?;
            }
            let _ = self.exp_avg.f_lerp_(&g, 1.0 - c.beta1)?;
            let _ = self.exp_avg_sq.f_mul_scalar_(c.beta2)?;
            let _ = self
                .exp_avg_sq
                .f_addcmul_(&g, &g.f_mul_scalar(1.0 - c.beta2)?)?;
            let denom = (self.exp_avg_sq.f_sqrt()? / bias2_sqrt).f_add_scalar(c.eps)?;
            let _ = p.f_sub_(&self.exp_avg.f_div(&denom)?.f_mul_scalar(step_size)?)?;
            let full = sync.all_gather(p)?;
            let mut offset = 0;
            for (_, v, len) in &mut self.vars {
                let part = full
                    .f_narrow(0, offset, *len)?
                    .f_view(v.size().as_slice())?
                    .f_to_kind(v.kind())?;
                v.f_copy_(&part)?;
                offset += *len;
            }
            Ok(total)
        })
    }

    /// This rank's index in the group.
    pub fn rank(&self) -> usize {
        self.rank
    }
}

/// `parts` concatenated and zero-padded to `len` elements.
fn padded(parts: impl Iterator<Item = Result<Tensor>>, len: i64) -> Result<Tensor> {
    let mut parts = parts.collect::<Result<Vec<Tensor>>>()?;
    let have: i64 = parts.iter().map(|p| p.size()[0]).sum();
    if len > have {
        let device = parts.first().map_or(tch::Device::Cpu, Tensor::device);
        parts.push(Tensor::f_zeros([len - have], (Kind::Float, device))?);
    }
    Ok(Tensor::f_cat(&parts, 0)?)
}
