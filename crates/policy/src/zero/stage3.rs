//! ZeRO-3: during a training step no rank holds the decoder layers' weights whole. The masters
//! and moments are ZeRO-2's slices (the same flat layout, so the same shard files: a checkpoint
//! resumes under either stage and on any rank count), and the bf16 weights are their cast, so
//! the rank that owns a stretch of the flat vector is the one that can make it whole:
//!
//! - at the start of a step's passes every decoder layer's variables are released (an empty
//!   tensor each); the embedding, the final norm and the head stay whole (one vocabulary-sized
//!   matrix or two, every pass needs them first and last);
//! - a pass (with recompute, [`crate::qwen3::WeightUnits`]) makes layer `i` whole just before
//!   its forward and again before its recomputed backward: the layer's variables are one
//!   contiguous stretch of the flat layout (names sort layer by layer), so its owner ranks
//!   (one, or two where a slice boundary cuts it) broadcast their masters' part, and every rank
//!   casts to the weights' kind, as the ZeRO-2 all-gather does. The broadcasts of the layer a
//!   pass will ask for next are started as soon as the current one is whole (a prefetch), so
//!   they run beside its compute and a rank waits only for what has not arrived by then. The
//!   layer is dropped when the next one is made whole, except that the one a pass asks for
//!   again next stays (the last layer from its forward to its backward, the first from one
//!   pass's backward to the next pass's forward: 2 of each pass's 2 x layers gathers saved);
//! - the layer's gradients from one pass are summed into their owners (a reduce to each owner
//!   rank, float32, point to point: half an all-reduce's traffic), left running beside the
//!   next layer's backward, and each owner adds the sum to its float32 gradient slice when the
//!   next layer's reduce starts (or at the step); a rank with fewer micro-batches than another
//!   runs passes with no tokens (the same gathers, zero gradients) so the collectives stay in
//!   step;
//! - at the step the whole-on-every-rank variables' gradients are summed once (all-reduce),
//!   each rank adds its part, and the update and the all-gather are ZeRO-2's; the all-gather
//!   makes every layer whole again, so the rollouts between steps sample with whole weights
//!   (gathered once per step) while the optimiser state stays sharded.
//!
//! A Qwen3-MoE layer's experts are part of its stretch, so each rank holds a slice of them
//! (the stretch cut by the flat layout, not whole experts per rank) and a layer's experts are
//! whole only while that layer runs. Peak memory of a step is then the slices, the whole
//! embedding and head, one layer's weights and the next one's float32 on its way, the
//! activations of one micro-batch with recompute, one layer's gradients and the previous
//! one's float32 sums on their way ([`crate::memplan`]).
//!
//! What it costs beside ZeRO-2: each layer is broadcast twice per pass but for the two kept
//! (float32: the masters') and its gradients reduced once per pass instead of one
//! reduce-scatter per step; on CPU ranks with Gloo that is the price of the memory, and
//! what the prefetch and the running reduces do not hide shows as the ranks' seconds in
//! collectives (`spade model bench --ranks 2 --zero-stage 3`).

use super::ShardedAdamW;
use crate::error::{PolicyError, Result};
use crate::optim::GradientSync;
use crate::qwen3::WeightUnits;
use std::ops::Range;
use tch::{Kind, Tensor};

/// Which ZeRO stage a sharded trainer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroStage {
    /// Optimiser state sharded; whole weights and gradients on every rank.
    #[default]
    Two,
    /// The decoder layers' weights and gradients sharded too during a step.
    Three,
}

impl std::fmt::Display for ZeroStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ZeroStage::Two => "ZeRO-2",
            ZeroStage::Three => "ZeRO-3",
        })
    }
}

