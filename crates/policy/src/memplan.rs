//! The memory a run needs on its device, worked out before the first step from the model's
//! shape and the training recipe, so that a plan that cannot fit is refused with the numbers
//! instead of running out of memory in the first designer round, and so that
//! `model.kv_cache_tokens = "auto"` can give the engine what is left (as vLLM's
//! `gpu_memory_fraction` does).
//!
//! What is counted, for P parameters stored in a kind of `w` bytes (bf16 on CUDA, float32 on
//! the CPU):
//! - weights: `P w`;
//! - gradients: the `.grad` each backward pass leaves, `P w`, plus, for a half kind, the float32
//!   accumulator the step sums micro-batches into (`P 4`; see [`crate::optim`]), plus, with
//!   ranks (ZeRO-2), the rank's float32 slice of the sum (`4 P / ranks`) and the two 25 MB
//!   buckets of the reduce-scatter and the all-gather;
//! - masters: float32 copies of half-kind weights, `P 4` (none in float32);
//! - moments: AdamW's two float32 moments, `P 8`;
//! - reference: a frozen copy of the weights when the loss has a KL term, `P w`;
//! - activations of one micro-batch of `T` tokens: per layer and token the tensors autograd
//!   keeps, `(5 H + 2 Q + 2 K + 4 I) w` bytes (attention: norm input and output, query,
//!   key and value, attention output, output projection; MLP: norm output, gate, up, their
//!   activation and product, down projection; H hidden, Q = heads x head_dim, K = KV heads x
//!   head_dim, I the MLP width or, for a MoE layer, top-k x the expert width). With recompute,
//!   only each layer's input (`L T H w`) plus one layer's tensors are held at once. Attention
//!   scores are not counted: CUDA's flash and memory-efficient kernels keep none (the CPU's
//!   math kernel does; the CPU plan is advice, never a refusal);
//! - logits: float32 logits and log-probabilities of one log-prob chunk, `2 C V 4`;
//! - KV cache: `slots x L x 2 x K x w`.
//!
//! With ZeRO-3 ([`Recipe::zero3`], [`crate::zero`]'s stage 3) a rank's memory has two phases,
//! and the plan counts each apart ([`Phase`]): the rollouts sample with whole weights (`P w`,
//! made whole by the all-gather after each update) and the KV cache, while the update holds
//! no decoder layer whole (released at the start of its passes) and no KV cache (a new
//! engine is made per phase). Both hold the optimiser's slices, the KL reference and the
//! whole ends' gradients (embedding, final norm and head: `E (w + 4)` for a half kind,
//! counted in both phases). The update adds the ends' weights (`E w`), one layer's gradients
//! (its autograd gradients and the float32 vector its reduce sums, `Y (w + 4)`, Y the largest
//! layer's parameters), the previous layer's float32 sums still on their way to their owner
//! and the owner's receive buffer (`Y 8`) and the rank's float32 gradient slice (`4 P /
//! ranks`, made at the step's first reduce and taken by the step), the activations and
//! logits, and the one layer made whole (its float32 gather and its cast, `Y (4 + w)`) with
//! the next one's float32 gather on its way (`Y 4`). The plan needs the larger phase; the KV
//! cache gets what the rollouts leave. Without ZeRO-3 every line is counted at once (the
//! whole weights and gradients persist across steps).
//!
//! The device's budget is its free memory less the share `1 - fraction` of its total that is
//! kept back (`model.gpu_memory_fraction`, 0.9 by default as in vLLM).

use crate::qwen3::Config;

/// What the recipe adds to the shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recipe {
    /// Bytes of the weights' kind (2 for bf16, 4 for float32).
    pub weight_bytes: u64,
    /// Tokens of one forward/backward pass (`grpo.micro_batch_tokens`).
    pub micro_batch_tokens: u64,
    /// Tokens whose logits exist at once (`grpo.logprob_chunk_tokens`).
    pub logprob_chunk_tokens: u64,
    /// `grpo.activation_recompute`.
    pub recompute: bool,
    /// A frozen reference for the KL term (`grpo.kl_coef > 0`).
    pub kl_reference: bool,
    /// Data-parallel ranks (`spade train --ranks`): above 1 the plan is one rank's, whose
    /// masters and moments are its 1/ranks shard ([`crate::zero`], ZeRO-2) and whose
    /// gradients add its float32 slice of the sum and the buckets of the reduce-scatter and
    /// the all-gather.
    pub ranks: u64,
    /// ZeRO-3 (`run.zero_stage = 3`, with ranks): gradients sharded too (see the module doc).
    pub zero3: bool,
}

