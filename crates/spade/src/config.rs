//! The run configuration: one typed TOML file holding every number of `shared/spade-spec.md` as
//! a default, plus a switch for each baseline and ablation of the spec.
//!
//! Why one file: the backend stores exactly what the worker runs (`serde_json` of
//! [`RunConfig`] travels in `report::Message::RunStarted`), and a run can be repeated from it.
//! Strictness: every table denies unknown keys, and [`RunConfig::validate`] reports *every*
//! out-of-range value or conflict at once, each naming its full key path (`designer.plateau.low`)
//! and the allowed range. Sections omitted from a file take the spec's defaults.
//!
//! Parsing is from a string ([`RunConfig::from_toml_str`]); reading the file is the caller's.

use crate::EnvKind;
use serde::{Deserialize, Serialize};

mod check;
pub mod form;
pub mod help;
mod presets;
mod vllm;

pub use check::{ConfigError, ConfigIssue};
pub use presets::{
    DEFAULT_PRESET, DEMO_TOML, MODEL_PRESETS, Preset, SMOL_DEMO_TOML, preset, presets,
};
pub use vllm::{VllmSection, WeightSync};

/// A complete run configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    pub run: RunSection,
    pub model: ModelSection,
    pub curriculum: CurriculumSection,
    pub corpus: CorpusSection,
    pub memory: MemorySection,
    pub designer: DesignerSection,
    pub hint: HintSection,
    pub agent: AgentSection,
    pub grpo: GrpoSection,
    pub sandbox: SandboxSection,
    pub metrics: MetricsSection,
    pub ablation: AblationSection,
    pub eval: EvalSection,
    pub spice: SpiceSection,
    pub vllm: VllmSection,
}

/// Length, seeding and checkpointing of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSection {
    /// Rollout steps (spec, headline results: 400).
    pub steps: u64,
    /// Seed of every random choice of the run (corpus, memory, sampling).
    pub seed: u64,
    /// Keep the weights as a checkpoint (`checkpoints/step-N`) every this many steps (and
    /// always at the end).
    pub checkpoint_every: u64,
    /// Write the resume point (weights and `state.json`) every this many steps, at every kept
    /// checkpoint and at the end. A step's reports are delivered with the resume point that
    /// includes it, so between two writes they wait, and a crash costs the steps since the last
    /// write (they run again on resume; none of their reports had been delivered).
    pub weights_every: u64,
    /// Write the optimiser state (AdamW's moments, and the float32 masters of bf16 weights:
    /// 8 to 12 bytes per parameter) every this many steps (with the first resume point written
    /// at or after each multiple of it, see `weights_every`, and at the end); the resume point
    /// carries the last one between. A resume between two writes continues with the moments of
    /// the last one (and, for bf16 weights, from the weights of its own step).
    pub optimizer_every: u64,
    /// Checkpoints kept: the last this many (0 = all of them).
    pub checkpoint_keep: u64,
    /// Processes that train the run together (data-parallel ranks on this node's CPUs, Gloo):
    /// each plays its share of the agent's and the hint episodes and trains its share of each
    /// update, holding 1/ranks of the optimizer state (ZeRO-2). A checkpoint resumes on any rank
    /// count, or in one process (the optimizer state is re-sharded). `spade train --ranks`
    /// overrides it.
    pub ranks: u32,
    /// How the ranks shard the training state: 2 (ZeRO-2: each rank holds every weight and
    /// gradient and 1/ranks of the float32 masters and AdamW moments) or 3 (ZeRO-3: during an
    /// update the decoder layers' weights and gradients are sharded too, each layer gathered
    /// from its owners just before its forward and its recomputed backward; needs
    /// `grpo.activation_recompute`; the rollouts between updates sample with whole weights).
    /// One process ignores it. Checkpoints of either stage resume under the other.
    pub zero_stage: u8,
    /// What the run trains: `"spade"` (designer and agent on environments the designer
    /// writes, and the baselines and ablations of `[ablation]`) or `"spice"` (the predecessor:
    /// a challenger writes questions from corpus documents, a reasoner answers them; `[spice]`).
    pub algorithm: Algorithm,
}

/// The self-play algorithm of a run (`run.algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    #[default]
    Spade,
    /// SPICE (Self-Play In Corpus Environments, arXiv 2510.24684; spec "SPICE").
    Spice,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Spade => "spade",
            Algorithm::Spice => "spice",
        }
    }
}

/// SPICE runs (`run.algorithm = "spice"`): the numbers of the SPICE paper (arXiv 2510.24684,
/// spec "SPICE") as defaults. The challenger writes at most `model.designer_max_new_tokens`
/// tokens per task, the reasoner `model.agent_max_new_tokens` per answer; the corpus is the
/// `[corpus]` one. The challenger is the policy itself, or the frozen model of
/// `designer.model_path` (SPICE's "strong challenger" baseline), or the policy without
/// challenger updates with `ablation.frozen_designer`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpiceSection {
    /// Documents drawn per step, one task kept per document (SPICE: batch B = 128).
    pub tasks_per_step: u32,
    /// Reasoner answers per task (SPICE: G = 8); also K of the variance reward.
    pub group_size: u32,
    /// Challenger attempts per document until a task parses (SPICE: up to N = 1,024).
    pub max_attempts: u32,
    /// Longest document segment the challenger reads, in tokens (SPICE: 5,992).
    pub max_document_tokens: u32,
    /// Share of documents asked for a multiple-choice task, the rest free-form (SPICE mixes
    /// both formats, which beat either alone).
    pub multiple_choice_share: f64,
    /// The challenger's reward for an attempt that is not a valid task (SPICE: rho = -0.1).
    pub invalid_reward: f64,
    /// Sampling temperature of both roles, and the trainer's (SPICE: 1.0).
    pub temperature: f64,
}

impl Default for SpiceSection {
    fn default() -> Self {
        Self {
            tasks_per_step: crate::spice::BATCH as u32,
            group_size: crate::spice::GROUP_SIZE as u32,
            max_attempts: crate::spice::MAX_ATTEMPTS,
            max_document_tokens: crate::spice::MAX_DOCUMENT_TOKENS as u32,
            multiple_choice_share: 0.5,
            invalid_reward: crate::spice::INVALID_REWARD,
            temperature: crate::spice::TEMPERATURE,
        }
    }
}

