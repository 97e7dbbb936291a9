//! The designer and hint roles (spec, "One training step", items 2 to 4): sampling environment
//! code for each slot, up to N attempts per slot, extracting the Python block, validating it in
//! the sandbox (rejections keep their reason), and the separate hint call (temperature 0.3, not
//! trained).
//!
//! Attempts of all open slots are sampled as one batch; a slot closes at its first accepted
//! environment. Every attempt, accepted or not, is a designer sample: its prompt ids, sampled
//! tokens and the sampler's log-probs are kept so the delayed update (k steps later) can weight
//! the tokens by truncated importance sampling against the policy that wrote them.
//!
//! With `self_judge` on (spec, "Validation": on for real models, off for the tiny one), code the
//! sandbox accepted is also shown to the policy together with one played trajectory (its own
//! `solution()` from seed 42); a `\boxed{no}` rejects it as `judge_rejected`. An unreadable
//! verdict or a play that fails counts as accept, as the reference implementation does.

use crate::WorkerError;
use crate::play::{Backend, Cut, sample_all};
use serde::{Deserialize, Serialize};
use spade::parse;
use spade::prompt::{self, ChatPrompt, PromptStyle};
use spade::report::{Turn, TurnRole};
use spade_policy::Policy;
use spade_policy::chat::Role;
use spade_policy::sample::{Completion, SamplingParams};
use spade_policy::tokenizer::IM_END;
use spade_sandbox::{EnvKind, Pool, ValidationConfig, validate};
use std::collections::BTreeMap;

/// One designer sample, kept for the delayed update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesignerSample {
    pub env_id: String,
    pub skill: String,
    pub prompt_ids: Vec<i64>,
    pub tokens: Vec<i64>,
    /// The sampler's log-probs at generation (the behaviour policy of the delayed update).
    pub logprobs: Vec<f32>,
}

/// One attempt at a slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub env_id: String,
    /// The Python code extracted from the reply (the whole reply when no block was found).
    pub code: String,
    pub accepted: bool,
    /// Machine-readable reason (`no_code_block`, or the validator's reason in snake_case).
    pub rejection_reason: Option<String>,
    pub rejection_message: Option<String>,
    pub max_turns: Option<u32>,
    pub sample: DesignerSample,
}

/// What to sample for one slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slot {
    pub skill: String,
    pub kind: EnvKind,
}

/// The designer's sampling and validation settings of `cfg`, generating with `backend`.
pub fn design_options(cfg: &spade::config::RunConfig, backend: Backend) -> DesignOptions {
    DesignOptions {
        attempts: cfg.designer.attempts,
        temperature: cfg.designer.temperature,
        cut: Cut::new(cfg.designer.top_p, cfg.designer.top_k),
        max_new_tokens: cfg.model.designer_max_new_tokens as usize,
        repair_fstrings: cfg.designer.repair_fstrings,
        validation: ValidationConfig {
            budget: std::time::Duration::from_secs_f64(cfg.sandbox.validation_timeout_s),
            call_timeout: std::time::Duration::from_secs_f64(cfg.sandbox.step_timeout_s),
            kind: None,
            // Drawn from OS randomness on purpose, not from the run seed: the designer must
            // not be able to learn them (the report's seeds replay a rejection).
            ..ValidationConfig::default()
        },
        self_judge: cfg.designer.self_judge,
        judge_temperature: cfg.designer.judge_temperature,
        judge_cut: Cut::new(cfg.agent.top_p, cfg.agent.top_k),
        judge_max_new_tokens: cfg.designer.judge_max_new_tokens as usize,
        backend,
        prompts: cfg.model.prompts,
    }
}

/// One slot's attempts planned ahead: attempt a's prompt, environment id and sampling seed
/// (what [`design`]'s closures give), so a slot can be designed on any rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotPlan {
    pub slot: Slot,
    pub prompts: Vec<ChatPrompt>,
    pub env_ids: Vec<String>,
    pub seeds: Vec<u64>,
}

