//! Parsing and validation of [`RunConfig`]: errors name the full key path and what was allowed.

use super::{RunConfig, VllmSection};
use crate::EnvKind;
use std::fmt;

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not TOML (bad syntax, duplicate key).
    #[error("invalid TOML at line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    /// A key is unknown or a value has the wrong type; `path` is the full key path
    /// (e.g. `designer.plateau.lowx`, `curriculum.kinds[1]`).
    #[error("`{path}` (line {line}, column {column}): {message}")]
    Field {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// The file parsed, but values are out of range or contradict each other (all of them).
    #[error("invalid run configuration: {}", join(.0))]
    Invalid(Vec<ConfigIssue>),
}

/// One problem found by [`RunConfig::validate`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigIssue {
    /// A number outside its allowed range.
    #[error("`{path}` = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        path: String,
        value: String,
        allowed: String,
    },
    /// A value that is not one of the allowed ones (e.g. an unknown preset).
    #[error("`{path}` = {value:?} is not allowed: expected {allowed}")]
    NotAllowed {
        path: String,
        value: String,
        allowed: String,
    },
    /// Two settings that cannot hold together.
    #[error("`{path}` conflicts with `{other}`: {reason}")]
    Conflict {
        path: String,
        other: String,
        reason: String,
    },
}

impl ConfigIssue {
    /// The key path the issue is about.
    pub fn path(&self) -> &str {
        match self {
            ConfigIssue::OutOfRange { path, .. }
            | ConfigIssue::NotAllowed { path, .. }
            | ConfigIssue::Conflict { path, .. } => path,
        }
    }
}

fn join(issues: &[ConfigIssue]) -> String {
    issues
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// 1-based line and column of byte offset `at` in `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

pub(super) fn parse(text: &str) -> Result<RunConfig, ConfigError> {
    let span_of = |e: &toml::de::Error| e.span().map_or((0, 0), |s| line_column(text, s.start));
    let de = toml::Deserializer::parse(text).map_err(|e| {
        let (line, column) = span_of(&e);
        ConfigError::Syntax {
            line,
            column,
            message: e.message().to_string(),
        }
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let (line, column) = span_of(e.inner());
        ConfigError::Field {
            path: e.path().to_string(),
            line,
            column,
            message: e.inner().message().to_string(),
        }
    })
}

/// Collects issues while walking the configuration.
pub(super) struct Checker(Vec<ConfigIssue>);

/// An inclusive or exclusive bound, rendered in the error.
#[derive(Clone, Copy)]
enum Bound {
    Incl(f64),
    Excl(f64),
    Open,
}

impl Checker {
    fn range(&mut self, path: &str, value: f64, lo: Bound, hi: Bound) {
        let ok_lo = match lo {
            Bound::Incl(l) => value >= l,
            Bound::Excl(l) => value > l,
            Bound::Open => true,
        };
        let ok_hi = match hi {
            Bound::Incl(h) => value <= h,
            Bound::Excl(h) => value < h,
            Bound::Open => true,
        };
        if !(ok_lo && ok_hi && value.is_finite()) {
            self.0.push(ConfigIssue::OutOfRange {
                path: path.into(),
                value: value.to_string(),
                allowed: Interval(lo, hi).to_string(),
            });
        }
    }

    fn unit(&mut self, path: &str, value: f64) {
        self.range(path, value, Bound::Incl(0.0), Bound::Incl(1.0));
    }

    pub(super) fn count(&mut self, path: &str, value: u64, lo: u64, hi: u64) {
        if !(lo..=hi).contains(&value) {
            self.0.push(ConfigIssue::OutOfRange {
                path: path.into(),
                value: value.to_string(),
                allowed: format!("{lo} to {hi}"),
            });
        }
    }

    fn ordered(&mut self, low_path: &str, low: f64, high_path: &str, high: f64) {
        if low > high {
            self.conflict(
                low_path,
                high_path,
                &format!("{low} must not exceed {high}"),
            );
        }
    }

    pub(super) fn not_allowed(&mut self, path: &str, value: &str, allowed: &str) {
        self.0.push(ConfigIssue::NotAllowed {
            path: path.into(),
            value: value.into(),
            allowed: allowed.into(),
        });
    }

    pub(super) fn conflict(&mut self, path: &str, other: &str, reason: &str) {
        self.0.push(ConfigIssue::Conflict {
            path: path.into(),
            other: other.into(),
            reason: reason.into(),
        });
    }
}

struct Interval(Bound, Bound);

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Bound::Incl(l) => write!(f, "[{l}, ")?,
            Bound::Excl(l) => write!(f, "({l}, ")?,
            Bound::Open => write!(f, "(-inf, ")?,
        }
        match self.1 {
            Bound::Incl(h) => write!(f, "{h}]"),
            Bound::Excl(h) => write!(f, "{h})"),
            Bound::Open => write!(f, "inf)"),
        }
    }
}

