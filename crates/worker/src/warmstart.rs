//! Warm start of the tiny model on the seed library (issue 5, item 6): a model of a few million
//! parameters initialised from scratch cannot write an environment, so before self-play it is
//! fine-tuned (SFT) on three kinds of pairs built from `envs/seed`:
//!
//! - designer: the designer prompt for a seed's skill (with a corpus document and memory
//!   examples drawn from the other seeds of its skill, as the loop builds them) -> the seed's
//!   code;
//! - hint: the hint prompt with the seed's code -> the seed's docstring (skill and mechanic);
//! - agent: the observations of an episode of the seed, played through the sandbox with its own
//!   `solution()` -> `\boxed{solution()}` each turn (tool use: the solution's tool call), in the
//!   exact token layout [`crate::play`] uses, half of them with the hint in front.
//!
//! A pretrained preset (`smollm2-135m` with `model.warm_start` `"seeds"` or `"families"`) is
//! fine-tuned on the same pairs from its own checkpoint ([`WarmStartOptions::base`]: its
//! tokenizer and chat template, fewer epochs, a smaller rate), its agent on the hinted
//! episodes only ([`WarmStartOptions::agent_hint_only`]).
//!
//! With `model.warm_start = "families"` the seeds are the variants of a built-in game family
//! ([`families`]) instead: many programs that differ in their parameters, with a hint of the
//! family's own, so the designer writes programs that differ and the hint carries what the
//! agent needs.
//!
//! The warm start trains until its criterion is met, up to a bound: after `epochs` epochs, and
//! after every epoch from then on, `measure_samples` designer samples on prompts held back from
//! training are validated in the sandbox, and it stops once at least `min_acceptance` of them
//! are accepted, or at `max_epochs`, saying so in plain words ([`WarmStartReport::verdict`]).
//! A fixed number of epochs is not enough: with the same data and recipe the tiny model ends on
//! either side of "writes whole programs" depending on the CPU kernels' rounding (issue 35: 0 of
//! 12 accepted after 12 epochs with libtorch's AVX-512 kernels, 12 of 12 with its AVX2 kernels on
//! the same machine).
//!
//! The result is cached by a content hash of the seed files, the options, the CPU kernels
//! ([`spade_policy::kernels::fingerprint`]: trained weights differ between kernel sets) and
//! [`WARMSTART_VERSION`], so tests and the demo train it once per machine kind. The measured
//! acceptance of every check is stored with the checkpoint (`warmstart.json`).

use crate::designer::{self, DesignOptions, Slot};
use crate::play::{TokenTrace, observation_frame};
use crate::{WorkerError, seeds};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use spade::memory::{Examples, MemoryRecord};
use spade::prompt::ChatPrompt;
use spade_policy::Policy;
use spade_policy::preset;
use spade_policy::sft::{SftConfig, SftTrainer};
use spade_policy::tokenizer::{IM_END, Tokenizer};
use spade_policy::train::{MaskedSeq, OptimConfig};
use spade_sandbox::{EnvKind, Pool, ValidationConfig};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod data;
use data::designer_pair_prompt;
pub use data::{SeedEnv, build_data, designer_files, read_seeds};
pub(crate) use data::{collect_py, pair};
pub mod families;
pub(crate) mod spice;

/// Bumped whenever the pairs or the training change, so stale caches are not reused.
pub const WARMSTART_VERSION: u32 = 3;

/// A pretrained base's warm start (`model.preset = "smollm2-135m"` with `model.warm_start`
/// `"families"` or `"seeds"`): epochs before its criterion is first checked, its bound, and
/// its learning rate. A pretrained model needs a few passes over the contract where the tiny
/// one needs dozens, and a rate near its pretraining's end rather than the tiny model's.
pub const PRETRAINED_EPOCHS: usize = 1;
pub const PRETRAINED_MAX_EPOCHS: usize = 4;
pub const PRETRAINED_LR: f64 = 5e-5;