/// A ZeRO-3 optimiser's view of the model: each decoder layer's variables and flat stretch.
#[derive(Debug)]
pub(super) struct Layers {
    /// Per decoder layer: its variables (indices into the optimiser's `vars`, consecutive) and
    /// its stretch `[start, end)` of the flat layout.
    layers: Vec<(Range<usize>, i64, i64)>,
    /// Variables outside the layers: whole on every rank.
    rest: Vec<usize>,
    /// Every variable's shape (a released one has none).
    shapes: Vec<Vec<i64>>,
    /// This rank's slice of the step's layer gradients (float32), once a pass has added any.
    grad: Option<Tensor>,
    released: bool,
    /// The layer the pass asked for next, on its way (see [`Prefetch`]).
    prefetch: Option<Prefetch>,
    /// The last layer's gradient sums on their way to their owners (see [`Reducing`]).
    reducing: Option<Reducing>,
    /// The one layer left whole after the pass said it was done with it: a pass asks for its
    /// last layer again right after the head and the next pass for the first one right after
    /// the embedding, and the masters do not change between a step's passes, so its drop waits
    /// for the next gather of another layer (or the step) instead of costing a gather.
    held: Option<usize>,
}

/// A layer's float32 stretch whose owners' broadcasts were started by a prefetch: it runs
/// beside the current layer's compute, so a rank waits only for what has not arrived by the
/// time the pass needs the layer, not for every other rank at every layer.
#[derive(Debug)]
struct Prefetch {
    layer: usize,
    whole: Tensor,
    started: Vec<crate::optim::Started>,
}

/// A pass's gradient sums of one layer whose reduces to their owners were started: they are
/// waited for and added to this rank's slice when the next layer's reduces start (or at the
/// step).
#[derive(Debug)]
struct Reducing {
    flat: Tensor,
    start: i64,
    started: Vec<crate::optim::Started>,
}

/// The decoder layer a variable name belongs to (`model.layers.{i}.…`).
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("model.layers.")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

impl Layers {
    /// `offsets`: every variable's start in the flat layout.
    pub(super) fn new(vars: &[(String, Tensor, i64)], offsets: &[i64]) -> Result<Self> {
        // Names sort as text (layer 10 before layer 2): collect by number.
        let mut by_layer: std::collections::BTreeMap<usize, (Range<usize>, i64, i64)> =
            Default::default();
        let mut rest = vec![];
        for (i, (name, _, len)) in vars.iter().enumerate() {
            let Some(l) = layer_of(name) else {
                rest.push(i);
                continue;
            };
            match by_layer.get_mut(&l) {
                None => {
                    by_layer.insert(l, (i..i + 1, offsets[i], offsets[i] + len));
                }
                Some((range, _, end)) if range.end == i => {
                    range.end = i + 1;
                    *end = offsets[i] + len;
                }
                Some(_) => {
                    return Err(PolicyError::InvalidInput(format!(
                        "ZeRO-3: variable `{name}` of layer {l} is not beside its layer's \
                         others (the flat layout needs each layer's variables together)"
                    )));
                }
            }
        }
        if by_layer.is_empty() || by_layer.keys().copied().ne(0..by_layer.len()) {
            return Err(PolicyError::InvalidInput(format!(
                "ZeRO-3: the model's `model.layers.N.` variables are of layers {:?}, expected \
                 0 to N-1",
                by_layer.keys().collect::<Vec<_>>()
            )));
        }
        let layers: Vec<(Range<usize>, i64, i64)> = by_layer.into_values().collect();
        Ok(Self {
            layers,
            rest,
            shapes: vars.iter().map(|(_, t, _)| t.size()).collect(),
            grad: None,
            released: false,
            prefetch: None,
            reducing: None,
            held: None,
        })
    }

    pub(super) fn shape(&self, var: usize) -> &[i64] {
        &self.shapes[var]
    }

    pub(super) fn zero_grad(&mut self) {
        self.grad = None;
    }

    /// The all-gather made every layer whole again.
    pub(super) fn restored(&mut self) {
        self.released = false;
        self.held = None;
    }

    /// The masters were replaced (a loaded state): a layer left whole is stale.
    pub(super) fn masters_changed(&mut self) {
        self.held = None;
    }
}

fn no_layers() -> PolicyError {
    PolicyError::InvalidInput("a ZeRO-2 optimiser has no layer units".into())
}

/// This rank's part of the flat stretch `[start, start + len)`: (offset in the stretch, offset
/// in the slice, elements), or None.
fn overlap(rank: usize, shard: i64, start: i64, len: i64) -> Option<(i64, i64, i64)> {
    let (lo, hi) = (rank as i64 * shard, (rank as i64 + 1) * shard);
    let (a, b) = (start.max(lo), (start + len).min(hi));
    (a < b).then_some((a - start, a - lo, b - a))
}

