//! The documentation of every configuration key path, beside the structs it documents, in
//! their declaration order: what the launch form shows under each field and its section
//! titles ([`super::form`] walks it; a test there keeps it and `RunConfig` in step).
//! `docs/configuration.md` lists every key from it (`tests/config_doc.rs` keeps the page in step;
//! `SPADE_BLESS=1` rewrites it).

/// Section titles, in the order of `RunConfig`'s fields.
pub const SECTIONS: &[(&str, &str)] = &[
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

/// Documentation of every key path (from the doc comments of `spade::config`), in declaration
/// order.
pub const HELP: &[(&str, &str)] = &[
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
        "run.ranks",
        "Processes that train the run together (data-parallel ranks: on the CPU through Gloo; with model.device = \"cuda\" and the CUDA build one GPU each, LOCAL_RANK's, through NCCL, not yet run on GPUs): each plays its share of the agent's and the hint episodes and trains its share of each update, holding 1/ranks of the optimizer state (ZeRO-2). A checkpoint resumes on any rank count, or in one process (the optimizer state is re-sharded). spade train --ranks overrides it.",
    ),
    (
        "run.zero_stage",
        "How the ranks shard the training state: 2 (ZeRO-2: each rank holds every weight and gradient and 1/ranks of the float32 masters and AdamW moments) or 3 (ZeRO-3: during an update the decoder layers' weights and gradients are sharded too, each layer gathered from its owners just before its forward and its recomputed backward; needs grpo.activation_recompute; the rollouts between updates sample with whole weights). One process ignores it. Checkpoints of either stage resume under the other.",
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
        "\"tiny\" (the project's own tiny Qwen3-shaped model, warm-started on this machine), \"smollm2-135m\" (SmolLM2-135M-Instruct, a real pretrained model imported from the GGUF scripts/setup installs) or \"qwen3\" (a real checkpoint at model.path).",
    ),
    (
        "model.device",
        "Where the policy trains and generates: \"auto\" (the first GPU when the worker's libtorch sees one, else the CPU), \"cpu\", \"cuda\" (the first GPU the job is given) or \"cuda:N\". Asking for CUDA on a worker built without it, or on a node without that GPU, fails the run at its start with the reason (spade doctor shows what a worker sees); it never trains on the CPU instead. The GPU presets say \"cuda\".",
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
        "KV-cache slots the engine may allocate (in blocks of 16 slots as sequences need them, at least one context; Qwen3-4B takes 144 KiB a slot in bf16), or \"auto\": what the device has left after the memory plan's weights, gradients, optimizer state and activations, within model.gpu_memory_fraction (the GPU presets' choice).",
    ),
    (
        "model.gpu_memory_fraction",
        "The share of the device's total memory a run may plan for (vLLM's gpu_memory_fraction): the worker's memory plan refuses a CUDA run that needs more, and model.kv_cache_tokens = \"auto\" fills it.",
    ),
    (
        "model.max_batch",
        "Most sequences the engine decodes at once.",
    ),
    (
        "model.prefill_tokens",
        "Most prompt tokens one engine step prefills, over all the requests being prefilled: several prompts run in one pass beside the decoding rows, and a longer prompt in pieces over several steps.",
    ),
    (
        "model.decode_window",
        "Decoding passes one engine step runs before the host reads the sampled tokens back: the tokens are drawn on the device and fed to the next pass where they lie, and stops are checked at the window's end, so every window gives the same tokens (up to float rounding). 0 leaves it to the device (1 on the CPU, where a read costs nothing, 4 on CUDA).",
    ),
    (
        "model.warm_start",
        "What a preset model is fine-tuned on before self-play (ignored with model.path): \"auto\" (the preset's choice: \"seeds\" for tiny, \"none\" for smollm2-135m), \"none\" (the pretrained weights as they are; not for tiny, which starts from random weights), \"seeds\" (the seed library's shortest file) or \"families\" (many variants of the built-in game families, so the designer writes programs that differ: the CPU demos' choice).",
    ),
    (
        "model.prompts",
        "Which prompts the roles read: \"reference\" (the reference implementation's structure and rules in our words: the interactive game specification, <REFERENCE_DOCUMENT> and <REFERENCE_ENVIRONMENTS> tags, one user message for the agent with HINT:, a 1-3 sentence hint, a five-criteria judge; for tool use a multi-turn task on the ToolUseBaseEnv base class with _tools, _user_messages and _message_criteria in a drawn domain and task variant, and a value-free plan as the hint) or \"compact\" (this project's short prompts, ToolUseEnv for tool use, which the tiny model is warm-started on).",
    ),
    (
        "model.thinking",
        "Let a hybrid-thinking checkpoint think (Qwen3's enable_thinking). Off (the reference's launchers), every generation prompt of such a model ends with the empty <think> block its template adds; models without the switch are unaffected.",
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
        "memory.win_rate_from",
        "What a record's win rate counts: \"regeneration_step\" (the share of the regeneration step's no-hint plays with a reward above 0, as the reference) or \"window\" (the share of the window's no-hint plays won). The record is written when the window closes either way.",
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
        "designer.top_p",
        "Nucleus sampling of the designer's attempts: the most likely tokens whose probabilities sum to this (the reference's 0.95; 1 = off).",
    ),
    (
        "designer.top_k",
        "Sample among this many most likely tokens (the reference's 20; 0 = off).",
    ),
    (
        "designer.repair_fstrings",
        "Repair generated code whose f-string braces are not doubled before validation (the reference's fix for its most common syntax error: on the line of the syntax error, a {...} whose inside is no Python expression becomes {{...}}).",
    ),
    (
        "designer.plateau_reads",
        "What the plateau's w reads: \"mean_return\" (the window's mean no-hint episode return, as the reference) or \"win_rate\" (the share of no-hint plays won, spec 7). Equal for games whose only rewards are 0 and a winning 1.",
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
    (
        "hint.max_chars",
        "Characters of a hint the agent is shown; 0 = the whole hint (the reference shows it whole, bounded by model.hint_max_new_tokens).",
    ),
    ("agent.temperature", "Sampling temperature (spec 5: 0.6)."),
    (
        "agent.top_p",
        "Nucleus sampling of the agent's turns and the self-judge's verdict (the reference's 0.95; 1 = off).",
    ),
    (
        "agent.top_k",
        "Sample among this many most likely tokens (the reference's 20; 0 = off).",
    ),
    ("agent.max_turns", "Turn limit of one play (spec 5: 25)."),
    (
        "agent.global_batch",
        "No-hint plays per step over all environments: ceil(global_batch / n_envs) per environment (spec 5: 192, so 8 for 24 environments).",
    ),
    (
        "agent.max_episode_tokens",
        "Tokens the agent may write over a whole episode, all turns together; the last turn gets what is left, and the episode ends truncated when fewer than 64 tokens are left (the reference bounds an episode by its context alone: 32,768).",
    ),
    (
        "agent.end_on_cut_turn",
        "A turn that fills its token budget without the end token ends the episode, truncated (the reference). Off: the turn is closed and play goes on.",
    ),
    (
        "agent.raw_actions",
        "A game reply without \\boxed{} reaches the environment's step as its raw text (the reference), so the game answers it. Off: the environment is not stepped and the agent is told the format it missed.",
    ),
    (
        "agent.failed_plays",
        "A play the environment breaks (exception, step timeout, a return the contract forbids): \"minus_one\" (it fails alone, the other plays go on, and in its group it counts a return of -1 while the rest train: the reference) or \"drop\" (the first violation stops the environment's plays and none of that step's train). A failed play is no outcome of the game: the designer's scores never count it.",
    ),
    (
        "agent.retire_on",
        "Which failures in play retire the environment, with the invalid designer reward: \"hang\" (a step past its time limit, or a runner that died: the reference blacklists only games that hang) or \"violation\" (any contract violation, an exception or a forbidden return too). An environment that failed a play without being retired is played again at the next step.",
    ),
    (
        "agent.train_truncated",
        "A play that ended without terminating (out of turns, or out of its token budget) trains. Off, it counts in its group's z-score but its tokens get no gradient (the reference's tool-use launchers: running out of budget is not a policy failure).",
    ),
    (
        "agent.tool_template",
        "How tool-use episodes reach the model: \"native\" (the model's own tool calling: the schemas in the system turn its chat template writes for tools, several calls a turn, each result a tool message; the reference) or \"inline\" (the schemas and the call format in the first observation, one call a turn, results as user messages). A model whose chat template has no tool calling plays inline.",
    ),
    (
        "agent.concurrency",
        "Episodes played at once: sandbox runners, and rows of one sampling batch. 0 (the default) = model.max_batch, so the engine is never short of episodes to decode while some wait for their environments.",
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
        "grpo.loss_norm",
        "How a step averages its per-token losses: sample_mean (each sample's token mean, averaged over the step's samples, zero-advantage ones included; the reference's slime default) or token_mean (one mean over the trained tokens of the samples with a non-zero advantage; DAPO, the spec's wording).",
    ),
    (
        "grpo.trim_to_global_batch",
        "With sample_mean: the step's batch is the delayed designer samples first, then the agent's, cut to agent.global_batch samples (as the reference trims its batch).",
    ),
    (
        "grpo.weight_decay",
        "AdamW's decoupled weight decay (the reference: 0.1).",
    ),
    (
        "grpo.adam_beta2",
        "AdamW's second-moment decay (the reference: 0.98; torch's default 0.999).",
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
    (
        "vllm.weight_sync",
        "How updated weights reach the servers: \"disk\" (safetensors in vllm.weights_dir, reloaded by every server), \"nccl\" (GPU to GPU through vLLM's NCCL weight transfer: the policy on a GPU, a CUDA build with NCCL, servers started by the worker; a run that cannot fails at its start) or \"auto\" (nccl where it can run, else disk).",
    ),
];