/// What the warm start trains on and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmStartOptions {
    /// Environment kinds whose seeds train the designer and the agent.
    pub kinds: Vec<EnvKind>,
    /// Seed of the tokenizer/weights and of every draw.
    pub seed: u64,
    /// Epochs trained before the criterion is first checked (all of them when nothing is
    /// measured).
    pub epochs: usize,
    /// The bound: the warm start stops after this many epochs even when its criterion is not
    /// met (never fewer than `epochs`).
    pub max_epochs: usize,
    /// The criterion: the share of the `measure_samples` designer samples, on held-back
    /// prompts, that the sandbox must accept.
    pub min_acceptance: f64,
    pub batch_size: usize,
    pub lr: f64,
    /// Designer prompts per seed file (each with another corpus document and memory draw).
    pub designer_variants: usize,
    /// Seed files the designer learns to write: the shortest ones of the kinds. A 4 M-parameter
    /// model on a shared 2-core machine reproduces one file of ~1,000 tokens after minutes of
    /// training; all 24 would take hours. The hint and agent pairs use the same files.
    pub designer_files: usize,
    /// Agent episodes per seed file (seeds 0..n), played with `solution()`.
    pub agent_episodes: usize,
    /// Characters of code the hint prompt shows.
    pub hint_code_chars: usize,
    /// Memory examples in designer prompts (positives, negatives) and their code length.
    pub memory_positives: usize,
    pub memory_negatives: usize,
    pub memory_code_chars: usize,
    /// Corpus documents (already truncated) the designer prompts draw from; empty = none.
    pub corpus_docs: Vec<String>,
    /// Designer samples validated at every check of the criterion (0: no designer to measure,
    /// no criterion).
    pub measure_samples: usize,
    pub designer_max_new_tokens: usize,
    /// The turn limit the designer prompt's contract states.
    pub max_turns: u32,
    /// Train on the variants of this built-in game family ([`families`]) instead of the seed
    /// library's files (absent = the seed library; also keeps the cache keys of older options).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Fine-tune this pretrained checkpoint directory (with its own tokenizer) instead of
    /// initialising the tiny model (absent = the tiny model; also keeps older cache keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<PathBuf>,
    /// The agent learns only episodes with the hint in front. Without it a family's key cannot
    /// be known, and a pretrained model taught to answer it anyway collapsed onto the prompt's
    /// placeholder (measured on SmolLM2: `\boxed{\boxed{n}}` in every one of 132 no-hint plays
    /// of a demo run, so no play without the hint could ever win); left to itself it guesses.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub agent_hint_only: bool,
}

/// What the warm start did, stored next to the checkpoint as `warmstart.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmStartReport {
    pub hash: String,
    pub designer_pairs: usize,
    pub hint_pairs: usize,
    pub agent_sequences: usize,
    pub tokens: usize,
    pub first_loss: f64,
    pub last_loss: f64,
    pub train_seconds: f64,
    /// Designer samples validated at the last check, and how many the sandbox accepted.
    pub measured: usize,
    pub accepted: usize,
    pub acceptance_rate: f64,
    /// Rejection reasons of the last check's samples, by count.
    pub rejections: std::collections::BTreeMap<String, usize>,
    /// Epochs trained.
    #[serde(default)]
    pub epochs: usize,
    /// Accepted samples the criterion needs of `measured` (0 when nothing is measured).
    #[serde(default)]
    pub needed: usize,
    /// Whether the last check met the criterion (true when there is none).
    #[serde(default)]
    pub criterion_met: bool,
    /// Every check of the criterion, in order.
    #[serde(default)]
    pub checks: Vec<AcceptanceCheck>,
    /// The CPU kernels it was trained with ([`spade_policy::kernels::fingerprint`]).
    #[serde(default)]
    pub kernels: String,
}

/// One check of the warm start's criterion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcceptanceCheck {
    /// Epochs trained when it was measured.
    pub epoch: usize,
    pub accepted: usize,
    pub measured: usize,
    /// Mean training loss of that epoch.
    pub loss: f64,
}

impl WarmStartReport {
    /// Whether the designer it trained writes environments the sandbox accepts often enough for
    /// a run (its criterion); tests that need a working tiny designer check this first.
    pub fn designer_ready(&self) -> bool {
        self.criterion_met
    }

    /// What the warm start achieved, in words a user understands: the worker logs it at the
    /// end of every warm start (trained or cached) and tests fail with it.
    pub fn verdict(&self) -> String {
        if self.measured == 0 {
            return format!(
                "warm start: {} epochs; no designer samples measured (the run writes no \
                 environments)",
                self.epochs
            );
        }
        let share = format!(
            "the sandbox accepted {}/{} designer samples on held-back prompts",
            self.accepted, self.measured
        );
        if self.criterion_met {
            return format!(
                "warm start: criterion met after {} epochs: {share} (needs {})",
                self.epochs, self.needed
            );
        }
        let consequence = if self.accepted == 0 {
            "the designer writes no valid environment yet: the run will show no curriculum"
        } else {
            "the designer writes few valid environments: the run's curriculum will be thin"
        };
        format!(
            "warm start: stopped at its bound of {} epochs without meeting its criterion: \
             {share}, needs {}; {consequence}",
            self.epochs, self.needed
        )
    }
}

