//! The launch form (`/runs/new`): its presets, its fields and its submission.
//!
//! The fields are walked from `RunConfig`'s JSON, so every key of the configuration is on the
//! form; [`HELP`] gives each one its documentation (a test keeps the two in step) and the
//! order of the struct declarations. A submission becomes JSON with the types of
//! `RunConfig::default()` (a field that does not parse gets its own message), is deserialised
//! and checked with `RunConfig::validate`, and each `ConfigIssue` goes beside the field its key
//! path names. A valid form creates the run through the API handler (roles, audit, the same
//! checks); an invalid one renders the page again with what was typed, through the request
//! extension [`LaunchDraft`] that `Dashboard::launch` answers from.

use crate::AppState;
use crate::api::runs::{CreateRun, EXECUTORS, create};
use crate::auth::AuthUser;
use crate::error::{ApiJson, ApiPath};
use axum::extract::State;
use serde_json::{Map, Value};
use spade::config::{ConfigError, RunConfig};
use spade_app::dto::{self, ConfigField, ConfigSection, FieldKind, LaunchForm};
use spade_db::{TeamScope, teams};
use std::collections::{BTreeMap, BTreeSet};

/// A named starting point of the form.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    pub key: &'static str,
    pub label: &'static str,
    pub description: &'static str,
    pub build: fn() -> RunConfig,
}

/// The preset a fresh form starts from: the one that runs on any machine.
pub const DEFAULT_PRESET: &str = "tiny_cpu_demo";

/// Where the fixed-env baseline preset reads its pool (the hand-written seed library; relative
/// to the worker's working directory, so people usually change it).
const SEED_POOL: &str = "envs/seed";

/// The presets: the tiny CPU demo, the paper's two GPU runs (games, tool use: separate runs, as
/// the reference's `cmd/games/` and `cmd/tool_use/`), and the games run with each baseline or
/// ablation of the spec ("Baselines and ablations a run can choose").
pub fn presets() -> Vec<Preset> {
    fn gpu_with(f: fn(&mut RunConfig)) -> RunConfig {
        let mut c = RunConfig::gpu_qwen3_games();
        f(&mut c);
        c
    }
    vec![
        Preset {
            key: "tiny_cpu_demo",
            label: "Tiny CPU demo",
            description: "The project's tiny model on CPU: games only, 6 steps, finishes in minutes.",
            build: RunConfig::tiny_cpu_demo,
        },
        Preset {
            key: "tiny_serve_demo",
            label: "Tiny CPU demo, as scripts/serve runs it",
            description: "configs/tiny-demo.toml: the tiny demo without corpus documents or memory examples in the designer's prompt, which the tiny model needs to write valid environments.",
            // The file is compiled in and parsed by a test below; the fallback never shows.
            build: || {
                RunConfig::from_toml_str(crate::demo::DEMO_CONFIG)
                    .unwrap_or_else(|_| RunConfig::tiny_cpu_demo())
            },
        },
        Preset {
            key: "gpu_qwen3_games",
            label: "GPU Qwen3 (SPADE, games)",
            description: "The paper's games run: a local Qwen3 checkpoint, 3 of 6 game skills x 8 = 24 environments every 4 steps, 8 no-hint plays each per step, designer loss weight 32, 5 attempts per slot.",
            build: RunConfig::gpu_qwen3_games,
        },
        Preset {
            key: "gpu_qwen3_tool_use",
            label: "GPU Qwen3 (SPADE, tool use)",
            description: "The paper's tool-use run: a local Qwen3 checkpoint, all 6 tool-use skills x 4 = 24 environments every 8 steps, 8 no-hint plays each per step, designer loss weight 50, 5 attempts per slot.",
            build: RunConfig::gpu_qwen3_tool_use,
        },
        Preset {
            key: "baseline_fixed_env",
            label: "Baseline: fixed-env GRPO",
            description: "GPU Qwen3 playing a frozen pool of environments (the seed library), 24 drawn per step without replacement; only the agent trains.",
            build: || gpu_with(|c| c.ablation.fixed_env_pool = Some(SEED_POOL.into())),
        },
        Preset {
            key: "baseline_rlve",
            label: "Baseline: fixed-env RLVE",
            description: "GPU Qwen3 agent-only GRPO on RLVE's 400 verifiable environments (rlve-gym, in the sandbox) with RLVE's adaptive difficulty per environment, 24 drawn per step: the paper's strongest baseline.",
            build: || gpu_with(|c| c.ablation.rlve = true),
        },
        Preset {
            key: "baseline_stronger_designer",
            label: "Baseline: frozen stronger designer",
            description: "GPU Qwen3 agent training on environments, hints and verdicts written by a second, frozen checkpoint (designer.model_path; set it to the stronger model's directory): the paper's stronger-frozen-model baseline and SPICE's strong challenger.",
            build: || gpu_with(|c| c.designer.model_path = Some("models/Qwen3-8B".into())),
        },
        Preset {
            key: "spice",
            label: "SPICE (corpus challenger and reasoner)",
            description: "The predecessor, SPICE (arXiv 2510.24684), on a Qwen3 checkpoint: a challenger writes a multiple-choice or free-form question from each of 128 corpus documents a step, the reasoner answers each 8 times without the document; variance reward for the challenger, DrGRPO for both roles, temperature 1.0.",
            build: RunConfig::gpu_qwen3_spice,
        },
        Preset {
            key: "spice_strong_challenger",
            label: "SPICE: strong challenger",
            description: "SPICE with the questions written by a second, frozen checkpoint (designer.model_path; set it to the stronger model's directory): only the reasoner trains, SPICE's strong-challenger baseline.",
            build: || {
                let mut c = RunConfig::gpu_qwen3_spice();
                c.designer.model_path = Some("models/Qwen3-8B".into());
                c
            },
        },
        Preset {
            key: "ablation_frozen_designer",
            label: "Ablation: frozen designer",
            description: "GPU Qwen3 generating environments online without designer updates.",
            build: || gpu_with(|c| c.ablation.frozen_designer = true),
        },
        Preset {
            key: "ablation_no_memory",
            label: "Ablation: no memory",
            description: "GPU Qwen3 without memory examples in the designer's prompts.",
            build: || gpu_with(|c| c.ablation.no_memory = true),
        },
        Preset {
            key: "ablation_no_corpus",
            label: "Ablation: no corpus",
            description: "GPU Qwen3 without a corpus document in the designer's prompts.",
            build: || gpu_with(|c| c.ablation.no_corpus = true),
        },
        Preset {
            key: "ablation_two_skill",
            label: "Ablation: two-skill curriculum",
            description: "GPU Qwen3 with only two game skills, Mathematical Reasoning and Pattern Recognition, 12 environments each.",
            build: || gpu_with(|c| c.ablation.two_skill_curriculum = true),
        },
        Preset {
            key: "ablation_ema",
            label: "Ablation: EMA learning potential",
            description: "GPU Qwen3 with the EMA learning-potential designer reward instead of regret + plateau.",
            build: || gpu_with(|c| c.ablation.ema_learning_potential = true),
        },
    ]
}

