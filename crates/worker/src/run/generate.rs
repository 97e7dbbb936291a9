//! Regeneration (spec, "One training step", items 1 to 5): active skills, designer prompts with a
//! corpus document and memory examples, attempts and validation, hints, the formula-reveal check,
//! embeddings for the Vendi window, and the hint plays. Also the fixed-env baseline's pool.

use super::{Loop, env_seed, fnv, play_record};
use crate::designer::{self, DesignOptions, Slot};
use crate::state::{Buffered, Embedded, LiveEnv, Window};
use crate::{WorkerError, play, seeds};
use spade::EnvKind;
use spade::config::RunConfig;
use spade::corpus::Corpus;
use spade::memory::Examples;
use spade::report::{EnvStatus, EnvironmentRecord, Message};
use spade_sandbox::ValidationConfig;
use std::collections::BTreeMap;
use std::time::Duration;

/// The sandbox's twin of a kind.
pub fn sandbox_kind(k: EnvKind) -> spade_sandbox::EnvKind {
    match k {
        EnvKind::Game => spade_sandbox::EnvKind::Game,
        EnvKind::ToolUse => spade_sandbox::EnvKind::ToolUse,
    }
}

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

/// The kind's window key in the state.
pub fn window_key(kind: EnvKind) -> String {
    kind.as_str().to_string()
}

