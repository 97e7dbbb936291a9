//! Multi-turn agent play through the sandbox (spec, "One training step", items 5 and 6).
//!
//! Every episode of one environment runs in its own sandboxed runner (an environment instance
//! has state); the agent's turns of all running episodes are sampled as one batch. Token ids
//! are built incrementally: the sampled tokens are appended exactly as sampled, then the next
//! observation's chat frame, so the sequence GRPO trains on is the one the sampler saw, and the
//! stored log-probs line up with it.
//!
//! Episode return (spec 6): the last reward clamped to [-1, 1] if the episode terminated, else 0
//! (truncated, out of turns, out of context, or stopped by a sandbox failure).
//!
//! Checks during play: every reset and step return is held to the environment contract, as
//! validation holds it (types and observation length in the runner, a finite reward in
//! [-10, 10] here through [`spade_sandbox::validate::step_violation`], the per-call time limit
//! in the pool). The first violation marks the play `failure` with the reason and the seed and
//! stops every episode of that environment still running; the caller then retires the
//! environment (`broken_in_play`: the designer's -0.5, "invalid environment or a step
//! timeout", no further plays, its plays kept but not trained on).

use crate::WorkerError;
use spade::config::ToolTemplate;
use spade::parse::{self, FormatError, ToolAction};
use spade::prompt;
use spade::report::{Turn, TurnRole};
use spade_policy::Policy;
use spade_policy::chat::Role;
use spade_policy::engine::{
    Engine, EngineConfig, EngineStats, Request, Rollout, SeqId, generate_all,
};
use spade_policy::sample::{Completion, Finish, SamplingParams, generate};
use spade_policy::tokenizer::{IM_END, Tokenizer};
use spade_sandbox::validate::{Reason, reason_of, step_violation};
use spade_sandbox::{EnvKind, EnvSession, Pool, SandboxError};
use std::collections::{BTreeMap, VecDeque};

mod turns;

/// spec "Play": at most 25 turns per episode.
pub const MAX_TURNS: u32 = 25;

/// How to play. (Serialised for the ranks that play a share of a step, [`crate::ranks`]:
/// everything but the backend, which each rank has its own of.)
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PlayOptions {
    /// Turn cap (the environment's own `max_turns` applies too; the smaller wins).
    pub max_turns: u32,
    /// Tokens the agent may write per turn.
    pub max_new_tokens: usize,
    /// spec "Play": 0.6.
    pub temperature: f64,
    /// Nucleus and top-k cut of the agent's sampling (`agent.top_p`, `agent.top_k`).
    pub cut: Cut,
    /// Longest token sequence of an episode; an episode that would pass it ends truncated.
    pub max_context: usize,
    /// Tokens the agent may write over the whole episode; an episode whose next turn could
    /// pass it ends truncated.
    pub max_episode_tokens: usize,
    /// Characters of a hint shown to the agent (longer hints are cut).
    pub max_hint_chars: usize,
    /// The agent's opening message (`model.prompts`).
    pub prompts: spade::prompt::PromptStyle,
    /// The first contract violation stops the environment's other episodes (this project's
    /// rule, `agent.failed_plays = "drop"`); off, a violation fails its own play only and the
    /// others play on (the reference, `"minus_one"`).
    pub stop_at_violation: bool,
    /// A turn that fills its budget without the end token ends the episode, truncated
    /// (`agent.end_on_cut_turn`); otherwise the turn is closed and play goes on.
    pub end_on_cut_turn: bool,
    /// A game reply without `\boxed{}` steps the environment with its raw text
    /// (`agent.raw_actions`); otherwise the agent is told the format it missed.
    pub raw_actions: bool,
    /// How tool-use episodes reach the model (`agent.tool_template`; the caller sets
    /// `Inline` for a model whose template has no tool calling).
    pub tool_template: ToolTemplate,
    /// What serves the agent's turns.
    #[serde(skip)]
    pub backend: Backend,
    /// Step environments on the decode loop itself, as before they had threads of their own:
    /// only the benchmark's side-by-side sets it (`spade model bench-rollout --path
    /// seed-envs`).
    pub envs_inline: bool,
}

/// What serving the turns of a play call measured.
#[derive(Debug, Clone, Default)]
pub struct PlayMeasures {
    /// What the engine did (`None` on the sampler and vLLM paths).
    pub engine: Option<EngineStats>,
    /// Seconds the decode loop waited for environments (blocked with nothing to decode, or
    /// stepping them itself with `envs_inline`); `None` on the sampler path.
    pub env_wait_s: Option<f64>,
}

