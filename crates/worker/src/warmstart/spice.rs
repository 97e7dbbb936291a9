//! The tiny model's warm start for SPICE runs (`run.algorithm = "spice"`): the same cache,
//! pairs and report as the seed library's warm start ([`super`]), on corpus documents. SPICE's
//! prompt formats and seed purposes live here, shared with the run's SPICE step.

use super::WarmStartReport;
use crate::{WorkerError, seeds};
use sha2::{Digest, Sha256};
use spade::config::RunConfig;
use spade::spice::{self, Task};
use spade_policy::Policy;
use spade_policy::chat::Role;
use spade_policy::sft::{SftConfig, SftTrainer};
use spade_policy::tokenizer::Tokenizer;
use spade_policy::train::OptimConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Seed purposes of SPICE draws (beside `crate::seeds::tag`'s).
pub(crate) mod tag {
    pub const DOCUMENT: u64 = 101;
    pub const FORMAT: u64 = 102;
    pub const CHALLENGER: u64 = 103;
    pub const REASONER: u64 = 104;
}

/// Bumped whenever the warm start's pairs or training change.
const WARMSTART_VERSION: u32 = 4;

/// What the SPICE warm start trains and where it caches.
pub(crate) struct Options<'a> {
    /// Epochs before the criterion is first checked; then one epoch at a time up to
    /// `max_epochs` until it is met.
    pub epochs: usize,
    pub max_epochs: usize,
    pub lr: f64,
    /// Challenger samples measured after training.
    pub measure: usize,
    pub cache_dir: &'a Path,
}

/// `measure(policy, challenger samples, held-back tasks)`: one check of the criterion.
pub(crate) type Measure<'a> =
    dyn FnMut(&Policy, usize, &[Task]) -> Result<Measured, WorkerError> + 'a;

/// Held-back tasks the reasoner is checked on.
const HELD_TASKS: usize = 8;

/// One check of the SPICE warm start's criterion.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    /// Challenger samples that parsed, and the others' errors by kind.
    pub parsed: usize,
    pub rejections: BTreeMap<String, usize>,
    /// Held-back tasks (no reasoner pair trained their answer) whose group of reasoner answers
    /// was mixed, some right and some wrong: a task a GRPO step learns from.
    pub mixed_groups: usize,
    /// Of the challenger's parsed samples, the tasks whose group of reasoner answers was mixed:
    /// what a run's step plays is the challenger's tasks, not the held-back ones.
    pub challenger_mixed: usize,
}

/// The criterion: a share of the challenger's samples parse (a quarter, at least one), the
/// reasoner answers a quarter of the held-back tasks (at least one) right some of the time, and
/// at least one of the challenger's own parsed tasks gets a mixed group of answers. Without the
/// second and third the run's reasoner never gets a right answer, so no reasoner sample,
/// nothing to learn: on an AMD EPYC with AVX-512 the fixed 12 epochs gave a pass rate of 0 in
/// every step, and on an AMD EPYC without AVX-512 a warm start that met the first two (mixed
/// groups on the held-back tasks, which the warm start made itself) still gave 0 in both steps,
/// because a run plays the tasks the challenger writes, and those the reasoner never got right.
fn needed_parses(measured: usize) -> usize {
    measured.div_ceil(4).max(1)
}

/// Held-back tasks with a mixed group of answers the criterion needs (see [`needed_parses`]).
fn needed_mixed(held: usize) -> usize {
    held.div_ceil(4).max(1)
}

/// The first `max_tokens` tokens of `text` under `tok` (SPICE cuts documents by tokens).
pub(crate) fn excerpt(
    tok: &Tokenizer,
    text: &str,
    max_tokens: usize,
) -> Result<String, WorkerError> {
    let ids = tok.encode(text)?;
    if ids.len() <= max_tokens {
        return Ok(text.to_string());
    }
    Ok(tok.decode(&ids[..max_tokens], true)?)
}

