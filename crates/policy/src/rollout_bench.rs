//! One SPADE step's generation with synthetic environments, timed on both rollout paths:
//! what `spade model bench-rollout` runs.
//!
//! The workload has the paper's shape (spec "One training step"), scaled by its options: a
//! regeneration step's designer attempts (one per environment), their hints, `hint_plays`
//! hint plays per environment, then `plays` no-hint plays per environment. An episode has
//! 1 to `max_turns` turns (drawn from its seed); after each turn its observation (a fixed
//! number of tokens drawn from the seed and turn) is appended, as a real environment's frame
//! would be. Prompts share what real prompts share: every play starts with the same system
//! prompt, and the plays of an environment with that environment's first observation.
//!
//! A turn ends at a stop token or its budget. With random weights the next-token distribution
//! is near uniform, so the stop set is every `mean_turn_tokens`-th id: turns end after about
//! that many tokens, with the spread real replies have.
//!
//! Sampler path: what the worker did before the engine; environments one after another, plays
//! in chunks of `chunk`, every turn one `sample::generate` call over the whole transcripts.
//! Engine path: each phase's sequences all at once through one [`Engine`], KV kept across
//! turns. Both paths sample every turn with the same seed, so they generate the same tokens up
//! to float rounding; the report says how many turns agree.

use crate::engine::{Engine, EngineConfig, Request, Rollout, SeqId, generate_all};
use crate::error::{PolicyError, Result};
use crate::policy::{Policy, default_kind};
use crate::preset;
use crate::qwen3::{Config, WeightInit};
use crate::sample::{Completion, Finish, SamplingParams, SplitMix64, generate};
use std::collections::BTreeMap;
use std::time::Instant;
use tch::Device;

/// The workload and the model.
#[derive(Debug, Clone)]
pub struct RolloutBenchOptions {
    /// `tiny` or a name of [`preset::SHAPES`] (random weights).
    pub shape: String,
    pub envs: usize,
    pub plays: usize,
    pub hint_plays: usize,
    pub max_turns: usize,
    /// Agent tokens per turn at most.
    pub turn_tokens: usize,
    pub mean_turn_tokens: usize,
    pub system_tokens: usize,
    pub observation_tokens: usize,
    pub designer_prompt_tokens: usize,
    pub designer_tokens: usize,
    pub hint_tokens: usize,
    /// The sampler path's plays per batch (the worker's `agent.concurrency` before the engine
    /// chunked each environment's plays by it).
    pub chunk: usize,
    /// The engine's batch width and KV budget.
    pub max_batch: usize,
    pub kv_tokens: usize,
    /// The engine's prefill budget per pass.
    pub prefill_tokens: usize,
    /// The engine's decode window (0 = the device's default).
    pub decode_window: usize,
    pub context: usize,
    pub device: Device,
    pub seed: u64,
}

impl Default for RolloutBenchOptions {
    fn default() -> Self {
        Self {
            shape: "tiny".into(),
            envs: 24,
            plays: 8,
            hint_plays: 16,
            max_turns: 6,
            turn_tokens: 40,
            mean_turn_tokens: 20,
            system_tokens: 160,
            observation_tokens: 24,
            designer_prompt_tokens: 600,
            designer_tokens: 256,
            hint_tokens: 64,
            chunk: 8,
            max_batch: 256,
            kv_tokens: 1 << 19,
            prefill_tokens: crate::engine::DEFAULT_PREFILL_TOKENS,
            decode_window: 0,
            context: 4096,
            device: Device::Cpu,
            seed: 0,
        }
    }
}

/// Which path to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Sampler,
    Engine,
    /// Another [`Rollout`] (vLLM servers) in the engine's place: [`run_external`].
    External,
}

impl Path {
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Sampler => "sampler",
            Path::Engine => "engine",
            Path::External => "external",
        }
    }
}

/// One phase on one path.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseReport {
    pub phase: &'static str,
    pub wall_s: f64,
    /// Tokens sampled.
    pub generated: u64,
    /// Model calls (sampler: `generate` calls; engine: decoding passes).
    pub calls: u64,
}

