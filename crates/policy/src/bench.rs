//! One training step of a random-init model of a given shape, timed: what `spade model bench`
//! runs to tell how fast a GPU (or CPU) trains, and whether a step fits in its memory.
//!
//! The step is the worker's: GRPO over `tokens` predicted tokens in sequences of `seq_len`,
//! packed into one micro-batch, log-probs in chunks, optional activation recompute, gradient
//! clipping and a mixed-precision AdamW step (bf16 compute weights and float32 masters and
//! moments on CUDA; float32 on CPU). The first `warmup` steps are not timed.
//!
//! Peak memory ([`measure`]): on CPU the process's peak resident set (`VmHWM`); on CUDA the
//! most `nvidia-smi` reported for this process while the steps ran, polled every 200 ms
//! (libtorch's caching allocator and the CUDA context included, so an upper bound of what the
//! step needs; tch exposes no allocator statistics).

use crate::error::{PolicyError, Result};
use crate::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
use crate::policy::{Policy, default_kind};
use crate::preset;
use crate::qwen3::WeightInit;
use crate::sample::SplitMix64;
use crate::train::{MaskedSeq, OptimConfig};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tch::Device;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// A name of [`preset::SHAPES`].
    pub shape: String,
    /// Predicted tokens per step.
    pub tokens: usize,
    /// Tokens per sequence (the step holds `tokens / (seq_len - 1)` of them, at least one).
    pub seq_len: usize,
    pub warmup: usize,
    pub steps: usize,
    pub recompute: bool,
    pub chunk_tokens: usize,
    pub device: Device,
    /// Tokens per micro-batch; None = the whole step in one pass. Ranks share out
    /// micro-batches, so a comparison of rank counts sets it.
    pub micro_batch_tokens: Option<usize>,
    /// With ranks: ZeRO-3 instead of ZeRO-2 (needs `recompute`).
    pub zero3: bool,
}

/// What was measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    pub parameters: i64,
    /// The weights' kind (`BFloat16` on CUDA, `Float` on CPU).
    pub kind: String,
    /// Predicted tokens per step, as run.
    pub tokens: usize,
    pub sequences: usize,
    /// Seconds of each timed step.
    pub step_s: Vec<f64>,
    /// With ranks: seconds of each timed step spent in the group's collectives (moving data
    /// and waiting for the other ranks); empty alone.
    pub collective_s: Vec<f64>,
    /// The same by collective (`broadcast`, `reduce`, `sum`, `reduce_scatter`,
    /// `all_gather`): each timed step's seconds in it.
    pub collective_by_op: std::collections::BTreeMap<&'static str, Vec<f64>>,
}

/// A group that times every collective it passes on: what the ranks' steps spend in them.
struct Timed<'a> {
    inner: &'a dyn crate::optim::GradientSync,
    /// Shared with the waits of started collectives, which are timed when they run.
    spent: std::rc::Rc<std::cell::RefCell<std::collections::BTreeMap<&'static str, Duration>>>,
}

impl Timed<'_> {
    fn timed<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let t = Instant::now();
        let out = f();
        *self.spent.borrow_mut().entry(op).or_default() += t.elapsed();
        out
    }

    /// `s` whose wait is timed as `op` too: a started collective costs its start and what
    /// its wait still waits.
    fn timed_wait(&self, op: &'static str, s: crate::optim::Started) -> crate::optim::Started {
        let spent = self.spent.clone();
        crate::optim::Started::new(move || {
            let t = Instant::now();
            let out = s.wait();
            *spent.borrow_mut().entry(op).or_default() += t.elapsed();
            out
        })
    }

    /// Seconds by collective since the last call.
    fn take(&self) -> std::collections::BTreeMap<&'static str, f64> {
        std::mem::take(&mut *self.spent.borrow_mut())
            .into_iter()
            .map(|(op, d)| (op, d.as_secs_f64()))
            .collect()
    }
}