/// Accepted samples of `measure_samples` the criterion needs (at least 1 when anything is
/// measured).
pub fn needed_accepts(opts: &WarmStartOptions) -> usize {
    if opts.measure_samples == 0 {
        return 0;
    }
    let n = (opts.min_acceptance * opts.measure_samples as f64).ceil();
    (n.max(1.0) as usize).min(opts.measure_samples)
}

/// The content hash that names the cached checkpoint: the version, the options, the CPU kernels
/// it trains with (`kernels`, [`spade_policy::kernels::fingerprint`]) and the seeds.
pub fn cache_key(seeds: &[SeedEnv], opts: &WarmStartOptions, kernels: &str) -> String {
    let mut h = Sha256::new();
    h.update(WARMSTART_VERSION.to_le_bytes());
    h.update(serde_json::to_vec(opts).unwrap_or_default());
    h.update(kernels.as_bytes());
    h.update([0u8]);
    for s in seeds {
        h.update(s.code.as_bytes());
        h.update([0u8]);
    }
    short_hex(&h.finalize())
}

/// The first 8 bytes of a digest in hex: the names of cached warm starts and the identity of a
/// program in `distinct_accepted_run`.
pub(crate) fn short_hex(digest: &[u8]) -> String {
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Returns the warm-started checkpoint for `opts`, training it (and measuring its designer) when
/// `cache_root/warmstart-<hash>` does not hold one yet. `progress` receives one line per stage.
pub fn warm_start(
    seed_dir: &Path,
    cache_root: &Path,
    pool: &Pool,
    opts: &WarmStartOptions,
    mut progress: impl FnMut(&str),
) -> Result<(PathBuf, WarmStartReport), WorkerError> {
    let seeds_all = match &opts.family {
        Some(f) => families::variants(f, opts.seed, families::PER_SKILL, families::PLAY_BASES)
            .map_err(WorkerError::Config)?
            .into_iter()
            .filter(|s| opts.kinds.contains(&s.kind))
            .collect(),
        None => read_seeds(seed_dir)?,
    };
    let kernels = spade_policy::kernels::fingerprint();
    let hash = cache_key(&seeds_all, opts, &kernels);
    let dir = cache_root.join(format!("warmstart-{hash}"));
    if let Some(report) = load_cached(&dir)? {
        progress(&format!("warm start: cached at {}", dir.display()));
        progress(&report.verdict());
        return Ok((dir, report));
    }
    progress(&format!(
        "warm start: training (CPU kernels: {kernels}), cached as {}",
        dir.display()
    ));
    let started = Instant::now();
    let policy = match &opts.base {
        Some(base) => {
            progress(&format!("warm start: fine-tuning {}", base.display()));
            Policy::load(base, spade_policy::Device::Cpu)?
        }
        None => preset::tiny(&tiny_texts(&seeds_all, opts), opts.seed, |l| progress(l))?,
    };
    let tok = policy.require_tokenizer()?.clone();
    progress("warm start: playing the seeds' solutions for the agent pairs");
    let (data, counts) = build_data(&tok, pool, &seeds_all, opts)?;
    let tokens: usize = data.iter().map(|s| s.ids.len()).sum();
    let needed = needed_accepts(opts);
    let max_epochs = opts.max_epochs.max(opts.epochs);
    progress(&format!(
        "warm start: {} designer, {} hint, {} agent sequences, {tokens} tokens; {}",
        counts[0],
        counts[1],
        counts[2],
        if needed == 0 {
            format!("{} epochs", opts.epochs)
        } else {
            format!(
                "trains until {needed}/{} designer samples on held-back prompts are accepted, \
                 checked after {} epochs and every epoch after, at most {max_epochs} epochs",
                opts.measure_samples, opts.epochs
            )
        }
    ));
    let cfg = SftConfig {
        optim: OptimConfig {
            lr: opts.lr,
            weight_decay: 0.0,
            ..OptimConfig::default()
        },
        micro_batch: 2,
        max_len: 4096,
    };
    let mut trainer = SftTrainer::new(&policy, cfg)?;
    let mut order = data;
    // A fixed shuffle so batches mix the three roles.
    order.sort_by_key(|s| {
        seeds::derive(
            opts.seed,
            &[s.ids.len() as u64, s.ids[s.ids.len() / 2] as u64],
        )
    });
    let mut losses: Vec<f64> = Vec::new();
    let mut checks = Vec::new();
    let mut last = (0, 0, Default::default());
    let mut epochs = 0;
    let last_epoch = if needed == 0 { opts.epochs } else { max_epochs };
    while epochs < last_epoch {
        let (epoch_losses, loss) = train_epoch(
            &mut trainer,
            &policy,
            &order,
            epochs,
            opts.batch_size,
            &mut |l| progress(l),
        )?;
        epochs += 1;
        losses.extend(epoch_losses);
        progress(&format!(
            "warm start: epoch {epochs}/{last_epoch} loss {loss:.3} ({:.0} s)",
            started.elapsed().as_secs_f64()
        ));
        if needed == 0 || epochs < opts.epochs {
            continue;
        }
        let (measured, accepted, rejections) = measure(&policy, pool, &seeds_all, opts)?;
        progress(&format!(
            "warm start: designer acceptance {accepted}/{measured} on held-back prompts after \
             {epochs} epochs (criterion: {needed}/{measured}; {:.0} s)",
            started.elapsed().as_secs_f64()
        ));
        checks.push(AcceptanceCheck {
            epoch: epochs,
            accepted,
            measured,
            loss,
        });
        last = (measured, accepted, rejections);
        if accepted >= needed {
            break;
        }
    }
    let train_seconds = started.elapsed().as_secs_f64();
    let (measured, accepted, rejections) = last;
    let report = WarmStartReport {
        hash: hash.clone(),
        designer_pairs: counts[0],
        hint_pairs: counts[1],
        agent_sequences: counts[2],
        tokens,
        first_loss: losses.first().copied().unwrap_or(f64::NAN),
        last_loss: losses.last().copied().unwrap_or(f64::NAN),
        train_seconds,
        measured,
        accepted,
        acceptance_rate: if measured == 0 {
            0.0
        } else {
            accepted as f64 / measured as f64
        },
        rejections,
        epochs,
        needed,
        criterion_met: accepted >= needed,
        checks,
        kernels,
    };
    progress(&format!(
        "warm start: designer acceptance {accepted}/{measured} after {train_seconds:.0} s of training"
    ));
    progress(&report.verdict());
    save_cached(&policy, &report, &dir)?;
    Ok((dir, report))
}

/// What the tiny model's tokenizer is trained on: the programs, hints and prompts the warm
/// start teaches.
fn tiny_texts(seeds_all: &[SeedEnv], opts: &WarmStartOptions) -> Vec<String> {
    let mut texts: Vec<String> = seeds_all.iter().map(|s| s.code.clone()).collect();
    texts.extend(seeds_all.iter().map(|s| s.hint.clone()));
    texts.extend(opts.corpus_docs.iter().cloned());
    texts.push(spade::prompt::DESIGNER_SYSTEM.into());
    texts.push(spade::prompt::HINT_SYSTEM.into());
    texts.push(spade::prompt::contract(
        spade::EnvKind::Game,
        opts.max_turns,
    ));
    texts.push(spade::prompt::contract(
        spade::EnvKind::ToolUse,
        opts.max_turns,
    ));
    texts.push(spade::prompt::agent_system(spade::EnvKind::Game).into());
    texts.push(spade::prompt::agent_system(spade::EnvKind::ToolUse).into());
    // Every designer pair repeats its kind's prompt (system, skill, contract): a tokenizer
    // that saw that prose once splits it into short pieces, and the prompt was most of the
    // warm start's tokens. Twice more for each skill the warm start teaches, so its words
    // become tokens of their own.
    if opts.family.is_some() {
        for skill in spade::skills::SKILLS
            .iter()
            .filter(|k| seeds_all.iter().any(|s| s.designer && s.skill == k.name))
        {
            let p = designer::render(&spade::prompt::designer_prompt(
                skill,
                None,
                &Examples::default(),
                opts.max_turns,
            ));
            texts.push(p.clone());
            texts.push(p);
        }
    }
    texts
}

/// Trains epoch `epoch` of `data` in the order one `SftTrainer::fit` over all the epochs
/// gives it (rotated by the epoch), so a warm start can check its criterion between epochs;
/// returns the epoch's losses and their mean.
///
/// `progress` gets a line about every eighth of the epoch (a pretrained model's epoch takes
/// tens of minutes on a CPU).
pub(crate) fn train_epoch(
    trainer: &mut SftTrainer,
    policy: &Policy,
    data: &[MaskedSeq],
    epoch: usize,
    batch_size: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<f64>, f64), WorkerError> {
    let mut order = data.to_vec();
    order.rotate_left(epoch % data.len().max(1));
    let batches = order.len().div_ceil(batch_size.max(1));
    let every = batches.div_ceil(8).max(1);
    let started = Instant::now();
    let mut recent = Vec::new();
    let losses = trainer.fit(policy, &order, 1, batch_size, |_, step, loss| {
        recent.push(loss);
        if (step + 1) % every == 0 && step + 1 < batches {
            let mean = recent.iter().sum::<f64>() / recent.len() as f64;
            recent.clear();
            progress(&format!(
                "warm start: epoch {}: {}/{batches} batches, loss {mean:.3} ({:.0} s)",
                epoch + 1,
                step + 1,
                started.elapsed().as_secs_f64()
            ));
        }
    })?;
    let mean = losses.iter().sum::<f64>() / losses.len().max(1) as f64;
    Ok((losses, mean))
}

/// The report of the warm start cached in `dir`, if one finished there (a directory without
/// `warmstart.json` is not one; a report that does not parse is an error naming it).
pub(crate) fn load_cached(dir: &Path) -> Result<Option<WarmStartReport>, WorkerError> {
    let report_path = dir.join("warmstart.json");
    let Ok(text) = std::fs::read_to_string(&report_path) else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| WorkerError::Corrupt {
            path: report_path.display().to_string(),
            message: e.to_string(),
        })
}