/// Upper bounds on counts: generous, but they catch a typo of a few zeros.
const MAX_STEPS: u64 = 1_000_000;
const MAX_TOKENS: u64 = 131_072;
/// Longest context a run may ask for (Qwen3 with YaRN reaches 131,072; this leaves room).
const MAX_CONTEXT: u64 = 1_048_576;

pub(super) fn validate(c: &RunConfig) -> Vec<ConfigIssue> {
    use Bound::{Excl, Incl, Open};
    let mut k = Checker(Vec::new());

    k.count("run.steps", c.run.steps, 1, MAX_STEPS);
    k.count("run.checkpoint_every", c.run.checkpoint_every, 1, MAX_STEPS);
    k.count("run.weights_every", c.run.weights_every, 1, MAX_STEPS);
    k.count("run.optimizer_every", c.run.optimizer_every, 1, MAX_STEPS);
    k.count("run.checkpoint_keep", c.run.checkpoint_keep, 0, MAX_STEPS);
    k.count("run.ranks", u64::from(c.run.ranks), 1, 64);
    if c.run.ranks > 1 && c.model.device.trim().starts_with("cuda:") {
        k.conflict(
            "model.device",
            "run.ranks",
            "ranks on GPUs each take their own (LOCAL_RANK's, or the one a launcher gave them): \
             set model.device = \"cuda\" rather than one device for all",
        );
    }
    if !matches!(c.run.zero_stage, 2 | 3) {
        k.not_allowed("run.zero_stage", &c.run.zero_stage.to_string(), "2 or 3");
    } else if c.run.zero_stage == 3 && !c.grpo.activation_recompute {
        k.conflict(
            "run.zero_stage",
            "grpo.activation_recompute",
            "ZeRO-3 gathers each layer again for its recomputed backward pass: set \
             grpo.activation_recompute = true or run.zero_stage = 2",
        );
    }
    // TOML integers are signed 64-bit: a larger seed could not be written back.
    k.count("run.seed", c.run.seed, 0, i64::MAX as u64);

    let presets = super::presets::MODEL_PRESETS;
    if !presets.contains(&c.model.preset.as_str()) {
        k.not_allowed("model.preset", &c.model.preset, &presets.join(" or "));
    }
    if c.model.preset == "qwen3" && c.model.path.is_none() {
        k.not_allowed(
            "model.path",
            "",
            "a local Hugging Face checkpoint directory (required for preset \"qwen3\")",
        );
    }
    let warm = c.model.warm_start.resolve(&c.model.preset);
    // A run that would silently train on something else than it says is refused.
    if c.model.path.is_none() {
        match warm {
            super::WarmStartData::None if c.model.preset == "tiny" => k.conflict(
                "model.warm_start",
                "model.preset",
                "the tiny preset starts from random weights: it needs \"seeds\" or \"families\"",
            ),
            super::WarmStartData::Seeds | super::WarmStartData::Families
                if !matches!(c.model.preset.as_str(), "tiny" | "smollm2-135m") =>
            {
                k.conflict(
                    "model.warm_start",
                    "model.preset",
                    "a warm start fine-tunes the \"tiny\" or \"smollm2-135m\" preset only",
                )
            }
            _ => {}
        }
    }
    if c.model.warm_start == super::WarmStartData::Families {
        if c.model.path.is_some() {
            k.conflict(
                "model.warm_start",
                "model.path",
                "\"families\" warm-starts a preset; a run from a checkpoint has no warm start",
            );
        }
        if !c.curriculum.kinds.contains(&crate::EnvKind::Game) {
            k.conflict(
                "model.warm_start",
                "curriculum.kinds",
                "the built-in families are games; add \"game\" or use \"seeds\"",
            );
        }
    }
    if c.model.path.as_deref().is_some_and(str::is_empty) {
        k.not_allowed(
            "model.path",
            "",
            "a checkpoint directory (or leave the key out)",
        );
    }
    let mo = &c.model;
    k.count(
        "model.designer_max_new_tokens",
        mo.designer_max_new_tokens.into(),
        1,
        MAX_TOKENS,
    );
    k.count(
        "model.hint_max_new_tokens",
        mo.hint_max_new_tokens.into(),
        1,
        MAX_TOKENS,
    );
    k.count(
        "model.agent_max_new_tokens",
        mo.agent_max_new_tokens.into(),
        1,
        MAX_TOKENS,
    );

    k.count("model.max_context", mo.max_context.into(), 256, MAX_CONTEXT);
    if super::device_gpus(&mo.device).is_none() {
        k.not_allowed("model.device", &mo.device, "auto, cpu, cuda or cuda:N");
    }
    // "auto" is sized by the worker's memory plan, which refuses a cache below one context.
    if let Some(kv) = mo.kv_cache_tokens.slots() {
        k.count("model.kv_cache_tokens", kv.into(), 256, 1 << 26);
        if kv < mo.max_context {
            k.conflict(
                "model.kv_cache_tokens",
                "model.max_context",
                &format!(
                    "a KV cache of {} slots cannot hold one {}-token context",
                    kv, mo.max_context
                ),
            );
        }
    }
    k.range(
        "model.gpu_memory_fraction",
        mo.gpu_memory_fraction,
        Excl(0.0),
        Incl(1.0),
    );
    k.count("model.max_batch", mo.max_batch.into(), 1, 4096);
    k.count("model.prefill_tokens", mo.prefill_tokens.into(), 1, 1 << 20);
    k.count("model.decode_window", mo.decode_window.into(), 0, 64);
    for (path, budget) in [
        ("model.designer_max_new_tokens", mo.designer_max_new_tokens),
        ("model.hint_max_new_tokens", mo.hint_max_new_tokens),
        ("model.agent_max_new_tokens", mo.agent_max_new_tokens),
    ] {
        if budget >= mo.max_context {
            k.conflict(
                path,
                "model.max_context",
                &format!(
                    "{budget} new tokens leave no room for a prompt in a {}-token context",
                    mo.max_context
                ),
            );
        }
    }

    let cu = &c.curriculum;
    if cu.kinds.is_empty() {
        k.not_allowed(
            "curriculum.kinds",
            "[]",
            "one or both of \"game\", \"tool_use\"",
        );
    }
    for (i, kind) in cu.kinds.iter().enumerate() {
        if cu.kinds[..i].contains(kind) {
            let path = format!("curriculum.kinds[{i}]");
            k.not_allowed(&path, kind.as_str(), "each kind at most once");
        }
    }
    k.count(
        "curriculum.game_regenerate_every",
        cu.game_regenerate_every,
        1,
        MAX_STEPS,
    );
    k.count(
        "curriculum.tool_use_regenerate_every",
        cu.tool_use_regenerate_every,
        1,
        MAX_STEPS,
    );
    let n_games = crate::skills::skills_of(EnvKind::Game).count() as u64;
    let n_tools = crate::skills::skills_of(EnvKind::ToolUse).count() as u64;
    k.count(
        "curriculum.active_game_skills",
        cu.active_game_skills as u64,
        1,
        n_games,
    );
    k.count(
        "curriculum.active_tool_use_skills",
        cu.active_tool_use_skills as u64,
        1,
        n_tools,
    );
    k.count(
        "curriculum.envs_per_skill",
        cu.envs_per_skill as u64,
        1,
        1024,
    );

    k.count(
        "corpus.game_max_words",
        c.corpus.game_max_words as u64,
        1,
        1_000_000,
    );
    k.count(
        "corpus.tool_use_max_words",
        c.corpus.tool_use_max_words as u64,
        1,
        1_000_000,
    );
    if c.corpus.path.as_deref().is_some_and(str::is_empty) {
        k.not_allowed(
            "corpus.path",
            "",
            "a JSONL file (or leave the key out: bundled corpus)",
        );
    }

    let m = &c.memory;
    if m.seed_pool.as_deref().is_some_and(str::is_empty) {
        k.not_allowed(
            "memory.seed_pool",
            "",
            "a pool directory or pool.jsonl (or leave the key out)",
        );
    }
    if m.seed_pool.is_some() {
        for (flag, on) in [
            ("ablation.no_memory", c.ablation.no_memory),
            (
                "ablation.fixed_env_pool",
                c.ablation.fixed_env_pool.is_some(),
            ),
        ] {
            if on {
                k.conflict(
                    "memory.seed_pool",
                    flag,
                    "a seeded memory needs a designer that reads its memory",
                );
            }
        }
    }
    k.count("memory.capacity", m.capacity as u64, 1, 1_000_000);
    k.count("memory.code_chars", m.code_chars as u64, 1, 1_000_000);
    k.count("memory.positives", m.positives as u64, 0, 16);
    k.count("memory.negatives", m.negatives as u64, 0, 16);
    k.count(
        "memory.positive_pool_factor",
        m.positive_pool_factor as u64,
        1,
        1000,
    );
    k.count(
        "memory.positive_pool_min",
        m.positive_pool_min as u64,
        1,
        1_000_000,
    );
    let (lo, hi) = (m.positive_win_rate_low, m.positive_win_rate_high);
    k.unit("memory.positive_win_rate_low", lo);
    k.unit("memory.positive_win_rate_high", hi);
    k.ordered(
        "memory.positive_win_rate_low",
        lo,
        "memory.positive_win_rate_high",
        hi,
    );
    let (lo, hi) = (m.negative_below, m.negative_above);
    k.unit("memory.negative_below", lo);
    k.unit("memory.negative_above", hi);
    k.ordered("memory.negative_below", lo, "memory.negative_above", hi);

    let d = &c.designer;
    k.count("designer.attempts", d.attempts.into(), 1, 64);
    k.range("designer.temperature", d.temperature, Excl(0.0), Incl(2.0));
    k.range("designer.top_p", d.top_p, Excl(0.0), Incl(1.0));
    k.count("designer.top_k", d.top_k.into(), 0, 1_000_000);
    // One GRPO trainer serves both roles and takes log-probs at one temperature, so a trained
    // designer must sample at the agent's (a frozen one, or another model, need not). The
    // form, the API and the worker all read this one rule.
    if c.trains_designer() && !c.is_spice() && (d.temperature - c.agent.temperature).abs() > 1e-12 {
        k.conflict(
            "designer.temperature",
            "agent.temperature",
            &format!(
                "{} differs from {}: one GRPO trainer serves both roles and measures log-probs \
                 at one temperature (only a frozen designer may differ)",
                d.temperature, c.agent.temperature
            ),
        );
    }
    k.range(
        "designer.regret_scale",
        d.regret_scale,
        Excl(0.0),
        Incl(2.0),
    );
    k.unit("designer.regret_weight", d.regret_weight);
    k.unit("designer.plateau_weight", d.plateau_weight);
    if (d.regret_weight + d.plateau_weight - 1.0).abs() > 1e-9 {
        k.conflict(
            "designer.regret_weight",
            "designer.plateau_weight",
            "the blend weights must sum to 1 (spec: 0.4 + 0.6)",
        );
    }
    k.unit("designer.plateau.low", d.plateau.low);
    k.unit("designer.plateau.high", d.plateau.high);
    k.ordered(
        "designer.plateau.low",
        d.plateau.low,
        "designer.plateau.high",
        d.plateau.high,
    );
    k.range(
        "designer.plateau.ramp",
        d.plateau.ramp,
        Excl(0.0),
        Incl(1.0),
    );
    k.range(
        "designer.invalid_reward",
        d.invalid_reward,
        Incl(-1.0),
        Incl(0.0),
    );
    k.range(
        "designer.loss_weight_cap",
        d.loss_weight_cap,
        Excl(0.0),
        Incl(1000.0),
    );
    k.range(
        "designer.judge_temperature",
        d.judge_temperature,
        Excl(0.0),
        Incl(2.0),
    );
    k.count(
        "designer.judge_max_new_tokens",
        d.judge_max_new_tokens.into(),
        1,
        MAX_TOKENS,
    );
    k.range(
        "designer.ema.gamma_fast",
        d.ema.gamma_fast,
        Excl(0.0),
        Excl(1.0),
    );
    k.range(
        "designer.ema.gamma_slow",
        d.ema.gamma_slow,
        Excl(0.0),
        Excl(1.0),
    );

    k.range("hint.temperature", c.hint.temperature, Excl(0.0), Incl(2.0));
    k.count("hint.plays", c.hint.plays.into(), 1, 1024);
    k.count("hint.code_chars", c.hint.code_chars as u64, 0, 10_000_000);

    let a = &c.agent;
    k.range("agent.temperature", a.temperature, Excl(0.0), Incl(2.0));
    k.range("agent.top_p", a.top_p, Excl(0.0), Incl(1.0));
    k.count("agent.top_k", a.top_k.into(), 0, 1_000_000);
    k.count("agent.max_turns", a.max_turns.into(), 1, 1000);
    k.count("agent.global_batch", a.global_batch.into(), 1, 1_000_000);
    k.count(
        "agent.max_episode_tokens",
        a.max_episode_tokens.into(),
        1,
        MAX_CONTEXT,
    );
    if a.max_episode_tokens < mo.agent_max_new_tokens {
        k.conflict(
            "agent.max_episode_tokens",
            "model.agent_max_new_tokens",
            "an episode's budget must hold at least one whole turn",
        );
    }
    k.count("agent.concurrency", a.concurrency.into(), 0, 4096);

    let g = &c.grpo;
    k.range("grpo.lr", g.lr, Excl(0.0), Incl(1.0));
    k.range("grpo.clip_low", g.clip_low, Excl(0.0), Excl(1.0));
    k.range("grpo.clip_high", g.clip_high, Excl(0.0), Open);
    k.range("grpo.kl_coef", g.kl_coef, Incl(0.0), Incl(10.0));
    k.range(
        "grpo.router_aux_coef",
        g.router_aux_coef,
        Incl(0.0),
        Incl(1.0),
    );
    k.range("grpo.tis_cap", g.tis_cap, Incl(1.0), Open);
    k.range("grpo.weight_decay", g.weight_decay, Incl(0.0), Incl(1.0));
    k.range("grpo.adam_beta2", g.adam_beta2, Excl(0.0), Excl(1.0));
    k.count(
        "grpo.micro_batch_tokens",
        g.micro_batch_tokens.into(),
        64,
        MAX_CONTEXT * 16,
    );
    k.count(
        "grpo.logprob_chunk_tokens",
        g.logprob_chunk_tokens.into(),
        1,
        MAX_CONTEXT,
    );

    let s = &c.sandbox;
    k.range(
        "sandbox.step_timeout_s",
        s.step_timeout_s,
        Excl(0.0),
        Incl(3600.0),
    );
    k.range(
        "sandbox.validation_timeout_s",
        s.validation_timeout_s,
        Excl(0.0),
        Incl(3600.0),
    );
    k.count(
        "sandbox.max_observation_chars",
        s.max_observation_chars as u64,
        1,
        10_000_000,
    );

    let mt = &c.metrics;
    k.count(
        "metrics.vendi_window_steps",
        mt.vendi_window_steps,
        1,
        MAX_STEPS,
    );
    k.count(
        "metrics.vendi_subsample",
        mt.vendi_subsample as u64,
        2,
        4096,
    );
    k.count("metrics.vendi_draws", mt.vendi_draws as u64, 1, 1000);
    let encoder = mt.vendi_encoder.as_deref().filter(|p| !p.trim().is_empty());
    match (mt.vendi_kernel, encoder) {
        (crate::config::VendiKernel::Sentence, None) => k.conflict(
            "metrics.vendi_encoder",
            "metrics.vendi_kernel",
            "the sentence kernel needs the directory of a BERT or RoBERTa encoder",
        ),
        (crate::config::VendiKernel::Sentence, Some(_)) | (_, None) => {}
        (_, Some(_)) => k.conflict(
            "metrics.vendi_encoder",
            "metrics.vendi_kernel",
            "an encoder is read only by vendi_kernel = \"sentence\"",
        ),
    }
    let (lo, hi) = (mt.learnable_low, mt.learnable_high);
    k.unit("metrics.learnable_low", lo);
    k.unit("metrics.learnable_high", hi);
    k.ordered("metrics.learnable_low", lo, "metrics.learnable_high", hi);
    k.unit("metrics.easy_above", mt.easy_above);
    k.unit("metrics.hard_below", mt.hard_below);
    k.ordered(
        "metrics.hard_below",
        mt.hard_below,
        "metrics.easy_above",
        mt.easy_above,
    );

    if let Some(p) = c.designer.model_path.as_deref() {
        if p.trim().is_empty() {
            k.not_allowed(
                "designer.model_path",
                p,
                "a checkpoint directory (or leave the key out)",
            );
        }
        if c.ablation.fixed_env_pool.is_some() {
            k.conflict(
                "designer.model_path",
                "ablation.fixed_env_pool",
                "fixed-env GRPO has no designer to replace",
            );
        }
    }

    check_vllm(
        &mut k,
        &c.vllm,
        c.model.rollout == super::RolloutBackend::Vllm,
    );
    if c.vllm.weight_sync == super::WeightSync::Nccl && c.model.device.trim() == "cpu" {
        k.conflict(
            "vllm.weight_sync",
            "model.device",
            "\"nccl\" broadcasts the policy from its GPU; a policy on the CPU syncs through \
             \"disk\" (or \"auto\")",
        );
    }

    let ab = &c.ablation;
    if ab.fixed_env_pool.as_deref().is_some_and(str::is_empty) {
        k.not_allowed(
            "ablation.fixed_env_pool",
            "",
            "a pool directory (or leave the key out)",
        );
    }
    k.count(
        "ablation.fixed_env_envs_per_step",
        ab.fixed_env_envs_per_step as u64,
        0,
        1_000_000,
    );
    if ab.rlve && ab.fixed_env_pool.is_some() {
        k.conflict(
            "ablation.rlve",
            "ablation.fixed_env_pool",
            "the RLVE baseline plays RLVE's environments, not a pool directory",
        );
    }
    if ab.rlve && !c.curriculum.kinds.contains(&crate::EnvKind::Game) {
        k.conflict(
            "ablation.rlve",
            "curriculum.kinds",
            "RLVE's environments are games: the kinds must include \"game\"",
        );
    }
    if let Some(fixed) = [
        ("ablation.fixed_env_pool", ab.fixed_env_pool.is_some()),
        ("ablation.rlve", ab.rlve),
    ]
    .into_iter()
    .find_map(|(key, on)| on.then_some(key))
    {
        for (flag, on) in [
            ("ablation.frozen_designer", ab.frozen_designer),
            ("ablation.no_memory", ab.no_memory),
            ("ablation.no_corpus", ab.no_corpus),
            ("ablation.two_skill_curriculum", ab.two_skill_curriculum),
            ("ablation.ema_learning_potential", ab.ema_learning_potential),
        ] {
            if on {
                k.conflict(
                    flag,
                    fixed,
                    "fixed-env GRPO has no designer, so designer ablations do not apply",
                );
            }
        }
    }
    if c.is_spice() {
        spice(&mut k, c);
    }
    let ev = &c.eval;
    k.count("eval.every_steps", ev.every_steps, 0, MAX_STEPS);
    k.count("eval.limit", u64::from(ev.limit), 1, 1_000_000);
    k.count(
        "eval.max_new_tokens",
        u64::from(ev.max_new_tokens),
        1,
        131_072,
    );
    for (i, suite) in ev.suites.iter().enumerate() {
        if let Err(expected) = crate::suites::check(suite) {
            k.not_allowed(&format!("eval.suites[{i}]"), suite, &expected);
        }
    }
    if ev.every_steps > 0 {
        if ev.suites.is_empty() {
            k.not_allowed(
                "eval.suites",
                "[]",
                "at least one suite when eval.every_steps > 0",
            );
        }
        let ck = c.run.checkpoint_every.max(1);
        if !ev.every_steps.is_multiple_of(ck) {
            k.conflict(
                "eval.every_steps",
                "run.checkpoint_every",
                "evaluations read checkpoints, so every_steps must be a multiple of checkpoint_every",
            );
        }
    }

    if ab.two_skill_curriculum && !cu.kinds.contains(&EnvKind::Game) {
        k.conflict(
            "ablation.two_skill_curriculum",
            "curriculum.kinds",
            "the two-skill curriculum uses two game skills, so kinds must include \"game\"",
        );
    }
    k.0
}