impl ShardedAdamW {
    fn layers(&self) -> Result<&Layers> {
        self.stage3.as_ref().ok_or_else(no_layers)
    }

    fn layers_mut(&mut self) -> Result<&mut Layers> {
        self.stage3.as_mut().ok_or_else(no_layers)
    }

    /// Decoder layers of a ZeRO-3 optimiser's model (0 for ZeRO-2).
    pub fn num_layers(&self) -> usize {
        self.stage3.as_ref().map_or(0, |l| l.layers.len())
    }

    /// Drops every decoder layer's whole weights (ZeRO-3, at the start of a step's passes; the
    /// step's all-gather brings them back). Nothing to do for ZeRO-2 or when already done.
    pub fn release_layers(&mut self) -> Result<()> {
        let Some(l) = &mut self.stage3 else {
            return Ok(());
        };
        if l.released {
            return Ok(());
        }
        let n = l.layers.len();
        (0..n).try_for_each(|i| self.release_layer(i))?;
        let l = self.layers_mut()?;
        l.released = true;
        l.held = None;
        Ok(())
    }

    /// The layer-wise hooks of one pass over the group `sync` (ZeRO-3).
    pub fn units<'a>(&'a mut self, sync: &'a dyn GradientSync) -> Zero3Units<'a> {
        Zero3Units { z: self, sync }
    }

    /// What a pass with layer-wise weights asks of the group, for a rank with no micro-batch
    /// left in this round: every gather, zero gradients (see the module doc).
    pub fn idle_pass(&mut self, sync: &dyn GradientSync) -> Result<()> {
        let n = self.layers()?.layers.len();
        let mut u = self.units(sync);
        for i in 0..n {
            u.gather(i)?;
            if i + 1 < n {
                u.prefetch(i + 1)?;
            }
            u.release(i)?;
        }
        for i in (0..n).rev() {
            u.gather(i)?;
            if i > 0 {
                u.prefetch(i - 1)?;
            }
            u.reduce(i, &[])?;
            u.release(i)?;
        }
        Ok(())
    }

    /// Starts making layer `i` whole: each owner's part of its stretch broadcast straight
    /// into a new float32 buffer (a 1-D narrow is contiguous), owners in rank order on every
    /// rank so the broadcasts match.
    fn start_layer(&self, i: usize, sync: &dyn GradientSync) -> Result<Prefetch> {
        let (rank, world, shard) = (self.rank, self.world, self.shard);
        let (_, start, end) = self.layers()?.layers[i].clone();
        let len = end - start;
        // Every element is written: by an owner's copy or by its broadcast.
        let whole = Tensor::f_empty([len], (Kind::Float, self.master.device()))?;
        let mut started = vec![];
        for owner in 0..world {
            let Some((at, from, n)) = overlap(owner, shard, start, len) else {
                continue;
            };
            let mut part = whole.f_narrow(0, at, n)?;
            if owner == rank {
                part.f_copy_(&self.master.f_narrow(0, from, n)?)?;
            }
            started.push(sync.broadcast_start(&mut part, owner)?);
        }
        Ok(Prefetch {
            layer: i,
            whole,
            started,
        })
    }

    fn prefetch_layer(&mut self, i: usize, sync: &dyn GradientSync) -> Result<()> {
        let l = self.layers()?;
        if l.held == Some(i) || l.prefetch.as_ref().is_some_and(|p| p.layer == i) {
            return Ok(());
        }
        self.drain_prefetch()?;
        let p = self.start_layer(i, sync)?;
        self.layers_mut()?.prefetch = Some(p);
        Ok(())
    }

    /// Waits for a prefetch nobody asked for (its broadcasts still have to pass on every
    /// rank) and drops it.
    fn drain_prefetch(&mut self) -> Result<()> {
        if let Some(p) = self.layers_mut()?.prefetch.take() {
            p.started.into_iter().try_for_each(|s| s.wait())?;
        }
        Ok(())
    }