/// [`design`] over planned slots (one plan per slot, an entry per attempt). An attempt past a
/// plan's end is an error.
pub fn design_planned(
    policy: &Policy,
    pool: &Pool,
    plans: &[SlotPlan],
    opts: &DesignOptions,
) -> Result<Vec<Vec<Attempt>>, WorkerError> {
    let short = plans.iter().find(|p| {
        let n = opts.attempts as usize;
        p.prompts.len() < n || p.env_ids.len() < n || p.seeds.len() < n
    });
    if let Some(p) = short {
        return Err(WorkerError::Config(format!(
            "a designer plan for skill {} holds fewer than designer.attempts = {} attempts",
            p.slot.skill, opts.attempts
        )));
    }
    let slots: Vec<Slot> = plans.iter().map(|p| p.slot.clone()).collect();
    design(
        policy,
        pool,
        &slots,
        opts,
        |i, a| plans[i].prompts[a as usize].clone(),
        |i, a| plans[i].env_ids[a as usize].clone(),
        |i, a| plans[i].seeds[a as usize],
        |_, _| {},
    )
}

/// Sampling and validation settings.
#[derive(Debug, Clone)]
pub struct DesignOptions {
    pub attempts: u32,
    pub temperature: f64,
    /// Top-p and top-k of the attempts (`designer.top_p`, `designer.top_k`).
    pub cut: Cut,
    pub max_new_tokens: usize,
    /// Double the literal braces of f-strings on the line of a syntax error before
    /// validation (`designer.repair_fstrings`; [`spade_sandbox::repair`]).
    pub repair_fstrings: bool,
    pub validation: ValidationConfig,
    /// Run the LLM self-judge on code the sandbox accepted.
    pub self_judge: bool,
    /// The self-judge's sampling temperature and reply budget.
    pub judge_temperature: f64,
    /// The judge samples with the agent's cut (the reference's self-judge call passes
    /// `actor_top_p` / `actor_top_k`).
    pub judge_cut: Cut,
    pub judge_max_new_tokens: usize,
    /// What serves the designer's attempts and the judge's calls.
    pub backend: Backend,
    /// The judge's prompt (`model.prompts`; the designer's is built by the caller).
    pub prompts: PromptStyle,
}