/// `[spice]` and what a SPICE run cannot combine with (it has no environments, windows or
/// memory: the SPADE designer's switches do not apply).
fn spice(k: &mut Checker, c: &RunConfig) {
    use Bound::{Excl, Incl};
    let sp = &c.spice;
    k.count("spice.tasks_per_step", sp.tasks_per_step.into(), 1, 100_000);
    k.count("spice.group_size", sp.group_size.into(), 2, 1024);
    k.count("spice.max_attempts", sp.max_attempts.into(), 1, 1024);
    k.count(
        "spice.max_document_tokens",
        sp.max_document_tokens.into(),
        16,
        MAX_CONTEXT,
    );
    if u64::from(sp.max_document_tokens) >= u64::from(c.model.max_context) {
        k.conflict(
            "spice.max_document_tokens",
            "model.max_context",
            "the challenger's prompt holds the document, so it must be shorter than the context",
        );
    }
    k.unit("spice.multiple_choice_share", sp.multiple_choice_share);
    k.range(
        "spice.invalid_reward",
        sp.invalid_reward,
        Incl(-1.0),
        Incl(0.0),
    );
    k.range("spice.temperature", sp.temperature, Excl(0.0), Incl(2.0));
    let ab = &c.ablation;
    for (flag, on) in [
        ("ablation.fixed_env_pool", ab.fixed_env_pool.is_some()),
        ("ablation.rlve", ab.rlve),
        ("ablation.no_memory", ab.no_memory),
        ("ablation.no_corpus", ab.no_corpus),
        ("ablation.two_skill_curriculum", ab.two_skill_curriculum),
        ("ablation.ema_learning_potential", ab.ema_learning_potential),
        ("memory.seed_pool", c.memory.seed_pool.is_some()),
    ] {
        if on {
            k.conflict(
                flag,
                "run.algorithm",
                "SPICE writes questions from corpus documents: it has no environments, memory \
                 or SPADE designer reward for this switch to change",
            );
        }
    }
}