/// Which model the policy loads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSection {
    /// A local Hugging Face checkpoint directory (`config.json`, `*.safetensors`,
    /// `tokenizer.json`). Relative paths are relative to the worker's working directory.
    pub path: Option<String>,
    /// `"tiny"` (the project's own tiny Qwen3-shaped model, warm-started on this machine),
    /// `"smollm2-135m"` (SmolLM2-135M-Instruct, a real pretrained model, imported from the GGUF
    /// that scripts/setup installs) or `"qwen3"` (a real checkpoint at `model.path`).
    pub preset: String,
    /// Where the policy trains and generates: `"auto"` (the first GPU when the worker's libtorch
    /// sees one, else the CPU), `"cpu"`, `"cuda"` (the first GPU the job is given) or
    /// `"cuda:N"`. A run that asks for CUDA on a worker built without it, or on a node without
    /// that GPU, fails at its start with the reason; it never trains on the CPU instead.
    pub device: String,
    /// Most tokens the designer may write for one environment.
    pub designer_max_new_tokens: u32,
    /// Most tokens of one hint.
    pub hint_max_new_tokens: u32,
    /// Most tokens of one agent turn.
    pub agent_max_new_tokens: u32,
    /// Longest token sequence the policy is given (prompt and everything generated): an agent
    /// episode whose next turn would pass it ends truncated (the reference's context: 32,768).
    pub max_context: u32,
    /// What serves generation: `"engine"` (continuous batching over a KV cache that keeps each
    /// episode between turns; every episode of a step at once), `"sampler"` (the batch
    /// sampler: one environment at a time, each turn prefilled again) or `"vllm"` (the servers
    /// of the `[vllm]` section, weights synced after every update).
    pub rollout: RolloutBackend,
    /// KV-cache slots the engine may allocate (in blocks of 16, as sequences need them; at
    /// least one context).
    /// Qwen3-4B takes 144 KiB a slot in bf16, so the default 262,144 is 36 GiB.
    pub kv_cache_tokens: KvCacheTokens,
    /// `model.kv_cache_tokens = "auto"` and the memory plan: the share of the device's total
    /// memory the run may use (vLLM's `gpu_memory_fraction`); the rest is kept back.
    pub gpu_memory_fraction: f64,
    /// Most sequences the engine decodes at once.
    pub max_batch: u32,
    /// Most prompt tokens one engine step prefills, over all the requests being prefilled
    /// (several prompts in one pass, a longer one in pieces over several steps, beside the
    /// decoding rows).
    pub prefill_tokens: u32,
    /// Decoding passes one engine step runs before the host reads the sampled tokens back
    /// (the tokens are drawn on the device and fed to the next pass where they lie; stops are
    /// checked at the window's end, so every window gives the same tokens up to float
    /// rounding): 0 leaves it to
    /// the device (1 on the CPU, 4 on CUDA).
    pub decode_window: u32,
    /// What a preset model is fine-tuned on before self-play (ignored with `model.path`):
    /// `"auto"` (the preset's choice: `"seeds"` for `tiny`, `"none"` for `smollm2-135m`),
    /// `"none"` (the pretrained weights as they are), `"seeds"` (the shortest file of the seed
    /// library) or `"families"` (many variants of the built-in game families, so the designer
    /// writes programs that differ; the CPU demos' choice).
    pub warm_start: WarmStartData,
    /// Which prompts the roles read: `"reference"` (the reference implementation's structure
    /// and rules, in our words: the interactive game specification with the document in
    /// `<REFERENCE_DOCUMENT>` tags and the memory in `<REFERENCE_ENVIRONMENTS>`, one user
    /// message for the agent with `HINT:`, a 1-3 sentence hint, a five-criteria judge; for tool
    /// use the multi-turn task on the `ToolUseBaseEnv` base class in a drawn domain and task
    /// variant, and a value-free plan as the hint) or `"compact"` (this project's short
    /// prompts, `ToolUseEnv` for tool use, which the tiny model is warm-started on).
    pub prompts: PromptStyle,
    /// Let a hybrid-thinking checkpoint think (Qwen3's `enable_thinking`). Off (the
    /// reference's launchers pass `enable_thinking: false`), every generation prompt of such a
    /// model ends with the empty `<think>` block its template adds; models without the switch
    /// (Qwen3 Instruct-2507, Qwen2.5, SmolLM2, the tiny model) are unaffected.
    pub thinking: bool,
}

/// GPUs a job must be given for `model.device`: `cuda:N` indexes the job's devices, so N + 1;
/// 0 for `auto` and `cpu`; `None` for a name that is not a device.
pub fn device_gpus(name: &str) -> Option<u32> {
    spade_types::DeviceName::parse(name).map(spade_types::DeviceName::gpus_needed)
}

/// `model.kv_cache_tokens`: a number of slots, or `"auto"`: what the device has left after the
/// memory plan's weights, optimizer state and activations (`spade_policy::memplan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCacheTokens {
    Auto,
    Slots(u32),
}

impl KvCacheTokens {
    /// The fixed number of slots, `None` for `"auto"`.
    pub fn slots(self) -> Option<u32> {
        match self {
            Self::Auto => None,
            Self::Slots(n) => Some(n),
        }
    }
}

impl std::fmt::Display for KvCacheTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Slots(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for KvCacheTokens {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Slots(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for KvCacheTokens {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = KvCacheTokens;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number of KV-cache slots or \"auto\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                u32::try_from(v)
                    .map(KvCacheTokens::Slots)
                    .map_err(|_| E::custom(format!("{v} KV-cache slots: at most {}", u32::MAX)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map_err(|_| {
                        E::custom(format!(
                            "{v} KV-cache slots: expected a positive number or \"auto\""
                        ))
                    })
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                // The launch form sends every field as text.
                match v.trim() {
                    "auto" => Ok(KvCacheTokens::Auto),
                    t => t.parse::<u32>().map(KvCacheTokens::Slots).map_err(|_| {
                        E::custom(format!(
                            "\"{v}\": expected a number of KV-cache slots or \"auto\""
                        ))
                    }),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// What a play that the environment breaks does to its group (`agent.failed_plays`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailedPlays {
    /// The failed play counts -1 in the group's z-score; the other plays go on and train.
    #[default]
    MinusOne,
    /// The first violation stops the environment's plays; none of them train.
    Drop,
}

/// How a tool-use episode reaches the model (`agent.tool_template`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolTemplate {
    /// The model's own tool calling, as the reference plays tool use (`orchestrator.py`, the
    /// native tool-calling path): the schemas in the system turn the chat template writes for
    /// `tools`, several `<tool_call>`s a turn, each result a `tool` message
    /// (`<tool_response>`). A model whose template has no tool calling plays inline.
    #[default]
    Native,
    /// This project's earlier layout: the schemas and the call format in the first
    /// observation, one call a turn (the last in the reply), results as user messages.
    Inline,
}

impl ToolTemplate {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolTemplate::Native => "native",
            ToolTemplate::Inline => "inline",
        }
    }
}

/// Which failures in play retire an environment (`agent.retire_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetireOn {
    /// Only a failure that cost the environment its runner: a step past its time limit, or a
    /// runner that died (a crash, its memory limit, a broken protocol). The reference
    /// blacklists only the games that hang (`orchestrator.py`, `_hung_game_blacklist`); a game
    /// that raises fails that play and is played again.
    #[default]
    Hang,
    /// Any contract violation in play, an exception or a forbidden return too.
    Violation,
}

impl RetireOn {
    pub fn as_str(self) -> &'static str {
        match self {
            RetireOn::Hang => "hang",
            RetireOn::Violation => "violation",
        }
    }
}

/// Which prompts the roles read (`model.prompts`; the texts are in `crate::prompt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptStyle {
    /// The reference implementation's structure and rules (`prompt::reference`,
    /// `prompt::reference_tools`).
    #[default]
    Reference,
    /// This project's short prompts (a system prompt per role, the contract after the memory
    /// examples): what the tiny model is warm-started on.
    Compact,
}