/// When a line's memory is held (see the module doc): phases matter under ZeRO-3 only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Through the rollouts and the update.
    Always,
    /// While the rollouts sample (with the KV cache).
    Rollouts,
    /// During the update.
    Update,
}

/// One line of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub what: &'static str,
    pub bytes: u64,
    pub phase: Phase,
}

impl Line {
    /// A line held through both phases.
    pub fn always(what: &'static str, bytes: u64) -> Self {
        Self {
            what,
            bytes,
            phase: Phase::Always,
        }
    }
}

/// Every part but the KV cache, and a KV slot's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    pub parameters: u64,
    pub lines: Vec<Line>,
    /// Bytes of one KV-cache slot (all layers, keys and values).
    pub kv_slot_bytes: u64,
    /// The ranks the plan is one of ([`Recipe::ranks`]).
    pub ranks: u64,
    /// [`Recipe::zero3`].
    pub zero3: bool,
}

/// Gibibytes with two decimals.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

impl MemoryPlan {
    pub fn new(c: &Config, r: &Recipe) -> Self {
        let p = c.num_parameters().max(0) as u64;
        let w = r.weight_bytes;
        let half = w < 4;
        let ranks = r.ranks.max(1);
        let shard = p.div_ceil(ranks);
        let (h, l) = (c.hidden_size as u64, c.num_hidden_layers as u64);
        let q = (c.num_attention_heads * c.head_dim) as u64;
        let k = (c.num_key_value_heads * c.head_dim) as u64;
        let width = |layer: i64| match &c.moe {
            Some(m) if m.is_sparse(layer) => {
                (m.num_experts_per_tok * m.moe_intermediate_size) as u64
            }
            _ => c.intermediate_size as u64,
        };
        let widest = (0..c.num_hidden_layers).map(width).max().unwrap_or(0);
        let per_token = |i: u64| (5 * h + 2 * q + 2 * k + 4 * i) * w;
        let t = r.micro_batch_tokens;
        let activations = if r.recompute {
            l * t * h * w + t * per_token(widest)
        } else {
            (0..c.num_hidden_layers)
                .map(|x| t * per_token(width(x)))
                .sum()
        };
        // ZeRO-3's whole-on-every-rank variables (embedding, head, final norm) and its
        // largest layer.
        let embed = (c.vocab_size * c.hidden_size).max(0) as u64;
        let ends = embed * if c.tie_word_embeddings { 1 } else { 2 } + h;
        let layer = (0..c.num_hidden_layers)
            .map(|x| c.layer_parameters(x).max(0) as u64)
            .max()
            .unwrap_or(0);
        // Under ZeRO-3 a line belongs to its phase; otherwise everything is held at once.
        let (rollouts, update) = if r.zero3 {
            (Phase::Rollouts, Phase::Update)
        } else {
            (Phase::Always, Phase::Always)
        };
        let line = |what, bytes, phase| Line { what, bytes, phase };
        let acc = if half { 4 } else { 0 };
        let mut lines = vec![line("weights", p * w, rollouts)];
        if r.zero3 {
            lines.push(line("update weights", ends * w, Phase::Update));
            lines.push(Line::always("gradients", ends * (w + acc)));
            lines.push(line(
                "step gradients",
                layer * (w + 12) + shard * 4,
                Phase::Update,
            ));
        } else {
            // With ranks: the rank's summed float32 slice and one bucket's float32 of the
            // reduce-scatter and of the all-gather (`zero/buckets.rs`).
            let buckets = 2 * crate::zero::BUCKET_BYTES as u64;
            lines.push(Line::always(
                "gradients",
                p * (w + acc) + if ranks > 1 { shard * 4 + buckets } else { 0 },
            ));
        }
        lines.push(Line::always(
            "float32 masters",
            match (ranks, half) {
                (1, true) => p * 4,
                (1, false) => 0,
                // A rank's slice of the flat float32 weights, whatever their kind.
                _ => shard * 4,
            },
        ));
        lines.push(Line::always("AdamW moments", shard * 8));
        lines.push(line("activations", activations, update));
        lines.push(line(
            "logits",
            2 * r.logprob_chunk_tokens * c.vocab_size.max(0) as u64 * 4,
            update,
        ));
        if r.zero3 {
            lines.push(line("gathered layer", layer * (8 + w), Phase::Update));
        }
        if r.kl_reference {
            lines.push(Line::always("KL reference", p * w));
        }
        Self {
            parameters: p,
            lines,
            kv_slot_bytes: l * 2 * k * w,
            ranks,
            zero3: r.zero3,
        }
    }