/// Range checks of the section, and that `model.rollout = "vllm"` names its servers.
fn check_vllm(k: &mut Checker, v: &VllmSection, rollout_is_vllm: bool) {
    for (i, u) in v.urls.iter().enumerate() {
        let ok = (u.starts_with("http://") || u.starts_with("https://"))
            && u.split("://")
                .nth(1)
                .is_some_and(|h| !h.trim_matches('/').is_empty())
            && !u.chars().any(char::is_whitespace);
        if !ok {
            k.not_allowed(
                &format!("vllm.urls[{i}]"),
                u,
                "a base URL such as \"http://127.0.0.1:8000\"",
            );
        }
    }
    k.count("vllm.start", v.start.into(), 0, 64);
    k.count(
        "vllm.port",
        v.port.into(),
        1024,
        65_535 - u64::from(v.start),
    );
    k.count("vllm.threads", v.threads.into(), 0, 4096);
    k.count("vllm.kv_cache_gib", v.kv_cache_gib.into(), 1, 4096);
    k.count("vllm.tensor_parallel", v.tensor_parallel.into(), 1, 64);
    for (i, g) in v.gpus.iter().enumerate() {
        if v.gpus[..i].contains(g) {
            k.not_allowed(
                &format!("vllm.gpus[{i}]"),
                &g.to_string(),
                "each device once (two servers on one GPU would share its memory unasked)",
            );
        }
    }
    if !v.gpus.is_empty() {
        let need = u64::from(v.start) * u64::from(v.tensor_parallel.max(1));
        if v.start == 0 {
            k.conflict(
                "vllm.gpus",
                "vllm.start",
                "the devices are split between the servers the worker starts; servers reached \
                 by vllm.urls choose their own",
            );
        } else if need > v.gpus.len() as u64 {
            k.conflict(
                "vllm.gpus",
                "vllm.start",
                &format!(
                    "{} server(s) of {} GPU(s) each need {need} devices; vllm.gpus lists {}",
                    v.start,
                    v.tensor_parallel,
                    v.gpus.len()
                ),
            );
        }
    } else if v.start > 1 && v.tensor_parallel > 1 {
        k.conflict(
            "vllm.tensor_parallel",
            "vllm.gpus",
            "several started servers of more than one GPU each would all take the first \
             devices: list the devices to split in vllm.gpus",
        );
    }
    k.count(
        "vllm.startup_timeout_s",
        v.startup_timeout_s.into(),
        1,
        86_400,
    );
    k.count(
        "vllm.request_timeout_s",
        v.request_timeout_s.into(),
        1,
        86_400,
    );
    if v.start > 0 && !v.urls.is_empty() {
        k.conflict(
            "vllm.start",
            "vllm.urls",
            "either the worker starts its servers or it uses running ones, not both",
        );
    }
    if v.venv.as_deref().is_some_and(|p| p.trim().is_empty()) {
        k.not_allowed("vllm.venv", "", "a directory (or leave the key out)");
    }
    if v.weights_dir
        .as_deref()
        .is_some_and(|p| p.trim().is_empty())
    {
        k.not_allowed("vllm.weights_dir", "", "a directory (or leave the key out)");
    }
    if v.weight_sync == super::WeightSync::Nccl && !v.urls.is_empty() {
        k.conflict(
            "vllm.weight_sync",
            "vllm.urls",
            "\"nccl\" needs servers the worker starts (vllm.start), which it starts with vLLM's \
             NCCL weight transfer on; servers reached by URL sync through \"disk\"",
        );
    }
    if rollout_is_vllm && v.start == 0 && v.urls.is_empty() {
        k.conflict(
            "model.rollout",
            "vllm.urls",
            "\"vllm\" needs servers: list their URLs in vllm.urls or set vllm.start",
        );
    }
}