impl crate::optim::GradientSync for Timed<'_> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn sum(&self, t: &mut tch::Tensor) -> Result<()> {
        self.timed("sum", || self.inner.sum(t))
    }
    fn reduce(&self, t: &mut tch::Tensor, root: usize) -> Result<()> {
        self.timed("reduce", || self.inner.reduce(t, root))
    }
    fn broadcast(&self, t: &mut tch::Tensor, root: usize) -> Result<()> {
        self.timed("broadcast", || self.inner.broadcast(t, root))
    }
    fn reduce_scatter(&self, t: &tch::Tensor) -> Result<tch::Tensor> {
        self.timed("reduce_scatter", || self.inner.reduce_scatter(t))
    }
    fn all_gather(&self, t: &tch::Tensor) -> Result<tch::Tensor> {
        self.timed("all_gather", || self.inner.all_gather(t))
    }
    fn reduce_start(&self, t: &mut tch::Tensor, root: usize) -> Result<crate::optim::Started> {
        let s = self.timed("reduce", || self.inner.reduce_start(t, root))?;
        Ok(self.timed_wait("reduce", s))
    }
    fn broadcast_start(&self, t: &mut tch::Tensor, root: usize) -> Result<crate::optim::Started> {
        let s = self.timed("broadcast", || self.inner.broadcast_start(t, root))?;
        Ok(self.timed_wait("broadcast", s))
    }
}

impl BenchReport {
    /// Median seconds per step.
    pub fn median_s(&self) -> f64 {
        median(&self.step_s)
    }

    /// Median seconds per step in the collectives (NaN alone).
    pub fn collective_median_s(&self) -> f64 {
        median(&self.collective_s)
    }

    /// Median seconds per step in each collective.
    pub fn collective_medians_by_op(&self) -> std::collections::BTreeMap<&'static str, f64> {
        self.collective_by_op
            .iter()
            .map(|(op, v)| (*op, median(v)))
            .collect()
    }

    /// Predicted tokens trained per second at the median step.
    pub fn tokens_per_s(&self) -> f64 {
        self.tokens as f64 / self.median_s()
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Builds the model and runs the steps; `on_step(i, seconds)` after each timed one. With
/// `ranks`, this process is one rank of a data-parallel group: the same samples on every rank,
/// each its share of the micro-batches, the optimiser sharded (ZeRO-2, or ZeRO-3 with
/// `o.zero3`), as the worker's ranks train ([`GrpoTrainer::step_synced`]); `tokens` stays the
/// step's, not the rank's.
pub fn train_step(
    o: &BenchOptions,
    ranks: Option<&dyn crate::optim::GradientSync>,
    mut on_step: impl FnMut(usize, f64),
) -> Result<BenchReport> {
    if o.seq_len < 2 || o.tokens == 0 || o.steps == 0 {
        return Err(PolicyError::InvalidInput(
            "the bench needs seq_len >= 2, tokens >= 1 and steps >= 1".into(),
        ));
    }
    let cfg = preset::shape(&o.shape)?;
    tch::manual_seed(0);
    let kind = default_kind(o.device);
    let policy = Policy::new(&cfg, o.device, kind, WeightInit::Normal { std: 0.02 }, None)?;
    let n_seq = (o.tokens / (o.seq_len - 1)).max(1);
    let mut rng = SplitMix64::new(7);
    let vocab = cfg.vocab_size as u64;
    // Uniform old log-probs: a random-init model is close to uniform, so ratios are near 1.
    let old = -(cfg.vocab_size as f32).ln();
    let samples: Vec<GrpoSample> = (0..n_seq)
        .map(|i| {
            let ids: Vec<i64> = (0..o.seq_len)
                .map(|_| (rng.next_u64() % vocab) as i64)
                .collect();
            let prompt = o.seq_len / 4;
            GrpoSample {
                seq: MaskedSeq::prompt_completion(&ids[..prompt.max(1)], &ids[prompt.max(1)..]),
                old_logprobs: vec![old; o.seq_len],
                behavior_logprobs: None,
                advantage: if i % 2 == 0 { 1.0 } else { -1.0 },
                weight: 1.0,
            }
        })
        .collect();
    let grpo = GrpoConfig {
        micro_batch_tokens: o.micro_batch_tokens.unwrap_or(n_seq * (o.seq_len - 1)),
        logprob_chunk_tokens: o.chunk_tokens,
        recompute: o.recompute,
        optim: OptimConfig::default(),
        ..GrpoConfig::default()
    };
    let mut trainer = match ranks {
        Some(r) => {
            let stage = match o.zero3 {
                true => crate::zero::ZeroStage::Three,
                false => crate::zero::ZeroStage::Two,
            };
            GrpoTrainer::new_sharded_stage(&policy, grpo, r.rank(), r.world_size(), stage)?
        }
        None => GrpoTrainer::new(&policy, grpo)?,
    };
    let timed = ranks.map(|inner| Timed {
        inner,
        spent: Default::default(),
    });
    let group = timed.as_ref().map(|t| t as &dyn crate::optim::GradientSync);
    let (mut step_s, mut collective_s) = (vec![], vec![]);
    let mut collective_by_op = std::collections::BTreeMap::<&'static str, Vec<f64>>::new();
    for i in 0..o.warmup + o.steps {
        sync(o.device);
        let t = Instant::now();
        trainer.step_synced(&policy, &samples, group)?;
        sync(o.device);
        let s = t.elapsed().as_secs_f64();
        let c = timed.as_ref().map(Timed::take);
        if i >= o.warmup {
            step_s.push(s);
            if let Some(c) = c {
                collective_s.push(c.values().sum());
                for (op, s) in c {
                    collective_by_op.entry(op).or_default().push(s);
                }
            }
            on_step(i - o.warmup, s);
        }
    }
    Ok(BenchReport {
        parameters: cfg.num_parameters(),
        kind: format!("{kind:?}"),
        tokens: n_seq * (o.seq_len - 1),
        sequences: n_seq,
        step_s,
        collective_s,
        collective_by_op,
    })
}

/// A report with the peak memory of the run.
#[derive(Debug, Clone)]
pub struct Measured {
    pub report: BenchReport,
    pub peak_bytes: u64,
    /// How `peak_bytes` was measured.
    pub peak_source: &'static str,
}

/// Peak resident memory of this process (Linux `VmHWM`), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// GPU memory `nvidia-smi` reports for this process, in bytes.
fn gpu_used() -> Option<u64> {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-compute-apps=pid,used_memory",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .ok()?;
    let me = std::process::id().to_string();
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let mut f = l.split(',').map(str::trim);
        (f.next()? == me).then_some(())?;
        Some(f.next()?.parse::<u64>().ok()? * 1024 * 1024)
    })
}

