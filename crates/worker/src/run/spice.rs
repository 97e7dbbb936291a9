//! SPICE runs (`run.algorithm = "spice"`; spec "SPICE", arXiv 2510.24684), one step at a time:
//!
//! 1. draw `spice.tasks_per_step` corpus documents (each cut to `spice.max_document_tokens`
//!    tokens) and ask for a multiple-choice task for a `spice.multiple_choice_share` of them,
//!    a free-form one for the rest;
//! 2. challenger: sample one attempt for every document still without a task, parse, and
//!    repeat until each has one or `spice.max_attempts` attempts were made (one valid task kept
//!    per document);
//! 3. reasoner: `spice.group_size` answers per task, without the document; expression
//!    answers checked by math-verify (SPICE's checker) in the sandbox, the others by
//!    [`spade::spice::is_correct`] (integers by value, exact match after normalising);
//! 4. rewards and advantages (DrGRPO, role-wise, no division by the standard deviation):
//!    reasoner 1/0, centred within each task's group; challenger
//!    `exp(-(Var - 0.25)^2 / 0.02)` for a valid task and `spice.invalid_reward` for every
//!    attempt that did not parse, centred over all the step's challenger attempts (the
//!    challenger's group is its batch: a document answered at the first attempt would
//!    otherwise be a group of one, which teaches nothing);
//! 5. one GRPO update on both roles' samples (the caller's `train`), unless the challenger is
//!    frozen (`ablation.frozen_designer`) or another model (`designer.model_path`, SPICE's
//!    "strong challenger"), when only the reasoner trains.
//!
//! Tasks are reported as environments (kind game, skill `spice_multiple_choice` or
//! `spice_free_form`, the task and its document excerpt as the code, the pass rate as the
//! no-hint win rate, the challenger reward as the designer reward) and the reasoner's answers
//! as plays, so the environment pages browse them. A document that got no valid task is one
//! rejected record (`invalid_task`, the last attempt's text and why it did not parse).
//!
//! The tiny preset first learns the two formats from corpus documents
//! ([`crate::warmstart::spice`], measured here by [`warm_start`]), as the SPADE tiny model
//! learns from the seed library: a model of a few million parameters initialised from scratch
//! writes no parsable task.

use super::metrics::SpiceStats;
use super::{Event, Loop, RunOptions, backend};
use crate::warmstart::WarmStartReport;
use crate::warmstart::spice::{self as ws, challenger_text, excerpt, reasoner_text, tag};
use crate::{WorkerError, play, seeds};
use spade::config::RunConfig;
use spade::report::{EnvStatus, EnvironmentRecord, Message, PlayRecord, Turn, TurnRole};
use spade::spice::{self, Task, TaskError};
use spade_policy::Policy;
use spade_policy::grpo::GrpoSample;
use spade_policy::sample::Completion;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One challenger attempt.
struct Attempt {
    prompt: Vec<i64>,
    completion: Completion,
    parsed: Result<Task, TaskError>,
}

/// One document of the step and its attempts (the last one is the kept task when valid).
struct Doc {
    excerpt: String,
    multiple_choice: bool,
    attempts: Vec<Attempt>,
}

impl Doc {
    fn task(&self) -> Option<&Task> {
        self.attempts.last().and_then(|a| a.parsed.as_ref().ok())
    }
}

/// Whether document `d` of `step` asks for a multiple-choice task.
fn multiple_choice(cfg: &RunConfig, step: u64, d: usize) -> bool {
    let u = seeds::derive(cfg.run.seed, &[tag::FORMAT, step, d as u64]) >> 11;
    (u as f64 / (1u64 << 53) as f64) < cfg.spice.multiple_choice_share
}