pub(crate) fn challenger_text(excerpt: &str, multiple_choice: bool) -> String {
    Role::Designer.prompt(
        Some(spice::CHALLENGER_SYSTEM),
        &spice::challenger_prompt(excerpt, multiple_choice),
    )
}

pub(crate) fn reasoner_text(task: &Task) -> String {
    Role::Agent.prompt(Some(spice::REASONER_SYSTEM), &spice::reasoner_prompt(task))
}

/// The tiny model's start for a SPICE run: a fresh tiny model whose tokenizer is trained on
/// the corpus and the prompts, fine-tuned on fill-in-the-blank tasks made from corpus documents
/// ([`spade::spice::cloze_task`]) in both formats (challenger pairs: document -> task) and on
/// answers in `\boxed{}` (reasoner pairs, for every other task), then measured: the share of
/// challenger samples that parse. Cached by a content hash of what it trains on.
/// Trains until its criterion is met, up to a bound (see [`Options`]): `measure(policy, n,
/// held)` samples `n` challenger tasks (how many parse, why the others did not) and the
/// reasoner's answers to the `held` tasks (the run's SPICE step does both, as in a run).
pub(crate) fn warm_start(
    cfg: &RunConfig,
    opts: &Options<'_>,
    corpus: &spade::corpus::Corpus,
    measure: &mut Measure<'_>,
    log: &mut dyn FnMut(String),
) -> Result<(PathBuf, WarmStartReport), WorkerError> {
    let docs: Vec<&str> = corpus
        .documents()
        .iter()
        .take(32)
        .map(|d| d.text.as_str())
        .collect();
    let mut h = Sha256::new();
    h.update(WARMSTART_VERSION.to_le_bytes());
    for part in [
        cfg.run.seed.to_string(),
        opts.epochs.to_string(),
        opts.max_epochs.to_string(),
        opts.lr.to_string(),
        cfg.spice.max_document_tokens.to_string(),
        cfg.spice.temperature.to_string(),
        // Trained weights differ between CPU kernel sets (issue 35).
        spade_policy::kernels::fingerprint(),
    ] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    for d in &docs {
        h.update(d.as_bytes());
        h.update([0u8]);
    }
    let hash = super::short_hex(&h.finalize());
    let dir = opts.cache_dir.join(format!("spice-warmstart-{hash}"));
    if let Some(report) = super::load_cached(&dir)? {
        log(format!("spice warm start: cached at {}", dir.display()));
        return Ok((dir, report));
    }
    let started = Instant::now();
    let mut texts: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
    texts.push(challenger_text("", true));
    texts.push(challenger_text("", false));
    texts.push(spice::REASONER_SYSTEM.into());
    let policy = spade_policy::preset::tiny(&texts, cfg.run.seed, |l| log(l.into()))?;
    let tok = policy.require_tokenizer()?.clone();
    let pair = |prompt: &str, completion: &str| super::pair(&tok, prompt, completion);
    let mut data = Vec::new();
    let mut held: Vec<Task> = Vec::new();
    let (mut challenger_pairs, mut reasoner_pairs) = (0, 0);
    let max_doc = cfg.spice.max_document_tokens as usize;
    for (i, d) in docs.iter().enumerate() {
        let ex = excerpt(&tok, d, max_doc)?;
        for mcq in [true, false] {
            let seed = seeds::derive(cfg.run.seed, &[tag::DOCUMENT, i as u64, u64::from(mcq)]);
            let Some(task) = spice::cloze_task(&ex, seed, mcq) else {
                continue;
            };
            data.push(pair(&challenger_text(&ex, mcq), &task.to_reply())?);
            challenger_pairs += 1;
            // Every other task also teaches the answer format, not all of them: the reasoner
            // should start unsure, so pass rates (and the variance reward) spread.
            if (i + usize::from(mcq)).is_multiple_of(2) {
                let answer = format!("The blank is \\boxed{{{}}}", task.reference());
                data.push(pair(&reasoner_text(&task), &answer)?);
                reasoner_pairs += 1;
            } else if held.len() < HELD_TASKS {
                held.push(task);
            }
        }
    }
    if data.is_empty() {
        return Err(WorkerError::Config(
            "the corpus has no sentence to make a SPICE warm-start task from".into(),
        ));
    }
    let tokens: usize = data.iter().map(|s| s.ids.len()).sum();
    log(format!(
        "spice warm start: {challenger_pairs} challenger and {reasoner_pairs} reasoner pairs, \
         {tokens} tokens, {} epochs",
        opts.epochs
    ));
    let sft = SftConfig {
        optim: OptimConfig {
            lr: opts.lr,
            weight_decay: 0.0,
            ..OptimConfig::default()
        },
        micro_batch: 4,
        max_len: cfg.model.max_context as usize,
    };
    let mut trainer = SftTrainer::new(&policy, sft)?;
    // A fixed shuffle so batches mix the two roles (fit() only rotates the order).
    data.sort_by_key(|s| {
        seeds::derive(
            cfg.run.seed,
            &[s.ids.len() as u64, s.ids[s.ids.len() / 2] as u64],
        )
    });
    let measured = opts.measure.max(1);
    let needed = needed_parses(measured);
    let max_epochs = opts.max_epochs.max(opts.epochs);
    log(format!(
        "spice warm start: trains until {needed}/{measured} challenger samples parse and the \
         reasoner answers {}/{} held-back tasks and at least one of the challenger's own \
         tasks right some of the time, checked after {} epochs and every epoch after, at most \
         {max_epochs} epochs",
        needed_mixed(held.len()),
        held.len(),
        opts.epochs
    ));
    let (mut losses, mut checks) = (Vec::new(), Vec::new());
    let mut last = Measured::default();
    let mut met = false;
    let mut epochs = 0;
    while epochs < max_epochs {
        let (epoch_losses, loss) =
            super::train_epoch(&mut trainer, &policy, &data, epochs, 4, &mut |_| {})?;
        epochs += 1;
        losses.extend(epoch_losses);
        log(format!(
            "spice warm start: epoch {epochs}/{max_epochs} loss {loss:.3} ({:.0} s)",
            started.elapsed().as_secs_f64()
        ));
        if epochs < opts.epochs {
            continue;
        }
        last = measure(&policy, measured, &held)?;
        log(format!(
            "spice warm start: {}/{measured} challenger samples parse, {} of {} held-back \
             tasks and {} of those {} challenger tasks answered right some of the time after \
             {epochs} epochs",
            last.parsed,
            last.mixed_groups,
            held.len(),
            last.challenger_mixed,
            last.parsed
        ));
        checks.push(super::AcceptanceCheck {
            epoch: epochs,
            accepted: last.parsed,
            measured,
            loss,
        });
        met = last.parsed >= needed
            && last.mixed_groups >= needed_mixed(held.len())
            && last.challenger_mixed >= 1;
        if met {
            break;
        }
    }
    let train_seconds = started.elapsed().as_secs_f64();
    let accepted = last.parsed;
    let report = WarmStartReport {
        hash: hash.clone(),
        designer_pairs: challenger_pairs,
        hint_pairs: 0,
        agent_sequences: reasoner_pairs,
        tokens,
        first_loss: losses.first().copied().unwrap_or(f64::NAN),
        last_loss: losses.last().copied().unwrap_or(f64::NAN),
        train_seconds,
        measured,
        accepted,
        acceptance_rate: accepted as f64 / measured as f64,
        rejections: last.rejections,
        epochs,
        needed,
        criterion_met: met,
        checks,
        kernels: spade_policy::kernels::fingerprint(),
    };
    if !met {
        log(format!(
            "spice warm start: stopped at its bound of {max_epochs} epochs without meeting its \
             criterion: the run's reasoner may never answer right, and then it learns nothing"
        ));
    }
    log(format!(
        "spice warm start: {accepted}/{measured} challenger samples parse after {train_seconds:.0} s"
    ));
    super::save_cached(&policy, &report, &dir)?;
    Ok((dir, report))
}