impl PromptStyle {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptStyle::Reference => "reference",
            PromptStyle::Compact => "compact",
        }
    }
}

/// What a preset model is fine-tuned on before self-play (`model.warm_start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarmStartData {
    /// The preset's own choice: `Seeds` for the tiny preset (initialised at random, it writes
    /// nothing without one), `None` for `smollm2-135m` (pretrained).
    #[default]
    Auto,
    /// No warm start: the preset's weights as they are (pretrained presets only).
    None,
    /// The seed library's shortest file (`envs/seed`, or the worker's `--seeds`).
    Seeds,
    /// The built-in game families' variants (`spade_worker::warmstart::families`).
    Families,
}

impl WarmStartData {
    pub fn as_str(self) -> &'static str {
        match self {
            WarmStartData::Auto => "auto",
            WarmStartData::None => "none",
            WarmStartData::Seeds => "seeds",
            WarmStartData::Families => "families",
        }
    }

    /// What `Auto` means for `preset`.
    pub fn resolve(self, preset: &str) -> WarmStartData {
        match self {
            WarmStartData::Auto if preset == "tiny" => WarmStartData::Seeds,
            WarmStartData::Auto => WarmStartData::None,
            other => other,
        }
    }
}

/// The generation backend of rollouts (`model.rollout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutBackend {
    /// `spade_policy::engine`: continuous batching, KV kept across turns, shared prefixes.
    #[default]
    Engine,
    /// `spade_policy::sample::generate`: one batch per environment and turn.
    Sampler,
    /// External vLLM servers (`[vllm]`), token ids in, token ids and log-probs out.
    Vllm,
}

impl RolloutBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutBackend::Engine => "engine",
            RolloutBackend::Sampler => "sampler",
            RolloutBackend::Vllm => "vllm",
        }
    }
}

/// Skills, their rotation and the regeneration schedule (spec, step 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CurriculumSection {
    /// Environment kinds the run generates: `["game"]`, `["tool_use"]` or both (default
    /// games: the paper trains games and tool use as separate runs, `cmd/games/` and
    /// `cmd/tool_use/` of the reference).
    pub kinds: Vec<EnvKind>,
    /// Regenerate games every k steps (spec 1: k = 4).
    pub game_regenerate_every: u64,
    /// Regenerate tool-use environments every k steps (spec 1: k = 8).
    pub tool_use_regenerate_every: u64,
    /// Game skills active per regeneration, rotating over the six (spec 1: 3 of 6).
    pub active_game_skills: usize,
    /// Tool-use skills active per regeneration (spec 1: all 6).
    pub active_tool_use_skills: usize,
    /// Environments generated per active skill (spec 1: 8, so 24 games).
    pub envs_per_skill: usize,
}

/// The document corpus that conditions the designer (spec, step 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorpusSection {
    /// JSONL file with a `text` or `orig_doc` field per line; absent = the bundled corpus.
    pub path: Option<String>,
    /// Documents are truncated to this many words for games (spec 2: 6,000).
    pub game_max_words: usize,
    /// ... and for tool use (spec 2: 4,000).
    pub tool_use_max_words: usize,
}

/// The memory of past environments (spec, steps 2 and 9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySection {
    /// Records kept, newest last (spec 9: 200).
    pub capacity: usize,
    /// Characters of code kept per record (spec 9: 2,000).
    pub code_chars: usize,
    /// Positive examples per prompt (spec 2: 2).
    pub positives: usize,
    /// Negative examples per prompt (spec 2: 1).
    pub negatives: usize,
    /// Positives are drawn from the top max(factor * n, min) records by regret (spec 2:
    /// max(3n, 10)), n = `positives`.
    pub positive_pool_factor: usize,
    pub positive_pool_min: usize,
    /// Eligible positives have a win rate in [low, high] (spec 2: [0.15, 0.85]).
    pub positive_win_rate_low: f64,
    pub positive_win_rate_high: f64,
    /// Negatives have a win rate below `negative_below` or above `negative_above`
    /// (spec 2: < 0.1 or > 0.9).
    pub negative_below: f64,
    pub negative_above: f64,
    /// Which records a designer prompt's examples come from: `"skill"` (records of the slot's
    /// skill, as the reference's `EnvironmentMemory.high_regret_seeds(skill=...)` and
    /// `low_quality_examples(skill=...)` in `spade/core/env_memory.py`) or `"kind"` (every
    /// record of the same kind, games or tool use: this project's earlier behaviour).
    pub match_by: MemoryMatch,
    /// What a record's win rate counts: `"regeneration_step"` (the share of the regeneration
    /// step's no-hint plays with a reward above 0, as the reference records it) or `"window"`
    /// (the share of the window's no-hint plays won). Either way the record is written when
    /// the window closes.
    pub win_rate_from: MemoryWinRate,
    /// A pool ([`crate::pool`]) whose scored environments start the memory of a new run, so
    /// the designer's first prompts have examples; absent = an empty memory (the spec's start).
    /// Every environment is validated first; only entries with a no-hint win rate and a
    /// regret can be examples (the spec chooses examples by them).
    pub seed_pool: Option<String>,
}

/// The records a designer prompt draws its memory examples from (`memory.match_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryMatch {
    /// Records of the slot's skill (the reference's default).
    #[default]
    Skill,
    /// Records of the slot's kind (games or tool use), any skill.
    Kind,
}