/// Top-p and top-k of one role's sampling ([`SamplingParams::top_p`], [`SamplingParams::top_k`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Cut {
    pub top_p: f64,
    pub top_k: usize,
}

impl Cut {
    /// Full-vocabulary sampling.
    pub const NONE: Cut = Cut {
        top_p: 1.0,
        top_k: 0,
    };

    /// A role's `top_p` and `top_k` keys.
    pub fn new(top_p: f64, top_k: u32) -> Self {
        Cut {
            top_p,
            top_k: top_k as usize,
        }
    }
}

/// Tokens a turn needs at least: the reference ends an episode, truncated, once fewer than
/// these are left in its context (`_play_game_async`, `min_generation_tokens`), and a turn's
/// budget leaves them free.
pub const MIN_TURN_TOKENS: usize = 64;

/// The token budget of an episode's next turn when it holds `len` tokens of which it wrote
/// `generated`: the turn cap, within what the context leaves after [`MIN_TURN_TOKENS`] kept
/// free (the reference's dynamic `max_tokens`) and what the episode budget leaves. `None`: the
/// episode ends here, truncated (fewer than [`MIN_TURN_TOKENS`] left in the context, or
/// nothing left of the episode budget).
pub fn turn_budget(opts: &PlayOptions, len: usize, generated: usize) -> Option<usize> {
    let context_left = opts.max_context.saturating_sub(len);
    let episode_left = opts.max_episode_tokens.saturating_sub(generated);
    if context_left <= MIN_TURN_TOKENS || episode_left == 0 {
        return None;
    }
    Some(
        opts.max_new_tokens
            .min(context_left - MIN_TURN_TOKENS)
            .min(episode_left),
    )
}

/// What serves generation (`model.rollout` with its limits).
#[derive(Debug, Clone)]
pub enum Backend {
    /// `spade_policy::sample::generate`: one batch per environment and turn, each turn
    /// prefilled again (the path before the engine; kept as the reference and for comparison).
    Sampler,
    /// `spade_policy::engine`: every episode handed to [`play_envs`] at once, each keeping its
    /// KV cache between turns.
    Engine(EngineLimits),
    /// vLLM servers ([`crate::vllm`]) serving this policy's current weights; they play like
    /// the engine (every episode at once), each episode on one server.
    Vllm(std::sync::Arc<crate::vllm::Fleet>),
}

impl Default for Backend {
    fn default() -> Self {
        Backend::Engine(EngineLimits::default())
    }
}

/// What an engine may take (`model.*`): the KV slots the memory plan settled, the batch
/// width, the prompt tokens a step prefills and the decode window (0 = the device's default).
/// Each rank builds its engines from the same limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EngineLimits {
    pub kv_tokens: usize,
    pub max_batch: usize,
    pub prefill_tokens: usize,
    pub decode_window: usize,
}

impl Default for EngineLimits {
    fn default() -> Self {
        Self {
            kv_tokens: 1 << 17,
            max_batch: 256,
            prefill_tokens: spade_policy::engine::DEFAULT_PREFILL_TOKENS,
            decode_window: 0,
        }
    }
}

impl EngineLimits {
    /// An engine's configuration for sequences of up to `context` tokens (the KV budget is
    /// at least one such sequence).
    pub fn config(&self, context: usize) -> EngineConfig {
        EngineConfig {
            prefill_tokens: self.prefill_tokens,
            decode_window: self.decode_window,
            ..EngineConfig::new(context, self.kv_tokens.max(context), self.max_batch)
        }
    }
}

/// Samples one completion per prompt through `backend` (designer attempts, hints, the
/// self-judge): the contract of `sample::generate`.
pub fn sample_all(
    policy: &Policy,
    prompts: &[Vec<i64>],
    seeds: &[u64],
    params: &SamplingParams,
    backend: Backend,
) -> Result<Vec<Completion>, WorkerError> {
    if prompts.is_empty() {
        return Ok(vec![]);
    }
    match backend {
        Backend::Sampler => Ok(generate(
            policy.model(),
            prompts,
            seeds,
            params,
            policy.tokenizer(),
        )?),
        Backend::Engine(limits) => {
            // One-shot calls have no episode context: the longest request bounds it.
            let context =
                prompts.iter().map(Vec::len).max().unwrap_or(0) + params.max_new_tokens + 1;
            let mut e = Engine::new(policy.model(), policy.tokenizer(), limits.config(context))?;
            Ok(generate_all(&mut e, prompts, seeds, params)?)
        }
        Backend::Vllm(fleet) => {
            let mut r = fleet.rollout(policy.require_tokenizer()?);
            Ok(generate_all(&mut r, prompts, seeds, params)?)
        }
    }
}