fn preset(key: &str) -> Preset {
    let all = presets();
    all.iter()
        .find(|p| p.key == key)
        .or_else(|| all.iter().find(|p| p.key == DEFAULT_PRESET))
        .copied()
        .unwrap_or(all[0])
}

/// Section titles, in the order of `RunConfig`'s fields.
const SECTIONS: &[(&str, &str)] = &[
    ("run", "Run length and seed"),
    ("model", "Model"),
    ("curriculum", "Curriculum"),
    ("corpus", "Corpus"),
    ("memory", "Memory"),
    ("designer", "Designer"),
    ("hint", "Hint"),
    ("agent", "Agent"),
    ("grpo", "GRPO"),
    ("sandbox", "Sandbox"),
    ("metrics", "Metrics"),
    ("ablation", "Baselines and ablations"),
    ("spice", "SPICE (run.algorithm = \"spice\")"),
];

use spade::config::MODEL_PRESETS;
/// Values of `curriculum.kinds` (`spade::EnvKind`).
const ENV_KINDS: [&str; 2] = ["game", "tool_use"];

/// Documentation of every key path (from the doc comments of `spade::config`), in declaration
/// order.
const HELP: &[(&str, &str)] = &[
    ("run.steps", "Rollout steps (spec, headline results: 400)."),
    (
        "run.seed",
        "Seed of every random choice of the run (corpus, memory, sampling).",
    ),
    (
        "run.checkpoint_every",
        "Keep the weights as a checkpoint (checkpoints/step-N) every this many steps (and always at the end).",
    ),
    (
        "run.weights_every",
        "Write the resume point (weights and state.json) every this many steps, at every kept checkpoint and at the end. A step's reports are delivered with the resume point that includes it, so between two writes they wait, and a crash costs the steps since the last write (they run again on resume; none of their reports had been delivered).",
    ),
    (
        "run.optimizer_every",
        "Write the optimiser state (AdamW's moments, and the float32 masters of bf16 weights: 8 to 12 bytes per parameter) every this many steps (with the first resume point written at or after each multiple of it, see weights_every, and at the end); the resume point carries the last one between. A resume between two writes continues with the moments of the last one (and, for bf16 weights, from the weights of its own step).",
    ),
    (
        "run.checkpoint_keep",
        "Checkpoints kept: the last this many (0 = all of them).",
    ),
    (
        "run.algorithm",
        "What the run trains: \"spade\" (designer and agent on environments the designer writes, with the baselines and ablations below) or \"spice\" (the predecessor SPICE: a challenger writes questions from corpus documents, a reasoner answers them; see the SPICE section).",
    ),
    (
        "model.path",
        "A local Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json). Relative paths are relative to the worker's working directory.",
    ),
    (
        "model.preset",
        "\"tiny\" (the project's own tiny Qwen3-shaped model) or \"qwen3\" (a real checkpoint).",
    ),
    (
        "model.designer_max_new_tokens",
        "Most tokens the designer may write for one environment.",
    ),
    ("model.hint_max_new_tokens", "Most tokens of one hint."),
    (
        "model.agent_max_new_tokens",
        "Most tokens of one agent turn.",
    ),
    (
        "model.max_context",
        "Longest token sequence the policy is given (prompt and everything generated): an agent episode whose next turn would pass it ends truncated (the reference's context: 32,768).",
    ),
    (
        "model.rollout",
        "What serves generation: \"engine\" (continuous batching; every episode of a step at once, each keeping its KV cache between turns), \"sampler\" (one environment at a time, each turn prefilled again) or \"vllm\" (the [vllm] servers, weights synced after every update).",
    ),
    (
        "model.kv_cache_tokens",
        "KV-cache slots the engine may allocate (rows x slots per row, at least one context); Qwen3-4B takes 144 KiB a slot in bf16.",
    ),
    (
        "model.max_batch",
        "Most sequences the engine decodes at once.",
    ),
    (
        "curriculum.kinds",
        "Environment kinds the run generates: [\"game\"], [\"tool_use\"] or both (default games: the paper trains games and tool use as separate runs).",
    ),
    (
        "curriculum.game_regenerate_every",
        "Regenerate games every k steps (spec 1: k = 4).",
    ),
    (
        "curriculum.tool_use_regenerate_every",
        "Regenerate tool-use environments every k steps (spec 1: k = 8).",
    ),
    (
        "curriculum.active_game_skills",
        "Game skills active per regeneration, rotating over the six (spec 1: 3 of 6).",
    ),
    (
        "curriculum.active_tool_use_skills",
        "Tool-use skills active per regeneration (spec 1: all 6).",
    ),
    (
        "curriculum.envs_per_skill",
        "Environments generated per active skill (spec 1: 8, so 24 games).",
    ),
    (
        "corpus.path",
        "JSONL file with a text or orig_doc field per line; absent = the bundled corpus.",
    ),
    (
        "corpus.game_max_words",
        "Documents are truncated to this many words for games (spec 2: 6,000).",
    ),
    (
        "corpus.tool_use_max_words",
        "... and for tool use (spec 2: 4,000).",
    ),
    (
        "memory.capacity",
        "Records kept, newest last (spec 9: 200).",
    ),
    (
        "memory.code_chars",
        "Characters of code kept per record (spec 9: 2,000).",
    ),
    (
        "memory.positives",
        "Positive examples per prompt (spec 2: 2).",
    ),
    (
        "memory.negatives",
        "Negative examples per prompt (spec 2: 1).",
    ),
    (
        "memory.positive_pool_factor",
        "Positives are drawn from the top max(factor * n, min) records by regret (spec 2: max(3n, 10)), n = positives.",
    ),
    (
        "memory.positive_pool_min",
        "Positives are drawn from the top max(factor * n, min) records by regret (spec 2: max(3n, 10)), n = positives.",
    ),
    (
        "memory.positive_win_rate_low",
        "Eligible positives have a win rate in [low, high] (spec 2: [0.15, 0.85]).",
    ),
    (
        "memory.positive_win_rate_high",
        "Eligible positives have a win rate in [low, high] (spec 2: [0.15, 0.85]).",
    ),
    (
        "memory.negative_below",
        "Negatives have a win rate below negative_below or above negative_above (spec 2: < 0.1 or > 0.9).",
    ),
    (
        "memory.negative_above",
        "Negatives have a win rate below negative_below or above negative_above (spec 2: < 0.1 or > 0.9).",
    ),
    (
        "memory.match_by",
        "Which records a designer prompt's examples come from: \"skill\" (the slot's skill, as the reference's env_memory.py) or \"kind\" (every record of the same kind).",
    ),
    (
        "memory.seed_pool",
        "A pool (directory with pool.jsonl, or the file) whose scored environments start the memory of a new run. Absent = empty memory.",
    ),
    (
        "designer.attempts",
        "Attempts per environment slot (spec 2: 8; the reference's rollout and the paper presets: 5).",
    ),
    (
        "designer.temperature",
        "Sampling temperature (spec 5: 0.6 for both roles).",
    ),
    (
        "designer.regret_scale",
        "Regret is divided by this and clipped to [0, 1] (spec 7: 0.15).",
    ),
    (
        "designer.regret_weight",
        "Blend weights r = regret_weight * regret_norm + plateau_weight * plateau(w) (spec 7: 0.4 / 0.6).",
    ),
    (
        "designer.plateau_weight",
        "Blend weights r = regret_weight * regret_norm + plateau_weight * plateau(w) (spec 7: 0.4 / 0.6).",
    ),
    (
        "designer.plateau.low",
        "The designer's plateau: 1 on [low, high], linear to 0 over ramp on each side (spec 7: 0.4, 0.6, 0.25).",
    ),
    (
        "designer.plateau.high",
        "The designer's plateau: 1 on [low, high], linear to 0 over ramp on each side (spec 7: 0.4, 0.6, 0.25).",
    ),
    (
        "designer.plateau.ramp",
        "The designer's plateau: 1 on [low, high], linear to 0 over ramp on each side (spec 7: 0.4, 0.6, 0.25).",
    ),
    (
        "designer.invalid_reward",
        "Reward of an invalid environment or a step timeout (spec 7: -0.5).",
    ),
    (
        "designer.regret_timing",
        "Which no-hint plays the regret compares with the hint plays: \"matched\" (those of the regeneration step, the reference's default) or \"window\" (all of the window).",
    ),
    (
        "designer.train_rejected",
        "Train rejected attempts too, at invalid_reward (off: in the reference a failed attempt yields no designer sample).",
    ),
    (
        "designer.loss_weight_cap",
        "Cap of the designer loss weight min(n_agent_samples / n_designer_samples * k, cap) (spec 7: 50).",
    ),
    (
        "designer.self_judge",
        "Ask the policy whether a validated game works (spec, \"Validation\": on for real models, off for the tiny one).",
    ),
    (
        "designer.judge_temperature",
        "Sampling temperature of the self-judge's verdict (the reference's 0.3).",
    ),
    (
        "designer.judge_max_new_tokens",
        "Most tokens of the self-judge's reply (the reference's 2,048).",
    ),
    (
        "designer.model_path",
        "A second checkpoint (Hugging Face directory on the worker's machine) that writes the environments, hints and self-judge verdicts, frozen, while the agent trains alone: the paper's stronger frozen designer, SPICE's strong challenger. Empty: the policy plays both roles.",
    ),
    (
        "designer.ema.gamma_fast",
        "Per-skill fast average decay (spec: 0.98).",
    ),
    (
        "designer.ema.gamma_slow",
        "Per-skill slow average decay (spec: 0.85).",
    ),
    (
        "hint.temperature",
        "Sampling temperature of the hint call (spec 4: 0.3).",
    ),
    (
        "hint.plays",
        "Plays with the hint per environment, once at generation (spec 5: 16).",
    ),
    (
        "hint.code_chars",
        "Characters of the environment's code the hint call reads; 0 = the whole program (the spec's hint writer reads the accepted code).",
    ),
    ("agent.temperature", "Sampling temperature (spec 5: 0.6)."),
    ("agent.max_turns", "Turn limit of one play (spec 5: 25)."),
    (
        "agent.global_batch",
        "No-hint plays per step over all environments: ceil(global_batch / n_envs) per environment (spec 5: 192, so 8 for 24 environments).",
    ),
    (
        "agent.max_episode_tokens",
        "Tokens the agent may write over a whole episode, all turns together (the reference's agent budget: 8,192); the episode ends truncated when its next turn would pass it.",
    ),
    (
        "agent.concurrency",
        "Episodes played at once: sandbox runners, and rows of one sampling batch.",
    ),
    ("grpo.lr", "Learning rate (spec 8: 1e-6 for 4B-30B models)."),
    (
        "grpo.clip_low",
        "Asymmetric clip range (spec 8: 0.2 low, 0.28 high).",
    ),
    (
        "grpo.clip_high",
        "Asymmetric clip range (spec 8: 0.2 low, 0.28 high).",
    ),
    (
        "grpo.kl_coef",
        "KL coefficient (spec 8: 0 by default, 0.005 as an option).",
    ),
    (
        "grpo.tis_cap",
        "Cap of the truncated importance-sampling ratio of delayed designer samples (spec 8: 2).",
    ),
    (
        "grpo.micro_batch_tokens",
        "Tokens per forward/backward pass: samples are packed into micro-batches of at most this many tokens (a longer sample gets a micro-batch of its own); gradients accumulate.",
    ),
    (
        "grpo.logprob_chunk_tokens",
        "Positions per chunk of the language-model head when log-probs are computed, so the logits of a whole micro-batch never exist at once.",
    ),
    (
        "grpo.activation_recompute",
        "Recompute each layer's activations in the backward pass (less memory, about a third more compute).",
    ),
    (
        "grpo.router_aux_coef",
        "Coefficient of the router load-balancing loss of a Qwen3-MoE model; 0 = off, as RL fine-tuning usually runs. Dense models ignore it.",
    ),
    (
        "sandbox.step_timeout_s",
        "Per-call limit of step (spec: 30 s).",
    ),
    (
        "sandbox.validation_timeout_s",
        "Budget of one validation (spec: 60 s).",
    ),
    (
        "sandbox.max_observation_chars",
        "Longest observation accepted (spec: 20,000 characters).",
    ),
    (
        "metrics.vendi_window_steps",
        "Vendi score over the environments of the last this many steps (spec: 40).",
    ),
    (
        "metrics.vendi_subsample",
        "Environments per Vendi subsample (spec: 24).",
    ),
    (
        "metrics.vendi_draws",
        "Subsamples drawn; mean and s.d. are reported (spec: 12).",
    ),
    (
        "metrics.vendi_kernel",
        "The Vendi score's similarity: \"ngram\" (word unigram and bigram counts of the code, the Vendi authors' text kernel), \"policy\" (the policy's mean-pooled hidden states) or \"sentence\" (a BERT or RoBERTa sentence encoder from metrics.vendi_encoder, as the Vendi authors embed text); named in the metric (vendi_ngram_mean).",
    ),
    (
        "metrics.vendi_encoder",
        "Directory of the sentence encoder for vendi_kernel = \"sentence\" (config.json, safetensors weights, tokenizer.json), on the machine the worker runs on.",
    ),
    (
        "metrics.learnable_low",
        "Learnable: agent win rate in [low, high] (spec: [0.2, 0.8]).",
    ),
    (
        "metrics.learnable_high",
        "Learnable: agent win rate in [low, high] (spec: [0.2, 0.8]).",
    ),
    (
        "metrics.easy_above",
        "Easy above this win rate, hard below hard_below (spec: 0.8 and 0.2).",
    ),
    (
        "metrics.hard_below",
        "Easy above this win rate, hard below hard_below (spec: 0.8 and 0.2).",
    ),
    (
        "ablation.fixed_env_pool",
        "Fixed-env GRPO: play the environments of this pool (a pool directory, its pool.jsonl, or a directory of .py files), train only the agent. Absent = off.",
    ),
    (
        "ablation.fixed_env_envs_per_step",
        "Fixed-env GRPO: environments drawn from the pool per step, without replacement until the pool is exhausted (the reference's 24); 0 = every pool environment every step.",
    ),
    (
        "ablation.rlve",
        "The fixed-environment RLVE baseline: fixed-env GRPO on RLVE's 400 verifiable environments (rlve-gym in the sandbox's venv) with RLVE's adaptive difficulty instead of a pool; fixed_env_envs_per_step of them per step, answers in \\boxed{}. Needs \"game\" in curriculum.kinds.",
    ),
    (
        "ablation.frozen_designer",
        "Online generation without designer updates.",
    ),
    (
        "ablation.no_memory",
        "No memory examples in designer prompts.",
    ),
    (
        "ablation.no_corpus",
        "No corpus document in designer prompts.",
    ),
    (
        "ablation.two_skill_curriculum",
        "Only two game skills, always the same two: Mathematical Reasoning and Pattern Recognition, sharing the regeneration's environments (24 = 2 x 12, the reference's ablation).",
    ),
    (
        "ablation.ema_learning_potential",
        "Designer reward = EMA learning potential instead of regret + plateau.",
    ),
    (
        "eval.every_steps",
        "Evaluate the checkpoints whose step is a multiple of this, and the last one (0 = only \
         when asked from the run page). A multiple of run.checkpoint_every.",
    ),
    (
        "eval.base_model",
        "With every_steps, also evaluate the model the run starts from (the base-model row).",
    ),
    (
        "eval.suites",
        "Held-out suites each due checkpoint is evaluated on (reasoning-gym hard categories, \
         or the seed environments' win rate).",
    ),
    (
        "eval.limit",
        "Items per task at most (questions per reasoning-gym dataset).",
    ),
    ("eval.max_new_tokens", "Tokens per answer."),
    (
        "spice.tasks_per_step",
        "Documents drawn per step, one task kept per document (SPICE: batch B = 128).",
    ),
    (
        "spice.group_size",
        "Reasoner answers per task (SPICE: G = 8); also K of the challenger's variance reward.",
    ),
    (
        "spice.max_attempts",
        "Challenger attempts per document until a task parses (SPICE: up to N = 1,024).",
    ),
    (
        "spice.max_document_tokens",
        "Longest document segment the challenger reads, in tokens (SPICE: 5,992); shorter than model.max_context.",
    ),
    (
        "spice.multiple_choice_share",
        "Share of documents asked for a multiple-choice task (four options), the rest free-form (integer, expression or string); SPICE mixes both formats.",
    ),
    (
        "spice.invalid_reward",
        "The challenger's reward for an attempt that is not a valid task (SPICE: rho = -0.1).",
    ),
    (
        "spice.temperature",
        "Sampling temperature of both SPICE roles, and the trainer's (SPICE: 1.0).",
    ),
    (
        "vllm.urls",
        "With model.rollout = \"vllm\": base URLs of running vLLM servers (comma-separated), used data-parallel; each episode stays on one server. They must run vLLM 0.32 with VLLM_SERVER_DEV_MODE=1, --logprobs-mode processed_logprobs and (on CPU) --no-enable-chunked-prefill, and read vllm.weights_dir.",
    ),
    (
        "vllm.start",
        "vLLM servers the worker starts itself (vllm serve beside it on 127.0.0.1); 0 = use vllm.urls.",
    ),
    (
        "vllm.port",
        "First port of the servers the worker starts (then +1 each).",
    ),
    (
        "vllm.venv",
        "Virtual environment whose bin/vllm starts them; empty = $SPADE_CACHE/venv-vllm (scripts/setup --vllm).",
    ),
    (
        "vllm.threads",
        "CPU threads of each started server (OMP_NUM_THREADS); 0 = the worker's.",
    ),
    (
        "vllm.kv_cache_gib",
        "KV-cache GiB of each started server on CPU (VLLM_CPU_KVCACHE_SPACE).",
    ),
    (
        "vllm.gpus",
        "CUDA devices the started servers share out, in order (comma-separated): server i gets the i-th run of vllm.tensor_parallel of them as CUDA_VISIBLE_DEVICES. Leave out the trainer's device. Empty = no split (one server, or CPU).",
    ),
    (
        "vllm.tensor_parallel",
        "GPUs per started server (its --tensor-parallel-size).",
    ),
    (
        "vllm.weights_dir",
        "Where the policy is written after every update for the servers to load (a path every server reads; /dev/shm when colocated); empty = the run's state directory.",
    ),
    (
        "vllm.startup_timeout_s",
        "Seconds to wait for every server's /health before the first step.",
    ),
    (
        "vllm.request_timeout_s",
        "Seconds one completion may take before its server counts as hung (the run fails).",
    ),
];