    fn gather_layer(&mut self, i: usize, sync: &dyn GradientSync) -> Result<()> {
        let l = self.layers_mut()?;
        if l.held == Some(i) {
            return Ok(());
        }
        let ready = match l.prefetch.take() {
            Some(p) if p.layer == i => p,
            other => {
                self.layers_mut()?.prefetch = other;
                self.drain_prefetch()?;
                self.start_layer(i, sync)?
            }
        };
        ready.started.into_iter().try_for_each(|s| s.wait())?;
        if let Some(h) = self.layers_mut()?.held.take() {
            self.release_layer(h)?;
        }
        let (range, start, _) = self.layers()?.layers[i].clone();
        let l = self.stage3.as_mut().ok_or_else(no_layers)?;
        for j in range {
            let (_, v, n) = &mut self.vars[j];
            let w = ready
                .whole
                .f_narrow(0, self.offsets[j] - start, *n)?
                .f_view(l.shapes[j].as_slice())?
                .f_to_kind(v.kind())?
                .f_to_device(v.device())?;
            v.set_data(&w);
        }
        l.held = Some(i);
        Ok(())
    }

    /// The pass is done with layer `i`: its drop is deferred (see [`Layers::held`]).
    fn done_with_layer(&mut self, i: usize) -> Result<()> {
        let l = self.layers()?;
        if l.held != Some(i) {
            return Err(PolicyError::InvalidInput(format!(
                "ZeRO-3: layer {i} given back but {} is the one whole",
                l.held.map_or("none".into(), |h| h.to_string())
            )));
        }
        Ok(())
    }

    fn release_layer(&mut self, i: usize) -> Result<()> {
        let range = self.layers()?.layers[i].0.clone();
        for (_, v, _) in &mut self.vars[range] {
            v.set_data(&Tensor::f_empty([0], (v.kind(), v.device()))?);
        }
        Ok(())
    }

    /// Starts summing one pass's gradients of layer `i` into their owner ranks and finishes
    /// the previous layer's (this rank's part added to its gradient slice); `grads` in the
    /// layer's variable order, undefined (or missing) = none.
    fn reduce_layer(&mut self, i: usize, grads: &[Tensor], sync: &dyn GradientSync) -> Result<()> {
        let shard = self.shard;
        let device = self.master.device();
        let l = self.layers()?;
        let (range, start, end) = l.layers[i].clone();
        let parts = range
            .clone()
            .enumerate()
            .map(|(k, j)| -> Result<Tensor> {
                let n = self.vars[j].2;
                Ok(match grads.get(k).filter(|g| g.defined()) {
                    Some(g) => g
                        .f_to_kind(Kind::Float)?
                        .f_to_device(device)?
                        .f_reshape([-1])?,
                    None => Tensor::f_zeros([n], (Kind::Float, device))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let flat = Tensor::f_cat(&parts, 0)?;
        // Each owner needs only the sum of its own part: a reduce to it, half an all-reduce's
        // traffic; every rank walks the owners in the same order so the reduces match. They
        // run beside the next layer's backward; the previous layer's are finished here.
        let len = end - start;
        let mut started = vec![];
        for owner in 0..self.world {
            if let Some((at, _, n)) = overlap(owner, shard, start, len) {
                started.push(sync.reduce_start(&mut flat.f_narrow(0, at, n)?, owner)?);
            }
        }
        self.finish_reducing()?;
        self.layers_mut()?.reducing = Some(Reducing {
            flat,
            start,
            started,
        });
        Ok(())
    }

    /// Waits for the started reduces of a layer and adds this rank's part of their sums to
    /// its gradient slice.
    fn finish_reducing(&mut self) -> Result<()> {
        let Some(r) = self.layers_mut()?.reducing.take() else {
            return Ok(());
        };
        r.started.into_iter().try_for_each(|s| s.wait())?;
        let (rank, shard) = (self.rank, self.shard);
        let len = r.flat.size()[0];
        self.add_to_slice(&r.flat, r.start, len, rank, shard)
    }

    /// Adds the part of the flat stretch `[start, start + len)` (values `flat`) that falls in
    /// this rank's slice to the gradient slice.
    fn add_to_slice(
        &mut self,
        flat: &Tensor,
        start: i64,
        len: i64,
        rank: usize,
        shard: i64,
    ) -> Result<()> {
        let Some((at, to, n)) = overlap(rank, shard, start, len) else {
            return Ok(());
        };
        let device = self.master.device();
        let l = self.layers_mut()?;
        if l.grad.is_none() {
            l.grad = Some(Tensor::f_zeros([shard], (Kind::Float, device))?);
        }
        if let Some(g) = &l.grad {
            let _ = g.f_narrow(0, to, n)?.f_add_(&flat.f_narrow(0, at, n)?)?;
        }
        Ok(())
    }

    /// ZeRO-3's gradient slice of the step: the layers' (summed pass by pass) and the whole
    /// variables' (summed here, once).
    pub(super) fn stage3_gradient(&mut self, sync: &dyn GradientSync) -> Result<Tensor> {
        self.finish_reducing()?;
        self.drain_prefetch()?;
        let (rank, shard) = (self.rank, self.shard);
        let rest = self.layers()?.rest.clone();
        let parts = rest
            .iter()
            .map(|&j| self.flat_grad(j))
            .collect::<Result<Vec<_>>>()?;
        if !parts.is_empty() {
            let mut flat = Tensor::f_cat(&parts, 0)?;
            sync.sum(&mut flat)?;
            let mut at = 0;
            for &j in &rest {
                let (start, n) = (self.offsets[j], self.vars[j].2);
                self.add_to_slice(&flat.f_narrow(0, at, n)?, start, n, rank, shard)?;
                at += n;
            }
        }
        let device = self.master.device();
        Ok(match self.layers_mut()?.grad.take() {
            Some(g) => g,
            None => Tensor::f_zeros([shard], (Kind::Float, device))?,
        })
    }
}

/// One pass's layer-wise hooks (see [`ShardedAdamW::units`]).
pub struct Zero3Units<'a> {
    z: &'a mut ShardedAdamW,
    sync: &'a dyn GradientSync,
}

impl std::fmt::Debug for Zero3Units<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zero3Units")
            .field("rank", &self.z.rank)
            .field("layers", &self.z.num_layers())
            .finish()
    }
}

impl WeightUnits for Zero3Units<'_> {
    fn gather(&mut self, layer: usize) -> Result<()> {
        tch::no_grad(|| self.z.gather_layer(layer, self.sync))
    }