impl Default for PlayOptions {
    fn default() -> Self {
        Self {
            max_turns: MAX_TURNS,
            max_new_tokens: 512,
            temperature: 0.6,
            cut: Cut::NONE,
            max_context: 4096,
            max_episode_tokens: 4096,
            max_hint_chars: 2000,
            prompts: spade::prompt::PromptStyle::Compact,
            stop_at_violation: true,
            end_on_cut_turn: false,
            raw_actions: false,
            tool_template: ToolTemplate::Inline,
            backend: Backend::default(),
            envs_inline: false,
        }
    }
}

/// Why an episode stopped early through the environment's (not the agent's) fault: a call that
/// exceeded its time limit, raised, returned something the contract does not allow, or killed
/// its runner. Reasons are validation's, so play and validation name a violation alike.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlayFailure {
    pub reason: Reason,
    pub message: String,
}

impl PlayFailure {
    /// `reason: message`, as stored with the environment.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.reason.as_str(), self.message)
    }
}

/// One played episode.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Episode {
    pub seed: i64,
    pub with_hint: bool,
    pub transcript: Vec<Turn>,
    pub episode_return: f64,
    pub won: bool,
    pub turns: u32,
    pub terminated: bool,
    /// It ended on a budget: its context or episode budget ran out, or (with
    /// `end_on_cut_turn`) a turn filled its budget without the end token.
    pub truncated: bool,
    /// The episode's tokens (prompt, actions, observations).
    pub ids: Vec<i64>,
    /// True on tokens the agent sampled (the ones that train).
    pub loss_mask: Vec<bool>,
    /// The sampler's log-prob of each token (0 where the mask is false).
    pub logprobs: Vec<f32>,
    /// Turns whose reply had no action element (`\boxed{}`, `<tool_call>`, `<answer>`).
    pub format_errors: u32,
    /// Every reward the environment gave, in order (for the distinct-reward-levels metric).
    pub rewards: Vec<f64>,
    /// Environment calls (reset and step) whose returns were checked against the contract.
    pub env_calls: u32,
    pub failure: Option<PlayFailure>,
    /// Why generation could not serve a turn (the episode ended there, not the environment's
    /// fault; the other episodes went on).
    pub error: Option<String>,
}

/// The environment action of a reply (spec: the last `\boxed{}` for games, the last
/// `<tool_call>` / `<answer>` for tool use), or why the reply has none.
pub fn env_action(kind: EnvKind, reply: &str) -> Result<String, FormatError> {
    env_action_with(kind, reply, false)
}

/// [`env_action`]; with `raw`, a game reply without a non-empty `\boxed{}` is its own action
/// (the visible text, trimmed), so the game answers it (the reference's `parse_action`).
pub fn env_action_with(kind: EnvKind, reply: &str, raw: bool) -> Result<String, FormatError> {
    match kind {
        EnvKind::Game if raw => Ok(parse::game_action(reply)
            .unwrap_or_else(|_| parse::strip_think(reply).trim().to_string())),
        EnvKind::Game => parse::game_action(reply),
        EnvKind::ToolUse => match parse::tool_action(reply)? {
            ToolAction::Done => Ok("<answer>done</answer>".to_string()),
            ToolAction::Call { name, arguments } => Ok(format!(
                "<tool_call>{}</tool_call>",
                serde_json::json!({"name": name, "arguments": arguments})
            )),
        },
    }
}

/// The chat frame between an agent turn (which ended with `<|im_end|>`) and the next one.
pub fn observation_frame(obs: &str) -> String {
    format!("\n<|im_start|>user\n{obs}{IM_END}\n<|im_start|>assistant\n")
}

/// Token-level transcript of one episode, shared by play and the warm start so both see the
/// same layout.
#[derive(Debug, Clone, Default)]
pub struct TokenTrace {
    pub ids: Vec<i64>,
    pub loss_mask: Vec<bool>,
    pub logprobs: Vec<f32>,
}

impl TokenTrace {
    /// The agent's prompt (its system prompt for `kind`, compact prompts) with its first
    /// message.
    pub fn start(tok: &Tokenizer, kind: EnvKind, first: &str) -> Result<Self, WorkerError> {
        Self::opening(tok, Some(prompt::agent_system(kind)), first, "")
    }