/// Samples and validates environments for `slots`. `prompt(slot, attempt)` builds the
/// designer prompt (`spade::prompt::designer_prompt`: skill, corpus document, memory examples,
/// contract) for each attempt, so a fresh corpus document can be drawn per attempt. `env_id(slot, attempt)` names
/// each attempt. Returns every attempt per slot, in order; the last one is accepted when any is.
#[allow(clippy::too_many_arguments)]
pub fn design(
    policy: &Policy,
    pool: &Pool,
    slots: &[Slot],
    opts: &DesignOptions,
    mut prompt: impl FnMut(usize, u32) -> ChatPrompt,
    env_id: impl Fn(usize, u32) -> String,
    sample_seed: impl Fn(usize, u32) -> u64,
    mut on_attempt: impl FnMut(usize, &Attempt),
) -> Result<Vec<Vec<Attempt>>, WorkerError> {
    let (tok, params) = turn_params(policy, opts.temperature, opts.cut, opts.max_new_tokens)?;
    let mut out: Vec<Vec<Attempt>> = slots.iter().map(|_| Vec::new()).collect();
    for attempt in 0..opts.attempts {
        let open: Vec<usize> = (0..slots.len())
            .filter(|&i| !out[i].last().is_some_and(|a| a.accepted))
            .collect();
        if open.is_empty() {
            break;
        }
        let mut prompts = Vec::with_capacity(open.len());
        for &i in &open {
            let p = prompt(i, attempt);
            prompts.push(tok.encode(&render_for(policy, &p))?);
        }
        let seeds: Vec<u64> = open.iter().map(|&i| sample_seed(i, attempt)).collect();
        let completions = sample_all(policy, &prompts, &seeds, &params, opts.backend.clone())?;
        // Validation (and the judge's sandbox play) of every reply at once, each on its own
        // thread with one runner at a time; then one batch of judge calls.
        let kinds: Vec<EnvKind> = open.iter().map(|&i| slots[i].kind).collect();
        let checked: Vec<Checked> = std::thread::scope(|scope| {
            let handles: Vec<_> = completions
                .iter()
                .zip(&kinds)
                .map(|(c, &kind)| scope.spawn(move || check(pool, opts, kind, c)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Checked::crashed()))
                .collect()
        });
        let judged: Vec<(usize, u64, &str)> = checked
            .iter()
            .enumerate()
            .filter_map(|(k, c)| {
                let seed = sample_seed(open[k], attempt) ^ JUDGE_SEED;
                c.judge_text.as_deref().map(|t| (k, seed, t))
            })
            .collect();
        let verdicts = judge_all(policy, &judged, opts)?;
        drop(judged);
        let replies = open.iter().zip(prompts).zip(completions).zip(checked);
        for (k, (((&i, prompt_ids), c), checked)) in replies.enumerate() {
            let sample = DesignerSample {
                env_id: env_id(i, attempt),
                skill: slots[i].skill.clone(),
                prompt_ids,
                tokens: c.tokens,
                logprobs: c.logprobs,
            };
            let Checked {
                code,
                mut accepted,
                mut reason,
                mut message,
                max_turns,
                ..
            } = checked;
            if verdicts.get(&k) == Some(&Some(false)) {
                accepted = false;
                reason = Some("judge_rejected".into());
                message =
                    Some("self_judge: the policy judged the game broken (\\boxed{no})".into());
            }
            let a = Attempt {
                env_id: sample.env_id.clone(),
                code,
                accepted,
                rejection_reason: reason,
                rejection_message: message,
                max_turns,
                sample,
            };
            on_attempt(i, &a);
            out[i].push(a);
        }
    }
    Ok(out)
}

/// One reply checked: its code (repaired when the repair helped), the sandbox's verdict, and
/// the judge's prompt when the sandbox accepted it and the self-judge is on.
struct Checked {
    code: String,
    accepted: bool,
    reason: Option<String>,
    message: Option<String>,
    max_turns: Option<u32>,
    judge_text: Option<String>,
}

impl Checked {
    /// A checking thread that panicked: the attempt is rejected, the step goes on.
    fn crashed() -> Self {
        Checked {
            code: String::new(),
            accepted: false,
            reason: Some("internal_error".into()),
            message: Some("validation stopped unexpectedly".into()),
            max_turns: None,
            judge_text: None,
        }
    }
}

/// Extracts, validates (repairing f-string braces once where that helps) and, for the self-judge,
/// plays the code's own solution for the judge's prompt.
fn check(pool: &Pool, opts: &DesignOptions, kind: EnvKind, c: &Completion) -> Checked {
    let reply = c.text.clone().unwrap_or_default();
    let code = match parse::extract_code(&reply) {
        Ok(code) => code,
        Err(e) => {
            return Checked {
                code: reply,
                accepted: false,
                reason: Some("no_code".into()),
                message: Some(e.to_string()),
                max_turns: None,
                judge_text: None,
            };
        }
    };
    let mut vcfg = opts.validation.clone();
    vcfg.kind = Some(kind);
    let mut report = validate(pool, &code, &vcfg);
    let mut code = code;
    if opts.repair_fstrings && rejected_for_syntax(&report) {
        // The repair runs in a runner too (it parses untrusted code); a failing repair leaves
        // the first verdict.
        if let Ok(Some(fixed)) = spade_sandbox::repair::fstring_braces(pool, &code) {
            report = validate(pool, &fixed, &vcfg);
            code = fixed;
        }
    }
    let (reason, message) = match &report.rejection {
        Some(r) => (
            Some(snake(&r.reason)),
            Some(format!("{}: {}", snake(&r.check), r.message)),
        ),
        None => (None, None),
    };
    let judge_text = (report.accepted && opts.self_judge)
        .then(|| {
            judge_prompt_text(
                pool,
                &code,
                kind,
                report.max_turns,
                opts.validation.budget,
                opts.prompts,
            )
        })
        .flatten();
    Checked {
        code,
        accepted: report.accepted,
        reason,
        message,
        max_turns: report.max_turns,
        judge_text,
    }
}