/// A refused submission, put into the request's extensions for the page render that follows.
#[derive(Debug, Clone)]
pub struct LaunchDraft(pub LaunchForm);

/// The leaves of a configuration's JSON, by key path.
fn leaves(v: &Value) -> BTreeMap<String, Value> {
    fn walk(v: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(v, &path, out);
                }
            }
            other => {
                out.insert(prefix.to_owned(), other.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(v, "", &mut out);
    out
}

/// The key paths in form order: [`HELP`]'s order, then any path it does not know (so a new
/// configuration key is on the form even before it is documented here).
fn ordered_paths(types: &BTreeMap<String, Value>) -> Vec<String> {
    let mut paths: Vec<String> = HELP
        .iter()
        .map(|(p, _)| (*p).to_owned())
        .filter(|p| types.contains_key(p))
        .collect();
    paths.extend(
        types
            .keys()
            .filter(|p| !HELP.iter().any(|(h, _)| h == p))
            .cloned(),
    );
    paths
}

/// How a path is edited, from its value in `RunConfig::default()` (where optional paths are
/// null).
fn kind_of(path: &str, template: &Value) -> FieldKind {
    match template {
        Value::Bool(_) => FieldKind::Bool,
        Value::Number(n) if n.is_f64() => FieldKind::Number,
        Value::Number(_) => FieldKind::Integer,
        Value::Null => FieldKind::Text { optional: true },
        Value::Array(_) if path == "curriculum.kinds" => {
            FieldKind::Multi(ENV_KINDS.map(str::to_owned).to_vec())
        }
        // The named suites as checkboxes; `qa:` and `envs:` paths go through the TOML mode.
        Value::Array(_) if path == "eval.suites" => FieldKind::Multi(
            spade::suites::NAMED
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        ),
        Value::String(_) if path == "model.preset" => {
            FieldKind::Choice(MODEL_PRESETS.iter().map(|s| (*s).to_owned()).collect())
        }
        Value::String(_) if path == "designer.regret_timing" => {
            FieldKind::Choice(vec!["matched".to_owned(), "window".to_owned()])
        }
        Value::String(_) if path == "metrics.vendi_kernel" => FieldKind::Choice(vec![
            "ngram".to_owned(),
            "policy".to_owned(),
            "sentence".to_owned(),
        ]),
        Value::String(_) if path == "run.algorithm" => {
            FieldKind::Choice(vec!["spade".to_owned(), "spice".to_owned()])
        }
        Value::String(_) if path == "model.rollout" => FieldKind::Choice(vec![
            "engine".to_owned(),
            "sampler".to_owned(),
            "vllm".to_owned(),
        ]),
        Value::String(_) if path == "memory.match_by" => {
            FieldKind::Choice(vec!["skill".to_owned(), "kind".to_owned()])
        }
        _ => FieldKind::Text { optional: false },
    }
}

/// A JSON leaf as the form shows it.
fn display(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        // Rust's shortest round-trip form, without exponents (1e-6 -> 0.000001), which
        // `<input type=number>` accepts.
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        Value::Array(items) => items.iter().map(display).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

fn label_of(path: &str) -> String {
    let rest = path.split_once('.').map_or(path, |(_, r)| r);
    let words = rest
        .split(['_', '.'])
        .map(|w| match w {
            "ema" => "EMA",
            "kl" => "KL",
            "tis" => "TIS",
            "lr" => "learning rate",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut c = words.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => words,
    }
}

/// The form's sections: `values` (what is shown) by path, `preset` the preset's values, and
/// `errors` by path.
fn sections(
    values: &BTreeMap<String, String>,
    preset: &BTreeMap<String, Value>,
    errors: &BTreeMap<String, Vec<String>>,
) -> Vec<ConfigSection> {
    let types = leaves(&RunConfig::default().to_json());
    let mut out: Vec<ConfigSection> = Vec::new();
    for path in ordered_paths(&types) {
        let key = path.split('.').next().unwrap_or_default().to_owned();
        let field = ConfigField {
            label: label_of(&path),
            help: HELP
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, h)| (*h).to_owned())
                .unwrap_or_default(),
            kind: kind_of(&path, &types[&path]),
            value: values.get(&path).cloned().unwrap_or_default(),
            default: preset.get(&path).map(display).unwrap_or_default(),
            errors: errors.get(&path).cloned().unwrap_or_default(),
            path,
        };
        match out.iter_mut().find(|s| s.key == key) {
            Some(s) => s.fields.push(field),
            None => out.push(ConfigSection {
                title: SECTIONS
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map_or_else(|| key.clone(), |(_, t)| (*t).to_owned()),
                key,
                fields: vec![field],
            }),
        }
    }
    out
}

/// Projects of the teams where `auth` may create runs (editor or owner).
async fn launchable_projects(
    state: &AppState,
    auth: &AuthUser,
) -> Result<Vec<dto::ProjectOption>, spade_db::DbError> {
    let mut out = Vec::new();
    for t in teams::teams_of(&state.db, auth.user.id).await? {
        if !t.role.can_edit() {
            continue;
        }
        let scope = TeamScope::for_member(&state.db, auth.user.id, t.id).await?;
        for p in teams::projects(&state.db, &scope).await? {
            out.push(dto::ProjectOption {
                id: p.id,
                team: t.name.clone(),
                name: p.name,
            });
        }
    }
    Ok(out)
}

/// A fresh form for `preset_key` (unknown keys fall back to the default preset).
pub async fn fresh_form(
    state: &AppState,
    auth: &AuthUser,
    preset_key: Option<&str>,
    project: Option<i64>,
) -> Result<LaunchForm, spade_db::DbError> {
    let p = preset(preset_key.unwrap_or(DEFAULT_PRESET));
    let cfg = (p.build)();
    let preset_values = leaves(&cfg.to_json());
    let values = preset_values
        .iter()
        .map(|(k, v)| (k.clone(), display(v)))
        .collect();
    let projects = launchable_projects(state, auth).await?;
    let project = project
        .filter(|id| projects.iter().any(|p| p.id == *id))
        .or_else(|| projects.first().map(|p| p.id));
    Ok(LaunchForm {
        projects,
        project,
        presets: presets()
            .iter()
            .map(|p| dto::PresetDto {
                key: p.key.into(),
                label: p.label.into(),
                description: p.description.into(),
            })
            .collect(),
        preset: p.key.into(),
        name: format!("{}-{}", p.key.replace('_', "-"), cfg.run.seed),
        executors: EXECUTORS.map(str::to_owned).to_vec(),
        executor: EXECUTORS[0].into(),
        sections: sections(&values, &preset_values, &BTreeMap::new()),
        toml: cfg.to_toml(),
        field_errors: Vec::new(),
        errors: Vec::new(),
        toml_submitted: false,
    })
}

/// Lists shown as one comma-separated text field: text, or whole numbers.
const LISTS: &[(&str, ListItem)] = &[
    ("vllm.urls", ListItem::Text),
    ("vllm.gpus", ListItem::Whole),
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum ListItem {
    Text,
    Whole,
}

fn list_item(path: &str) -> Option<ListItem> {
    LISTS.iter().find(|(p, _)| *p == path).map(|(_, k)| *k)
}

/// One comma-separated field as its list (empty items dropped: a trailing comma is harmless).
fn parse_list(item: ListItem, raw: &[String]) -> Result<Value, String> {
    let joined = raw.join(",");
    let items = joined.split(',').map(str::trim).filter(|u| !u.is_empty());
    match item {
        ListItem::Text => Ok(Value::Array(
            items.map(|u| Value::String(u.to_owned())).collect(),
        )),
        ListItem::Whole => items
            .map(|u| {
                u.parse::<u64>()
                    .map(Value::from)
                    .map_err(|_| format!("must be whole numbers separated by commas, got \"{u}\""))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
    }
}

/// Parses one submitted value as the type of its path; `Err` is the message for the field.
fn parse_value(kind: &FieldKind, raw: &[String]) -> Result<Value, String> {
    let one = raw.first().map(|s| s.trim()).unwrap_or_default();
    match kind {
        FieldKind::Bool => Ok(Value::Bool(raw.iter().any(|v| v == "true"))),
        FieldKind::Multi(_) => Ok(Value::Array(
            raw.iter().map(|v| Value::String(v.clone())).collect(),
        )),
        FieldKind::Integer => {
            if let Ok(u) = one.parse::<u64>() {
                Ok(Value::from(u))
            } else if let Ok(i) = one.parse::<i64>() {
                Ok(Value::from(i))
            } else {
                Err(format!("must be a whole number, got \"{one}\""))
            }
        }
        FieldKind::Number => one
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("must be a number, got \"{one}\"")),
        FieldKind::Text { optional: true } if one.is_empty() => Ok(Value::Null),
        FieldKind::Text { .. } | FieldKind::Choice(_) => Ok(Value::String(one.to_owned())),
    }
}

/// Sets `path` (dotted) in a JSON object tree.
fn insert_path(root: &mut Map<String, Value>, path: &str, v: Value) {
    match path.split_once('.') {
        None => {
            root.insert(path.to_owned(), v);
        }
        Some((head, rest)) => {
            let child = root
                .entry(head.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = child {
                insert_path(m, rest, v);
            }
        }
    }
}

/// The field a validation issue belongs to: `curriculum.kinds[1]` -> `curriculum.kinds`.
fn field_path(issue_path: &str) -> &str {
    issue_path.split('[').next().unwrap_or(issue_path)
}

/// What a submission amounts to: a configuration, or the messages by key path.
#[derive(Debug)]
pub enum Checked {
    Valid(Box<RunConfig>),
    Invalid {
        /// What the form shows again, by path.
        values: BTreeMap<String, String>,
        errors: BTreeMap<String, Vec<String>>,
        /// Messages that name no field of the form.
        general: Vec<String>,
    },
}

/// Checks the configuration fields of a submitted form (pairs in order; a checkbox group
/// repeats its name).
pub fn check_fields(pairs: &[(String, String)]) -> Checked {
    let types = leaves(&RunConfig::default().to_json());
    let mut by_path: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (k, v) in pairs {
        by_path.entry(k.as_str()).or_default().push(v.clone());
    }
    let mut root = Map::new();
    let mut values = BTreeMap::new();
    let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, template) in &types {
        let kind = kind_of(path, template);
        let raw = by_path.get(path.as_str()).cloned().unwrap_or_default();
        values.insert(
            path.clone(),
            match kind {
                FieldKind::Bool => raw.iter().any(|v| v == "true").to_string(),
                _ => raw.join(","),
            },
        );
        // Checkboxes say "off" by being absent; any other field must be on the form.
        // An empty list of text values may come as no value at all.
        if raw.is_empty()
            && !matches!(kind, FieldKind::Bool | FieldKind::Multi(_))
            && list_item(path).is_none()
        {
            errors
                .entry(path.clone())
                .or_default()
                .push("missing from the form".into());
            // The default stands in, so the other fields still get their range checks.
            insert_path(&mut root, path, template.clone());
            continue;
        }
        let parsed = if let Some(item) = list_item(path) {
            // A list is one text field, comma-separated, as it is displayed.
            parse_list(item, &raw)
        } else {
            parse_value(&kind, &raw)
        };
        match parsed {
            Ok(v) => insert_path(&mut root, path, v),
            Err(msg) => {
                errors.entry(path.clone()).or_default().push(msg);
                insert_path(&mut root, path, template.clone());
            }
        }
    }
    // Fields that did not parse hold their defaults below: every other field is still checked
    // in this same round (type and range errors came in two rounds), but no rule is reported
    // about a default the user never typed.
    let unparsed: BTreeSet<String> = errors.keys().cloned().collect();
    let cfg: RunConfig = match serde_path_to_error::deserialize(Value::Object(root)) {
        Ok(c) => c,
        Err(e) => {
            let path = e.path().to_string();
            errors
                .entry(field_path(&path).to_owned())
                .or_default()
                .push(e.inner().to_string());
            return Checked::Invalid {
                values,
                errors,
                general: Vec::new(),
            };
        }
    };
    let issues = cfg.validate();
    if issues.is_empty() && errors.is_empty() {
        return Checked::Valid(Box::new(cfg));
    }
    let mut general = Vec::new();
    for issue in issues {
        // The backticks around key paths read as noise in a form.
        let msg = issue.to_string().replace('`', "");
        let mut placed = false;
        let mut paths = vec![field_path(issue.path()).to_owned()];
        if let spade::config::ConfigIssue::Conflict { other, .. } = &issue {
            paths.push(field_path(other).to_owned());
        }
        if paths.iter().any(|p| unparsed.contains(p)) {
            continue;
        }
        for p in paths {
            if types.contains_key(&p) {
                errors.entry(p).or_default().push(msg.clone());
                placed = true;
            }
        }
        if !placed {
            general.push(msg);
        }
    }
    Checked::Invalid {
        values,
        errors,
        general,
    }
}

/// The submitted form's fields that are not configuration keys.
#[derive(Debug, Default)]
struct Head {
    preset: String,
    name: String,
    project: String,
    executor: String,
    mode: String,
    config_toml: String,
}

fn head(pairs: &[(String, String)]) -> Head {
    let mut h = Head::default();
    for (k, v) in pairs {
        let slot = match k.as_str() {
            "preset" => &mut h.preset,
            "name" => &mut h.name,
            "project" => &mut h.project,
            "executor" => &mut h.executor,
            "mode" => &mut h.mode,
            "config_toml" => &mut h.config_toml,
            _ => continue,
        };
        *slot = v.clone();
    }
    h
}

/// Handles a submitted launch form: `Ok(run id)` when the run was created, else the form to
/// show again.
pub async fn submit(
    state: &AppState,
    auth: AuthUser,
    pairs: &[(String, String)],
) -> Result<i64, LaunchForm> {
    let h = head(pairs);
    let mut form = match fresh_form(state, &auth, Some(h.preset.as_str()), None).await {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "launch form: cannot list projects");
            let mut f = LaunchForm {
                projects: Vec::new(),
                project: None,
                presets: Vec::new(),
                preset: String::new(),
                name: String::new(),
                executors: Vec::new(),
                executor: String::new(),
                sections: Vec::new(),
                toml: String::new(),
                field_errors: Vec::new(),
                errors: Vec::new(),
                toml_submitted: false,
            };
            f.errors
                .push("the server could not load this page; try again shortly".into());
            return Err(f);
        }
    };
    let toml_mode = h.mode == "toml";
    form.toml_submitted = toml_mode;
    form.name = h.name.clone();
    form.executor = h.executor.clone();
    if !h.config_toml.trim().is_empty() {
        form.toml = h.config_toml.clone();
    }
    // Name, project and executor: the API checks them too; checked here to place the messages.
    let name = h.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        form.field_errors.push((
            "name".into(),
            "give the run a name of 1 to 200 characters".into(),
        ));
    }
    match h.project.parse::<i64>() {
        Ok(id) if form.projects.iter().any(|p| p.id == id) => form.project = Some(id),
        _ => form.field_errors.push((
            "project".into(),
            "choose a project of a team where you are an editor or owner".into(),
        )),
    }
    if !EXECUTORS.contains(&h.executor.as_str()) {
        form.field_errors.push((
            "executor".into(),
            format!("choose one of {}", EXECUTORS.join(", ")),
        ));
    }
    let preset_values = leaves(&(preset(&h.preset).build)().to_json());
    let request = if toml_mode {
        // Checked by the API handler, which names the key path of each problem.
        match RunConfig::from_toml_str(&h.config_toml) {
            Ok(_) => Some(CreateRun {
                name: name.to_owned(),
                config_toml: Some(h.config_toml.clone()),
                config: None,
                executor: h.executor.clone(),
            }),
            Err(ConfigError::Invalid(issues)) => {
                form.errors
                    .extend(issues.iter().map(|i| i.to_string().replace('`', "")));
                None
            }
            Err(other) => {
                form.errors.push(other.to_string());
                None
            }
        }
    } else {
        match check_fields(pairs) {
            Checked::Valid(cfg) => {
                // Shown again only if the name, project or executor was wrong.
                let values = leaves(&cfg.to_json())
                    .iter()
                    .map(|(k, v)| (k.clone(), display(v)))
                    .collect();
                form.sections = sections(&values, &preset_values, &BTreeMap::new());
                Some(CreateRun {
                    name: name.to_owned(),
                    config_toml: None,
                    config: Some(cfg.to_json()),
                    executor: h.executor.clone(),
                })
            }
            Checked::Invalid {
                values,
                errors,
                general,
            } => {
                form.sections = sections(&values, &preset_values, &errors);
                form.errors.extend(general);
                None
            }
        }
    };
    let (Some(req), true, Some(project)) = (request, form.field_errors.is_empty(), form.project)
    else {
        return Err(form);
    };
    match create(State(state.clone()), auth, ApiPath(project), ApiJson(req)).await {
        Ok((_, axum::Json(run))) => Ok(run.id),
        Err(e) => {
            form.errors.push(e.to_string());
            Err(form)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs_of(cfg: &RunConfig) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (path, v) in leaves(&cfg.to_json()) {
            match v {
                Value::Bool(false) => {}
                Value::Array(items) => {
                    out.extend(items.iter().map(|i| (path.clone(), display(i))));
                }
                other => out.push((path, display(&other))),
            }
        }
        out
    }

    #[test]
    fn every_configuration_key_is_documented_and_every_documented_key_exists() {
        let paths = leaves(&RunConfig::default().to_json());
        for p in paths.keys() {
            assert!(HELP.iter().any(|(h, _)| h == p), "{p} has no help text");
        }
        for (h, _) in HELP {
            assert!(paths.contains_key(*h), "{h} is not a configuration key");
        }
    }

    #[test]
    fn the_form_offers_the_papers_games_and_tool_use_runs() {
        let g = (preset("gpu_qwen3_games").build)();
        let t = (preset("gpu_qwen3_tool_use").build)();
        assert_eq!(g.curriculum.kinds, vec![spade::EnvKind::Game]);
        assert_eq!(t.curriculum.kinds, vec![spade::EnvKind::ToolUse]);
        assert_eq!(t.curriculum.envs_per_skill, 4, "6 skills x 4 = 24");
        assert!(
            presets().iter().all(|p| p.key != "gpu_qwen3"),
            "no preset mixes the two kinds"
        );
    }

    #[test]
    fn the_serve_demo_preset_is_the_demo_file() {
        let file = RunConfig::from_toml_str(crate::demo::DEMO_CONFIG);
        assert_eq!(file.ok(), Some((preset("tiny_serve_demo").build)()));
    }

    #[test]
    fn every_preset_round_trips_through_the_form() {
        for p in presets() {
            let cfg = (p.build)();
            assert!(cfg.validate().is_empty(), "{} is invalid", p.key);
            match check_fields(&pairs_of(&cfg)) {
                Checked::Valid(back) => assert_eq!(*back, cfg, "{}", p.key),
                other => panic!("{}: {other:?}", p.key),
            }
        }
    }

    #[test]
    fn vllm_urls_are_one_comma_separated_field() {
        let mut pairs = pairs_of(&RunConfig::tiny_cpu_demo());
        pairs.retain(|(k, _)| k != "vllm.urls" && k != "model.rollout");
        pairs.push(("model.rollout".into(), "vllm".into()));
        pairs.push((
            "vllm.urls".into(),
            " http://10.0.0.5:8000, http://10.0.0.6:8000 ,".into(),
        ));
        match check_fields(&pairs) {
            Checked::Valid(cfg) => assert_eq!(
                cfg.vllm.urls,
                ["http://10.0.0.5:8000", "http://10.0.0.6:8000"]
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn vllm_gpus_are_one_comma_separated_field_of_whole_numbers() {
        let with = |gpus: &str| {
            let mut pairs = pairs_of(&RunConfig::tiny_cpu_demo());
            pairs.retain(|(k, _)| !k.starts_with("vllm.") && k != "model.rollout");
            pairs.extend(
                [
                    ("model.rollout", "vllm"),
                    ("vllm.start", "2"),
                    ("vllm.port", "8300"),
                    ("vllm.threads", "0"),
                    ("vllm.kv_cache_gib", "1"),
                    ("vllm.tensor_parallel", "2"),
                    ("vllm.startup_timeout_s", "600"),
                    ("vllm.request_timeout_s", "600"),
                    ("vllm.venv", ""),
                    ("vllm.weights_dir", ""),
                    ("vllm.gpus", gpus),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            );
            check_fields(&pairs)
        };
        match with(" 1, 2,3 ,4") {
            Checked::Valid(cfg) => assert_eq!(cfg.vllm.gpus, [1, 2, 3, 4]),
            other => panic!("{other:?}"),
        }
        match with("1,two") {
            Checked::Invalid { errors, .. } => {
                let msg = errors
                    .get("vllm.gpus")
                    .map(|m| m.join(" "))
                    .unwrap_or_default();
                assert!(
                    msg.contains("whole numbers") && msg.contains("two"),
                    "{errors:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Two servers of two GPUs need four devices: the rule of spade::config, beside the field.
        match with("1,2,3") {
            Checked::Invalid { errors, .. } => {
                assert!(errors.contains_key("vllm.gpus"), "{errors:?}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn issues_land_beside_their_fields() {
        let mut pairs = pairs_of(&RunConfig::tiny_cpu_demo());
        for (k, v) in &mut pairs {
            match k.as_str() {
                "designer.plateau.low" => *v = "0.9".into(),
                "grpo.lr" => *v = "fast".into(),
                _ => {}
            }
        }
        // A type error and a range error come back together, in one round (issue 20, item 7).
        let Checked::Invalid { errors, values, .. } = check_fields(&pairs) else {
            panic!("a word is not a learning rate");
        };
        assert!(errors["grpo.lr"][0].contains("must be a number"));
        let low = errors["designer.plateau.low"].join(" ");
        assert!(low.contains("designer.plateau.low"), "{low}");
        assert_eq!(values["designer.plateau.low"], "0.9", "typed values stay");
        assert_eq!(values["grpo.lr"], "fast", "what did not parse stays too");
        assert!(
            errors
                .keys()
                .all(|k| k == "grpo.lr" || k.starts_with("designer.plateau.")),
            "nothing about the default behind grpo.lr: {errors:?}"
        );
        for (k, v) in &mut pairs {
            if k == "grpo.lr" {
                *v = "0.0001".into();
            }
        }
        let Checked::Invalid { errors, .. } = check_fields(&pairs) else {
            panic!("low above high is refused");
        };
        assert!(
            errors.contains_key("designer.plateau.low") && !errors.contains_key("grpo.lr"),
            "{errors:?}"
        );
        // No kinds at all: the checkbox group's own message.
        pairs.retain(|(k, _)| k != "curriculum.kinds");
        let Checked::Invalid { errors, .. } = check_fields(&pairs) else {
            panic!("no kinds is refused");
        };
        assert!(errors.contains_key("curriculum.kinds"), "{errors:?}");
    }

    /// The temperature rule is `spade::config`'s, so the form refuses what the worker would.
    #[test]
    fn the_form_refuses_a_trained_designer_at_another_temperature() {
        let mut pairs = pairs_of(&RunConfig::tiny_cpu_demo());
        for (k, v) in &mut pairs {
            if k == "designer.temperature" {
                *v = "0.9".into();
            }
        }
        let Checked::Invalid { errors, .. } = check_fields(&pairs) else {
            panic!("different temperatures for a trained designer are refused");
        };
        let e = errors["designer.temperature"].join(" ");
        assert!(e.contains("agent.temperature"), "{e}");
        pairs.push(("ablation.frozen_designer".into(), "true".into()));
        assert!(
            matches!(check_fields(&pairs), Checked::Valid(_)),
            "a frozen designer may sample at its own temperature"
        );
    }

    #[test]
    fn numbers_show_without_exponents() {
        assert_eq!(display(&serde_json::json!(1e-6)), "0.000001");
        assert_eq!(display(&serde_json::json!(400)), "400");
        assert_eq!(
            display(&serde_json::json!(["game", "tool_use"])),
            "game,tool_use"
        );
        assert_eq!(label_of("designer.plateau.low"), "Plateau low");
        assert_eq!(label_of("designer.ema.gamma_fast"), "EMA gamma fast");
    }
}
