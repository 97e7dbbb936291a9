//! AdamW in Rust over tch tensors, with a state that can be saved and restored (libtorch's
//! optimiser behind tch's `nn::Optimizer` cannot export its moments).
//!
//! The update is `torch.optim.AdamW`'s (`amsgrad=False`, `maximize=False`): for every trainable
//! variable `p` with a gradient `g`, at step `t` (counted from 1)
//!
//! ```text
//! p   <- p * (1 - lr * weight_decay)                 (decoupled weight decay)
//! m   <- beta1 * m + (1 - beta1) * g
//! v   <- beta2 * v + (1 - beta2) * g^2
//! p   <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//! ```
//!
//! **Mixed precision** (the recipe of PyTorch AMP with bf16 and of Megatron's distributed
//! optimiser): a variable of a half kind (bf16 or f16, the compute weights a CUDA policy runs
//! in) gets a float32 *master* copy; `p`, `m` and `v` above are float32 whatever the
//! variable's kind, the gradient is cast to float32 before it is used, and after the update the
//! master is rounded into the compute variable, so the sampler and the next forward pass use the
//! updated weights. A float32 variable is its own master (no copy). Why: at the paper's
//! learning rate (1e-6) one update is far below half a bf16 ulp of a typical weight (2^-9
//! relative), so updating bf16 weights in place would leave almost all of them unchanged.
//!
//! **Gradients accumulate in float32** (the reference's `--accumulate-allreduce-grads-in-fp32`):
//! a step's micro-batches each add a gradient; for a variable of a half kind,
//! [`AdamW::accumulate`] moves the gradient the backward pass left (in the variable's kind) into a
//! float32 accumulator and zeroes it, so the sum over micro-batches is a float32 sum. A bf16 sum
//! would drop every micro-batch's contribution below half an ulp of the running total (2^-9
//! relative): with many micro-batches, most of the small ones. Clipping ([`AdamW::clip_grad_norm`])
//! and the step read the accumulators.
//!
//! One step counter serves all variables (torch keeps one per parameter; they differ only for a
//! parameter that had no gradient at some step, which this model never has). A variable without
//! a gradient is left alone (no decay, no moment update), as torch does.
//!
//! [`AdamW::save`] writes one safetensors file: `exp_avg.<name>` and `exp_avg_sq.<name>` (float32)
//! for every trainable variable by its `VarStore` name, `master.<name>` (float32) for every
//! variable with a master copy, and the step count plus the hyper-parameters in the metadata.
//! [`AdamW::load`] checks the format, the step, that every variable has both moments with its
//! shape and that the file holds nothing else, and changes nothing unless all of it checks out;
//! saved masters become the masters (and, rounded, the compute weights); a mixed-precision
//! variable without a saved master starts from its compute weights.

use crate::error::{PolicyError, Result};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use tch::{Device, Kind, Tensor, nn::VarStore};

/// AdamW and gradient clipping settings.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Global L2 norm the gradients are scaled down to (0 disables clipping).
    pub max_grad_norm: f64,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            // The paper's learning rate for 4B-30B models (spade-spec.md, "Update").
            lr: 1e-6,
            // torch.optim.AdamW's defaults.
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            // slime's `--clip-grad` default.
            max_grad_norm: 1.0,
        }
    }
}

/// Name of the optimiser state file inside a checkpoint directory.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// The `format` metadata value of an optimiser state file.
pub const FORMAT: &str = "spade-adamw-v1";

/// One trainable variable and its moment estimates.
#[derive(Debug)]
struct Slot {
    name: String,
    /// The variable the model computes with.
    var: Tensor,
    /// Float32 weights the update is applied to, when `var` is of a half kind.
    master: Option<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    /// The float32 sum of the step's gradients so far, for a variable of a half kind (see
    /// [`AdamW::accumulate`]); none until a gradient arrives. After
    /// [`AdamW::sync_gradients`], the whole step's gradient for every variable.
    grad_acc: Option<Tensor>,
}

impl Slot {
    /// The float32 weights the update is applied to.
    fn weights(&self) -> &Tensor {
        self.master.as_ref().unwrap_or(&self.var)
    }