/// The similarity kernel of the Vendi score (`metrics.vendi_kernel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VendiKernel {
    /// Word unigram and bigram counts of the code, cosine similarity.
    #[default]
    Ngram,
    /// The policy's mean-pooled final hidden states over the code's first 512 tokens.
    Policy,
    /// A BERT-family sentence encoder from `metrics.vendi_encoder` (the Vendi authors embed
    /// text with unsup-SimCSE RoBERTa-base's pooler output), cosine similarity.
    Sentence,
}

impl VendiKernel {
    pub fn as_str(self) -> &'static str {
        match self {
            VendiKernel::Ngram => "ngram",
            VendiKernel::Policy => "policy",
            VendiKernel::Sentence => "sentence",
        }
    }
}

/// Which no-hint plays the regret's no-hint arm uses (`designer.regret_timing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegretTiming {
    /// The no-hint plays of the regeneration step, the step of the hint plays (the reference's
    /// "matched timing", `spade/core/utils/delayed_env_rewards.py`,
    /// `recompute_delayed_env_rewards_blend`); the plateau still uses the whole window.
    #[default]
    Matched,
    /// Every no-hint play of the window, for the regret and the plateau alike (spec 7 read
    /// literally: "computed k steps later from all plays in the window").
    Window,
}

/// What the plateau's `w` reads (`designer.plateau_reads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlateauReads {
    /// The mean no-hint episode return over the window (the reference:
    /// `spade/core/utils/delayed_env_rewards.py`, the window's mean reward it calls win rate).
    #[default]
    MeanReturn,
    /// The share of no-hint plays won over the window (spec 7: "w = no-hint win rate").
    WinRate,
}

/// Which plays the memory record's win rate counts (`memory.win_rate_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryWinRate {
    /// The share of the regeneration step's no-hint plays with a reward above 0 (the
    /// reference: `spade/core/orchestrator.py` records each game's memory entry at the
    /// regeneration step from those plays).
    #[default]
    RegenerationStep,
    /// The share of the window's no-hint plays won, at the window's close.
    Window,
}

/// The designer's plateau: 1 on [low, high], linear to 0 over `ramp` on each side (spec 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlateauSection {
    pub low: f64,
    pub high: f64,
    pub ramp: f64,
}

/// EMA learning-potential reward (spec, "Baselines and ablations").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmaSection {
    /// Per-skill fast average decay (spec: 0.98).
    pub gamma_fast: f64,
    /// Per-skill slow average decay (spec: 0.85).
    pub gamma_slow: f64,
}

/// The designer role: attempts, sampling and its delayed reward (spec, steps 2, 3 and 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DesignerSection {
    /// Attempts per environment slot (spec 2: 8; the reference's rollout passes 5,
    /// `spade/slime/spade_rollout.py`, `collect_trajectories(max_attempts=5)`, which the paper
    /// presets use).
    pub attempts: u32,
    /// Sampling temperature (spec 5: 0.6 for both roles).
    pub temperature: f64,
    /// Nucleus sampling of the designer's attempts: the most likely tokens whose probabilities
    /// sum to this (the reference's `env_top_p`: 0.95; 1 = off).
    pub top_p: f64,
    /// Sample among this many most likely tokens (the reference's `env_top_k`: 20; 0 = off).
    pub top_k: u32,
    /// Repair the most common syntax error of generated code before validation: an f-string
    /// whose literal braces are not doubled (the reference's `repair_fstring_braces`: on the
    /// line of the syntax error, a `{...}` whose inside is no Python expression becomes
    /// `{{...}}`, up to 20 times).
    pub repair_fstrings: bool,
    /// What the plateau's `w` reads: `"mean_return"` (the mean no-hint episode return of the
    /// window, the reference's `win_rate` in `recompute_delayed_env_rewards_blend`) or
    /// `"win_rate"` (the share of no-hint plays won, spec 7 read literally). Equal for games
    /// whose only rewards are 0 and a winning 1.
    pub plateau_reads: PlateauReads,
    /// Regret is divided by this and clipped to [0, 1] (spec 7: 0.15).
    pub regret_scale: f64,
    /// Blend weights `r = regret_weight * regret_norm + plateau_weight * plateau(w)`
    /// (spec 7: 0.4 / 0.6).
    pub regret_weight: f64,
    pub plateau_weight: f64,
    pub plateau: PlateauSection,
    /// Reward of an invalid environment or a step timeout (spec 7: -0.5).
    pub invalid_reward: f64,
    /// Which no-hint plays the regret compares with the hint plays: `"matched"` (those of the
    /// regeneration step, the reference's default) or `"window"` (all of the window).
    pub regret_timing: RegretTiming,
    /// Train rejected attempts too, at `invalid_reward`, centred with the skill's accepted
    /// ones. Off by default: in the reference a failed attempt yields no designer sample
    /// (`spade/core/orchestrator.py`, `_generate_single_game`: only an accepted game returns a
    /// trajectory).
    pub train_rejected: bool,
    /// Cap of the designer loss weight `min(n_agent_samples / n_designer_samples * k, cap)`
    /// (spec 7: 50; the reference's `compute_env_reward_scale` counts the designer samples
    /// trained, one per accepted environment).
    pub loss_weight_cap: f64,
    /// Ask the policy whether a validated game works (spec, "Validation": on for real models,
    /// off for the tiny one).
    pub self_judge: bool,
    /// Sampling temperature of the self-judge's verdict (the reference's 0.3,
    /// `spade/slime/arguments.py`, `--spade-self-judge-temperature`).
    pub judge_temperature: f64,
    /// Most tokens of the self-judge's reply (the reference's 2,048,
    /// `--spade-self-judge-max-tokens`).
    pub judge_max_new_tokens: u32,
    pub ema: EmaSection,
    /// A second checkpoint (Hugging Face directory) that writes the environments, their hints
    /// and the self-judge's verdicts, frozen, while the agent trains alone: the paper's "fixed
    /// pool by a stronger frozen model" ablation and SPICE's "strong challenger". None: the
    /// policy plays both roles, as SPADE does.
    pub model_path: Option<String>,
}

/// The privileged hint call (spec, step 4 and 5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HintSection {
    /// Sampling temperature of the hint call (spec 4: 0.3).
    pub temperature: f64,
    /// Plays with the hint per environment, once at generation (spec 5: 16).
    pub plays: u32,
    /// Characters of the environment's code the hint call reads; 0 = the whole program (the
    /// spec's hint writer reads the accepted code).
    pub code_chars: usize,
    /// Characters of a hint the agent is shown; 0 = the whole hint (the reference shows it
    /// whole; its length is bounded by `model.hint_max_new_tokens`).
    pub max_chars: usize,
}

