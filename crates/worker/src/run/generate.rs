//! Regeneration (spec, "One training step", items 1 to 5): active skills, designer prompts with a
//! corpus document and memory examples, attempts and validation, hints, the formula-reveal check,
//! embeddings for the Vendi window, and the hint plays. Also the fixed-env baseline's pool.

use super::Loop;
use super::metrics::StepObservations;
use super::{env_seed, fnv, play_record};
use crate::designer::{self, Slot, SlotPlan};
use crate::state::{Buffered, Embedded, LiveEnv, Window};
use crate::{WorkerError, play, seeds};
use spade::EnvKind;
use spade::config::{RunConfig, VendiKernel};
use spade::corpus::Corpus;
use spade::memory::Examples;
use spade::report::{EnvStatus, EnvironmentRecord, Message};
use std::collections::BTreeMap;

/// The corpus: the configured JSONL file (a `text` or `orig_doc` field per line), else the
/// bundled one; none with the no-corpus ablation.
pub fn load_corpus(cfg: &RunConfig) -> Result<Option<Corpus>, WorkerError> {
    if cfg.ablation.no_corpus {
        return Ok(None);
    }
    let Some(path) = &cfg.corpus.path else {
        return Ok(Some(Corpus::bundled()));
    };
    let path = std::path::Path::new(path);
    let text = std::fs::read_to_string(path).map_err(|e| WorkerError::io(path, e))?;
    Corpus::from_jsonl(&text)
        .map(Some)
        .map_err(|e| WorkerError::Corrupt {
            path: path.display().to_string(),
            message: e.to_string(),
        })
}

/// The seed coordinates of attempt `attempt` at designer slot `slot` of the regeneration of
/// `kind` at `step` (for hints: `slot` = the accepted environment's index, `attempt` 0), under
/// the purpose `tag`. The kind is a coordinate, so games and tool use regenerating at the same
/// step draw different documents, memory examples, designer and hint samples.
pub(crate) fn attempt_coords(
    tag: u64,
    kind: EnvKind,
    step: u64,
    slot: usize,
    attempt: u32,
) -> [u64; 5] {
    let kind = match kind {
        EnvKind::Game => 0,
        EnvKind::ToolUse => 1,
    };
    [tag, kind, step, slot as u64, u64::from(attempt)]
}

/// A regeneration's result: the new window (its hint plays tallied), the reports of its
/// attempts and hint plays in the order they are sent, how many attempts the designer made and
/// what the phase observed for the step's metrics.
pub(super) struct Regenerated {
    pub window: Window,
    pub messages: Vec<Message>,
    pub attempts: u64,
    pub obs: StepObservations,
}