    /// Adds the variable's gradient into the float32 accumulator and zeroes it (half kinds only;
    /// a float32 variable's gradient is its own float32 sum).
    fn accumulate(&mut self) -> Result<()> {
        if self.master.is_none() {
            return Ok(());
        }
        let mut g = self.var.grad();
        if !g.defined() {
            return Ok(());
        }
        let g32 = g.f_to_kind(Kind::Float)?;
        match &mut self.grad_acc {
            Some(acc) => {
                let _ = acc.f_add_(&g32)?;
            }
            None => self.grad_acc = Some(g32),
        }
        let _ = g.f_zero_()?;
        Ok(())
    }

    /// The step's float32 gradient (after [`Slot::accumulate`]), if any.
    fn grad32(&self) -> Result<Option<Tensor>> {
        if self.master.is_some() || self.grad_acc.is_some() {
            return Ok(self.grad_acc.as_ref().map(Tensor::shallow_clone));
        }
        let g = self.var.grad();
        if !g.defined() {
            return Ok(None);
        }
        Ok(Some(if g.kind() == Kind::Float {
            g
        } else {
            g.f_to_kind(Kind::Float)?
        }))
    }
}

/// A collective started by [`GradientSync::reduce_start`] or
/// [`GradientSync::broadcast_start`]: [`Started::wait`] finishes it. One dropped unwaited (on
/// an error path: the trainer waits for every one it starts) is abandoned, not waited for, so
/// a failure surfaces after one group timeout and not one per collective in flight; the
/// group is out of step after that, as after any failed collective.
#[must_use = "a started collective's tensor holds its result only after the wait"]
pub struct Started(Option<Box<dyn FnOnce() -> Result<()>>>);

impl Started {
    /// Finished already.
    pub fn done() -> Self {
        Started(None)
    }

    /// Finished by `wait`.
    pub fn new(wait: impl FnOnce() -> Result<()> + 'static) -> Self {
        Started(Some(Box::new(wait)))
    }

    pub fn wait(mut self) -> Result<()> {
        match self.0.take() {
            Some(w) => w(),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Started(running)"
        } else {
            "Started(done)"
        })
    }
}

/// Sums tensors over the ranks of a data-parallel group, in place: the trainer's process group
/// (`spade_dist::ProcessGroup` behind it; the policy itself knows no collectives).
pub trait GradientSync {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// Sums the contiguous CPU tensor `t` over the ranks, in place.
    fn sum(&self, t: &mut Tensor) -> Result<()>;

    /// This rank's chunk of the sum over ranks of the 1-D `t`, cut into `world_size` equal
    /// chunks (its length divisible by it). The default sums everything and keeps the chunk;
    /// a process group overrides it with its reduce-scatter.
    fn reduce_scatter(&self, t: &Tensor) -> Result<Tensor> {
        let mut all = t.copy();
        self.sum(&mut all)?;
        let n = all.size()[0] / self.world_size().max(1) as i64;
        Ok(all.f_narrow(0, self.rank() as i64 * n, n)?.f_contiguous()?)
    }

    /// The sum over ranks of the contiguous CPU tensor `t` into rank `root`'s `t`; the other
    /// ranks' `t` is left undefined (scratch). The default sums on every rank; a process group
    /// overrides it with point-to-point sends to root, half an all-reduce's traffic.
    fn reduce(&self, t: &mut Tensor, root: usize) -> Result<()> {
        let _ = root;
        self.sum(t)
    }

    /// [`GradientSync::reduce`] started: done once the returned [`Started`] has been waited
    /// for, and no rank may touch its `t` before. The default finishes at once; a process
    /// group lets it run beside the caller's work.
    fn reduce_start(&self, t: &mut Tensor, root: usize) -> Result<Started> {
        self.reduce(t, root).map(|()| Started::done())
    }

    /// [`GradientSync::broadcast`] started, as [`GradientSync::reduce_start`].
    fn broadcast_start(&self, t: &mut Tensor, root: usize) -> Result<Started> {
        self.broadcast(t, root).map(|()| Started::done())
    }

    /// Rank `root`'s contiguous CPU tensor `t` into every rank's `t`. The default sums
    /// zeroed copies (exact: the other ranks add zeros); a process group overrides it with its
    /// broadcast.
    fn broadcast(&self, t: &mut Tensor, root: usize) -> Result<()> {
        if self.rank() != root {
            let _ = t.f_zero_()?;
        }
        self.sum(t)
    }

    /// Every rank's 1-D `t` (equal lengths), concatenated in rank order. The default sums
    /// zero-padded copies; a process group overrides it with its all-gather.
    fn all_gather(&self, t: &Tensor) -> Result<Tensor> {
        let n = t.size()[0];
        let mut all = Tensor::f_zeros([n * self.world_size() as i64], (t.kind(), t.device()))?;
        all.f_narrow(0, self.rank() as i64 * n, n)?.f_copy_(t)?;
        self.sum(&mut all)?;
        Ok(all)
    }
}