    /// What the rollouts hold besides the KV cache.
    pub fn rollout_bytes(&self) -> u64 {
        self.held(Phase::Rollouts)
    }

    /// What the update holds (it has no KV cache).
    pub fn update_bytes(&self) -> u64 {
        self.held(Phase::Update)
    }

    fn held(&self, phase: Phase) -> u64 {
        self.lines
            .iter()
            .filter(|l| l.phase == Phase::Always || l.phase == phase)
            .map(|l| l.bytes)
            .sum()
    }

    /// Everything but the KV cache, in the phase that holds more (without ZeRO-3 the two are
    /// one: the sum of every line).
    pub fn fixed_bytes(&self) -> u64 {
        self.rollout_bytes().max(self.update_bytes())
    }

    /// The plan's peak with `kv_slots` slots.
    pub fn total(&self, kv_slots: u64) -> u64 {
        (self.rollout_bytes() + kv_slots * self.kv_slot_bytes).max(self.update_bytes())
    }

    /// KV slots that fit in `budget` beside what the rollouts hold; `None` when nothing is
    /// left, or when the update itself does not fit.
    pub fn kv_slots_within(&self, budget: u64) -> Option<u64> {
        if self.update_bytes() > budget {
            return None;
        }
        let left = budget.checked_sub(self.rollout_bytes())?;
        let slots = left / self.kv_slot_bytes.max(1);
        (slots > 0).then_some(slots)
    }

    /// The table the worker prints before the first step.
    pub fn table(&self, kv_slots: u64, budget: Option<u64>) -> String {
        let per_rank = match (self.ranks, self.zero3) {
            (0 | 1, _) => String::new(),
            (n, false) => format!(", one rank of {n}, ZeRO-2"),
            (n, true) => format!(", one rank of {n}, ZeRO-3"),
        };
        let mut s = format!(
            "memory plan ({:.2} B parameters{per_rank}):\n",
            self.parameters as f64 / 1e9
        );
        let phased = self.lines.iter().any(|l| l.phase != Phase::Always);
        let mark = |p: Phase| match (phased, p) {
            (false, _) | (true, Phase::Always) => "",
            (true, Phase::Rollouts) => "  rollouts",
            (true, Phase::Update) => "  update",
        };
        for l in &self.lines {
            s.push_str(&format!(
                "  {:<16} {:>12}{}\n",
                l.what,
                gib(l.bytes),
                mark(l.phase)
            ));
        }
        s.push_str(&format!(
            "  {:<16} {:>12}  ({kv_slots} slots of {} bytes){}\n",
            "KV cache",
            gib(kv_slots * self.kv_slot_bytes),
            self.kv_slot_bytes,
            mark(Phase::Rollouts)
        ));
        if phased {
            s.push_str(&format!(
                "  {:<16} {:>12}  (with the KV cache)\n  {:<16} {:>12}\n",
                "rollouts",
                gib(self.rollout_bytes() + kv_slots * self.kv_slot_bytes),
                "update",
                gib(self.update_bytes())
            ));
        }
        s.push_str(&format!(
            "  {:<16} {:>12}",
            if phased { "total (peak)" } else { "total" },
            gib(self.total(kv_slots))
        ));
        if let Some(b) = budget {
            s.push_str(&format!("  of {} the device can give", gib(b)));
        }
        s
    }
}

/// What the device can give: its free memory less the share of its total kept back.
pub fn budget(free: u64, total: u64, fraction: f64) -> u64 {
    let reserve = (total as f64 * (1.0 - fraction).clamp(0.0, 1.0)).round() as u64;
    free.saturating_sub(reserve)
}