/// Generates a new window of environments of `kind` (None: no regeneration of `kind` at this
/// step). The run's totals (attempts, accepted, distinct programs) are counted in the state.
pub(super) fn regenerate(
    lp: &mut Loop<'_>,
    kind: EnvKind,
) -> Result<Option<Regenerated>, WorkerError> {
    let step = lp.state.step;
    let Some((round, skills)) = lp.cfg.regeneration_at(kind, step) else {
        return Ok(None);
    };
    let mut obs = StepObservations::default();
    let mut messages = Vec::new();
    let slots: Vec<Slot> = skills
        .iter()
        .map(|s| Slot {
            skill: s.name.to_string(),
            kind,
        })
        .collect();
    let d = designer::design_options(lp.cfg, lp.designer_backend());
    let run_seed = lp.cfg.run.seed;
    let max_words = lp.cfg.corpus_max_words(kind);
    let kind_char = if kind == EnvKind::Game { 'g' } else { 't' };
    let (cfg, corpus, memory) = (lp.cfg, &lp.corpus, &lp.state.memory);
    // Every attempt's prompt, planned before any is sampled (each is drawn from seeds of its
    // own, so planning one that is never needed changes nothing): a run on several ranks
    // sends each its slots' plans, since the corpus and the memory are rank 0's.
    let mut parents_of: Vec<Vec<Option<String>>> = Vec::with_capacity(slots.len());
    let plans: Vec<SlotPlan> = slots
        .iter()
        .enumerate()
        .map(|(slot, s)| {
            let mut parents = Vec::new();
            let mut plan = SlotPlan {
                slot: s.clone(),
                prompts: Vec::new(),
                env_ids: Vec::new(),
                seeds: Vec::new(),
            };
            for attempt in 0..d.attempts {
                // spec 2: a fresh corpus document per attempt, uniform with a seed, truncated.
                let doc = corpus.as_ref().map(|c| {
                    let d = c.pick(
                        run_seed,
                        &attempt_coords(seeds::tag::CORPUS, kind, step, slot, attempt),
                    );
                    spade::corpus::truncate_words(&d.text, max_words)
                });
                let examples = if cfg.ablation.no_memory {
                    Examples::default()
                } else {
                    let mut rng = spade::seeded_rng(
                        run_seed,
                        &attempt_coords(seeds::tag::MEMORY, kind, step, slot, attempt),
                    );
                    memory.examples(&cfg.memory, kind, skills[slot].name, &mut rng)
                };
                parents.push(examples.parent_env_id().map(str::to_string));
                plan.prompts.push(cfg.model.prompts.designer_prompt(
                    skills[slot],
                    doc.as_deref(),
                    &examples,
                    cfg.agent.max_turns,
                    seeds::derive(
                        run_seed,
                        &attempt_coords(seeds::tag::PROMPT_VARIANT, kind, step, slot, attempt),
                    ),
                ));
                plan.env_ids
                    .push(format!("s{step}-{kind_char}{slot}-a{attempt}"));
                plan.seeds.push(seeds::derive(
                    run_seed,
                    &attempt_coords(seeds::tag::DESIGNER, kind, step, slot, attempt),
                ));
            }
            parents_of.push(parents);
            plan
        })
        .collect();
    let attempts = match &lp.opts.ranks {
        // A frozen designer is rank 0's alone.
        Some(r) if lp.designer.is_none() => r.design_shared(&lp.policy, &lp.pool, &plans, &d)?,
        _ => designer::design_planned(lp.designer_policy(), &lp.pool, &plans, &d)?,
    };
    // An environment's parent: that of its slot's last attempt with memory examples.
    let parents: BTreeMap<usize, String> = attempts
        .iter()
        .enumerate()
        .filter_map(|(slot, list)| {
            let made = parents_of.get(slot)?.get(..list.len())?;
            Some((slot, made.iter().rev().find_map(Clone::clone)?))
        })
        .collect();

    let mut window = Window {
        started_step: step,
        envs: vec![],
        buffer: vec![],
        round,
    };
    let (mut n_attempts, mut n_accepted) = (0u64, 0u64);
    let mut accepted = Vec::new();
    for (slot, list) in attempts.iter().enumerate() {
        for a in list {
            n_attempts += 1;
            if a.accepted {
                n_accepted += 1;
                obs.acceptance.accept();
                lp.state.accepted_code.insert(code_hash(&a.code));
                accepted.push((slot, a));
            } else {
                obs.acceptance
                    .reject(a.rejection_reason.as_deref().unwrap_or("unknown"));
            }
            window.buffer.push(Buffered {
                sample: a.sample.clone(),
                accepted: a.accepted,
                generated_step: step,
            });
        }
    }
    lp.state.attempts_total += n_attempts;
    lp.state.accepted_total += n_accepted;

    lp.phase("hint")?;
    let codes: Vec<&str> = accepted.iter().map(|(_, a)| a.code.as_str()).collect();
    let hint_seeds: Vec<u64> = (0..codes.len())
        .map(|i| {
            seeds::derive(
                run_seed,
                &attempt_coords(seeds::tag::HINT, kind, step, i, 0),
            )
        })
        .collect();
    let hint_prompts: Vec<spade::prompt::ChatPrompt> = codes
        .iter()
        .map(|code| {
            designer::hint_prompt(lp.cfg.model.prompts, kind, code, lp.cfg.hint_code_limit())
        })
        .collect();
    let (temperature, max_new) = (
        lp.cfg.hint.temperature,
        lp.cfg.model.hint_max_new_tokens as usize,
    );
    let hints = match &lp.opts.ranks {
        Some(r) if lp.designer.is_none() => r.hints_shared(
            &lp.policy,
            &hint_prompts,
            &hint_seeds,
            temperature,
            max_new,
            lp.designer_backend(),
        )?,
        _ => designer::hints_for(
            lp.designer_policy(),
            &hint_prompts,
            temperature,
            max_new,
            &hint_seeds,
            lp.designer_backend(),
        )?,
    };
    let mut hints_by_id = BTreeMap::new();
    for ((slot, a), hint) in accepted.iter().zip(hints) {
        hints_by_id.insert(a.env_id.clone(), hint.clone());
        let reveals = reveals_solution(lp, &a.code, kind);
        obs.formula_reveals.push(reveals);
        window.envs.push(LiveEnv {
            hint,
            generated_step: step,
            parent_env_id: parents.get(slot).cloned(),
            reveals_solution: reveals,
            ..super::fixed::fixed_env(
                a.env_id.clone(),
                slots[*slot].skill.clone(),
                kind,
                a.code.clone(),
            )
        });
    }
    for (slot, list) in attempts.iter().enumerate() {
        for (i, a) in list.iter().enumerate() {
            let status = if a.accepted {
                EnvStatus::Accepted
            } else {
                EnvStatus::Rejected
            };
            messages.push(Message::Environment {
                record: EnvironmentRecord {
                    rejection_reason: a.rejection_reason.clone(),
                    rejection_message: a.rejection_message.clone(),
                    hint: hints_by_id.get(&a.env_id).cloned(),
                    parent_env_id: parents.get(&slot).cloned(),
                    attempts: i as u32 + 1,
                    ..EnvironmentRecord::new(
                        a.env_id.clone(),
                        step,
                        slots[slot].skill.clone(),
                        kind,
                        status,
                        a.code.clone(),
                    )
                },
            });
        }
    }
    embed(lp, &window.envs)?;

    lp.phase("hint plays")?;
    let popts = lp.play_options();
    let mut records = Vec::new();
    // Every new environment's hint plays go to the rollout backend at once.
    let jobs: Vec<play::PlayJob<'_>> = window
        .envs
        .iter()
        .map(|env| play::PlayJob {
            first_index: 0,
            code: &env.code,
            kind,
            hint: Some(&env.hint),
            seeds: (0..lp.cfg.hint.plays as usize)
                .map(|i| env_seed(run_seed, step, &format!("hint/{}", env.env_id), i))
                .collect(),
            sample_seed: seeds::derive(run_seed, &[seeds::tag::HINT_PLAY, step, fnv(&env.env_id)]),
        })
        .collect();
    let n = super::concurrency(lp.cfg, lp.opts);
    let all = match &lp.opts.ranks {
        Some(r) => r.play_shared(&lp.policy, &lp.pool, &jobs, &popts, n)?.0,
        None => play::play_envs(&lp.policy, &lp.pool, &jobs, &popts, n)?,
    };
    drop(jobs);
    for (env, eps) in window.envs.iter_mut().zip(all) {
        super::score::tally(env, &eps, true, step);
        obs.note_plays(&eps);
        if let Some(msg) = super::score::broken_in_play(env, &eps, step, lp.cfg.agent.retire_on) {
            messages.push(msg);
        }
        records.extend(eps.iter().map(|ep| play_record(&env.env_id, step, ep)));
    }
    messages.push(Message::Plays { records });
    Ok(Some(Regenerated {
        window,
        messages,
        attempts: n_attempts,
        obs,
    }))
}