/// The update of the module doc, in place, at step `step` (counted from 1): float32 weights
/// `p`, moments `m` and `v`, gradient `g` (one variable, or a rank's slice of all of them).
pub(crate) fn adamw_update(
    c: &OptimConfig,
    step: u64,
    p: &mut Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    g: &Tensor,
) -> Result<()> {
    let t = i32::try_from(step).unwrap_or(i32::MAX);
    let bias2_sqrt = (1.0 - c.beta2.powi(t)).sqrt();
    let step_size = c.lr / (1.0 - c.beta1.powi(t));
    if c.weight_decay != 0.0 {
        let _ = p.f_mul_scalar_(1.0 - c.lr * c.weight_decay)?;
    }
    let _ = m.f_lerp_(g, 1.0 - c.beta1)?;
    let _ = v.f_mul_scalar_(c.beta2)?;
    let _ = v.f_addcmul_(g, &g.f_mul_scalar(1.0 - c.beta2)?)?;
    let denom = (v.f_sqrt()? / bias2_sqrt).f_add_scalar(c.eps)?;
    let _ = p.f_sub_(&m.f_div(&denom)?.f_mul_scalar(step_size)?)?;
    Ok(())
}

/// Writes `tensors` as float32 (cast and copied to the host) with `meta` as one safetensors
/// file at `path`, creating its directory: [`AdamW`]'s state and ZeRO-2's shard files.
pub(crate) fn write_state(
    path: &Path,
    tensors: &[(String, &Tensor)],
    meta: HashMap<String, String>,
) -> Result<()> {
    let bad = |reason: String| PolicyError::OptimizerState {
        path: path.to_path_buf(),
        reason,
    };
    let mut host: Vec<(&str, Vec<usize>, Vec<u8>)> = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let t = t
            .detach()
            .to_kind(Kind::Float)
            .to_device(Device::Cpu)
            .contiguous();
        let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        let numel = t.numel();
        let mut data = vec![0u8; numel * 4];
        t.f_copy_data_u8(&mut data, numel)?;
        host.push((name.as_str(), shape, data));
    }
    let mut views = Vec::with_capacity(host.len());
    for (name, shape, data) in &host {
        let view = TensorView::new(Dtype::F32, shape.clone(), data)
            .map_err(|e| bad(format!("`{name}`: {e:?}")))?;
        views.push((*name, view));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| PolicyError::io(dir, e))?;
    }
    safetensors::tensor::serialize_to_file(views, &Some(meta), path)
        .map_err(|e| bad(format!("{e:?}")))
}

/// The bytes and the metadata of a state file [`write_state`] wrote, or why it is not one.
pub(crate) fn read_state(path: &Path) -> Result<(Vec<u8>, HashMap<String, String>)> {
    let bytes = std::fs::read(path).map_err(|e| PolicyError::io(path, e))?;
    let (_, meta) =
        SafeTensors::read_metadata(&bytes).map_err(|e| PolicyError::OptimizerState {
            path: path.to_path_buf(),
            reason: format!("not a safetensors file: {e:?}"),
        })?;
    let meta = meta.metadata().clone().unwrap_or_default();
    Ok((bytes, meta))
}

/// The bytes and the step of a whole optimiser state ([`AdamW::save`]'s file), or why it is
/// not one (its format, its step).
pub(crate) fn read_whole_state(path: &Path) -> Result<(Vec<u8>, u64)> {
    let (bytes, meta) = read_state(path)?;
    let step = whole_state_step(path, &meta)?;
    Ok((bytes, step))
}

/// The step of a whole optimiser state whose metadata is `meta`, or why it is not one.
pub(crate) fn whole_state_step(path: &Path, meta: &HashMap<String, String>) -> Result<u64> {
    let bad = |reason: String| PolicyError::OptimizerState {
        path: path.to_path_buf(),
        reason,
    };
    match meta.get("format") {
        Some(f) if f == FORMAT => {}
        Some(f) => return Err(bad(format!("format `{f}`, expected `{FORMAT}`"))),
        None => return Err(bad(format!("no `format` metadata (expected `{FORMAT}`)"))),
    }
    let step: u64 = meta
        .get("step")
        .ok_or_else(|| bad("no `step` metadata".into()))?
        .parse()
        .map_err(|e| bad(format!("`step` metadata is not a step count: {e}")))?;
    Ok(step)
}