/// [`train_step`] with the peak memory (see the module doc).
pub fn measure(
    o: &BenchOptions,
    ranks: Option<&dyn crate::optim::GradientSync>,
    on_step: impl FnMut(usize, f64),
) -> Result<Measured> {
    let cuda = o.device.is_cuda();
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let poller = cuda.then(|| {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(b) = gpu_used() {
                    peak.fetch_max(b, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    });
    let report = train_step(o, ranks, on_step);
    done.store(true, Ordering::Relaxed);
    if let Some(p) = poller {
        let _ = p.join();
    }
    let report = report?;
    Ok(if cuda {
        Measured {
            report,
            peak_bytes: peak.load(Ordering::Relaxed),
            peak_source: "nvidia-smi, process total",
        }
    } else {
        Measured {
            report,
            peak_bytes: peak_rss().unwrap_or(0),
            peak_source: "peak resident set",
        }
    })
}

impl Measured {
    /// One JSON object with everything measured; `threads` as asked for, `libtorch_threads`
    /// as libtorch reports them.
    pub fn to_json(&self, o: &BenchOptions, threads: usize) -> serde_json::Value {
        let r = &self.report;
        serde_json::json!({
            "side": "spade", "shape": o.shape, "parameters": r.parameters, "kind": r.kind,
            "device": format!("{:?}", o.device), "threads": threads, "libtorch_threads": tch::get_num_threads(), "tokens": r.tokens,
            "sequences": r.sequences, "recompute": o.recompute, "chunk_tokens": o.chunk_tokens,
            "step_s": r.step_s, "median_s": r.median_s(), "tokens_per_s": r.tokens_per_s(),
            "peak_bytes": self.peak_bytes, "peak_source": self.peak_source,
        })
    }
}