/// Free and total bytes of the CUDA device `index` of this process, from `nvidia-smi`
/// (`memory.free`, `memory.total`, [`crate::device::nvidia_smi_query`]); `None` without CUDA
/// in this process or without nvidia-smi.
pub fn cuda_memory(index: usize) -> Option<(u64, u64)> {
    if !crate::device::cuda_linked() {
        return None;
    }
    let f = crate::device::nvidia_smi_query(index, "memory.free,memory.total")?;
    parse_free_total(&f.join(","))
}

/// `free, total` in MiB (nvidia-smi's csv) as bytes.
fn parse_free_total(csv: &str) -> Option<(u64, u64)> {
    let mut f = csv
        .lines()
        .next()?
        .split(',')
        .map(|x| x.trim().parse::<u64>());
    let (free, total) = (f.next()?.ok()?, f.next()?.ok()?);
    Some((free << 20, total << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn paper(kl: bool) -> Recipe {
        Recipe {
            weight_bytes: 2,
            micro_batch_tokens: 16_384,
            logprob_chunk_tokens: 4096,
            recompute: true,
            kl_reference: kl,
            ranks: 1,
            zero3: false,
        }
    }

    fn line(p: &MemoryPlan, what: &str) -> u64 {
        p.lines
            .iter()
            .find(|l| l.what == what)
            .map_or(0, |l| l.bytes)
    }

    #[test]
    fn the_4b_plan_equals_the_hand_computed_table() {
        let c = crate::preset::shape("qwen3-4b").expect("shape");
        let p = MemoryPlan::new(&c, &paper(false));
        // Qwen3-4B by hand: per layer q 2560x4096 + k, v 2 x 2560x1024 + o 4096x2560
        // = 26,214,400, q/k norms 256, MLP 3 x 2560x9728 = 74,711,040, two norms 5,120:
        // 100,930,816; x 36 = 3,633,509,376; + embeddings 151,936 x 2560 = 388,956,160
        // (tied) + final norm 2,560 = 4,022,468,096.
        let n = 4_022_468_096u64;
        assert_eq!(p.parameters, n);
        assert_eq!(line(&p, "weights"), 2 * n); // 7.49 GiB
        assert_eq!(line(&p, "gradients"), 6 * n); // bf16 .grad + float32 sum
        assert_eq!(line(&p, "float32 masters"), 4 * n);
        assert_eq!(line(&p, "AdamW moments"), 8 * n);
        // Recompute: 36 layer inputs of 16,384 x 2560 bf16 = 3,019,898,880, plus one layer:
        // 16,384 x (5 x 2560 + 2 x 4096 + 2 x 1024 + 4 x 9728) x 2 = 16,384 x 61,952 x 2
        // = 2,030,043,136.
        assert_eq!(line(&p, "activations"), 3_019_898_880 + 2_030_043_136);
        // 2 x 4096 x 151,936 x 4 = 4,978,638,848.
        assert_eq!(line(&p, "logits"), 4_978_638_848);
        assert_eq!(line(&p, "KL reference"), 0);
        // 36 x 2 x 1024 x 2 = 147,456 bytes a slot (144 KiB).
        assert_eq!(p.kv_slot_bytes, 147_456);
        let fixed = 20 * n + 3_019_898_880 + 2_030_043_136 + 4_978_638_848;
        assert_eq!(p.fixed_bytes(), fixed); // 84.26 GiB
        // The default 262,144 slots add 36 GiB: 120.26 GiB, more than an 80 GB H100 holds.
        assert_eq!(p.total(262_144), fixed + 36 * GIB);
        let h100 = budget(80 * GIB, 80 * GIB, 0.9); // 72 GiB
        assert_eq!(h100, 72 * GIB);
        assert_eq!(p.kv_slots_within(h100), None);
        // An H200 (141 GiB of which 126.9 usable): what is left, in slots.
        let h200 = budget(141 * GIB, 141 * GIB, 0.9);
        let slots = p.kv_slots_within(h200).expect("fits an H200");
        assert_eq!(slots, (h200 - fixed) / 147_456);
        assert!(p.total(slots) <= h200 && p.total(slots + 1) > h200);
    }

    #[test]
    fn the_8b_plan_equals_the_hand_computed_table() {
        let c = crate::preset::shape("qwen3-8b").expect("shape");
        let p = MemoryPlan::new(&c, &paper(true));
        // Qwen3-8B by hand: per layer attention 2 x 4096x4096 + 2 x 4096x1024 = 41,943,040,
        // norms 256 + 8,192, MLP 3 x 4096 x 12,288 = 150,994,944: 192,946,432; x 36 =
        // 6,946,071,552; + untied embeddings and head 2 x 151,936 x 4096 = 1,244,659,712 +
        // final norm 4,096 = 8,190,735,360.
        let n = 8_190_735_360u64;
        assert_eq!(p.parameters, n);
        assert_eq!(line(&p, "KL reference"), 2 * n);
        // 36 x 16,384 x 4096 x 2 = 4,831,838,208; one layer 16,384 x (5 x 4096 + 2 x 4096
        // + 2 x 1024 + 4 x 12,288) x 2 = 16,384 x 79,872 x 2 = 2,617,245,696.
        assert_eq!(line(&p, "activations"), 4_831_838_208 + 2_617_245_696);
        assert_eq!(
            p.fixed_bytes(),
            22 * n + 4_831_838_208 + 2_617_245_696 + 4_978_638_848
        );
        // 179.4 GiB: no single GPU holds the 8B recipe (issue 41's sharding does).
        assert_eq!(p.kv_slots_within(budget(141 * GIB, 141 * GIB, 0.9)), None);
    }

    #[test]
    fn a_rank_of_eight_holds_an_eighth_of_the_optimizer_state() {
        let c = crate::preset::shape("qwen3-8b").expect("shape");
        let n = 8_190_735_360u64;
        let p = MemoryPlan::new(
            &c,
            &Recipe {
                ranks: 8,
                ..paper(false)
            },
        );
        assert_eq!(line(&p, "float32 masters"), n / 8 * 4);
        assert_eq!(line(&p, "AdamW moments"), n / 8 * 8);
        // bf16 .grad, the float32 sum, the rank's summed float32 slice and two 25 MB buckets
        // (the reduce-scatter's and the all-gather's).
        let buckets = 2 * (25u64 << 20);
        assert_eq!(line(&p, "gradients"), 6 * n + 4 * (n / 8) + buckets);
        assert_eq!(line(&p, "weights"), 2 * n);
        let one = MemoryPlan::new(&c, &paper(false));
        assert_eq!(
            one.fixed_bytes() - p.fixed_bytes(),
            18 * n - 8 * n - buckets
        );
    }

    #[test]
    fn a_zero_3_rank_of_eight_holds_an_eighth_of_the_gradients_and_one_layer() {
        let c = crate::preset::shape("qwen3-8b").expect("shape");
        let n = 8_190_735_360u64;
        let eight = |zero3| Recipe {
            ranks: 8,
            zero3,
            ..paper(false)
        };
        let (z2, z3) = (
            MemoryPlan::new(&c, &eight(false)),
            MemoryPlan::new(&c, &eight(true)),
        );
        // Qwen3-8B by hand: per layer q and o 2 x 4096x4096, k and v 2 x 4096x1024 (41,943,040),
        // q/k norms 256, MLP 3 x 4096x12288 (150,994,944), two norms 8,192: 192,946,432. The
        // untied embedding and head 2 x 151,936 x 4096 and the final norm 4096: 1,244,663,808.
        let (layer, ends) = (192_946_432u64, 1_244_663_808u64);
        assert_eq!(36 * layer + ends, n);
        // bf16 .grad and float32 sums of the whole ends (both phases); in the update one
        // layer's bf16 gradients and the float32 vector its reduce sums, the previous layer's
        // float32 sums on their way and the owner's receive buffer, and the rank's float32
        // slice.
        assert_eq!(line(&z3, "gradients"), 6 * ends);
        assert_eq!(line(&z3, "step gradients"), 14 * layer + 4 * (n / 8));
        assert_eq!(line(&z3, "update weights"), 2 * ends);
        // The layer whole (float32 gather and bf16 cast) and the next one's float32 gather.
        assert_eq!(line(&z3, "gathered layer"), 10 * layer);
        assert_eq!(line(&z2, "gathered layer"), 0);
        for what in ["weights", "float32 masters", "AdamW moments", "activations"] {
            assert_eq!(line(&z3, what), line(&z2, what), "{what}");
        }
        assert!(z3.table(0, None).contains("one rank of 8, ZeRO-3"));
        // 8B: 6.5 n of gradients under ZeRO-2 (50 GiB) against about 14 GiB, and one layer's
        // float32 gather more (the next on its way); and the whole weights are not held
        // beside the update's lines.
        assert!(z2.fixed_bytes() - z3.fixed_bytes() > 34 * GIB);
        assert_eq!(z2.rollout_bytes(), z2.update_bytes());
        assert_eq!(
            z2.fixed_bytes(),
            z2.lines.iter().map(|l| l.bytes).sum::<u64>()
        );
    }

    #[test]
    fn a_zero_3_rank_plans_its_rollouts_and_its_update_apart() {
        let c = crate::preset::shape("qwen3-30b-a3b").expect("shape");
        let r = Recipe {
            ranks: 8,
            zero3: true,
            ..paper(false)
        };
        let z3 = MemoryPlan::new(&c, &r);
        let (n, shard) = (z3.parameters, z3.parameters.div_ceil(8));
        let ends = line(&z3, "update weights") / 2;
        // The rollouts: whole bf16 weights, the ends' gradients, the optimiser's slices.
        assert_eq!(z3.rollout_bytes(), 2 * n + 6 * ends + 12 * shard);
        // The update: every line but the whole weights.
        let all: u64 = z3.lines.iter().map(|l| l.bytes).sum();
        assert_eq!(z3.update_bytes(), all - 2 * n);
        assert_eq!(z3.fixed_bytes(), z3.rollout_bytes().max(z3.update_bytes()));
        // 30B-A3B on 8 x 141 GB: the rollouts leave room for a KV cache and the update fits,
        // where counting every line at once (as before) was over the budget.
        let h200 = budget(143_771 << 20, 143_771 << 20, 0.9);
        assert!(all > h200, "all at once: {}", gib(all));
        let slots = z3.kv_slots_within(h200).expect("fits 8 x 141 GB");
        assert_eq!(slots, (h200 - z3.rollout_bytes()) / z3.kv_slot_bytes);
        assert!(z3.total(slots) <= h200 && z3.total(slots + 1) > h200);
        // An update that does not fit refuses the plan whatever the rollouts leave.
        assert_eq!(z3.kv_slots_within(z3.update_bytes() - 1), None);
        let t = z3.table(slots, Some(h200));
        assert!(t.contains("rollouts") && t.contains("total (peak)"), "{t}");
    }

    #[test]
    fn float32_has_no_masters_and_no_recompute_keeps_every_layer() {
        let c = crate::preset::shape("tiny").expect("shape");
        let r = Recipe {
            weight_bytes: 4,
            micro_batch_tokens: 4096,
            logprob_chunk_tokens: 4096,
            recompute: false,
            kl_reference: false,
            ranks: 1,
            zero3: false,
        };
        let p = MemoryPlan::new(&c, &r);
        let n = p.parameters;
        assert_eq!(line(&p, "float32 masters"), 0);
        assert_eq!(line(&p, "gradients"), 4 * n);
        // tiny: 4 layers, hidden 256, 4 x 64 query, 2 x 64 KV, MLP 768:
        // 4 x 4096 x (1280 + 512 + 256 + 3072) x 4.
        assert_eq!(line(&p, "activations"), 4 * 4096 * 5120 * 4);
        assert_eq!(p.kv_slot_bytes, 4 * 2 * 128 * 4);
        assert!(p.table(1000, Some(GIB)).contains("KV cache"));
    }

    #[test]
    fn nvidia_smi_memory_is_read_in_mib() {
        assert_eq!(
            parse_free_total("81000, 81559\n"),
            Some((81_000 << 20, 81_559 << 20))
        );
        assert_eq!(parse_free_total("[N/A], 81559"), None);
        // This CPU build has no CUDA: no device memory to ask for.
        assert_eq!(cuda_memory(0), None);
    }

    #[test]
    fn the_budget_keeps_back_the_share_of_the_total() {
        assert_eq!(budget(70 * GIB, 80 * GIB, 0.9), 62 * GIB);
        assert_eq!(budget(5 * GIB, 80 * GIB, 0.9), 0);
        assert_eq!(budget(80 * GIB, 80 * GIB, 1.0), 80 * GIB);
    }
}