/// The challenger's attempts for `docs`, round by round, each round one batch of every
/// document still without a task.
fn challenge(
    challenger: &Policy,
    cfg: &RunConfig,
    backend: &play::Backend,
    step: u64,
    docs: &mut [Doc],
) -> Result<(), WorkerError> {
    let (tok, p) = crate::designer::turn_params(
        challenger,
        cfg.spice.temperature,
        // SPICE samples the whole vocabulary at its temperature (its paper names no cut).
        crate::play::Cut::NONE,
        cfg.model.designer_max_new_tokens as usize,
    )?;
    for attempt in 0..cfg.spice.max_attempts {
        let open: Vec<usize> = (0..docs.len())
            .filter(|&i| docs[i].task().is_none())
            .collect();
        if open.is_empty() {
            break;
        }
        let mut prompts = Vec::with_capacity(open.len());
        for &i in &open {
            let text = challenger_text(&docs[i].excerpt, docs[i].multiple_choice);
            prompts.push(tok.encode(&format!("{text}{}", challenger.generation_suffix()))?);
        }
        let sample_seeds: Vec<u64> = open
            .iter()
            .map(|&i| {
                seeds::derive(
                    cfg.run.seed,
                    &[tag::CHALLENGER, step, i as u64, u64::from(attempt)],
                )
            })
            .collect();
        let out = play::sample_all(challenger, &prompts, &sample_seeds, &p, backend.clone())?;
        for ((&i, prompt), completion) in open.iter().zip(prompts).zip(out) {
            let parsed = spice::parse_task(completion.text.as_deref().unwrap_or_default());
            docs[i].attempts.push(Attempt {
                prompt,
                completion,
                parsed,
            });
        }
    }
    Ok(())
}

/// What one step of a SPICE run gives the update: both roles' samples, the reports of the
/// tasks and answers, and the step's SPICE metrics.
pub(super) struct Step {
    pub samples: Vec<GrpoSample>,
    pub messages: Vec<Message>,
    pub stats: SpiceStats,
}