    /// The agent's prompt: `system` (none in the reference's games) and the first message,
    /// then `suffix` after the assistant header (thinking off).
    pub fn opening(
        tok: &Tokenizer,
        system: Option<&str>,
        first: &str,
        suffix: &str,
    ) -> Result<Self, WorkerError> {
        let text = match system {
            Some(system) => Role::Agent.prompt(Some(system), first),
            // No system message at all (not the role's default one).
            None => spade_policy::chat::render(
                &[spade_policy::chat::Message::new(
                    spade_policy::chat::Speaker::User,
                    first,
                )],
                true,
            ),
        };
        let ids = tok.encode(&format!("{text}{suffix}"))?;
        let n = ids.len();
        Ok(Self {
            ids,
            loss_mask: vec![false; n],
            logprobs: vec![0.0; n],
        })
    }

    /// Appends tokens the agent produced (trained) with their log-probs.
    pub fn push_action(&mut self, tokens: &[i64], logprobs: &[f32]) {
        self.ids.extend_from_slice(tokens);
        self.loss_mask
            .extend(std::iter::repeat_n(true, tokens.len()));
        self.logprobs.extend_from_slice(logprobs);
    }

    /// Tokens the agent has written so far (the trained ones).
    pub fn generated(&self) -> usize {
        self.loss_mask.iter().filter(|&&m| m).count()
    }

    /// Appends tokens that are context only (observations, a missing end token).
    pub fn push_context(&mut self, tokens: &[i64]) {
        self.ids.extend_from_slice(tokens);
        self.loss_mask
            .extend(std::iter::repeat_n(false, tokens.len()));
        self.logprobs.extend(std::iter::repeat_n(0.0, tokens.len()));
    }
}

/// One environment's episodes to play: one per seed (hint plays when `hint` is set);
/// `sample_seed` derives every turn's sampling seed.
#[derive(Debug, Clone)]
pub struct PlayJob<'a> {
    pub code: &'a str,
    pub kind: EnvKind,
    pub hint: Option<&'a str>,
    pub seeds: Vec<i64>,
    pub sample_seed: u64,
    /// The place of `seeds[0]` in the whole job, when this is a rank's part of it
    /// ([`crate::ranks`]); 0 for a whole job. Sampling seeds derive from it.
    pub first_index: usize,
}

impl Episode {
    /// An episode not played yet.
    pub fn new(seed: i64, with_hint: bool) -> Self {
        Episode {
            seed,
            with_hint,
            transcript: vec![],
            episode_return: 0.0,
            won: false,
            turns: 0,
            terminated: false,
            truncated: false,
            ids: vec![],
            loss_mask: vec![],
            logprobs: vec![],
            format_errors: 0,
            rewards: vec![],
            env_calls: 0,
            failure: None,
            error: None,
        }
    }
}

/// Plays one episode per seed of `code` (hint plays when `hint` is set), at most
/// `concurrency` at once (one runner each); `sample_seed` derives every row's seed.
/// (Many arguments: each is one independent knob of a play batch.)
#[allow(clippy::too_many_arguments)]
pub fn play_env(
    policy: &Policy,
    pool: &Pool,
    code: &str,
    kind: EnvKind,
    hint: Option<&str>,
    seeds: &[i64],
    opts: &PlayOptions,
    concurrency: usize,
    sample_seed: u64,
) -> Result<Vec<Episode>, WorkerError> {
    let job = PlayJob {
        first_index: 0,
        code,
        kind,
        hint,
        seeds: seeds.to_vec(),
        sample_seed,
    };
    let mut out = play_envs(policy, pool, &[job], opts, concurrency)?;
    Ok(out.pop().unwrap_or_default())
}