/// Generates a new window of environments of `kind`.
pub(super) fn regenerate(
    lp: &mut Loop<'_>,
    kind: EnvKind,
    m: &mut BTreeMap<String, f64>,
) -> Result<(), WorkerError> {
    let step = lp.state.step;
    let key = window_key(kind);
    let Some((round, skills)) = spade::skills::regeneration_at(lp.cfg, kind, step) else {
        return Ok(());
    };
    let slots: Vec<Slot> = skills
        .iter()
        .map(|s| Slot {
            skill: s.name.to_string(),
            kind: sandbox_kind(kind),
        })
        .collect();
    let d = DesignOptions {
        attempts: lp.cfg.designer.attempts,
        temperature: lp.cfg.designer.temperature,
        max_new_tokens: lp.cfg.model.designer_max_new_tokens as usize,
        validation: ValidationConfig {
            budget: Duration::from_secs_f64(lp.cfg.sandbox.validation_timeout_s),
            call_timeout: Duration::from_secs_f64(lp.cfg.sandbox.step_timeout_s),
            kind: None,
            // Drawn from OS randomness on purpose, not from the run seed: the designer must
            // not be able to learn them (the report's seeds replay a rejection).
            ..ValidationConfig::default()
        },
        self_judge: lp.cfg.designer.self_judge,
        judge_temperature: lp.cfg.designer.judge_temperature,
        judge_max_new_tokens: lp.cfg.designer.judge_max_new_tokens as usize,
    };
    let run_seed = lp.cfg.run.seed;
    let max_words = lp.cfg.corpus_max_words(kind);
    let kind_char = if kind == EnvKind::Game { 'g' } else { 't' };
    let env_id = |slot: usize, attempt: u32| format!("s{step}-{kind_char}{slot}-a{attempt}");
    let mut parents: BTreeMap<usize, String> = BTreeMap::new();
    let (cfg, corpus, memory) = (lp.cfg, &lp.corpus, &lp.state.memory);
    let attempts = designer::design(
        &lp.policy,
        &lp.pool,
        &slots,
        &d,
        |slot, attempt| {
            let at = [step, slot as u64, u64::from(attempt)];
            // spec 2: a fresh corpus document per attempt, uniform with a seed, truncated.
            let doc = corpus.as_ref().map(|c| {
                let d = c.pick(run_seed, &[seeds::tag::CORPUS, at[0], at[1], at[2]]);
                spade::corpus::truncate_words(&d.text, max_words)
            });
            let examples = if cfg.ablation.no_memory {
                Examples::default()
            } else {
                let mut rng =
                    spade::seeded_rng(run_seed, &[seeds::tag::MEMORY, at[0], at[1], at[2]]);
                memory.examples(&cfg.memory, kind, &mut rng)
            };
            if let Some(p) = examples.parent_env_id() {
                parents.insert(slot, p.to_string());
            }
            spade::prompt::designer_prompt(
                skills[slot],
                doc.as_deref(),
                &examples,
                cfg.agent.max_turns,
            )
        },
        env_id,
        |slot, attempt| {
            seeds::derive(
                run_seed,
                &[seeds::tag::DESIGNER, step, slot as u64, u64::from(attempt)],
            )
        },
        |_, _| {},
    )?;

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
                lp.obs.acceptance.accept();
                accepted.push((slot, a));
            } else {
                lp.obs
                    .acceptance
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
    m.insert(format!("{}/attempts", kind.as_str()), n_attempts as f64);

    lp.phase("hint")?;
    let codes: Vec<&str> = accepted.iter().map(|(_, a)| a.code.as_str()).collect();
    let hint_seeds: Vec<u64> = (0..codes.len())
        .map(|i| seeds::derive(run_seed, &[seeds::tag::HINT, step, i as u64]))
        .collect();
    let hints = designer::hints(
        &lp.policy,
        &codes,
        lp.cfg.hint.temperature,
        lp.cfg.model.hint_max_new_tokens as usize,
        lp.cfg.hint_code_limit(),
        &hint_seeds,
    )?;
    let mut hints_by_id = BTreeMap::new();
    for ((slot, a), hint) in accepted.iter().zip(hints) {
        hints_by_id.insert(a.env_id.clone(), hint.clone());
        let reveals = reveals_solution(lp, &a.code, sandbox_kind(kind));
        lp.obs.formula_reveals.push(reveals);
        window.envs.push(LiveEnv {
            env_id: a.env_id.clone(),
            skill: slots[*slot].skill.clone(),
            kind,
            code: a.code.clone(),
            hint,
            generated_step: step,
            parent_env_id: parents.get(slot).cloned(),
            hint_returns: vec![],
            hint_wins: 0,
            no_hint_returns: vec![],
            no_hint_wins: 0,
            reward_levels: vec![],
            failed: None,
            broken_seed: None,
            reveals_solution: reveals,
        });
    }
    for (slot, list) in attempts.iter().enumerate() {
        for (i, a) in list.iter().enumerate() {
            lp.pending.push(Message::Environment {
                record: EnvironmentRecord {
                    env_id: a.env_id.clone(),
                    step,
                    skill: slots[slot].skill.clone(),
                    kind,
                    status: if a.accepted {
                        EnvStatus::Accepted
                    } else {
                        EnvStatus::Rejected
                    },
                    rejection_reason: a.rejection_reason.clone(),
                    rejection_message: a.rejection_message.clone(),
                    code: a.code.clone(),
                    hint: hints_by_id.get(&a.env_id).cloned(),
                    parent_env_id: parents.get(&slot).cloned(),
                    regret: None,
                    win_rate_hint: None,
                    win_rate_no_hint: None,
                    designer_reward: None,
                    reward_levels: None,
                    attempts: i as u32 + 1,
                },
            });
        }
    }
    embed(lp, &window.envs)?;

    lp.phase("hint plays")?;
    let popts = lp.play_options();
    let mut records = Vec::new();
    for env in &mut window.envs {
        let env_seeds: Vec<i64> = (0..lp.cfg.hint.plays as usize)
            .map(|i| env_seed(run_seed, step, &format!("hint/{}", env.env_id), i))
            .collect();
        let eps = play::play_env(
            &lp.policy,
            &lp.pool,
            &env.code,
            sandbox_kind(kind),
            Some(&env.hint),
            &env_seeds,
            &popts,
            super::concurrency(lp.cfg, lp.opts),
            seeds::derive(run_seed, &[seeds::tag::HINT_PLAY, step, fnv(&env.env_id)]),
        )?;
        super::score::tally(env, &eps, true);
        lp.obs.note_plays(&eps);
        if let Some(msg) = super::score::broken_in_play(env, &eps, step) {
            lp.pending.push(msg);
        }
        records.extend(eps.iter().map(|ep| play_record(&env.env_id, step, ep)));
    }
    lp.pending.push(Message::Plays { records });
    lp.state.windows.insert(key, window);
    Ok(())
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

/// Embeddings of new environments for the Vendi window: the policy's mean-pooled hidden states
/// over the first 512 tokens of the code; the n-gram embedding when the policy cannot embed.
fn embed(lp: &mut Loop<'_>, envs: &[LiveEnv]) -> Result<(), WorkerError> {
    let tok = lp.policy.require_tokenizer()?;
    let mut seqs = Vec::new();
    for e in envs {
        let mut ids = tok.encode(&e.code)?;
        ids.truncate(512);
        seqs.push(ids);
    }
    let vectors = if seqs.iter().all(|s| s.len() >= 2) && !seqs.is_empty() {
        spade_policy::embed::mean_hidden(&lp.policy, &seqs).ok()
    } else {
        None
    };
    let vectors = vectors.unwrap_or_else(|| {
        envs.iter()
            .map(|e| {
                spade::metrics::vendi::ngram_embedding(&e.code, 256)
                    .iter()
                    .map(|&x| x as f32)
                    .collect()
            })
            .collect()
    });
    let step = lp.state.step;
    lp.state
        .embeddings
        .extend(vectors.into_iter().map(|vector| Embedded { step, vector }));
    let keep_from = step.saturating_sub(lp.cfg.metrics.vendi_window_steps);
    lp.state.embeddings.retain(|e| e.step >= keep_from);
    Ok(())
}

/// Fixed-env GRPO: every `*.py` of the pool directory (recursively) becomes a live environment
/// for the whole run; its kind is detected by the sandbox.
pub(super) fn load_fixed_pool(lp: &mut Loop<'_>) -> Result<(), WorkerError> {
    let Some(dir) = lp.cfg.ablation.fixed_env_pool.clone() else {
        return Ok(());
    };
    let seeds_all = crate::warmstart::read_seeds(std::path::Path::new(&dir))?;
    let mut window = Window::default();
    for (i, s) in seeds_all.iter().enumerate() {
        let kind = match s.kind {
            spade_sandbox::EnvKind::Game => EnvKind::Game,
            spade_sandbox::EnvKind::ToolUse => EnvKind::ToolUse,
        };
        if !lp.cfg.curriculum.kinds.contains(&kind) {
            continue;
        }
        window.envs.push(LiveEnv {
            env_id: format!("fixed-{i}"),
            skill: s.skill.clone(),
            kind,
            code: s.code.clone(),
            hint: String::new(),
            generated_step: 0,
            parent_env_id: None,
            hint_returns: vec![],
            hint_wins: 0,
            no_hint_returns: vec![],
            no_hint_wins: 0,
            reward_levels: vec![],
            failed: None,
            broken_seed: None,
            reveals_solution: false,
        });
    }
    if window.envs.is_empty() {
        return Err(WorkerError::Config(format!(
            "ablation.fixed_env_pool: no environments of the configured kinds under {dir}"
        )));
    }
    lp.state.windows.insert("fixed".into(), window);
    Ok(())
}