/// Kinds whose variables get a float32 master copy.
fn is_half(kind: Kind) -> bool {
    matches!(kind, Kind::BFloat16 | Kind::Half)
}

/// AdamW over the trainable variables of a `VarStore` (see the module doc).
#[derive(Debug)]
pub struct AdamW {
    cfg: OptimConfig,
    step: u64,
    /// In name order.
    slots: Vec<Slot>,
}

impl AdamW {
    /// Zero float32 moments for every trainable variable of `vs` (those requiring gradients),
    /// and a float32 master copy of each one of a half kind (see the module doc).
    pub fn new(vs: &VarStore, cfg: &OptimConfig) -> Result<Self> {
        let mut vars: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let slots = vars
            .into_iter()
            .map(|(name, var)| {
                tch::no_grad(|| -> Result<Slot> {
                    let master = if is_half(var.kind()) {
                        Some(var.f_detach()?.f_to_kind(Kind::Float)?)
                    } else {
                        None
                    };
                    let opts = (Kind::Float, var.device());
                    let exp_avg = Tensor::f_zeros(var.size(), opts)?;
                    let exp_avg_sq = Tensor::f_zeros(var.size(), opts)?;
                    Ok(Slot {
                        name,
                        var,
                        master,
                        exp_avg,
                        exp_avg_sq,
                        grad_acc: None,
                    })
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            cfg: cfg.clone(),
            step: 0,
            slots,
        })
    }

    /// An optimiser that holds no state: what a trainer whose state is sharded
    /// ([`crate::zero::ShardedAdamW`]) keeps in its place.
    pub fn without_state(cfg: &OptimConfig) -> Self {
        Self {
            cfg: cfg.clone(),
            step: 0,
            slots: Vec::new(),
        }
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &OptimConfig {
        &self.cfg
    }

    /// Steps taken so far (restored by [`AdamW::load`]).
    pub fn step_count(&self) -> u64 {
        self.step
    }

    /// Changes the learning rate for the following steps.
    pub fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }

    /// The names of the variables it updates, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.slots.iter().map(|s| s.name.as_str())
    }

    /// The moments `(exp_avg, exp_avg_sq)` of the variable `name`.
    pub fn moments(&self, name: &str) -> Option<(&Tensor, &Tensor)> {
        self.slots
            .iter()
            .find(|s| s.name == name)
            .map(|s| (&s.exp_avg, &s.exp_avg_sq))
    }

    /// The float32 weights the update is applied to for the variable `name`: its master copy
    /// when the variable is of a half kind, else the variable itself.
    pub fn master(&self, name: &str) -> Option<&Tensor> {
        self.slots
            .iter()
            .find(|s| s.name == name)
            .map(Slot::weights)
    }

    /// True when some variable trains through a float32 master copy.
    pub fn is_mixed(&self) -> bool {
        self.slots.iter().any(|s| s.master.is_some())
    }

    /// Zeroes the gradients of its variables and the float32 accumulators.
    pub fn zero_grad(&mut self) {
        for s in &mut self.slots {
            s.var.zero_grad();
            s.grad_acc = None;
        }
    }

    /// Moves the gradients the last backward pass left in variables of a half kind into their
    /// float32 accumulators (see the module doc); call it after each micro-batch. A no-op for a
    /// float32 model.
    pub fn accumulate(&mut self) -> Result<()> {
        tch::no_grad(|| self.slots.iter_mut().try_for_each(Slot::accumulate))
    }

    /// The float32 gradient the next step would use for the variable `name` (the accumulated
    /// sum for a variable of a half kind).
    pub fn gradient(&mut self, name: &str) -> Result<Option<Tensor>> {
        self.accumulate()?;
        match self.slots.iter().find(|s| s.name == name) {
            Some(s) => s.grad32(),
            None => Ok(None),
        }
    }

    /// Sums the step's float32 gradients over the ranks of `sync`, so every rank holds the
    /// whole step's gradient and takes the same step (data parallelism; one collective over a
    /// flat buffer). A variable without a gradient on this rank adds zeros.
    pub fn sync_gradients(&mut self, sync: &dyn GradientSync) -> Result<()> {
        self.accumulate()?;
        tch::no_grad(|| -> Result<()> {
            let mut parts = Vec::with_capacity(self.slots.len());
            for s in &self.slots {
                let g = match s.grad32()? {
                    Some(g) => g,
                    None => Tensor::f_zeros(s.var.size(), (Kind::Float, s.var.device()))?,
                };
                parts.push(g.f_reshape([-1])?.f_to_device(Device::Cpu)?);
            }
            let mut flat = Tensor::f_cat(&parts, 0)?;
            sync.sum(&mut flat)?;
            let mut offset = 0;
            for s in &mut self.slots {
                let n = s.var.numel() as i64;
                let g = flat
                    .f_narrow(0, offset, n)?
                    .f_view(s.var.size().as_slice())?
                    .f_to_device(s.var.device())?
                    .f_contiguous()?;
                offset += n;
                // Where the step reads it (grad32): the synced sum, whatever the kind.
                s.grad_acc = Some(g);
                if s.master.is_none() {
                    let mut own = s.var.grad();
                    if own.defined() {
                        let _ = own.f_zero_()?;
                    }
                }
            }
            Ok(())
        })
    }

    /// Scales the step's gradients together so their global L2 norm (in float32) is at most
    /// `max` (when `max > 0`); returns the norm before clipping.
    pub fn clip_grad_norm(&mut self, max: f64) -> Result<f64> {
        self.accumulate()?;
        tch::no_grad(|| -> Result<f64> {
            let mut grads = Vec::with_capacity(self.slots.len());
            for s in &self.slots {
                if let Some(g) = s.grad32()? {
                    grads.push((s, g));
                }
            }
            if grads.is_empty() {
                return Ok(0.0);
            }
            let norms = grads
                .iter()
                .map(|(_, g)| g.f_norm())
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let total = Tensor::f_stack(&norms, 0)?.f_norm()?.f_double_value(&[])?;
            if max > 0.0 && total > max {
                let scale = max / (total + 1e-6);
                for (s, g) in grads {
                    // The accumulator itself, or the variable's own (float32) gradient.
                    let mut target = if s.master.is_some() || s.grad_acc.is_some() {
                        g
                    } else {
                        s.var.grad()
                    };
                    let _ = target.f_mul_scalar_(scale)?;
                }
            }
            Ok(total)
        })
    }

    /// One AdamW step with the current gradients (the float32 accumulators for variables of a
    /// half kind, after adding what the last backward pass left).
    pub fn step(&mut self) -> Result<()> {
        self.accumulate()?;
        self.step += 1;
        let (c, step) = (&self.cfg, self.step);
        tch::no_grad(|| -> Result<()> {
            for s in &mut self.slots {
                let Some(g) = s.grad32()? else {
                    continue;
                };
                let mut p = s.weights().shallow_clone();
                adamw_update(c, step, &mut p, &mut s.exp_avg, &mut s.exp_avg_sq, &g)?;
                if s.master.is_some() {
                    // Round the float32 masters into the compute weights.
                    s.var.f_copy_(&p)?;
                }
            }
            Ok(())
        })
    }

    /// Writes the moments and the step count to `path` (see the module doc).
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut tensors = Vec::with_capacity(3 * self.slots.len());
        for s in &self.slots {
            tensors.push((format!("exp_avg.{}", s.name), &s.exp_avg));
            tensors.push((format!("exp_avg_sq.{}", s.name), &s.exp_avg_sq));
            if let Some(m) = &s.master {
                tensors.push((format!("master.{}", s.name), m));
            }
        }
        let c = &self.cfg;
        let metadata = HashMap::from([
            ("format".to_string(), FORMAT.to_string()),
            ("step".to_string(), self.step.to_string()),
            ("lr".to_string(), c.lr.to_string()),
            ("beta1".to_string(), c.beta1.to_string()),
            ("beta2".to_string(), c.beta2.to_string()),
            ("eps".to_string(), c.eps.to_string()),
            ("weight_decay".to_string(), c.weight_decay.to_string()),
        ]);
        write_state(path, &tensors, metadata)
    }