/// The judge's verdicts on `(key, seed, prompt)` in one batch, by key; `None` where the
/// reply had no `\boxed{yes|no}`.
fn judge_all(
    policy: &Policy,
    prompts: &[(usize, u64, &str)],
    opts: &DesignOptions,
) -> Result<BTreeMap<usize, Option<bool>>, WorkerError> {
    if prompts.is_empty() {
        return Ok(BTreeMap::new());
    }
    let (tok, params) = turn_params(
        policy,
        opts.judge_temperature,
        opts.judge_cut,
        opts.judge_max_new_tokens,
    )?;
    let suffix = policy.generation_suffix();
    let ids = prompts
        .iter()
        .map(|(_, _, t)| tok.encode(&format!("{t}{suffix}")))
        .collect::<Result<Vec<_>, _>>()?;
    let seeds: Vec<u64> = prompts.iter().map(|(_, s, _)| *s).collect();
    let out = sample_all(policy, &ids, &seeds, &params, opts.backend.clone())?;
    Ok(prompts
        .iter()
        .zip(out)
        .map(|((k, _, _), c)| (*k, c.text.as_deref().and_then(parse::judge_verdict)))
        .collect())
}

/// Whether validation turned the code down for a Python syntax error (what the f-string
/// repair can mend).
fn rejected_for_syntax(report: &spade_sandbox::validate::Report) -> bool {
    report
        .rejection
        .as_ref()
        .is_some_and(|r| r.reason == spade_sandbox::validate::Reason::SyntaxError)
}

/// Separates the judge's sampling stream from the designer's for the same slot and attempt.
const JUDGE_SEED: u64 = 0x6a75_6467_6521;

/// Plays the environment's own solution from seed 42 and asks the policy whether the game
/// works. `None`: no usable verdict (the reply had no `\boxed{yes|no}`, or the play failed).
pub fn judge(
    policy: &Policy,
    pool: &Pool,
    code: &str,
    kind: EnvKind,
    max_turns: Option<u32>,
    seed: u64,
    opts: &DesignOptions,
) -> Result<Option<bool>, WorkerError> {
    let Some(text) = judge_prompt_text(
        pool,
        code,
        kind,
        max_turns,
        opts.validation.budget,
        opts.prompts,
    ) else {
        return Ok(None);
    };
    Ok(judge_all(policy, &[(0, seed, text.as_str())], opts)?
        .remove(&0)
        .flatten())
}

/// The rendered judge prompt for `code` in `style`: the code and its own solution played from
/// seed 42. `None` when the play fails.
pub fn judge_prompt_text(
    pool: &Pool,
    code: &str,
    kind: EnvKind,
    max_turns: Option<u32>,
    budget: std::time::Duration,
    style: PromptStyle,
) -> Option<String> {
    if style == PromptStyle::Reference && kind == EnvKind::ToolUse {
        // The reference's tool-use validator reads the code alone.
        return Some(render(&prompt::reference::tool_use_audit_prompt(code)));
    }
    let trajectory = pool
        .load(code, Some(kind), max_turns)
        .and_then(|mut env| env.play_solution(42, budget))
        .ok()?;
    if style == PromptStyle::Reference && kind == EnvKind::Game {
        let turns: Vec<prompt::reference::JudgedTurn<'_>> = trajectory
            .turns
            .iter()
            .map(|t| prompt::reference::JudgedTurn {
                action: &t.action,
                reward: t.result.reward,
                observation: &t.result.obs,
            })
            .collect();
        let shown = prompt::reference::judge_trajectory(&trajectory.reset.obs, &turns);
        return Some(render(&prompt::reference::judge_prompt(code, &shown)));
    }
    let mut turns = vec![Turn {
        role: TurnRole::User,
        content: trajectory.reset.obs,
    }];
    for t in trajectory.turns {
        turns.push(Turn {
            role: TurnRole::Assistant,
            content: t.action,
        });
        turns.push(Turn {
            role: TurnRole::User,
            content: format!(
                "{} (reward {}, terminated {}, truncated {})",
                t.result.obs, t.result.reward, t.result.terminated, t.result.truncated
            ),
        });
    }
    Some(render(&prompt::judge_prompt(code, &turns)))
}

