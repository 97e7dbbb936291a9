//! ZeRO-2 AdamW for data-parallel ranks: every rank keeps the whole model (its engine samples
//! with it) but only its shard of the float32 master weights and AdamW moments. The trainable
//! variables, in name order, are one flat float32 vector padded to a multiple of the world
//! size; rank r owns the r-th equal slice. A step sums the gradients over the ranks with a
//! reduce-scatter (each rank receives its slice's sum, in float32; in buckets of 25 MB,
//! `zero/buckets.rs`, so no rank builds the whole flat vector), clips with the global norm
//! (one all-reduce of the slices' squared norms), applies [`crate::optim::AdamW`]'s update to its
//! slice, and all-gathers the updated slices into every rank's variables, so no weights are
//! sent anywhere else. The update is elementwise, so this is the step one rank with the whole
//! optimiser takes, up to the order of float sums (`crates/dist/tests/two_ranks.rs`).
//!
//! **ZeRO-3** ([`ZeroStage::Three`], `zero/stage3.rs`): the same slices, and during a step the
//! decoder layers' weights are not kept whole either; see that module.
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

mod buckets;
mod parts;
mod stage3;
pub use buckets::BUCKET_BYTES;
pub use stage3::ZeroStage;
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
    /// ZeRO-3's layer layout and gradient slice; None for ZeRO-2.
    stage3: Option<stage3::Layers>,
    /// Bytes of one bucket of the step's collectives over all ranks (`zero/buckets.rs`).
    bucket_bytes: i64,
    /// Every variable's start in the flat layout.
    offsets: Vec<i64>,
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
        let offsets: Vec<i64> = vars
            .iter()
            .scan(0, |at, v| {
                let o = *at;
                *at += v.2;
                Some(o)
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
            stage3: None,
            bucket_bytes: buckets::BUCKET_BYTES,
            offsets,
        })
    }

    /// The sharded optimiser of `stage` (ZeRO-2 is [`ShardedAdamW::new`]).
    pub fn with_stage(
        vs: &VarStore,
        cfg: &OptimConfig,
        rank: usize,
        world: usize,
        stage: ZeroStage,
    ) -> Result<Self> {
        let mut z = Self::new(vs, cfg, rank, world)?;
        if stage == ZeroStage::Three {
            z.stage3 = Some(stage3::Layers::new(&z.vars, &z.offsets)?);
        }
        Ok(z)
    }

    /// ZeRO-2 or ZeRO-3.
    pub fn stage(&self) -> ZeroStage {
        match self.stage3 {
            Some(_) => ZeroStage::Three,
            None => ZeroStage::Two,
        }
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
        if let Some(l) = &mut self.stage3 {
            l.zero_grad();
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

    /// Variable `i`'s gradient of the step as a flat float32 vector (its float32 sum for a
    /// half kind; zeros when it has none).
    fn flat_grad(&self, i: usize) -> Result<Tensor> {
        let (_, v, len) = &self.vars[i];
        Ok(match &self.acc[i] {
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
    }

    /// One step over the ranks of `sync` (see the module doc); returns the gradients' global
    /// norm before clipping to `max_grad_norm`.
    pub fn step(&mut self, sync: &dyn GradientSync) -> Result<f64> {
        self.accumulate()?;
        tch::no_grad(|| -> Result<f64> {
            let mut g = match self.stage3 {
                Some(_) => self.stage3_gradient(sync)?,
                None => self.reduce_scatter_buckets(sync)?,
            };
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
            // ZeRO-3's released layers get their shape back: whole again for the rollouts.
            if let Some(l) = &mut self.stage3 {
                for (i, (_, v, _)) in self.vars.iter_mut().enumerate() {
                    let shape = l.shape(i);
                    if v.size() != shape {
                        v.set_data(&Tensor::f_empty(shape, (v.kind(), v.device()))?);
                    }
                }
                l.restored();
            }
            self.all_gather_buckets(sync)?;
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

    /// Makes `[master, exp_avg, exp_avg_sq]` (host tensors of this rank's slice) and `step`
    /// this rank's state, on the masters' device.
    fn install(&mut self, step: u64, [master, exp_avg, exp_avg_sq]: [Tensor; 3]) -> Result<()> {
        // All moved before any is replaced: nothing changes on an error.
        let device = self.master.device();
        let moved = (
            master.f_to_device(device)?,
            exp_avg.f_to_device(device)?,
            exp_avg_sq.f_to_device(device)?,
        );
        (self.master, self.exp_avg, self.exp_avg_sq) = moved;
        self.step = step;
        if let Some(l) = &mut self.stage3 {
            l.masters_changed();
        }
        Ok(())
    }

    /// Replaces this rank's slices and the step with those saved in `path`; nothing changes on
    /// an error (see the module doc). A file of another world size is refused: that state is
    /// read with [`ShardedAdamW::load_resharded`].
    pub fn load(&mut self, path: &Path) -> Result<()> {
        let mut saved = open_shard(path, None, Some(self.world), self.total_len())?;
        if saved.rank != self.rank {
            return Err(PolicyError::OptimizerState {
                path: path.to_path_buf(),
                reason: format!("rank {}'s state, this is rank {}", saved.rank, self.rank),
            });
        }
        let mut read = |name: &str| saved.file.read_f32(name, 0, saved.shard);
        let state = [read(SLICES[0])?, read(SLICES[1])?, read(SLICES[2])?];
        self.install(saved.step, state)
    }

    /// Replaces this rank's slices and the step with its slice of the state `saved_world`
    /// ranks wrote beside `path` (all of their shard files): re-sharding for a resume on
    /// another rank count. Every file is checked (format, rank, world size, the model's
    /// element count, one step for all) before anything changes; a missing one is named. Of
    /// each file only the header and the bytes of this rank's part are read
    /// (`zero/parts.rs`), so a rank never reads the whole state.
    pub fn load_resharded(&mut self, path: &Path, saved_world: usize) -> Result<()> {
        let (step, state) = read_resharded(
            path,
            saved_world,
            self.total_len(),
            self.rank as i64 * self.shard,
            self.shard,
        )?;
        self.install(step, state)
    }

    /// Replaces this rank's slices and the step with its slice of a whole optimiser state
    /// ([`crate::optim::AdamW::save`]'s file, written by one process). `masters` false: saved
    /// masters are checked but the masters stay the current weights (the state is older than
    /// the weights). A variable of float32 kind has no saved master: its weights are its
    /// master. Nothing changes on an error.
    pub fn load_whole(&mut self, path: &Path, masters: bool) -> Result<()> {
        let bad = |reason: String| PolicyError::OptimizerState {
            path: path.to_path_buf(),
            reason,
        };
        let mut f = parts::StateFile::open(path)?;
        let step = crate::optim::whole_state_step(path, &f.meta)?;
        // The whole header checked first: every variable's moments of its shape, masters
        // optional, nothing else.
        let mut unused: std::collections::BTreeSet<String> = f.names().cloned().collect();
        for (name, var, _) in &self.vars {
            for prefix in ["exp_avg", "exp_avg_sq", "master"] {
                let key = format!("{prefix}.{name}");
                if prefix == "master" && !f.has(&key) {
                    continue;
                }
                let shape = f.f32_shape(&key)?;
                if shape != var.size() {
                    return Err(bad(format!(
                        "`{key}` has shape {shape:?} but variable `{name}` has shape {:?}",
                        var.size()
                    )));
                }
                unused.remove(&key);
            }
        }
        if let Some(extra) = unused.into_iter().next() {
            return Err(bad(format!(
                "`{extra}` matches no trainable variable of this model"
            )));
        }
        // Then only the elements of this rank's slice are read.
        let (lo, hi) = (
            self.rank as i64 * self.shard,
            (self.rank as i64 + 1) * self.shard,
        );
        let out = zeros3(self.shard)?;
        let mut offset = 0i64;
        for (name, var, len) in &self.vars {
            let (start, end) = (offset.max(lo), (offset + len).min(hi));
            let first = offset;
            offset += len;
            if start >= end {
                continue;
            }
            let (from, n, to) = (start - first, end - start, start - lo);
            let key = format!("master.{name}");
            let master = if masters && f.has(&key) {
                f.read_f32(&key, from, n)?
            } else {
                tch::no_grad(|| -> Result<Tensor> {
                    Ok(var
                        .f_detach()?
                        .f_to_device(tch::Device::Cpu)?
                        .f_to_kind(Kind::Float)?
                        .f_reshape([-1])?
                        .f_narrow(0, from, n)?)
                })?
            };
            let m = f.read_f32(&format!("exp_avg.{name}"), from, n)?;
            let v = f.read_f32(&format!("exp_avg_sq.{name}"), from, n)?;
            for (dst, src) in out.iter().zip([&master, &m, &v]) {
                dst.f_narrow(0, to, n)?.f_copy_(src)?;
            }
        }
        self.install(step, out)
    }
}

impl crate::optim::AdamW {
    /// Replaces the moments, the step count and (with `masters`) the masters with the state
    /// `world` data-parallel ranks saved beside `path` ([`shard_file`]): a one-process resume
    /// of a checkpoint written by ranks. The ranks' masters are float32 for every variable; a
    /// float32 variable takes its master as its weights (equal to them: the ranks copied them
    /// there). Nothing changes on an error.
    pub fn load_shards(&mut self, path: &Path, world: usize, masters: bool) -> Result<()> {
        let total = self.total_len();
        let (step, state) = read_resharded(path, world, total, 0, total)?;
        self.restore_flat(step, state, masters)
    }
}

/// The slices a shard file holds, in [`ShardedAdamW::save`]'s order.
const SLICES: [&str; 3] = ["master", "exp_avg", "exp_avg_sq"];

/// A shard file opened and checked, its data not read yet.
struct OpenShard {
    file: parts::StateFile,
    rank: usize,
    step: u64,
    /// Elements of each slice.
    shard: i64,
}

/// Opens and checks the shard file `path`: its format, its rank (when `rank` is given), its
/// world size (when `world` is given), the model's element count `total`, and three F32
/// slices of `ceil(total / world)` elements.
fn open_shard(
    path: &Path,
    rank: Option<usize>,
    world: Option<usize>,
    total: i64,
) -> Result<OpenShard> {
    let bad = |reason: String| PolicyError::OptimizerState {
        path: path.to_path_buf(),
        reason,
    };
    let file = parts::StateFile::open(path)?;
    let field = |key: &str| -> Result<String> {
        file.meta
            .get(key)
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
    let (saved_world, saved_rank) = (number("world_size")?, number("rank")?);
    if let Some(w) = world.filter(|&w| w as u64 != saved_world) {
        return Err(bad(format!(
            "saved by {saved_world} ranks, this trainer has {w}: read it with load_resharded"
        )));
    }
    if let Some(r) = rank.filter(|&r| r as u64 != saved_rank) {
        return Err(bad(format!(
            "rank {saved_rank}'s state, expected rank {r}'s"
        )));
    }
    if saved_world == 0 || saved_rank >= saved_world {
        return Err(bad(format!(
            "rank {saved_rank} of world size {saved_world}"
        )));
    }
    let elements = number("elements")?;
    if elements != total as u64 {
        return Err(bad(format!(
            "saved for a model of {elements} elements, this one has {total}"
        )));
    }
    let step = number("step")?;
    let shard = (total + saved_world as i64 - 1) / saved_world as i64;
    for name in SLICES {
        let shape = file.f32_shape(name)?;
        if shape != [shard] {
            return Err(bad(format!(
                "`{name}` is F32 {shape:?}, expected F32 [{shard}]"
            )));
        }
    }
    Ok(OpenShard {
        file,
        rank: saved_rank as usize,
        step,
        shard,
    })
}

/// Elements `lo..lo + len` of the flat `[master, exp_avg, exp_avg_sq]` that `world` ranks
/// saved beside `path` (zero past the model's `total` elements), and their common step. Each
/// file is opened in turn and only those elements of it are read.
fn read_resharded(
    path: &Path,
    world: usize,
    total: i64,
    lo: i64,
    len: i64,
) -> Result<(u64, [Tensor; 3])> {
    if world == 0 {
        return Err(PolicyError::InvalidInput(
            "read_resharded: a world of 0 ranks".into(),
        ));
    }
    let out = zeros3(len)?;
    let saved_shard = (total + world as i64 - 1) / world as i64;
    let mut step = None;
    for rank in 0..world {
        let file = shard_file(path, rank, world);
        if !file.exists() {
            return Err(PolicyError::OptimizerState {
                path: file.clone(),
                reason: format!(
                    "missing: the optimizer state of {world} ranks needs every rank's shard"
                ),
            });
        }
        let mut saved = open_shard(&file, Some(rank), Some(world), total)?;
        match step {
            Some(s) if s != saved.step => {
                return Err(PolicyError::OptimizerState {
                    path: file,
                    reason: format!("step {}, rank 0's shard is of step {s}", saved.step),
                });
            }
            _ => step = Some(saved.step),
        }
        // This file's elements of the model (the padding past `total` stays zero).
        let from = rank as i64 * saved_shard;
        let (start, end) = (from.max(lo), (from + saved_shard).min(lo + len).min(total));
        if start >= end {
            continue;
        }
        for (dst, name) in out.iter().zip(SLICES) {
            let part = saved.file.read_f32(name, start - from, end - start)?;
            dst.f_narrow(0, start - lo, end - start)?.f_copy_(&part)?;
        }
    }
    Ok((step.unwrap_or(0), out))
}

/// Three host float32 zero vectors of `len` elements: a slice's `[master, exp_avg,
/// exp_avg_sq]` to fill.
fn zeros3(len: i64) -> Result<[Tensor; 3]> {
    let opts = (Kind::Float, tch::Device::Cpu);
    Ok([
        Tensor::f_zeros([len], opts)?,
        Tensor::f_zeros([len], opts)?,
        Tensor::f_zeros([len], opts)?,
    ])
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

    pub(super) fn policy(layers: i64) -> Result<Policy> {
        let _rng = crate::seeded_draws();
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

    /// Elements `lo..lo + len` of a flat state in a recognisable form: master i, exp_avg 2i,
    /// exp_avg_sq 3i + 1 (exact in float32 at these sizes), zero past `total`.
    fn marks(lo: i64, len: i64, total: i64) -> Result<[Tensor; 3]> {
        let idx = Tensor::f_arange_start(lo, lo + len, (Kind::Float, tch::Device::Cpu))?;
        let inside = idx.f_lt(total)?.f_to_kind(Kind::Float)?;
        Ok([
            &idx * &inside,
            &idx * 2.0 * &inside,
            (&idx * 3.0 + 1.0) * &inside,
        ])
    }

    fn marked(z: &mut ShardedAdamW, step: u64) -> Result<()> {
        [z.master, z.exp_avg, z.exp_avg_sq] =
            marks(z.rank as i64 * z.shard, z.shard, z.total_len())?;
        z.step = step;
        Ok(())
    }

    /// `world` ranks' marked shards of `p`'s state at `step`, saved beside `whole`.
    fn save_marked(p: &Policy, whole: &Path, world: usize, step: u64) -> Result<Vec<ShardedAdamW>> {
        (0..world)
            .map(|rank| {
                let mut z = ShardedAdamW::new(p.var_store(), &OptimConfig::default(), rank, world)?;
                marked(&mut z, step)?;
                z.save(&shard_file(whole, rank, world))?;
                Ok(z)
            })
            .collect()
    }

    fn is_marked(z: &ShardedAdamW, what: &str) -> Result<()> {
        let want = marks(z.rank as i64 * z.shard, z.shard, z.total_len())?;
        for (a, b, name) in [
            (&z.master, &want[0], "master"),
            (&z.exp_avg, &want[1], "exp_avg"),
            (&z.exp_avg_sq, &want[2], "exp_avg_sq"),
        ] {
            assert!(
                a.equal(b),
                "{what}: rank {} of {}: {name} is not the saved state's slice",
                z.rank,
                z.world
            );
        }
        Ok(())
    }

    /// The state of 3 ranks, read by 1, 2 and 4 ranks, by one process, and back from one
    /// process's file: every element lands where the whole layout puts it, the step comes
    /// along, and the one process's float32 weights become the masters.
    #[test]
    fn a_state_is_re_sharded_for_any_rank_count_and_for_one_process() -> Result<()> {
        let p = policy(2)?;
        let cfg = OptimConfig::default();
        let dir = tempfile_dir("reshard")?;
        let whole = dir.join("optimizer.safetensors");
        save_marked(&p, &whole, 3, 9)?;
        for world in [1, 2, 3, 4] {
            for rank in 0..world {
                let mut z = ShardedAdamW::new(p.var_store(), &cfg, rank, world)?;
                z.load_resharded(&whole, 3)?;
                assert_eq!(z.step_count(), 9);
                is_marked(&z, "3 ranks' shards")?;
            }
        }
        // One process: each variable's slice of the flat layout, weights from the masters.
        let mut q = policy(2)?;
        let mut one = crate::optim::AdamW::new(q.var_store(), &cfg)?;
        one.load_shards(&whole, 3, true)?;
        assert_eq!(one.step_count(), 9);
        let mut offset = 0.0;
        for name in one.names().map(str::to_string).collect::<Vec<_>>() {
            let (m, _) = one
                .moments(&name)
                .ok_or(PolicyError::InvalidInput(name.clone()))?;
            let n = m.numel() as f64;
            let want = Tensor::f_arange_start(offset, offset + n, (Kind::Float, tch::Device::Cpu))?;
            assert!(m.reshape([-1]).equal(&(&want * 2.0)), "{name}'s exp_avg");
            let var = &q.var_store().variables()[&name];
            assert!(var.reshape([-1]).equal(&want), "{name}'s weights");
            offset += n;
        }
        // And one process's whole file back into 2 ranks: the same slices again.
        one.save(&whole)?;
        for rank in 0..2 {
            let mut z = ShardedAdamW::new(q.var_store_mut(), &cfg, rank, 2)?;
            z.load_whole(&whole, true)?;
            assert_eq!(z.step_count(), 9);
            is_marked(&z, "one process's file")?;
        }
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    /// A missing shard is named; shards of two steps, of another model or of another world
    /// size than their name says are refused, and nothing changes.
    #[test]
    fn re_sharding_refuses_an_incomplete_or_mixed_state() -> Result<()> {
        let p = policy(1)?;
        let cfg = OptimConfig::default();
        let dir = tempfile_dir("reshard-bad")?;
        let whole = dir.join("optimizer.safetensors");
        let mut saved = save_marked(&p, &whole, 2, 4)?;
        let refused = |want: &str| -> Result<()> {
            let mut z = ShardedAdamW::new(p.var_store(), &cfg, 0, 3)?;
            let e = z
                .load_resharded(&whole, 2)
                .expect_err("refused")
                .to_string();
            assert!(e.contains(want), "{e}");
            assert_eq!(z.step_count(), 0, "nothing changed");
            Ok(())
        };
        // Rank 1's shard of another step.
        saved[1].step = 5;
        saved[1].save(&shard_file(&whole, 1, 2))?;
        refused("step 5, rank 0's shard is of step 4")?;
        // Rank 1's shard gone.
        std::fs::remove_file(shard_file(&whole, 1, 2)).map_err(|e| PolicyError::io(&dir, e))?;
        refused("optimizer.rank1-of-2.safetensors")?;
        // Rank 0's file put in rank 1's place.
        std::fs::copy(shard_file(&whole, 0, 2), shard_file(&whole, 1, 2))
            .map_err(|e| PolicyError::io(&dir, e))?;
        refused("rank 0's state, expected rank 1's")?;
        // A truncated shard (a copy cut short by a full disk) is refused before any read.
        let file = shard_file(&whole, 1, 2);
        saved[1].step = 4;
        saved[1].save(&file)?;
        let bytes = std::fs::read(&file).map_err(|e| PolicyError::io(&file, e))?;
        std::fs::write(&file, &bytes[..bytes.len() - 4]).map_err(|e| PolicyError::io(&file, e))?;
        refused("truncated or padded")?;
        // Another model's state.
        let mut z = ShardedAdamW::new(policy(2)?.var_store(), &cfg, 0, 3)?;
        let e = z
            .load_resharded(&whole, 2)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("saved for a model of"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    /// A rank's share without a group: one rank of one.
    pub(super) struct Alone;

    /// Copies `from`'s weights into `to` (a model of the same shape): tests run at once and
    /// share libtorch's global seed, so two models drawn one after the other may differ.
    pub(super) fn copy_weights(from: &Policy, to: &Policy) -> Result<()> {
        let theirs = from.var_store().variables();
        tch::no_grad(|| -> Result<()> {
            for (name, mut v) in to.var_store().variables() {
                if let Some(t) = theirs.get(&name) {
                    v.f_copy_(t)?;
                }
            }
            Ok(())
        })
    }

    impl GradientSync for Alone {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            1
        }
        fn sum(&self, _: &mut Tensor) -> Result<()> {
            Ok(())
        }
    }

    /// Every weight's square, weighted by its place: a loss whose gradient reaches every
    /// variable, differently per element.
    fn backward(p: &Policy) {
        let mut vars = p.var_store().variables().into_iter().collect::<Vec<_>>();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let mut loss = Tensor::zeros([], (Kind::Float, tch::Device::Cpu));
        for (i, (_, v)) in vars.iter().enumerate() {
            let w = Tensor::arange(v.numel() as i64, (Kind::Float, tch::Device::Cpu))
                .reshape(v.size())
                / 100.0;
            loss += (v * v * (w + i as f64)).sum(Kind::Float);
        }
        loss.backward();
    }

    fn flat_weights(p: &Policy) -> Tensor {
        let mut vars = p.var_store().variables().into_iter().collect::<Vec<_>>();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        Tensor::cat(
            &vars
                .iter()
                .map(|(_, v)| v.detach().reshape([-1]))
                .collect::<Vec<_>>(),
            0,
        )
    }

    /// Buckets of 7 elements, cutting variables anywhere, take the steps one bucket takes.
    #[test]
    fn small_buckets_take_the_steps_of_one_bucket() -> Result<()> {
        let (a, b) = (policy(2)?, policy(2)?);
        copy_weights(&a, &b)?;
        let cfg = OptimConfig {
            lr: 1e-2,
            ..Default::default()
        };
        let mut one = ShardedAdamW::new(a.var_store(), &cfg, 0, 1)?;
        let mut small = ShardedAdamW::new(b.var_store(), &cfg, 0, 1)?;
        small.set_bucket_bytes(28);
        let start = flat_weights(&a);
        for _ in 0..3 {
            for (p, z) in [(&a, &mut one), (&b, &mut small)] {
                z.zero_grad();
                backward(p);
                z.step(&Alone)?;
            }
        }
        let (wa, wb) = (flat_weights(&a), flat_weights(&b));
        assert!(wa.equal(&wb), "bucketed weights differ");
        let moved = (wa - start).abs().max().double_value(&[]);
        assert!(moved > 1e-3, "{moved}");
        Ok(())
    }

    /// Training goes on as if nothing had moved: a one-process optimiser after two steps, its
    /// state loaded into a sharded one, takes the third step the one process takes; that
    /// sharded state loaded back into one process takes the fourth step alike. A state loaded
    /// from before the second step (the negative control) does not.
    #[test]
    fn a_re_sharded_state_takes_the_steps_the_original_takes() -> Result<()> {
        let cfg = OptimConfig {
            lr: 1e-2,
            weight_decay: 0.1,
            max_grad_norm: 0.0,
            ..OptimConfig::default()
        };
        let dir = tempfile_dir("reshard-steps")?;
        let (state, weights) = (dir.join("optimizer.safetensors"), dir.join("w"));
        let early_path = dir.join("early/optimizer.safetensors");
        let reference = policy(2)?;
        let mut whole = crate::optim::AdamW::new(reference.var_store(), &cfg)?;
        for step in 0..2 {
            if step == 1 {
                whole.save(&early_path)?;
            }
            whole.zero_grad();
            backward(&reference);
            whole.step()?;
        }
        whole.save(&state)?;
        reference.save(&weights)?;
        // The third step: one process, and a sharded optimiser from its state.
        whole.zero_grad();
        backward(&reference);
        whole.step()?;
        let third = flat_weights(&reference);
        let sharded_policy = Policy::load(&weights, tch::Device::Cpu)?;
        let mut z = ShardedAdamW::new(sharded_policy.var_store(), &cfg, 0, 1)?;
        z.load_whole(&state, true)?;
        z.zero_grad();
        backward(&sharded_policy);
        z.step(&Alone)?;
        let gap = (flat_weights(&sharded_policy) - &third)
            .abs()
            .max()
            .double_value(&[]);
        assert!(gap <= 1e-6, "the sharded third step is {gap:e} off");
        // The fourth: the sharded state back in one process.
        z.save(&shard_file(&state, 0, 1))?;
        sharded_policy.save(&weights)?;
        whole.zero_grad();
        backward(&reference);
        whole.step()?;
        let fourth = flat_weights(&reference);
        let back = Policy::load(&weights, tch::Device::Cpu)?;
        let mut one = crate::optim::AdamW::new(back.var_store(), &cfg)?;
        one.load_shards(&state, 1, true)?;
        assert_eq!(one.step_count(), 3);
        one.zero_grad();
        backward(&back);
        one.step()?;
        let gap = (flat_weights(&back) - &fourth)
            .abs()
            .max()
            .double_value(&[]);
        assert!(
            gap <= 1e-6,
            "the fourth step after re-sharding is {gap:e} off"
        );
        // The control: the moments of one step earlier give another step.
        let back = Policy::load(&weights, tch::Device::Cpu)?;
        let mut stale = crate::optim::AdamW::new(back.var_store(), &cfg)?;
        stale.load_with(&early_path, false)?;
        stale.zero_grad();
        backward(&back);
        stale.step()?;
        let gap = (flat_weights(&back) - &fourth)
            .abs()
            .max()
            .double_value(&[]);
        assert!(gap > 1e-4, "a stale state took the same step ({gap:e})");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    pub(super) fn tempfile_dir(label: &str) -> Result<PathBuf> {
        let dir = std::env::temp_dir().join(format!("spade-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| PolicyError::io(&dir, e))?;
        Ok(dir)
    }
}