/// Steps 1-4 of the module doc.
pub(super) fn step(lp: &mut Loop<'_>) -> Result<Step, WorkerError> {
    let cfg = lp.cfg;
    let step = lp.state.step;
    lp.phase("challenger")?;
    let corpus = lp.corpus.as_ref().ok_or_else(|| {
        WorkerError::Config(
            "run.algorithm = \"spice\" needs a corpus (ablation.no_corpus is off)".into(),
        )
    })?;
    if corpus.is_empty() {
        return Err(WorkerError::Config(
            "the SPICE corpus has no documents".into(),
        ));
    }
    let challenger = lp.designer_policy();
    let ctok = challenger.require_tokenizer()?;
    let mut docs = Vec::with_capacity(cfg.spice.tasks_per_step as usize);
    for d in 0..cfg.spice.tasks_per_step as usize {
        let doc = corpus.pick(cfg.run.seed, &[tag::DOCUMENT, step, d as u64]);
        docs.push(Doc {
            excerpt: excerpt(ctok, &doc.text, cfg.spice.max_document_tokens as usize)?,
            multiple_choice: multiple_choice(cfg, step, d),
            attempts: vec![],
        });
    }
    // The servers when the run has them (a frozen challenger is not what they serve).
    challenge(challenger, cfg, &lp.designer_backend(), step, &mut docs)?;

    lp.phase("reasoner")?;
    let g = cfg.spice.group_size as usize;
    let (tok, rp) = crate::designer::turn_params(
        &lp.policy,
        cfg.spice.temperature,
        crate::play::Cut::NONE,
        cfg.model.agent_max_new_tokens as usize,
    )?;
    let tasks: Vec<(usize, &Task)> = docs
        .iter()
        .enumerate()
        .filter_map(|(i, d)| d.task().map(|t| (i, t)))
        .collect();
    let mut prompts = Vec::with_capacity(tasks.len() * g);
    let mut sample_seeds = Vec::with_capacity(tasks.len() * g);
    let mut task_prompts = Vec::with_capacity(tasks.len());
    for &(i, t) in &tasks {
        let text = reasoner_text(t);
        let ids = tok.encode(&format!("{text}{}", lp.policy.generation_suffix()))?;
        for a in 0..g {
            prompts.push(ids.clone());
            sample_seeds.push(seeds::derive(
                cfg.run.seed,
                &[tag::REASONER, step, i as u64, a as u64],
            ));
        }
        task_prompts.push((ids, text));
    }
    let answers = play::sample_all(&lp.policy, &prompts, &sample_seeds, &rp, lp.backend())?;

    let verdicts = check_answers(lp, &tasks, &answers, g)?;

    // Rewards, advantages, reports.
    let mut samples = Vec::new();
    let mut records = Vec::new();
    let mut plays = Vec::new();
    let mut pass_rates = Vec::new();
    let mut valid_rewards = Vec::new();
    let mut reasoner_samples = 0usize;
    let mut by_doc_reward: BTreeMap<usize, f64> = BTreeMap::new();
    for (k, (&(i, task), (prompt_ids, prompt_text))) in tasks.iter().zip(&task_prompts).enumerate()
    {
        let group = &answers[k * g..(k + 1) * g];
        let correct = &verdicts[k * g..(k + 1) * g];
        let rewards: Vec<f64> = correct.iter().map(|&c| spice::reasoner_reward(c)).collect();
        for (c, a) in group.iter().zip(spice::drgrpo_advantages(&rewards)) {
            if a.abs() > 1e-12 && !c.tokens.is_empty() {
                samples.push(GrpoSample::from_completion(prompt_ids, c, a as f32));
                reasoner_samples += 1;
            }
        }
        let pass = rewards.iter().sum::<f64>() / g as f64;
        let reward = spice::challenger_reward(correct);
        pass_rates.push(pass);
        valid_rewards.push(reward);
        by_doc_reward.insert(i, reward);
        let env_id = task_id(step, i);
        for (c, &won) in group.iter().zip(correct) {
            plays.push(PlayRecord {
                env_id: env_id.clone(),
                step,
                with_hint: false,
                episode_return: spice::reasoner_reward(won),
                won,
                turns: 1,
                transcript: vec![
                    Turn {
                        role: TurnRole::User,
                        content: prompt_text.clone(),
                    },
                    Turn {
                        role: TurnRole::Assistant,
                        content: c.text.clone().unwrap_or_default(),
                    },
                ],
            });
        }
        records.push(EnvironmentRecord {
            win_rate_no_hint: Some(pass),
            designer_reward: Some(reward),
            attempts: docs[i].attempts.len() as u32,
            ..EnvironmentRecord::new(
                env_id,
                step,
                spice::skill(task),
                spade::EnvKind::Game,
                EnvStatus::Accepted,
                task.describe(&docs[i].excerpt),
            )
        });
    }
    for (i, d) in docs.iter().enumerate() {
        if d.task().is_some() {
            continue;
        }
        let Some(last) = d.attempts.last() else {
            continue;
        };
        let why = last
            .parsed
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        records.push(EnvironmentRecord {
            rejection_reason: Some("invalid_task".into()),
            rejection_message: Some(why),
            designer_reward: Some(cfg.spice.invalid_reward),
            attempts: d.attempts.len() as u32,
            ..EnvironmentRecord::new(
                task_id(step, i),
                step,
                spice::skill_of_format(d.multiple_choice),
                spade::EnvKind::Game,
                EnvStatus::Rejected,
                last.completion.text.clone().unwrap_or_default(),
            )
        });
    }

    // The challenger: every attempt of the step is one sample of its group.
    let attempts: Vec<(&Attempt, f64)> = docs
        .iter()
        .enumerate()
        .flat_map(|(i, d)| {
            let kept = by_doc_reward.get(&i).copied();
            let n = d.attempts.len();
            d.attempts.iter().enumerate().map(move |(j, a)| {
                let r = match (&a.parsed, kept) {
                    (Ok(_), Some(r)) if j + 1 == n => r,
                    _ => cfg.spice.invalid_reward,
                };
                (a, r)
            })
        })
        .collect();
    let n_attempts = attempts.len();
    let invalid = attempts.iter().filter(|(a, _)| a.parsed.is_err()).count();
    let mut challenger_samples = 0usize;
    if cfg.trains_designer() {
        let rewards: Vec<f64> = attempts.iter().map(|(_, r)| *r).collect();
        for ((a, _), adv) in attempts.iter().zip(spice::drgrpo_advantages(&rewards)) {
            if adv.abs() > 1e-12 && !a.completion.tokens.is_empty() {
                samples.push(GrpoSample::from_completion(
                    &a.prompt,
                    &a.completion,
                    adv as f32,
                ));
                challenger_samples += 1;
            }
        }
    }

    // Samples from the vLLM servers train with the trainer's own log-probs (as the SPADE
    // loop's plays do); the gap says how far the servers' were.
    let logprob_gap = match lp.vllm {
        Some(_) => crate::vllm::rescore(&lp.policy, &mut samples, cfg.spice.temperature)?,
        None => None,
    };
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len().max(1) as f64;
    let n_valid = tasks.len();
    let mcq = tasks
        .iter()
        .filter(|(_, t)| matches!(t, Task::MultipleChoice { .. }))
        .count();
    let stats = SpiceStats {
        tasks: n_valid,
        attempts: n_attempts,
        invalid,
        valid: (n_valid > 0).then(|| {
            (
                mean(&pass_rates),
                mean(&valid_rewards),
                mcq as f64 / n_valid as f64,
            )
        }),
        challenger_samples,
        reasoner_samples,
        logprob_gap,
    };
    (lp.on)(Event::Log(format!(
        "spice step {step}: {n_valid}/{} documents with a task after {n_attempts} attempts, \
         pass rate {:.2}",
        docs.len(),
        mean(&pass_rates)
    )));
    let mut messages: Vec<Message> = records
        .into_iter()
        .map(|record| Message::Environment { record })
        .collect();
    messages.push(Message::Plays { records: plays });
    Ok(Step {
        samples,
        messages,
        stats,
    })
}

