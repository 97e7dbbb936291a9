//! Reference tests against Hugging Face transformers: fixtures written by
//! `scripts/policy/make_fixtures.py` (random small Qwen3 and Qwen3-MoE models saved with `save_pretrained`,
//! their last-position logits and 32-token greedy continuations) must be reproduced here.
//! Runs on CPU in float32, and on CUDA too (in float32, against the same tolerances) when
//! libtorch sees a GPU.

use crate::{devices, fixture, read_json};
use spade_policy::sample::{SamplingParams, generate};
use spade_policy::tokenizer::Tokenizer;
use spade_policy::{Policy, Result};
use std::path::Path;
use tch::Kind;

const CASES: &[&str] = &[
    "gqa2_tied",
    "gqa4_headdim32_untied",
    "mha_bias_theta5e5",
    "sharded_untied",
    // Qwen3-MoE (Qwen3MoeForCausalLM): more of it in moe.rs.
    "moe_top1_tied",
    "moe_top2_norm_untied",
    "moe_dense_layer",
    "moe_sparse_step2",
    // The other families of the same decoder (see make_fixtures.py's FAMILY_CASES).
    "llama_gqa_tied",
    "llama_bias_rope_llama3",
    "qwen2_bias_untied",
];

fn expected(dir: &Path) -> serde_json::Value {
    read_json(&dir.join("expected.json"))
}

fn ids(v: &serde_json::Value) -> Vec<Vec<i64>> {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("bad ids {v}: {e}"))
}

#[test]
fn last_position_logits_match_transformers_within_1e_4() -> Result<()> {
    for dev in devices() {
        for name in CASES {
            let dir = fixture(name);
            let exp = expected(&dir);
            let policy = Policy::load_as(&dir, dev, Kind::Float)?;
            for (prompt, want) in ids(&exp["prompts"]).iter().zip(
                exp["last_logits"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{name}: no last_logits")),
            ) {
                let got = policy.last_logits(prompt)?;
                let want: Vec<f32> = serde_json::from_value(want.clone()).unwrap();
                assert_eq!(got.len(), want.len(), "{name}");
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(worst < 1e-4, "{name} on {dev:?}: max |diff| {worst}");
            }
        }
    }
    Ok(())
}

#[test]
fn greedy_continuations_match_transformers_generate_with_left_padding() -> Result<()> {
    for dev in devices() {
        for name in CASES {
            let dir = fixture(name);
            let exp = expected(&dir);
            let policy = Policy::load_as(&dir, dev, Kind::Float)?;
            let want = ids(&exp["greedy"]);
            let params = SamplingParams {
                temperature: 0.0,
                max_new_tokens: want[0].len(),
                ..Default::default()
            };
            let prompts = ids(&exp["prompts"]);
            let out = generate(policy.model(), &prompts, &[0, 1], &params, None)?;
            for (o, w) in out.iter().zip(&want) {
                assert_eq!(&o.tokens, w, "{name} on {dev:?}");
                assert!(o.logprobs.iter().all(|l| *l <= 0.0 && l.is_finite()));
            }
        }
    }
    Ok(())
}

#[test]
fn qwen_style_tokenizer_encodes_like_the_python_tokenizers_library() -> Result<()> {
    let dir = fixture("tokenizer_qwen_style");
    let tok = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
    for case in expected(&dir)
        .as_array()
        .unwrap_or_else(|| panic!("expected a list"))
    {
        let text = case["text"].as_str().unwrap_or_default();
        let want: Vec<i64> = serde_json::from_value(case["ids"].clone()).unwrap_or_default();
        assert_eq!(tok.encode(text)?, want, "{text:?}");
        assert_eq!(tok.decode(&want, false)?, text);
    }
    Ok(())
}