/// The formula-reveal check (`spade::metrics::reveals_formula`) on the first observation of
/// seed 0 and the solution in that state; tool use has no formula to reveal.
fn reveals_solution(lp: &Loop<'_>, code: &str, kind: spade_sandbox::EnvKind) -> bool {
    if kind == spade_sandbox::EnvKind::ToolUse {
        return false;
    }
    let Ok(mut s) = lp.pool.load(code, Some(kind), None) else {
        return false;
    };
    match (s.reset(Some(0)), s.solution()) {
        (Ok(obs), Ok(sol)) => spade::metrics::reveals_formula(&obs.obs, &sol),
        _ => false,
    }
}

/// The sentence encoder of `metrics.vendi_kernel = "sentence"` (None for other kernels).
pub(crate) fn load_encoder(
    cfg: &RunConfig,
    device: spade_policy::Device,
    on: &mut dyn FnMut(crate::run::Event),
) -> Result<Option<spade_policy::encoder::Encoder>, WorkerError> {
    let (VendiKernel::Sentence, Some(dir)) = (
        cfg.metrics.vendi_kernel,
        cfg.metrics.vendi_encoder.as_deref(),
    ) else {
        return Ok(None);
    };
    let enc = spade_policy::encoder::Encoder::load(std::path::Path::new(dir), device)
        .map_err(|e| WorkerError::Config(format!("metrics.vendi_encoder = {dir:?}: {e}")))?;
    on(crate::run::Event::Log(format!(
        "Vendi kernel: sentence encoder {dir} ({} pooling)",
        enc.pooling()
    )));
    Ok(Some(enc))
}