/// Plays every job's episodes; returns them per job, in the jobs' order. With the engine,
/// episodes of all jobs run at once (up to `concurrency`, one runner each) and each keeps its
/// KV cache between turns; with the sampler, one job after another in batches of
/// `concurrency`. Either way an episode samples its turns with the same seeds
/// (`seeds::derive(sample_seed, [episode, turn])`), so the traces agree up to float rounding.
///
/// The first contract violation of a job's environment marks that play `failure` and, with
/// `stop_at_violation`, stops the job's other episodes where they are; its episodes not
/// started yet are not played.
pub fn play_envs(
    policy: &Policy,
    pool: &Pool,
    jobs: &[PlayJob<'_>],
    opts: &PlayOptions,
    concurrency: usize,
) -> Result<Vec<Vec<Episode>>, WorkerError> {
    play_envs_measured(policy, pool, jobs, opts, concurrency).map(|(eps, _)| eps)
}

/// [`play_envs`], with what serving the turns measured.
pub fn play_envs_measured(
    policy: &Policy,
    pool: &Pool,
    jobs: &[PlayJob<'_>],
    opts: &PlayOptions,
    concurrency: usize,
) -> Result<(Vec<Vec<Episode>>, PlayMeasures), WorkerError> {
    let tok = policy.require_tokenizer()?;
    let end = tok
        .token_id(IM_END)
        .ok_or_else(|| WorkerError::Model("the tokenizer has no <|im_end|> token".into()))?;
    // A session holds a runner until its episode ends: never wait on the pool for a runner
    // this call itself holds.
    let concurrency = concurrency.clamp(1, pool.config().max_runners.max(1));
    let turns = turns::Turns {
        tok,
        end,
        opts,
        params: SamplingParams {
            temperature: opts.temperature,
            top_p: opts.cut.top_p,
            top_k: opts.cut.top_k,
            max_new_tokens: opts.max_new_tokens,
            stop_token_ids: vec![end],
            stop_strings: vec![],
        },
        suffix: policy.generation_suffix(),
    };
    match &opts.backend {
        Backend::Sampler => jobs
            .iter()
            .map(|job| turns::play_batched(policy, pool, &turns, job, concurrency))
            .collect::<Result<Vec<_>, _>>()
            .map(|eps| (eps, PlayMeasures::default())),
        Backend::Engine(limits) => {
            let cfg = limits.config(opts.max_context);
            let mut engine = Engine::new(policy.model(), Some(tok), cfg)?;
            let (eps, waited) =
                turns::play_concurrently_timed(&mut engine, pool, &turns, jobs, concurrency)?;
            Ok((
                eps,
                PlayMeasures {
                    engine: Some(engine.stats().clone()),
                    env_wait_s: Some(waited.as_secs_f64()),
                },
            ))
        }
        Backend::Vllm(fleet) => {
            let mut r = fleet.rollout(tok);
            let (eps, waited) =
                turns::play_concurrently_timed(&mut r, pool, &turns, jobs, concurrency)?;
            Ok((
                eps,
                PlayMeasures {
                    engine: None,
                    env_wait_s: Some(waited.as_secs_f64()),
                },
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_gets_the_cap_within_what_the_context_and_the_episode_leave() {
        let opts = PlayOptions {
            max_new_tokens: 8192,
            max_context: 32_768,
            max_episode_tokens: 32_768,
            ..PlayOptions::default()
        };
        // A 1,000-token prompt: the whole cap.
        assert_eq!(turn_budget(&opts, 1000, 0), Some(8192));
        // 30,000 tokens in: 2,768 left, 64 kept free -> 2,704.
        assert_eq!(turn_budget(&opts, 30_000, 20_000), Some(2704));
        // 64 or fewer left: the episode ends truncated; 65 left gives a 1-token turn.
        assert_eq!(turn_budget(&opts, 32_704, 0), None);
        assert_eq!(turn_budget(&opts, 32_703, 0), Some(1));
        // The episode budget: 500 of 4,096 left -> 500; none left -> the end.
        let small = PlayOptions {
            max_episode_tokens: 4096,
            ..opts
        };
        assert_eq!(turn_budget(&small, 5000, 3596), Some(500));
        assert_eq!(turn_budget(&small, 5000, 4096), None);
    }

    #[test]
    fn actions_are_normalised_per_kind() {
        assert_eq!(
            env_action(EnvKind::Game, "so \\boxed{1} or \\boxed{ 7 }").ok(),
            Some("\\boxed{7}".to_string())
        );
        assert!(env_action(EnvKind::Game, "I think 7").is_err());
        // The reference's parse_action: a reply without a (non-empty) box reaches the game
        // as it is, trimmed; a boxed one is normalised either way.
        assert_eq!(
            env_action_with(EnvKind::Game, "  I think 7\n", true).ok(),
            Some("I think 7".to_string())
        );
        assert_eq!(
            env_action_with(EnvKind::Game, "it is \\boxed{}", true).ok(),
            Some("it is \\boxed{}".to_string())
        );
        assert_eq!(
            env_action_with(EnvKind::Game, "so \\boxed{ 7 }", true).ok(),
            Some("\\boxed{7}".to_string())
        );
        let call = env_action(
            EnvKind::ToolUse,
            "<tool_call>{\"name\": \"get\", \"arguments\": {\"id\": 3}}</tool_call>",
        );
        assert_eq!(
            call.ok(),
            Some("<tool_call>{\"arguments\":{\"id\":3},\"name\":\"get\"}</tool_call>".to_string())
        );
        assert_eq!(
            env_action(EnvKind::ToolUse, "ok <answer>done</answer>").ok(),
            Some("<answer>done</answer>".to_string())
        );
    }
}