    /// Replaces the step count and every variable's moments and (with `masters`) master with
    /// its slice of the flat float32 state `[master, exp_avg, exp_avg_sq]` (the variables in
    /// name order, back to back: [`crate::zero`]'s layout). A float32 variable takes its slice
    /// of the masters as its weights. Nothing changes on an error.
    pub(crate) fn restore_flat(
        &mut self,
        step: u64,
        [master, exp_avg, exp_avg_sq]: [Tensor; 3],
        masters: bool,
    ) -> Result<()> {
        tch::no_grad(|| -> Result<()> {
            let mut loaded = Vec::with_capacity(self.slots.len());
            let mut offset = 0;
            for s in &self.slots {
                let len = s.var.numel() as i64;
                let part = |t: &Tensor| -> Result<Tensor> {
                    Ok(t.f_narrow(0, offset, len)?
                        .f_view(s.var.size().as_slice())?
                        .f_to_device(s.var.device())?
                        .copy())
                };
                loaded.push((part(&exp_avg)?, part(&exp_avg_sq)?, part(&master)?));
                offset += len;
            }
            for (s, (m, v, saved)) in self.slots.iter_mut().zip(loaded) {
                s.exp_avg = m;
                s.exp_avg_sq = v;
                if !masters {
                    continue;
                }
                if let Some(own) = &mut s.master {
                    *own = saved;
                    s.var.f_copy_(own)?;
                } else {
                    s.var.f_copy_(&saved)?;
                }
            }
            Ok(())
        })?;
        self.step = step;
        Ok(())
    }