/// The agent role (spec, steps 5 and 6, and the tool-use contract).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSection {
    /// Sampling temperature (spec 5: 0.6).
    pub temperature: f64,
    /// Nucleus sampling of the agent's turns and the self-judge's verdict (the reference's
    /// `actor_top_p`: 0.95; 1 = off).
    pub top_p: f64,
    /// Sample among this many most likely tokens (the reference's `actor_top_k`: 20; 0 = off).
    pub top_k: u32,
    /// Turn limit of one play (spec 5: 25).
    pub max_turns: u32,
    /// No-hint plays per step over all environments: ceil(global_batch / n_envs) per
    /// environment (spec 5: 192, so 8 for 24 environments).
    pub global_batch: u32,
    /// Tokens the agent may write over a whole episode, all turns together; the last turn gets
    /// what is left, and the episode ends truncated when fewer than 64 tokens are left. The
    /// reference bounds an episode by its context only (32,768 tokens, `model.max_context`).
    pub max_episode_tokens: u32,
    /// A turn that fills its token budget without the end token ends the episode, truncated
    /// (the reference: "Missing EOS marks truncation"). Off: the turn is closed and play goes
    /// on.
    pub end_on_cut_turn: bool,
    /// A game reply without `\boxed{}` reaches the environment's `step` as its raw text (the
    /// reference's `parse_action`), so the game itself answers it. Off: the environment is not
    /// stepped and the agent is told the format it missed.
    pub raw_actions: bool,
    /// A play the environment breaks (an exception, a step timeout, a return the contract
    /// does not allow): `"minus_one"` (it fails alone: the environment's other plays go on,
    /// and in its group the failed play counts a return of -1 while the rest train, as the
    /// reference's z-score does) or `"drop"` (the first violation stops the environment's
    /// other plays and none of its plays of that step train). A failed play is no outcome of
    /// the game: the designer's scores never count it.
    pub failed_plays: FailedPlays,
    /// Which failures retire the environment from play, with the invalid designer reward:
    /// `"hang"` (a step timeout or a runner that died; the reference) or `"violation"` (any
    /// contract violation). An environment that failed a play without being retired is played
    /// again at the next step.
    pub retire_on: RetireOn,
    /// A play that ended without terminating (out of turns, or out of its token budget)
    /// trains. Off, it counts in its group's z-score but its tokens get no gradient (the
    /// reference's tool-use launchers, `--spade-compact-filter`: running out of budget is not
    /// a policy failure, and training on it as a return of 0 teaches early answers).
    pub train_truncated: bool,
    /// How tool-use episodes reach the model: `"native"` (the model's own tool calling: the
    /// schemas in the template's system turn, several calls a turn, results as `tool`
    /// messages; the reference) or `"inline"` (schemas in the first observation, one call a
    /// turn, results as user messages). A model whose chat template has no tool calling plays
    /// inline.
    pub tool_template: ToolTemplate,
    /// Episodes played at once: sandbox runners, and rows of one sampling batch. 0 (the
    /// default) = `model.max_batch`, so the engine is never short of episodes to decode while
    /// some wait for their environments.
    pub concurrency: u32,
}

/// GRPO for both roles (spec, step 8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpoSection {
    /// Learning rate (spec 8: 1e-6 for 4B-30B models).
    pub lr: f64,
    /// Asymmetric clip range (spec 8: 0.2 low, 0.28 high).
    pub clip_low: f64,
    pub clip_high: f64,
    /// KL coefficient (spec 8: 0 by default, 0.005 as an option).
    pub kl_coef: f64,
    /// Cap of the truncated importance-sampling ratio of delayed designer samples (spec 8: 2).
    pub tis_cap: f64,
    /// Tokens per forward/backward pass: samples are packed into micro-batches of at most this
    /// many tokens (a longer sample gets a micro-batch of its own); gradients accumulate.
    pub micro_batch_tokens: u32,
    /// Positions per chunk of the language-model head when log-probs are computed, so the
    /// logits of a whole micro-batch never exist at once.
    pub logprob_chunk_tokens: u32,
    /// Recompute each layer's activations in the backward pass (less memory, about a third
    /// more compute).
    pub activation_recompute: bool,
    /// Coefficient of the router load-balancing loss of a Qwen3-MoE model (transformers'
    /// `load_balancing_loss_func`); 0 = off, as RL fine-tuning usually runs. Dense models
    /// ignore it.
    pub router_aux_coef: f64,
    /// How the step's per-token losses are averaged: `"sample_mean"` (each sample's token mean,
    /// averaged over the step's samples, zero-advantage ones included: slime's default, which
    /// the reference trains with) or `"token_mean"` (one mean over the trained tokens of the
    /// samples with a non-zero advantage: DAPO's token-level mean as the spec words it).
    pub loss_norm: LossNorm,
    /// With `"sample_mean"`: the step's batch is the delayed designer samples first, then the
    /// agent's, cut to `agent.global_batch` samples (the reference trims the surplus agent
    /// samples so slime's batch has exactly its global batch size).
    pub trim_to_global_batch: bool,
    /// AdamW's decoupled weight decay (the reference's launchers: 0.1; torch's default 0.01).
    pub weight_decay: f64,
    /// AdamW's second-moment decay (the reference's launchers: 0.98; torch's default 0.999).
    pub adam_beta2: f64,
}

impl GrpoSection {
    /// Whether zero-advantage samples join the step's batch: under the per-sample mean they
    /// count in the loss's denominator (and in the reference's batch cut); the token mean
    /// leaves them out.
    pub fn counts_zero_advantage(&self) -> bool {
        self.loss_norm == LossNorm::SampleMean
    }
}

/// How a GRPO step averages its per-token losses (`grpo.loss_norm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossNorm {
    /// Each sample's token mean, averaged over the step's samples (the reference's).
    #[default]
    SampleMean,
    /// One mean over the trained tokens of the samples with a non-zero advantage.
    TokenMean,
}

/// Limits of generated code (spec, "Validation").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSection {
    /// Per-call limit of `step` (spec: 30 s).
    pub step_timeout_s: f64,
    /// Budget of one validation (spec: 60 s).
    pub validation_timeout_s: f64,
    /// Longest observation accepted (spec: 20,000 characters).
    pub max_observation_chars: usize,
}