/// The tokenizer and sampling settings of one chat turn: sampling at `temperature` within
/// `cut`, ending at `<|im_end|>`.
pub(crate) fn turn_params(
    policy: &Policy,
    temperature: f64,
    cut: Cut,
    max_new_tokens: usize,
) -> Result<(&spade_policy::tokenizer::Tokenizer, SamplingParams), WorkerError> {
    let tok = policy.require_tokenizer()?;
    let end = tok
        .token_id(IM_END)
        .ok_or_else(|| WorkerError::Model("the tokenizer has no <|im_end|> token".into()))?;
    let params = SamplingParams {
        temperature,
        top_p: cut.top_p,
        top_k: cut.top_k,
        max_new_tokens,
        stop_token_ids: vec![end],
        stop_strings: vec![],
    };
    Ok((tok, params))
}

/// A serde enum's snake_case name.
pub(crate) fn snake<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// A core prompt in the policy's chat template, ready to sample.
pub fn render(p: &ChatPrompt) -> String {
    Role::Designer.prompt(Some(&p.system), &p.user)
}

/// [`render`] for `policy` to answer: with its generation suffix (thinking off).
pub fn render_for(policy: &Policy, p: &ChatPrompt) -> String {
    format!("{}{}", render(p), policy.generation_suffix())
}

/// The hint prompt for `code` of `kind` in `style`, cut to `max_code_chars` characters
/// (`hint.code_chars`: the tiny model's context is short; real models get the whole code).
pub fn hint_prompt(
    style: PromptStyle,
    kind: EnvKind,
    code: &str,
    max_code_chars: usize,
) -> ChatPrompt {
    let cut: String = code.chars().take(max_code_chars).collect();
    style.hint_prompt(kind, &cut)
}

/// Hints for accepted environments, one batch, at the hint temperature (spec 4: 0.3). Not
/// trained: the log-probs are dropped.
pub fn hints(
    policy: &Policy,
    codes: &[&str],
    temperature: f64,
    max_new_tokens: usize,
    prompt: &dyn Fn(&str) -> ChatPrompt,
    seeds: &[u64],
    backend: Backend,
) -> Result<Vec<String>, WorkerError> {
    if codes.is_empty() {
        return Ok(vec![]);
    }
    let prompts: Vec<ChatPrompt> = codes.iter().map(|c| prompt(c)).collect();
    hints_for(
        policy,
        &prompts,
        temperature,
        max_new_tokens,
        seeds,
        backend,
    )
}

/// [`hints`] from the hint prompts themselves (a rank's share of them, [`crate::ranks`]).
pub fn hints_for(
    policy: &Policy,
    prompts: &[ChatPrompt],
    temperature: f64,
    max_new_tokens: usize,
    seeds: &[u64],
    backend: Backend,
) -> Result<Vec<String>, WorkerError> {
    if prompts.is_empty() {
        return Ok(vec![]);
    }
    // Not passed a cut: the reference's hint call sets only its temperature and budget.
    let (tok, params) = turn_params(policy, temperature, Cut::NONE, max_new_tokens)?;
    let prompts = prompts
        .iter()
        .map(|p| tok.encode(&render_for(policy, p)))
        .collect::<Result<Vec<_>, _>>()?;
    let outs = sample_all(policy, &prompts, seeds, &params, backend)?;
    Ok(outs
        .into_iter()
        .map(|c| c.text.unwrap_or_default().trim().to_string())
        .collect())
}