/// The SPICE warm start of the tiny model ([`crate::warmstart::spice`]), measured by how
/// often the challenger's samples parse, with this module's challenger.
pub(super) fn warm_start(
    cfg: &RunConfig,
    opts: &RunOptions,
    corpus: &spade::corpus::Corpus,
    on: &mut dyn FnMut(Event),
) -> Result<(PathBuf, WarmStartReport), WorkerError> {
    let w = ws::Options {
        epochs: opts.warm_epochs,
        // Up to twice as many again to meet the criterion.
        max_epochs: 3 * opts.warm_epochs,
        lr: opts.warm_lr,
        measure: opts.warm_measure,
        cache_dir: &opts.cache_dir,
    };
    let mut measure = |policy: &Policy, measured: usize, held: &[Task]| {
        let tok = policy.require_tokenizer()?;
        let max_doc = cfg.spice.max_document_tokens as usize;
        let mut probe: Vec<Doc> = (0..measured)
            .map(|k| {
                let d = corpus.pick(cfg.run.seed, &[tag::DOCUMENT, u64::MAX, k as u64]);
                Ok(Doc {
                    excerpt: excerpt(tok, &d.text, max_doc)?,
                    multiple_choice: k % 2 == 0,
                    attempts: vec![],
                })
            })
            .collect::<Result<_, WorkerError>>()?;
        let one = RunConfig {
            spice: spade::config::SpiceSection {
                max_attempts: 1,
                ..cfg.spice.clone()
            },
            ..cfg.clone()
        };
        challenge(
            policy,
            &one,
            &backend(cfg, probe_kv(cfg)),
            u64::MAX,
            &mut probe,
        )?;
        let mut rejections = BTreeMap::new();
        for d in &probe {
            if let Some(Err(e)) = d.attempts.last().map(|a| &a.parsed) {
                *rejections
                    .entry(task_error_kind(e).to_string())
                    .or_insert(0) += 1;
            }
        }
        let written: Vec<Task> = probe.iter().filter_map(|d| d.task().cloned()).collect();
        Ok(ws::Measured {
            parsed: written.len(),
            rejections,
            mixed_groups: mixed_groups(cfg, policy, held)?,
            challenger_mixed: mixed_groups(cfg, policy, &written)?,
        })
    };
    ws::warm_start(cfg, &w, corpus, &mut measure, &mut |l| on(Event::Log(l)))
}

/// Whether each answer (`g` per task, in order) is right. SPICE checks with math-verify: the
/// answers of expression tasks go through it, in one sandboxed runner per step (it imports
/// sympy, so it gets the evaluation runner's larger address space); integers, strings and
/// options follow [`spade::spice::is_correct`] (by value, or exact after normalising), and so
/// does every answer when math-verify cannot run (said in the log, never silently).
fn check_answers(
    lp: &mut Loop<'_>,
    tasks: &[(usize, &Task)],
    answers: &[Completion],
    g: usize,
) -> Result<Vec<bool>, WorkerError> {
    let mut verdicts = Vec::with_capacity(answers.len());
    let mut pairs = Vec::new();
    let mut at = Vec::new();
    for (k, &(_, task)) in tasks.iter().enumerate() {
        for (a, c) in answers[k * g..(k + 1) * g].iter().enumerate() {
            let reply = c.text.as_deref().unwrap_or_default();
            verdicts.push(spice::is_correct(task, reply));
            if let Task::FreeForm {
                answer,
                answer_type: spice::AnswerType::Expression,
                ..
            } = task
            {
                let visible = spade::parse::strip_think(reply);
                let given = spade::parse::last_boxed(&visible).map(str::to_string);
                pairs.push((answer.clone(), given));
                at.push(k * g + a);
            }
        }
    }
    if pairs.is_empty() {
        return Ok(verdicts);
    }
    match math_verify(&pairs) {
        Ok(scores) => {
            for (i, ok) in at.into_iter().zip(scores) {
                verdicts[i] = ok;
            }
        }
        Err(e) => (lp.on)(Event::Log(format!(
            "math-verify could not check {} expression answers ({e}); they were compared by \
             value instead",
            pairs.len()
        ))),
    }
    Ok(verdicts)
}