/// Embeddings of new environments for the Vendi window, by `metrics.vendi_kernel`: word
/// unigram and bigram counts of the code (`ngram`, the default), the policy's mean-pooled
/// hidden states over its first 512 tokens (`policy`; when the policy cannot embed them the
/// environments of this regeneration are left out rather than mixed with n-gram vectors), or a
/// sentence encoder's pooled output over the code's first 512 tokens (`sentence`).
fn embed(lp: &mut Loop<'_>, envs: &[LiveEnv]) -> Result<(), WorkerError> {
    let kernel = lp.cfg.metrics.vendi_kernel;
    let vectors = match kernel {
        VendiKernel::Ngram => ngram_vectors(envs),
        VendiKernel::Sentence => match &lp.encoder {
            Some(enc) => {
                let codes: Vec<&str> = envs.iter().map(|e| e.code.as_str()).collect();
                enc.embed(&codes)?
            }
            None => vec![],
        },
        VendiKernel::Policy => {
            let tok = lp.policy.require_tokenizer()?;
            let mut seqs = Vec::new();
            for e in envs {
                let mut ids = tok.encode(&e.code)?;
                ids.truncate(512);
                seqs.push(ids);
            }
            if seqs.iter().all(|s| s.len() >= 2) && !seqs.is_empty() {
                spade_policy::embed::mean_hidden(&lp.policy, &seqs).unwrap_or_default()
            } else {
                vec![]
            }
        }
    };
    let step = lp.state.step;
    lp.state
        .embeddings
        .extend(vectors.into_iter().map(|vector| Embedded {
            step,
            vector,
            kernel,
        }));
    let keep_from = step.saturating_sub(lp.cfg.metrics.vendi_window_steps);
    lp.state.embeddings.retain(|e| e.step >= keep_from);
    Ok(())
}

/// The n-gram kernel's vectors of `envs`' code (`spade::metrics::vendi::ngram_embedding`).
pub(crate) fn ngram_vectors(envs: &[LiveEnv]) -> Vec<Vec<f32>> {
    envs.iter()
        .map(|e| {
            spade::metrics::vendi::ngram_embedding(&e.code, spade::metrics::vendi::NGRAM_DIM)
                .iter()
                .map(|&x| x as f32)
                .collect()
        })
        .collect()
}

