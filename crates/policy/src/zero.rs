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
//! gradient counts as zero); every variable of the models here gets one.
//!
//! [`ShardedAdamW::save`] writes one file per rank ([`shard_file`]): the rank's `master`,
//! `exp_avg` and `exp_avg_sq` slices and, in the metadata, the step, the rank, the world size and
//! the model's element count; [`ShardedAdamW::load`] refuses a file of another rank, world size
//! or model, naming which (resuming with another rank count is not supported yet), and changes
//! nothing unless all of it checks out.

use crate::error::{PolicyError, Result};
use crate::optim::{GradientSync, OptimConfig};
use safetensors::tensor::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor, nn::VarStore};

/// The `format` metadata value of a shard file.
pub const SHARD_FORMAT: &str = "spade-zero2-adamw-v1";

/// Rank `rank` of `world`'s file for the optimiser state `path` names
/// (`optimizer.safetensors` -> `optimizer.rank1-of-2.safetensors`).
pub fn shard_file(path: &Path, rank: usize, world: usize) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(|| "optimizer".into(), |s| s.to_string_lossy().into_owned());
    path.with_file_name(format!("{stem}.rank{rank}-of-{world}.safetensors"))
}

/// (rank, world) when `file_name` is a file [`shard_file`] names for the optimiser state
/// `path` names (of any rank and world size), else None.
pub fn shard_of(path: &Path, file_name: &str) -> Option<(usize, usize)> {
    let stem = path
        .file_stem()
        .map_or_else(|| "optimizer".into(), |s| s.to_string_lossy().into_owned());
    let rest = file_name
        .strip_prefix(stem.as_str())?
        .strip_prefix(".rank")?
        .strip_suffix(".safetensors")?;
    let (rank, world) = rest.split_once("-of-")?;
    let (rank, world) = (rank.parse().ok()?, world.parse().ok()?);
    (rank < world).then_some((rank, world))
}

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
            crate::optim::adamw_update(
                c,
                self.step,
                &mut self.master,
                &mut self.exp_avg,
                &mut self.exp_avg_sq,
                &g,
            )?;
            let full = sync.all_gather(&self.master)?;
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

    /// Ranks in the group.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// Writes this rank's slices and the step to `path` (see the module doc).
    pub fn save(&self, path: &Path) -> Result<()> {
        let tensors = [
            ("master".to_string(), &self.master),
            ("exp_avg".to_string(), &self.exp_avg),
            ("exp_avg_sq".to_string(), &self.exp_avg_sq),
        ];
        let meta = HashMap::from([
            ("format".to_string(), SHARD_FORMAT.to_string()),
            ("step".to_string(), self.step.to_string()),
            ("rank".to_string(), self.rank.to_string()),
            ("world_size".to_string(), self.world.to_string()),
            ("elements".to_string(), self.total_len().to_string()),
        ]);
        crate::optim::write_state(path, &tensors, meta)
    }

    /// Replaces this rank's slices and the step with those saved in `path`; nothing changes on
    /// an error (see the module doc).
    pub fn load(&mut self, path: &Path) -> Result<()> {
        let bad = |reason: String| PolicyError::OptimizerState {
            path: path.to_path_buf(),
            reason,
        };
        let (bytes, meta) = crate::optim::read_state(path)?;
        let field = |key: &str| -> Result<String> {
            meta.get(key)
                .cloned()
                .ok_or_else(|| bad(format!("no `{key}` metadata")))
        };
        let number = |key: &str| -> Result<u64> {
            let v = field(key)?;
            v.parse()
                .map_err(|_| bad(format!("`{key}` metadata `{v}` is not a number")))
        };
        let format = field("format")?;
        if format != SHARD_FORMAT {
            return Err(bad(format!("format `{format}`, expected `{SHARD_FORMAT}`")));
        }
        let (world, rank) = (number("world_size")?, number("rank")?);
        if world != self.world as u64 {
            return Err(bad(format!(
                "saved by {world} ranks, this trainer has {}: resuming with another rank count \
                 is not supported yet",
                self.world
            )));
        }
        if rank != self.rank as u64 {
            return Err(bad(format!(
                "rank {rank}'s state, this is rank {}",
                self.rank
            )));
        }
        let elements = number("elements")?;
        if elements != self.total_len() as u64 {
            return Err(bad(format!(
                "saved for a model of {elements} elements, this one has {}",
                self.total_len()
            )));
        }
        let step = number("step")?;
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| bad(format!("not a safetensors file: {e:?}")))?;
        let device = self.master.device();
        let read = |name: &str| -> Result<Tensor> {
            let view = st.tensor(name).map_err(|_| PolicyError::MissingTensor {
                name: name.to_string(),
                path: path.to_path_buf(),
            })?;
            if view.dtype() != Dtype::F32 || view.shape() != [self.shard as usize] {
                return Err(bad(format!(
                    "`{name}` is {:?} {:?}, expected F32 [{}]",
                    view.dtype(),
                    view.shape(),
                    self.shard
                )));
            }
            Ok(
                Tensor::f_from_data_size(view.data(), &[self.shard], Kind::Float)?
                    .f_to_device(device)?,
            )
        };
        let (master, exp_avg, exp_avg_sq) =
            (read("master")?, read("exp_avg")?, read("exp_avg_sq")?);
        self.master = master;
        self.exp_avg = exp_avg;
        self.exp_avg_sq = exp_avg_sq;
        self.step = step;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;
    use crate::qwen3::{Config, WeightInit};
    use tch::Device;

    #[test]
    fn a_shard_files_name_gives_back_its_rank_and_world_size() {
        let whole = Path::new("/run/checkpoints/latest/optimizer.safetensors");
        for (rank, world) in [(0, 1), (1, 2), (7, 8), (12, 64)] {
            let f = shard_file(whole, rank, world);
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
            assert_eq!(
                shard_of(whole, &name.unwrap_or_default()),
                Some((rank, world))
            );
        }
        for other in [
            "optimizer.safetensors",
            "model.safetensors",
            "optimizer.rank2-of-2.safetensors",
            "optimizer.rankx-of-2.safetensors",
            "optimizer.rank0-of-2.json",
            "other.rank0-of-2.safetensors",
        ] {
            assert_eq!(shard_of(whole, other), None, "{other}");
        }
    }

    fn policy(layers: i64) -> Result<Policy> {
        tch::manual_seed(3);
        let serde_json::Value::Object(map) = serde_json::json!({
            "model_type": "qwen3", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": layers, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 8, "tie_word_embeddings": true
        }) else {
            return Err(PolicyError::InvalidInput("not a map".into()));
        };
        Policy::new(
            &Config::from_map(map)?,
            Device::Cpu,
            Kind::Float,
            WeightInit::Normal { std: 0.1 },
            None,
        )
    }

    /// A shard saves and loads back exactly; another rank, world size or model is refused by
    /// name and leaves the state as it was.
    #[test]
    fn a_shard_round_trips_and_another_rank_count_is_refused() -> Result<()> {
        let p = policy(1)?;
        let cfg = OptimConfig::default();
        let mut a = ShardedAdamW::new(p.var_store(), &cfg, 1, 2)?;
        assert_eq!(a.shard_len(), (a.total_len() + 1) / 2);
        let _ = a.exp_avg.f_fill_(0.25)?;
        a.step = 7;
        let dir = std::env::temp_dir().join(format!("spade-zero-{}", std::process::id()));
        let file = shard_file(&dir.join("optimizer.safetensors"), 1, 2);
        assert!(file.ends_with("optimizer.rank1-of-2.safetensors"));
        a.save(&file)?;
        let mut b = ShardedAdamW::new(p.var_store(), &cfg, 1, 2)?;
        b.load(&file)?;
        assert_eq!(b.step_count(), 7);
        assert!(b.exp_avg.allclose(&a.exp_avg, 0.0, 0.0, false));
        assert!(b.master.allclose(&a.master, 0.0, 0.0, false));
        for (mut other, want) in [
            (
                ShardedAdamW::new(p.var_store(), &cfg, 1, 3)?,
                "saved by 2 ranks, this trainer has 3",
            ),
            (
                ShardedAdamW::new(p.var_store(), &cfg, 0, 2)?,
                "rank 1's state, this is rank 0",
            ),
            (
                ShardedAdamW::new(policy(2)?.var_store(), &cfg, 1, 2)?,
                "saved for a model of",
            ),
        ] {
            let err = other.load(&file).expect_err("refused").to_string();
            assert!(err.contains(want), "{err}");
            assert_eq!(other.step_count(), 0, "nothing changed");
        }
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