    fn prefetch(&mut self, layer: usize) -> Result<()> {
        tch::no_grad(|| self.z.prefetch_layer(layer, self.sync))
    }

    fn release(&mut self, layer: usize) -> Result<()> {
        self.z.done_with_layer(layer)
    }

    fn params(&self, layer: usize) -> Vec<Tensor> {
        match &self.z.stage3 {
            Some(l) => self.z.vars[l.layers[layer].0.clone()]
                .iter()
                .map(|(_, v, _)| v.shallow_clone())
                .collect(),
            None => vec![],
        }
    }

    fn reduce(&mut self, layer: usize, grads: &[Tensor]) -> Result<()> {
        tch::no_grad(|| self.z.reduce_layer(layer, grads, self.sync))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;
    use crate::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
    use crate::qwen3::PassOptions;
    use crate::train::{self, MaskedSeq};
    use crate::zero::tests::{Alone, copy_weights};
    use tch::Device;

    /// Twelve layers: their names sort as text (`layers.10` before `layers.2`).
    fn policy() -> Result<Policy> {
        crate::zero::tests::policy(12)
    }

    fn samples(p: &Policy) -> Result<Vec<GrpoSample>> {
        (0..5i64)
            .map(|i| {
                let prompt: Vec<i64> = (0..3 + i % 2).map(|k| 1 + (i + k) % 30).collect();
                let completion: Vec<i64> = (0..3 + i % 3).map(|k| 2 + (5 * i + k) % 29).collect();
                let seq = MaskedSeq::prompt_completion(&prompt, &completion);
                let old = train::token_logprobs(p.model(), std::slice::from_ref(&seq.ids), 1.0)?
                    .remove(0);
                Ok(GrpoSample {
                    seq,
                    old_logprobs: old,
                    behavior_logprobs: None,
                    advantage: [1.0, -0.5, 0.25, -1.0, 0.5][i as usize],
                    weight: 1.0,
                })
            })
            .collect()
    }

    fn config() -> GrpoConfig {
        GrpoConfig {
            temperature: 1.0,
            micro_batch_tokens: 12,
            recompute: true,
            optim: crate::train::OptimConfig {
                lr: 1e-2,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn flat(p: &Policy) -> Result<Tensor> {
        let mut vars = p.var_store().variables().into_iter().collect::<Vec<_>>();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Tensor::f_cat(
            &vars
                .iter()
                .map(|(_, v)| v.detach().reshape([-1]))
                .collect::<Vec<_>>(),
            0,
        )?)
    }

    /// On one rank ZeRO-3 takes the steps the whole optimiser takes (every layer gathered,
    /// released and its gradient handed over), and the weights are whole between steps.
    #[test]
    fn zero_3_takes_the_steps_of_the_whole_optimizer() -> Result<()> {
        let (a, b) = (policy()?, policy()?);
        copy_weights(&a, &b)?;
        let start = flat(&a)?;
        let mut whole = GrpoTrainer::new(&a, config())?;
        let mut z3 = GrpoTrainer::new_sharded_stage(&b, config(), 0, 1, ZeroStage::Three)?;
        for _ in 0..3 {
            let (sa, sb) = (samples(&a)?, samples(&b)?);
            let la = whole.step(&a, &sa)?.loss;
            let lb = z3.step_synced(&b, &sb, Some(&Alone))?.loss;
            assert!((la - lb).abs() <= 1e-5 * la.abs().max(1e-3), "{la} vs {lb}");
        }
        let d = (flat(&a)? - flat(&b)?).abs().max().double_value(&[]);
        let moved = (flat(&a)? - start).abs().max().double_value(&[]);
        assert!(d < 1e-5 && moved > 1e-3, "apart {d}, moved {moved}");
        Ok(())
    }

    /// A group of one that counts the broadcasts: on one rank every gather that fetches a
    /// layer is one broadcast.
    #[derive(Default)]
    struct Counting(std::cell::Cell<usize>);

    impl GradientSync for Counting {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            1
        }
        fn sum(&self, _: &mut Tensor) -> Result<()> {
            Ok(())
        }
        fn broadcast(&self, _: &mut Tensor, _: usize) -> Result<()> {
            self.0.set(self.0.get() + 1);
            Ok(())
        }
    }

    /// The units of a pass, checking that no two layers are ever whole at once.
    struct OneAtATime<'a> {
        inner: Zero3Units<'a>,
        vars: Vec<(usize, Tensor)>,
        gathers: usize,
    }

    impl OneAtATime<'_> {
        fn whole_layers(&self) -> std::collections::BTreeSet<usize> {
            self.vars
                .iter()
                .filter(|(_, v)| v.numel() > 0)
                .map(|(l, _)| *l)
                .collect()
        }
    }