/// A short content hash of a program, whitespace at the ends ignored: what counts as one
/// distinct program in `distinct_accepted_run`.
pub(crate) fn code_hash(code: &str) -> String {
    use sha2::{Digest, Sha256};
    crate::warmstart::short_hex(&Sha256::digest(code.trim().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::fixed::fixed_env;

    #[test]
    fn games_and_tool_use_regenerating_at_one_step_draw_different_seeds() {
        // Step 8 regenerates both kinds (k = 4 and 8): slot 0, attempt 0 of each used the same
        // (tag, step, slot, attempt) before the kind became a coordinate.
        for tag in [
            seeds::tag::CORPUS,
            seeds::tag::MEMORY,
            seeds::tag::DESIGNER,
            seeds::tag::HINT,
        ] {
            let g = attempt_coords(tag, EnvKind::Game, 8, 0, 0);
            let t = attempt_coords(tag, EnvKind::ToolUse, 8, 0, 0);
            assert_ne!(g, t);
            assert_ne!(seeds::derive(7, &g), seeds::derive(7, &t));
        }
        let corpus = Corpus::bundled();
        let docs: Vec<&str> = (0..8)
            .map(|slot| {
                let g = corpus.pick(
                    0,
                    &attempt_coords(seeds::tag::CORPUS, EnvKind::Game, 8, slot, 0),
                );
                let t = corpus.pick(
                    0,
                    &attempt_coords(seeds::tag::CORPUS, EnvKind::ToolUse, 8, slot, 0),
                );
                if g.text == t.text {
                    "same"
                } else {
                    "different"
                }
            })
            .collect();
        assert!(docs.contains(&"different"), "{docs:?}");
    }

    #[test]
    fn the_sentence_kernel_loads_its_encoder_before_the_run_and_names_a_bad_path() {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../policy/tests/fixtures/encoder_roberta_pooler");
        let mut cfg = RunConfig::default();
        cfg.metrics.vendi_kernel = VendiKernel::Sentence;
        cfg.metrics.vendi_encoder = Some(fixture.display().to_string());
        let mut logs = vec![];
        let enc = load_encoder(&cfg, spade_policy::Device::Cpu, &mut |e| {
            if let crate::run::Event::Log(l) = e {
                logs.push(l)
            }
        });
        let enc = enc.unwrap().unwrap_or_else(|| panic!("no encoder loaded"));
        assert_eq!(enc.pooling(), "pooler");
        assert!(
            logs.iter().any(|l| l.contains("sentence encoder")),
            "{logs:?}"
        );
        let v = enc
            .embed(&["class MazeEnv: walls grid", "coins change amount"])
            .unwrap();
        assert_eq!((v.len(), v[0].len()), (2, 32));
        // The other kernels load nothing; a wrong path is named with its key.
        cfg.metrics.vendi_kernel = VendiKernel::Ngram;
        assert!(matches!(
            load_encoder(&cfg, spade_policy::Device::Cpu, &mut |_| {}),
            Ok(None)
        ));
        cfg.metrics.vendi_kernel = VendiKernel::Sentence;
        cfg.metrics.vendi_encoder = Some("/nonexistent/simcse".into());
        match load_encoder(&cfg, spade_policy::Device::Cpu, &mut |_| {}) {
            Err(WorkerError::Config(m)) => {
                assert!(
                    m.contains("metrics.vendi_encoder") && m.contains("/nonexistent"),
                    "{m}"
                )
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("loaded a missing encoder"),
        }
    }

    #[test]
    fn the_default_vendi_kernel_counts_ngrams_of_the_code() {
        let env = |id: &str, code: &str| {
            fixed_env(id.into(), "Optimization".into(), EnvKind::Game, code.into())
        };
        // Two copies of one maze and a coin-change game: the copies have cosine 1 and share no
        // word with the other, so the kernel is [[1, 1, 0], [1, 1, 0], [0, 0, 1]], whose
        // eigenvalues / 3 are 2/3, 1/3, 0: VS = exp(-(2/3 ln 2/3 + 1/3 ln 1/3)) = 1.8899.
        let envs = [
            env("a", "class MazeEnv: walls grid"),
            env("b", "class MazeEnv: walls grid"),
            env("c", "coins change amount"),
        ];
        let v: Vec<Vec<f64>> = ngram_vectors(&envs)
            .into_iter()
            .map(|v| v.into_iter().map(f64::from).collect())
            .collect();
        let vs =
            spade::metrics::vendi::vendi_score_unchecked(&spade::metrics::vendi::cosine_kernel(&v));
        let want = (-(2.0f64 / 3.0 * (2.0f64 / 3.0).ln() + 1.0 / 3.0 * (1.0f64 / 3.0).ln())).exp();
        assert!((vs - want).abs() < 1e-6, "{vs} != {want}");
        assert_eq!(
            RunConfig::default().metrics.vendi_kernel,
            VendiKernel::Ngram
        );
    }
}