/// Metrics logged each step (spec, "Metrics to log each step").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// Vendi score over the environments of the last this many steps (spec: 40).
    pub vendi_window_steps: u64,
    /// Environments per Vendi subsample (spec: 24).
    pub vendi_subsample: usize,
    /// Subsamples drawn; mean and s.d. are reported (spec: 12).
    pub vendi_draws: usize,
    /// The similarity the Vendi score uses: `"ngram"` (cosine of word unigram and bigram
    /// counts of the code, like the Vendi authors' text kernel, `vendi_score.text_utils.
    /// ngram_vendi_score(ns=[1, 2])`) or `"policy"` (cosine of the policy's mean-pooled final
    /// hidden states: anisotropic, so scores lean toward 1). The metric names carry it
    /// (`vendi_ngram_mean`, `vendi_policy_mean`). `"sentence"`: a sentence encoder's
    /// embeddings (`vendi_encoder`; `vendi_sentence_mean`).
    pub vendi_kernel: VendiKernel,
    /// Directory of the BERT or RoBERTa encoder for `vendi_kernel = "sentence"` (`config.json`,
    /// safetensors, `tokenizer.json`; e.g. princeton-nlp/unsup-simcse-roberta-base saved with
    /// safetensors). Read by the worker when the run starts, before the warm start.
    pub vendi_encoder: Option<String>,
    /// Learnable: agent win rate in [low, high] (spec: [0.2, 0.8]).
    pub learnable_low: f64,
    pub learnable_high: f64,
    /// Easy above this win rate, hard below `hard_below` (spec: 0.8 and 0.2).
    pub easy_above: f64,
    pub hard_below: f64,
}

/// Baselines and ablations (spec, "Baselines and ablations a run can choose"). All off = SPADE.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AblationSection {
    /// Fixed-env GRPO: play the environments of this pool (a pool directory, its `pool.jsonl`,
    /// or a directory of `.py` files; see [`crate::pool`]), train only the agent. Absent = off.
    pub fixed_env_pool: Option<String>,
    /// Fixed-env GRPO: environments drawn from the pool per step, without replacement until
    /// the pool is exhausted (the reference's 24: `cmd/games/_train_fixed_gpt55.sh`,
    /// `--rollout-batch-size 24`, and `spade/slime/spade_rollout.py`,
    /// `_select_static_games_without_replacement`); 0 = every pool environment every step.
    pub fixed_env_envs_per_step: usize,
    /// The fixed-environment RLVE baseline: fixed-env GRPO on RLVE's 400 verifiable
    /// environments (the `rlve-gym` package in the sandbox's venv) with RLVE's adaptive
    /// difficulty (`spade::rlve`) instead of a pool directory; `fixed_env_envs_per_step` of them
    /// per step. Answers go in `\boxed{}` as in our games (RLVE's own `\boxed{}` marker mode).
    pub rlve: bool,
    /// Online generation without designer updates.
    pub frozen_designer: bool,
    /// No memory examples in designer prompts.
    pub no_memory: bool,
    /// No corpus document in designer prompts.
    pub no_corpus: bool,
    /// Only two game skills, always the same two: Mathematical Reasoning and Pattern
    /// Recognition, sharing the regeneration's environments (24 = 2 x 12), as the reference's
    /// ablation (`cmd/ablations/train_two_skill_30b.sh`: `SPADE_SKILLS="Mathematical_Reasoning
    /// Pattern_Recognition"`, `SKILLS_PER_REGEN=2`, 24 games per rollout).
    pub two_skill_curriculum: bool,
    /// Designer reward = EMA learning potential instead of regret + plateau.
    pub ema_learning_potential: bool,
}

/// Held-out evaluation of the run's checkpoints (not part of the spec's loop: the service queues
/// a `spade eval` job per suite when the worker reports a checkpoint that is due).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalSection {
    /// Evaluate the checkpoints whose step is a multiple of this, and the last one; 0 = only
    /// when someone asks (run page or API). A multiple of `run.checkpoint_every`.
    pub every_steps: u64,
    /// With `every_steps`, also evaluate the model the run starts from (checkpoint 0), the
    /// base-model row of the results.
    pub base_model: bool,
    /// Suites, as `spade eval --suite` names them (see [`crate::suites`]).
    pub suites: Vec<String>,
    /// Items per task at most (questions per reasoning-gym dataset, QA items, environments).
    pub limit: u32,
    /// Tokens per answer (per turn in environments).
    pub max_new_tokens: u32,
}

impl Default for AblationSection {
    fn default() -> Self {
        Self {
            fixed_env_pool: None,
            // Reference: _train_fixed_gpt55.sh, 24 games per rollout.
            fixed_env_envs_per_step: 24,
            rlve: false,
            frozen_designer: false,
            no_memory: false,
            no_corpus: false,
            two_skill_curriculum: false,
            ema_learning_potential: false,
        }
    }
}

impl Default for EvalSection {
    fn default() -> Self {
        Self {
            every_steps: 0,
            base_model: true,
            suites: vec!["rg-hard".into()],
            limit: 50,
            max_new_tokens: 1024,
        }
    }
}

impl Default for RunSection {
    fn default() -> Self {
        Self {
            steps: 400, // spec, headline results: 400 rollout steps
            seed: 0,
            checkpoint_every: 50,
            // Every step: reports reach the dashboard at once and a crash costs one step; a big
            // model whose weights take long to write may raise it.
            weights_every: 1,
            optimizer_every: 50,
            checkpoint_keep: 0,
            ranks: 1,
            zero_stage: 2,
            algorithm: Algorithm::Spade,
        }
    }
}

impl Default for ModelSection {
    fn default() -> Self {
        Self {
            path: None,
            preset: "qwen3".into(),
            device: "auto".into(),
            // The reference's per-role budgets (cmd/games/train_spade_4b.sh): designer 16,384
            // tokens, hint 4,096, agent 8,192 a turn, within a 32,768-token context.
            designer_max_new_tokens: 16_384,
            hint_max_new_tokens: 4096,
            agent_max_new_tokens: 8192,
            max_context: 32_768,
            rollout: RolloutBackend::Engine,
            kv_cache_tokens: KvCacheTokens::Slots(262_144),
            gpu_memory_fraction: 0.9,
            max_batch: 256,
            prefill_tokens: 2048,
            decode_window: 0,
            warm_start: WarmStartData::Auto,
            prompts: PromptStyle::Reference,
            // Reference: --apply-chat-template-kwargs '{"enable_thinking":false}'.
            thinking: false,
        }
    }
}