/// A path's whole step.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutReport {
    pub path: Path,
    pub phases: Vec<PhaseReport>,
    /// Every turn's sampled tokens, by (phase, sequence, turn), to compare the paths.
    pub turns: BTreeMap<(usize, usize, usize), Vec<i64>>,
}

impl RolloutReport {
    pub fn wall_s(&self) -> f64 {
        self.phases.iter().map(|p| p.wall_s).sum()
    }

    pub fn generated(&self) -> u64 {
        self.phases.iter().map(|p| p.generated).sum()
    }

    pub fn tokens_per_s(&self) -> f64 {
        self.generated() as f64 / self.wall_s().max(1e-9)
    }
}

/// The random-init model of `o.shape` on `o.device`.
pub fn model(o: &RolloutBenchOptions) -> Result<Policy> {
    let cfg: Config = if o.shape == "tiny" {
        preset::tiny_config(preset::TINY_VOCAB as i64, Some(1), Some(0))
    } else {
        preset::shape(&o.shape)?
    };
    tch::manual_seed(o.seed as i64);
    Policy::new(
        &cfg,
        o.device,
        default_kind(o.device),
        WeightInit::Normal { std: 0.02 },
        None,
    )
}

/// Token ids drawn from `key` (ids 2.. so none is a pad).
fn tokens(vocab: i64, key: &[u64], n: usize) -> Vec<i64> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for k in key {
        h = (h ^ k).wrapping_mul(0x100_0000_01b3);
    }
    let mut r = SplitMix64::new(h);
    (0..n)
        .map(|_| 2 + (r.next_u64() % (vocab as u64 - 2)) as i64)
        .collect()
}

fn seed_of(key: &[u64]) -> u64 {
    tokens(1 << 40, key, 1)[0] as u64
}

/// A synthetic episode: its transcript and how many turns it plays.
#[derive(Debug, Clone)]
struct Episode {
    ids: Vec<i64>,
    turns: usize,
    turn: usize,
    key: [u64; 3],
}

struct Workload<'a> {
    o: &'a RolloutBenchOptions,
    vocab: i64,
    params: SamplingParams,
    end: i64,
}

impl Workload<'_> {
    fn new(o: &RolloutBenchOptions, vocab: i64) -> Workload<'_> {
        let every = o.mean_turn_tokens.max(1) as i64;
        let stops: Vec<i64> = (2..vocab).filter(|t| t % every == 0).collect();
        let end = stops.first().copied().unwrap_or(1);
        Workload {
            o,
            vocab,
            params: SamplingParams {
                temperature: 0.6,
                top_p: 1.0,
                top_k: 0,
                max_new_tokens: o.turn_tokens,
                stop_token_ids: stops,
                stop_strings: vec![],
            },
            end,
        }
    }

    /// Phase 2 (hint plays, with a hint) or 3 (no-hint plays): every environment's episodes.
    fn episodes(&self, phase: u64, per_env: usize) -> Vec<Vec<Episode>> {
        let o = self.o;
        let system = tokens(self.vocab, &[1], o.system_tokens);
        (0..o.envs as u64)
            .map(|j| {
                let first = tokens(self.vocab, &[2, j], o.observation_tokens);
                let hint = tokens(
                    self.vocab,
                    &[3, j],
                    if phase == 2 { o.hint_tokens } else { 0 },
                );
                (0..per_env as u64)
                    .map(|i| {
                        let mut ids = system.clone();
                        ids.extend(&hint);
                        ids.extend(&first);
                        ids.extend(tokens(self.vocab, &[4, phase, j, i], 6));
                        Episode {
                            ids,
                            turns: 1
                                + (seed_of(&[5, phase, j, i]) % o.max_turns.max(1) as u64) as usize,
                            turn: 0,
                            key: [phase, j, i],
                        }
                    })
                    .collect()
            })
            .collect()
    }

    fn turn_seed(&self, e: &Episode) -> u64 {
        seed_of(&[6, e.key[0], e.key[1], e.key[2], e.turn as u64])
    }

    /// Records a finished turn; true while the episode goes on.
    fn after(&self, e: &mut Episode, c: &Completion) -> bool {
        e.ids.extend(&c.tokens);
        if c.finish != Finish::StopToken {
            e.ids.push(self.end);
        }
        e.turn += 1;
        let more = e.turn < e.turns
            && e.ids.len() + self.o.observation_tokens + self.o.turn_tokens < self.o.context;
        if more {
            let key = [7, e.key[0], e.key[1], e.key[2], e.turn as u64];
            e.ids
                .extend(tokens(self.vocab, &key, self.o.observation_tokens));
        }
        more
    }

    /// One-shot prompts of phase 0 (designer) or 1 (hints).
    fn one_shot(&self, phase: u64) -> (Vec<Vec<i64>>, Vec<u64>, SamplingParams) {
        let o = self.o;
        let (len, budget) = match phase {
            0 => (o.designer_prompt_tokens, o.designer_tokens),
            _ => (o.designer_tokens + 40, o.hint_tokens),
        };
        let shared = tokens(self.vocab, &[8, phase], len / 2);
        let prompts = (0..o.envs as u64)
            .map(|j| {
                let mut p = shared.clone();
                p.extend(tokens(self.vocab, &[9, phase, j], len - len / 2));
                p
            })
            .collect();
        let seeds = (0..o.envs as u64)
            .map(|j| seed_of(&[10, phase, j]))
            .collect();
        // Designer programs and hints are long replies: they end at their budget (or, rarely,
        // at the end token), not after a turn's length.
        let params = SamplingParams {
            max_new_tokens: budget,
            stop_token_ids: vec![self.end],
            ..self.params.clone()
        };
        (prompts, seeds, params)
    }
}