    /// Elements of all trainable variables together.
    pub(crate) fn total_len(&self) -> i64 {
        self.slots.iter().map(|s| s.var.numel() as i64).sum()
    }

    /// Replaces the moments and the step count with those saved in `path`, and the masters
    /// with saved ones (see the module doc). The hyper-parameters stay this optimiser's (a
    /// resumed run may change the learning rate). Nothing changes on an error.
    pub fn load(&mut self, path: &Path) -> Result<()> {
        self.load_with(path, true)
    }

    /// [`AdamW::load`]; with `masters` false, saved masters are checked but not used (they are
    /// older than the weights, e.g. an optimiser state written fewer times than the weights),
    /// so the masters stay the current weights.
    pub fn load_with(&mut self, path: &Path, masters: bool) -> Result<()> {
        let bad = |reason: String| PolicyError::OptimizerState {
            path: path.to_path_buf(),
            reason,
        };
        let (bytes, step) = read_whole_state(path)?;
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| bad(format!("not a safetensors file: {e:?}")))?;
        let mut unused: BTreeSet<String> = st.names().into_iter().cloned().collect();
        let read = |name: &str, var: &Tensor| -> Result<Tensor> {
            let view = st.tensor(name).map_err(|_| PolicyError::MissingTensor {
                name: name.to_string(),
                path: path.to_path_buf(),
            })?;
            if view.dtype() != Dtype::F32 {
                return Err(bad(format!(
                    "`{name}` has dtype {:?}, expected F32",
                    view.dtype()
                )));
            }
            let found: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            if found != var.size() {
                return Err(bad(format!(
                    "`{name}` has shape {found:?} but variable `{}` has shape {:?}",
                    name.split_once('.').map_or(name, |(_, v)| v),
                    var.size()
                )));
            }
            Ok(Tensor::f_from_data_size(view.data(), &found, Kind::Float)?
                .f_to_device(var.device())?)
        };
        // (exp_avg, exp_avg_sq, saved master) per slot, all checked before anything changes.
        let mut loaded = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            let mut pair = vec![];
            for prefix in ["exp_avg", "exp_avg_sq"] {
                let name = format!("{prefix}.{}", s.name);
                pair.push(read(&name, &s.var)?);
                unused.remove(&name);
            }
            let name = format!("master.{}", s.name);
            let master = if unused.remove(&name) && masters {
                Some(read(&name, &s.var)?)
            } else {
                None
            };
            loaded.push((pair, master));
        }
        if let Some(extra) = unused.into_iter().next() {
            return Err(bad(format!(
                "`{extra}` matches no trainable variable of this model"
            )));
        }
        tch::no_grad(|| -> Result<()> {
            for (s, (pair, master)) in self.slots.iter_mut().zip(loaded) {
                let mut it = pair.into_iter();
                if let (Some(m), Some(v)) = (it.next(), it.next()) {
                    s.exp_avg = m;
                    s.exp_avg_sq = v;
                }
                match (master, &mut s.master) {
                    // Saved masters are the weights; the compute copy is their rounding.
                    (Some(saved), Some(own)) => {
                        *own = saved;
                        s.var.f_copy_(own)?;
                    }
                    (Some(saved), None) => s.var.f_copy_(&saved)?,
                    // Without saved masters, the masters start from the compute weights
                    // (as set by `new`).
                    (None, _) => {}
                }
            }
            Ok(())
        })?;
        self.step = step;
        Ok(())
    }
}