impl Default for CurriculumSection {
    fn default() -> Self {
        Self {
            // Reference: cmd/games/train_spade_*.sh and cmd/tool_use/ are separate runs.
            kinds: vec![EnvKind::Game],
            game_regenerate_every: 4,     // spec 1
            tool_use_regenerate_every: 8, // spec 1
            active_game_skills: 3,        // spec 1: 3 of 6
            active_tool_use_skills: 6,    // spec 1: all 6
            envs_per_skill: 8,            // spec 1
        }
    }
}

impl Default for CorpusSection {
    fn default() -> Self {
        Self {
            path: None,
            game_max_words: 6000,     // spec 2
            tool_use_max_words: 4000, // spec 2
        }
    }
}

impl Default for MemorySection {
    fn default() -> Self {
        Self {
            capacity: 200,           // spec 9
            code_chars: 2000,        // spec 9
            positives: 2,            // spec 2
            negatives: 1,            // spec 2
            positive_pool_factor: 3, // spec 2: top max(3n, 10)
            positive_pool_min: 10,
            positive_win_rate_low: 0.15, // spec 2: [0.15, 0.85]
            positive_win_rate_high: 0.85,
            negative_below: 0.1, // spec 2: < 0.1 or > 0.9
            negative_above: 0.9,
            // Reference: spade/core/env_memory.py filters by skill.
            match_by: MemoryMatch::Skill,
            // Reference: spade/slime/spade_rollout.py, the memory update at regeneration.
            win_rate_from: MemoryWinRate::RegenerationStep,
            seed_pool: None,
        }
    }
}

impl Default for PlateauSection {
    fn default() -> Self {
        Self {
            low: 0.4, // spec 7
            high: 0.6,
            ramp: 0.25,
        }
    }
}

impl Default for EmaSection {
    fn default() -> Self {
        Self {
            gamma_fast: 0.98, // spec, ablations
            gamma_slow: 0.85,
        }
    }
}

impl Default for DesignerSection {
    fn default() -> Self {
        Self {
            attempts: 8,      // spec 2 (the paper presets: 5, the reference's rollout)
            temperature: 0.6, // spec 5
            // Reference: spade/core/types.py, SpadeConfig.env_top_p / env_top_k.
            top_p: 0.95,
            top_k: 20,
            // Reference: spade/core/utils/parsing.py, extract_game_code.
            repair_fstrings: true,
            plateau_reads: PlateauReads::MeanReturn,
            regret_scale: 0.15, // spec 7
            regret_weight: 0.4, // spec 7
            plateau_weight: 0.6,
            plateau: PlateauSection::default(),
            invalid_reward: -0.5, // spec 7
            // Reference: delayed_env_rewards.py, recompute_delayed_env_rewards_blend.
            regret_timing: RegretTiming::Matched,
            // Reference: orchestrator.py, a failed attempt yields no sample.
            train_rejected: false,
            loss_weight_cap: 50.0, // spec 7
            self_judge: true,      // spec, Validation: on for real models
            // Reference: spade/slime/arguments.py (--spade-self-judge-temperature 0.3,
            // --spade-self-judge-max-tokens 2048).
            judge_temperature: 0.3,
            judge_max_new_tokens: 2048,
            model_path: None,
            ema: EmaSection::default(),
        }
    }
}

impl Default for HintSection {
    fn default() -> Self {
        Self {
            temperature: 0.3, // spec 4
            plays: 16,        // spec 5
            code_chars: 0,    // spec 4: the hint call reads the whole accepted code
            max_chars: 0,
        }
    }
}

impl Default for AgentSection {
    fn default() -> Self {
        Self {
            temperature: 0.6, // spec 5
            // Reference: spade/core/types.py, SpadeConfig.actor_top_p / actor_top_k.
            top_p: 0.95,
            top_k: 20,
            max_turns: 25,     // spec 5
            global_batch: 192, // spec 5
            // The reference's episode is bounded by its context alone.
            max_episode_tokens: 32_768,
            // Reference: spade/core/orchestrator.py, _play_game_async.
            end_on_cut_turn: true,
            raw_actions: true,
            // Reference: spade/core/utils/trajectory_build.py (-1.0 for a failed trajectory).
            failed_plays: FailedPlays::MinusOne,
            // Reference: spade/core/orchestrator.py blacklists hung games only.
            retire_on: RetireOn::Hang,
            // Reference: the games launchers do not pass --spade-compact-filter.
            train_truncated: true,
            // Reference: orchestrator.py plays tool use on the model's native tool template.
            tool_template: ToolTemplate::Native,
            // model.max_batch (issue 42: 32 left most of the engine's 256 rows idle).
            concurrency: 0,
        }
    }
}

impl Default for GrpoSection {
    fn default() -> Self {
        Self {
            lr: 1e-6,      // spec 8
            clip_low: 0.2, // spec 8
            clip_high: 0.28,
            kl_coef: 0.0, // spec 8 (0.005 option)
            tis_cap: 2.0, // spec 8
            // One 16k-token packed step (issue 12's memory target on one GPU).
            micro_batch_tokens: 16_384,
            logprob_chunk_tokens: 4096,
            activation_recompute: true,
            // Off: pretraining balanced the routers; RL fine-tuning leaves them be.
            router_aux_coef: 0.0,
            // The reference's recipe (slime's loss, `--weight-decay 0.1 --adam-beta2 0.98`).
            loss_norm: LossNorm::SampleMean,
            trim_to_global_batch: true,
            weight_decay: 0.1,
            adam_beta2: 0.98,
        }
    }
}

impl Default for SandboxSection {
    fn default() -> Self {
        Self {
            step_timeout_s: 30.0,       // spec, Validation
            validation_timeout_s: 60.0, // spec, Validation
            max_observation_chars: 20_000,
        }
    }
}

impl Default for MetricsSection {
    fn default() -> Self {
        Self {
            vendi_window_steps: 40, // spec, Metrics
            vendi_subsample: 24,
            vendi_draws: 12,
            // The Vendi authors' n-gram text kernel; the policy's hidden states are anisotropic.
            vendi_kernel: VendiKernel::Ngram,
            vendi_encoder: None,
            learnable_low: 0.2, // spec, Metrics
            learnable_high: 0.8,
            easy_above: 0.8,
            hard_below: 0.2,
        }
    }
}