/// Runs the whole step on `path`. `on_phase` hears each phase as it ends.
pub fn run(
    policy: &Policy,
    o: &RolloutBenchOptions,
    path: Path,
    on_phase: impl FnMut(&PhaseReport),
) -> Result<RolloutReport> {
    if path == Path::External {
        return Err(PolicyError::InvalidInput(
            "bench-rollout: the external path needs its rollout (run_external)".into(),
        ));
    }
    run_with(policy, o, path, None, on_phase)
}

/// [`run`]'s engine path with `r` serving every phase (each phase's sequences at once); its
/// model calls are not counted (0).
pub fn run_external(
    policy: &Policy,
    o: &RolloutBenchOptions,
    r: &mut dyn Rollout,
    on_phase: impl FnMut(&PhaseReport),
) -> Result<RolloutReport> {
    run_with(policy, o, Path::External, Some(r), on_phase)
}

fn run_with(
    policy: &Policy,
    o: &RolloutBenchOptions,
    path: Path,
    mut ext: Option<&mut dyn Rollout>,
    mut on_phase: impl FnMut(&PhaseReport),
) -> Result<RolloutReport> {
    if o.envs == 0 || o.plays == 0 || o.turn_tokens == 0 {
        return Err(PolicyError::InvalidInput(
            "bench-rollout: environments, plays and turn tokens must be positive".into(),
        ));
    }
    let m = policy.model();
    let w = Workload::new(o, m.config().vocab_size.min(m.usable_vocab()));
    let mut report = RolloutReport {
        path,
        phases: vec![],
        turns: BTreeMap::new(),
    };
    let engine_cfg = |context: usize| EngineConfig {
        prefill_tokens: o.prefill_tokens,
        decode_window: o.decode_window,
        ..EngineConfig::new(context, o.kv_tokens.max(context), o.max_batch)
    };
    for (phase, name) in [(0u64, "designer"), (1, "hints")] {
        let (prompts, seeds, params) = w.one_shot(phase);
        let t = Instant::now();
        let (outs, calls) = match path {
            Path::Sampler => (generate(m, &prompts, &seeds, &params, None)?, 1),
            Path::Engine => {
                let ctx =
                    prompts.iter().map(Vec::len).max().unwrap_or(0) + params.max_new_tokens + 1;
                let mut e = Engine::new(m, None, engine_cfg(ctx))?;
                let outs = generate_all(&mut e, &prompts, &seeds, &params)?;
                (outs, e.stats().decode_passes)
            }
            Path::External => {
                let r = ext.as_deref_mut().ok_or_else(no_external)?;
                (generate_all(r, &prompts, &seeds, &params)?, 0)
            }
        };
        sync(o.device);
        let p = PhaseReport {
            phase: name,
            wall_s: t.elapsed().as_secs_f64(),
            generated: outs.iter().map(|c| c.tokens.len() as u64).sum(),
            calls,
        };
        for (i, c) in outs.into_iter().enumerate() {
            report.turns.insert((phase as usize, i, 0), c.tokens);
        }
        on_phase(&p);
        report.phases.push(p);
    }
    for (phase, name, per_env) in [(2u64, "hint plays", o.hint_plays), (3, "plays", o.plays)] {
        if per_env == 0 {
            continue;
        }
        let mut envs = w.episodes(phase, per_env);
        let t = Instant::now();
        let mut generated = 0u64;
        let mut calls = 0u64;
        let record = |e: &Episode, c: &Completion, report: &mut RolloutReport| {
            let seq = (e.key[1] * per_env as u64 + e.key[2]) as usize;
            report
                .turns
                .insert((phase as usize, seq, e.turn), c.tokens.clone());
        };
        match path {
            Path::Sampler => {
                for env in &mut envs {
                    for chunk in env.chunks_mut(o.chunk.max(1)) {
                        let mut live: Vec<usize> = (0..chunk.len()).collect();
                        while !live.is_empty() {
                            let prompts: Vec<Vec<i64>> =
                                live.iter().map(|&i| chunk[i].ids.clone()).collect();
                            let seeds: Vec<u64> =
                                live.iter().map(|&i| w.turn_seed(&chunk[i])).collect();
                            let outs = generate(m, &prompts, &seeds, &w.params, None)?;
                            calls += 1;
                            let mut keep = vec![];
                            for (&i, c) in live.iter().zip(&outs) {
                                generated += c.tokens.len() as u64;
                                record(&chunk[i], c, &mut report);
                                if w.after(&mut chunk[i], c) {
                                    keep.push(i);
                                }
                            }
                            live = keep;
                        }
                    }
                }
            }
            Path::Engine | Path::External => {
                let mut own = None;
                let e: &mut dyn Rollout = match ext.as_deref_mut() {
                    Some(r) => r,
                    None => own.insert(Engine::new(m, None, engine_cfg(o.context))?),
                };
                let mut eps: Vec<Episode> = envs.into_iter().flatten().collect();
                let mut running: BTreeMap<SeqId, usize> = BTreeMap::new();
                for (k, ep) in eps.iter().enumerate() {
                    let id = e.open();
                    e.submit(id, request(ep, &w))?;
                    running.insert(id, k);
                }
                while !running.is_empty() {
                    for f in e.step()? {
                        let Some(k) = running.remove(&f.seq) else {
                            continue;
                        };
                        let c = f.result?;
                        generated += c.tokens.len() as u64;
                        record(&eps[k], &c, &mut report);
                        if w.after(&mut eps[k], &c) {
                            e.submit(f.seq, request(&eps[k], &w))?;
                            running.insert(f.seq, k);
                        } else {
                            e.close(f.seq);
                        }
                    }
                }
                calls = own.as_ref().map_or(0, |e| e.stats().decode_passes);
            }
        }
        sync(o.device);
        let p = PhaseReport {
            phase: name,
            wall_s: t.elapsed().as_secs_f64(),
            generated,
            calls,
        };
        on_phase(&p);
        report.phases.push(p);
    }
    Ok(report)
}

fn no_external() -> PolicyError {
    PolicyError::InvalidInput("bench-rollout: the external path has no rollout".into())
}

fn request(e: &Episode, w: &Workload<'_>) -> Request {
    Request {
        tokens: e.ids.clone(),
        params: w.params.clone(),
        seed: w.turn_seed(e),
    }
}

fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Turns of `b` whose tokens equal `a`'s, and turns compared.
pub fn agreement(a: &RolloutReport, b: &RolloutReport) -> (usize, usize) {
    let same = a
        .turns
        .iter()
        .filter(|(k, v)| b.turns.get(k) == Some(v))
        .count();
    (same, a.turns.len().max(b.turns.len()))
}