/// math-verify's verdicts on `(gold, prediction)` pairs, in a fresh sandboxed runner.
pub(crate) fn math_verify(pairs: &[(String, Option<String>)]) -> Result<Vec<bool>, String> {
    let cfg = spade_eval::runner_config(spade_sandbox::default_runner_path());
    let mut runner = spade_sandbox::Runner::start(&cfg).map_err(|e| e.to_string())?;
    let scored = spade_eval::qa::verify(&mut runner, pairs).map_err(|e| e.to_string())?;
    Ok(scored.into_iter().map(|s| s.score > 0.5).collect())
}

/// The stored id of document `d`'s task at `step`.
fn task_id(step: u64, d: usize) -> String {
    format!("spice-s{step}-d{d}")
}

/// KV-cache slots for the warm start's probes, which run before the memory plan: the configured
/// number, or for `"auto"` the default's 262,144 (the tiny model's probes use a fraction).
fn probe_kv(cfg: &RunConfig) -> usize {
    cfg.model
        .kv_cache_tokens
        .slots()
        .map_or(262_144, |n| n as usize)
}

/// How many of `tasks` get a mixed group of `spice.group_size` reasoner answers (some right,
/// some wrong), sampled as a run samples them: the tasks a reasoner update learns from.
fn mixed_groups(cfg: &RunConfig, policy: &Policy, tasks: &[Task]) -> Result<usize, WorkerError> {
    let g = cfg.spice.group_size as usize;
    let (tok, rp) = crate::designer::turn_params(
        policy,
        cfg.spice.temperature,
        crate::play::Cut::NONE,
        cfg.model.agent_max_new_tokens as usize,
    )?;
    let mut prompts = Vec::with_capacity(tasks.len() * g);
    let mut sample_seeds = Vec::with_capacity(tasks.len() * g);
    for (k, t) in tasks.iter().enumerate() {
        let ids = tok.encode(&format!(
            "{}{}",
            reasoner_text(t),
            policy.generation_suffix()
        ))?;
        for a in 0..g {
            prompts.push(ids.clone());
            sample_seeds.push(seeds::derive(
                cfg.run.seed,
                &[tag::REASONER, u64::MAX, k as u64, a as u64],
            ));
        }
    }
    let answers = play::sample_all(
        policy,
        &prompts,
        &sample_seeds,
        &rp,
        backend(cfg, probe_kv(cfg)),
    )?;
    Ok(tasks
        .iter()
        .enumerate()
        .filter(|(k, t)| {
            let right = answers[k * g..(k + 1) * g]
                .iter()
                .filter(|c| spice::is_correct(t, c.text.as_deref().unwrap_or_default()))
                .count();
            right > 0 && right < g
        })
        .count())
}

/// A task error's kind, for the warm start's rejection counts.
fn task_error_kind(e: &TaskError) -> &'static str {
    match e {
        TaskError::Missing(_) => "missing_tag",
        TaskError::Empty(_) => "empty_tag",
        TaskError::Options(_) => "options",
        TaskError::Letter(_) => "letter",
        TaskError::AnswerType(_) => "answer_type",
        TaskError::NotInteger(_) => "not_integer",
        TaskError::NotExpression(_) => "not_expression",
        TaskError::DuplicateOption(_) => "duplicate_option",
    }
}

#[cfg(test)]
mod tests {
    use super::math_verify;

    /// The check SPICE names: symbolic equivalence the by-value rules cannot see.
    #[test]
    fn math_verify_decides_expression_answers_in_the_sandbox() {
        let pairs = [
            ("\\frac{1}{2}", Some("0.5")),
            ("(x+1)^2", Some("x^2 + 2x + 1")),
            ("\\sqrt{2}", Some("2^{1/2}")),
            ("3", Some("4")),
            ("x+1", None),
        ]
        .map(|(g, p)| (g.to_string(), p.map(str::to_string)));
        let got = math_verify(&pairs).unwrap();
        assert_eq!(got, [true, true, true, false, false]);
        // The Rust rules alone miss the symbolic one.
        let t = spade::spice::Task::FreeForm {
            question: "q".into(),
            answer: "(x+1)^2".into(),
            answer_type: spade::spice::AnswerType::Expression,
        };
        assert!(!spade::spice::is_correct(&t, "\\boxed{x^2 + 2x + 1}"));
    }
}