impl Default for RunConfig {
    /// The paper's games configuration (`gpu_qwen3_games` without a model path and with the
    /// spec's 8 attempts per slot).
    fn default() -> Self {
        Self {
            run: RunSection::default(),
            model: ModelSection::default(),
            curriculum: CurriculumSection::default(),
            corpus: CorpusSection::default(),
            memory: MemorySection::default(),
            designer: DesignerSection::default(),
            hint: HintSection::default(),
            agent: AgentSection::default(),
            grpo: GrpoSection::default(),
            sandbox: SandboxSection::default(),
            metrics: MetricsSection::default(),
            ablation: AblationSection::default(),
            eval: EvalSection::default(),
            spice: SpiceSection::default(),
            vllm: VllmSection::default(),
        }
    }
}

impl RunConfig {
    /// Parses TOML text and validates it; missing keys take the spec's defaults.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let cfg = check::parse(text)?;
        let issues = cfg.validate();
        if issues.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError::Invalid(issues))
        }
    }

    /// Every problem of this configuration (empty when it is valid).
    pub fn validate(&self) -> Vec<ConfigIssue> {
        check::validate(self)
    }

    /// The configuration as TOML text (every key written; `from_toml_str` reads it back).
    pub fn to_toml(&self) -> String {
        // Serialising plain structs of numbers, strings and lists cannot fail.
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot serialise: {e}\n"))
    }

    /// The configuration as JSON (what `RunStarted.config` carries and the backend stores).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// k for `kind` (spec 1: 4 for games, 8 for tool use).
    pub fn regenerate_every(&self, kind: EnvKind) -> u64 {
        match kind {
            EnvKind::Game => self.curriculum.game_regenerate_every,
            EnvKind::ToolUse => self.curriculum.tool_use_regenerate_every,
        }
    }

    /// GPUs a job of this run needs at least: the trainer's (`model.device`, [`device_gpus`];
    /// one per rank of `run.ranks` on CUDA)
    /// or its started vLLM servers' split ([`VllmSection::job_gpus`]; the servers' indices
    /// leave out the trainer's device), whichever is more; 0 = whatever the executor gives
    /// every job.
    pub fn job_gpus(&self) -> u32 {
        // Ranks on GPUs take one each (`run.ranks` with model.device = "cuda").
        let trainer = match device_gpus(&self.model.device).unwrap_or(0) {
            0 => 0,
            n => n.max(self.run.ranks),
        };
        self.vllm
            .job_gpus(self.model.rollout == RolloutBackend::Vllm)
            .max(trainer)
    }

    /// When `step` starts a regeneration of `kind`: its index and the designer slots
    /// (each active skill repeated `envs_per_skill` times, skill-major; with the two-skill
    /// curriculum the run's `active_game_skills x envs_per_skill` environments are split between
    /// the two skills, 24 = 2 x 12 as in the reference). `None` between
    /// regenerations, when the kind is not in `curriculum.kinds`, or for fixed-env runs.
    pub fn regeneration_at(
        &self,
        kind: EnvKind,
        step: u64,
    ) -> Option<(u64, Vec<&'static crate::skills::Skill>)> {
        if self.is_fixed_env() || !self.curriculum.kinds.contains(&kind) {
            return None;
        }
        let k = self.regenerate_every(kind).max(1);
        if !step.is_multiple_of(k) {
            return None;
        }
        let regeneration = step / k;
        let active = match kind {
            EnvKind::Game => self.curriculum.active_game_skills,
            EnvKind::ToolUse => self.curriculum.active_tool_use_skills,
        };
        let skills = crate::skills::active_skills(
            kind,
            regeneration,
            active,
            self.ablation.two_skill_curriculum,
        );
        let per_skill = if self.ablation.two_skill_curriculum && kind == EnvKind::Game {
            // Reference: 24 games per rollout over SKILLS_PER_REGEN=2 skills.
            (active * self.curriculum.envs_per_skill)
                .div_ceil(crate::skills::TWO_SKILL_CURRICULUM.len())
        } else {
            self.curriculum.envs_per_skill
        };
        let slots = skills
            .into_iter()
            .flat_map(|s| std::iter::repeat_n(s, per_skill))
            .collect();
        Some((regeneration, slots))
    }

    /// Corpus truncation for `kind` (spec 2: 6,000 words for games, 4,000 for tool use).
    pub fn corpus_max_words(&self, kind: EnvKind) -> usize {
        match kind {
            EnvKind::Game => self.corpus.game_max_words,
            EnvKind::ToolUse => self.corpus.tool_use_max_words,
        }
    }

    /// Characters of an environment's code the hint call reads (`hint.code_chars`, where 0
    /// means the whole program).
    pub fn hint_code_limit(&self) -> usize {
        match self.hint.code_chars {
            0 => usize::MAX,
            n => n,
        }
    }

    /// Whether the checkpoint of `step` is due for an automatic evaluation (`eval` section).
    pub fn eval_due(&self, step: u64) -> bool {
        let every = self.eval.every_steps;
        every > 0
            && if step == 0 {
                self.eval.base_model
            } else {
                step.is_multiple_of(every) || step == self.run.steps
            }
    }

    /// True when the run is fixed-env GRPO (no designer at all): a pool directory or RLVE's.
    pub fn is_fixed_env(&self) -> bool {
        self.ablation.fixed_env_pool.is_some() || self.ablation.rlve
    }

    /// True when designer samples are trained (not fixed-env, not frozen, not another model).
    /// In a SPICE run the designer is the challenger.
    pub fn trains_designer(&self) -> bool {
        !self.is_fixed_env() && !self.ablation.frozen_designer && self.designer.model_path.is_none()
    }

    /// True for a SPICE run (`run.algorithm = "spice"`).
    pub fn is_spice(&self) -> bool {
        self.run.algorithm == Algorithm::Spice
    }

    /// The temperature every trained sample was drawn at, so the trainer's log-probs match
    /// the sampler's: the agent's, or both SPICE roles'.
    pub fn train_temperature(&self) -> f64 {
        if self.is_spice() {
            self.spice.temperature
        } else {
            self.agent.temperature
        }
    }

    /// Parameters of the designer reward, for `reward::designer_reward_with`.
    pub fn reward_params(&self) -> crate::reward::RewardParams {
        let d = &self.designer;
        crate::reward::RewardParams {
            regret_scale: d.regret_scale,
            regret_weight: d.regret_weight,
            plateau_weight: d.plateau_weight,
            plateau_low: d.plateau.low,
            plateau_high: d.plateau.high,
            plateau_ramp: d.plateau.ramp,
            invalid_reward: d.invalid_reward,
            loss_weight_cap: d.loss_weight_cap,
            plateau_on_return: d.plateau_reads == PlateauReads::MeanReturn,
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