    impl WeightUnits for OneAtATime<'_> {
        fn gather(&mut self, layer: usize) -> Result<()> {
            assert!(self.whole_layers().len() <= 1, "before layer {layer}");
            self.inner.gather(layer)?;
            assert_eq!(
                self.whole_layers(),
                [layer].into(),
                "gathering layer {layer}"
            );
            self.gathers += 1;
            Ok(())
        }
        fn release(&mut self, layer: usize) -> Result<()> {
            self.inner.release(layer)?;
            assert!(self.whole_layers().len() <= 1, "after layer {layer}");
            Ok(())
        }
        fn params(&self, layer: usize) -> Vec<Tensor> {
            self.inner.params(layer)
        }
        fn reduce(&mut self, layer: usize, grads: &[Tensor]) -> Result<()> {
            assert!(
                grads.iter().all(Tensor::defined),
                "layer {layer}: a gradient missing"
            );
            self.inner.reduce(layer, grads)
        }
    }

    #[test]
    fn a_pass_holds_one_layer_whole_at_a_time() -> Result<()> {
        let p = policy()?;
        let mut z =
            ShardedAdamW::with_stage(p.var_store(), &config().optim, 0, 1, ZeroStage::Three)?;
        let vars: Vec<(usize, Tensor)> = p
            .var_store()
            .variables()
            .into_iter()
            .filter_map(|(n, v)| layer_of(&n).map(|l| (l, v)))
            .collect();
        z.release_layers()?;
        let seq = MaskedSeq::prompt_completion(&[1, 2, 3], &[4, 5, 6]);
        let packed = train::pack(&[&seq], Device::Cpu)?;
        let o = PassOptions {
            temperature: 1.0,
            chunk_tokens: 4,
            recompute: true,
            router_aux: 0.0,
            entropy: false,
        };
        let group = Counting::default();
        let mut units = OneAtATime {
            inner: z.units(&group),
            vars,
            gathers: 0,
        };
        let pass = |units: &mut OneAtATime<'_>| -> Result<()> {
            p.model()
                .backward_packed_units(&packed.ids, &o, Some(units), |lp, _| {
                    Ok(-lp.sum(Kind::Float))
                })
                .map(|_| ())
        };
        pass(&mut units)?;
        // Each of the 12 layers asked for twice: its forward and its recomputed backward.
        assert_eq!(units.gathers, 24);
        // Fetched 23 times: the last layer stays whole from its forward to its backward.
        assert_eq!(group.0.get(), 23);
        // The first layer is left whole for the next pass, which fetches 22.
        assert_eq!(units.whole_layers(), [0].into());
        pass(&mut units)?;
        assert_eq!((units.gathers, group.0.get()), (48, 45));
        // Without recompute a layer-wise pass is refused.
        let err = p
            .model()
            .backward_packed_units(
                &packed.ids,
                &PassOptions {
                    recompute: false,
                    ..o
                },
                Some(&mut units),
                |lp, _| Ok(-lp.sum(Kind::Float)),
            )
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("needs recompute"), "{err}");
        // The step brings every layer back whole.
        let mut z = z;
        z.step(&Alone)?;
        assert!(p.var_store().variables().values().all(|v| v.numel() > 0));
        Ok(())
    }

    /// ZeRO-3 writes ZeRO-2's shard files: a state saved by one stage resumes under the other
    /// and both take the same next step.
    #[test]
    fn a_zero_3_state_resumes_under_zero_2_and_back() -> Result<()> {
        let dir = crate::zero::tests::tempfile_dir("zero3-resume")?;
        let (a, b) = (policy()?, policy()?);
        copy_weights(&a, &b)?;
        let mut z3 = GrpoTrainer::new_sharded_stage(&a, config(), 0, 1, ZeroStage::Three)?;
        for _ in 0..2 {
            let sa = samples(&a)?;
            z3.step_synced(&a, &sa, Some(&Alone))?;
        }
        let file = dir.join("optimizer.safetensors");
        z3.save_optimizer(&file)?;
        // The other stage on the same weights, from the saved state; and, the control, from
        // no state.
        let c = policy()?;
        copy_weights(&a, &b)?;
        copy_weights(&a, &c)?;
        let mut z2 = GrpoTrainer::new_sharded_stage(&b, config(), 0, 1, ZeroStage::Two)?;
        z2.load_optimizer(&file)?;
        let mut fresh = GrpoTrainer::new_sharded_stage(&c, config(), 0, 1, ZeroStage::Two)?;
        let (sa, sb, sc) = (samples(&a)?, samples(&b)?, samples(&c)?);
        z3.step_synced(&a, &sa, Some(&Alone))?;
        z2.step_synced(&b, &sb, Some(&Alone))?;
        fresh.step_synced(&c, &sc, Some(&Alone))?;
        let apart = |x: &Policy| -> Result<f64> {
            Ok((flat(&a)? - flat(x)?).abs().max().double_value(&[]))
        };
        let (resumed, control) = (apart(&b)?, apart(&c)?);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            resumed < 1e-6 && control > 1e-4,
            "resumed {resumed}, without the state {control}"
        );
        Ok(())
    }

    #[test]
    fn zero_3_without_recompute_is_refused() {
        let p = policy().expect("policy");
        let cfg = GrpoConfig {
            recompute: false,
            ..config()
        };
        let err = GrpoTrainer::new_sharded_stage(&p, cfg, 0, 1, ZeroStage::Three)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("grpo.recompute"), "{err}");
    }
}