/// Writes a warm-started model and its `warmstart.json` into the cache directory `dir`
/// atomically: into a temporary sibling, renamed into place, so a reader never sees half of
/// it; when another process finished the same warm start first, theirs is kept.
pub(crate) fn save_cached(
    policy: &Policy,
    report: &WarmStartReport,
    dir: &Path,
) -> Result<(), WorkerError> {
    let report_path = dir.join("warmstart.json");
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = dir.parent().unwrap_or(Path::new("."));
    let tmp = parent.join(format!(".{name}.tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    policy.save(&tmp)?;
    let json = serde_json::to_string_pretty(report).map_err(|e| WorkerError::Corrupt {
        path: report_path.display().to_string(),
        message: e.to_string(),
    })?;
    let tmp_report = tmp.join("warmstart.json");
    std::fs::write(&tmp_report, json).map_err(|e| WorkerError::io(&tmp_report, e))?;
    match std::fs::rename(&tmp, dir) {
        Ok(()) => Ok(()),
        Err(_) if report_path.exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(())
        }
        Err(e) => Err(WorkerError::io(dir, e)),
    }
}

/// Samples designer outputs for the seeds' skills and validates them.
fn measure(
    policy: &Policy,
    pool: &Pool,
    seeds_all: &[SeedEnv],
    opts: &WarmStartOptions,
) -> Result<(usize, usize, std::collections::BTreeMap<String, usize>), WorkerError> {
    let candidates = designer_files(seeds_all, opts);
    if candidates.is_empty() || opts.measure_samples == 0 {
        return Ok((0, 0, Default::default()));
    }
    let picks: Vec<usize> = (0..opts.measure_samples)
        .map(|k| candidates[k % candidates.len()])
        .collect();
    let slots: Vec<Slot> = picks
        .iter()
        .map(|&i| Slot {
            skill: seeds_all[i].skill.clone(),
            kind: seeds_all[i].kind,
        })
        .collect();
    let d = DesignOptions {
        attempts: 1,
        temperature: 0.6,
        cut: crate::play::Cut::NONE,
        max_new_tokens: opts.designer_max_new_tokens,
        repair_fstrings: false,
        validation: ValidationConfig::default(),
        // The warm-start measurement counts what the sandbox accepts (spec: no judge for the
        // tiny model).
        self_judge: false,
        judge_temperature: 0.6,
        judge_cut: crate::play::Cut::NONE,
        judge_max_new_tokens: opts.designer_max_new_tokens,
        backend: crate::play::Backend::default(),
        prompts: spade::prompt::PromptStyle::Compact,
    };
    // Fresh variants (index 1000+) so the measurement does not replay a training prompt.
    let attempts = designer::design(
        policy,
        pool,
        &slots,
        &d,
        |slot, _| designer_pair_prompt(seeds_all, picks[slot], 1000 + slot, opts),
        |slot, _| format!("warmstart-{slot}"),
        |slot, _| seeds::derive(opts.seed, &[seeds::tag::DESIGNER, 999, slot as u64]),
        |_, _| {},
    )?;
    let mut accepted = 0;
    let mut reasons = std::collections::BTreeMap::new();
    for a in attempts.iter().flatten() {
        if a.accepted {
            accepted += 1;
        } else {
            *reasons
                .entry(a.rejection_reason.clone().unwrap_or_default())
                .or_insert(0) += 1;
        }
    }
    Ok((slots.len(), accepted, reasons))
}

#[cfg(test)]
#[path = "warmstart_tests.rs"]
mod tests;
