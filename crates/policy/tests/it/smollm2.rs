//! The real model every machine has (issue 37): SmolLM2-135M-Instruct imported from its GGUF
//! (`preset::smollm2`) computes what transformers' own GGUF loader computes. Fixture:
//! `scripts/policy/make_gguf_fixtures.py` (`tests/fixtures/smollm2_gguf`: four prompts, two in
//! the chat template and two plain, with transformers' last-position logits and 24-token
//! greedy continuations, float32).

use crate::{fixture, read_json};
use spade_policy::chat::{Message, Speaker};
use spade_policy::preset;
use spade_policy::sample::{SamplingParams, generate};
use spade_policy::{Policy, Result};
use tch::{Device, Kind};

fn smollm2() -> Result<Policy> {
    let dir = preset::smollm2(&preset::cache_root(), &mut |l| eprintln!("{l}"))?;
    Policy::load_as(&dir, Device::Cpu, Kind::Float)
}

fn reference_logits() -> Vec<Vec<f32>> {
    let bytes = std::fs::read(fixture("smollm2_gguf").join("last_logits.f32"))
        .unwrap_or_else(|e| panic!("last_logits.f32: {e}"));
    let all: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    all.chunks(49_152).map(<[f32]>::to_vec).collect()
}

#[test]
fn imported_smollm2_matches_transformers_gguf_loader_logits_and_greedy_text() -> Result<()> {
    let policy = smollm2()?;
    assert_eq!(policy.config().num_hidden_layers, 30);
    let exp = read_json(&fixture("smollm2_gguf").join("expected.json"));
    let prompts = exp["prompts"].as_array().cloned().unwrap_or_default();
    assert_eq!(prompts.len(), 4);
    let tok = policy.require_tokenizer()?;
    for (p, want) in prompts.iter().zip(reference_logits()) {
        let name = p["name"].as_str().unwrap_or_default();
        let ids: Vec<i64> = serde_json::from_value(p["ids"].clone()).unwrap_or_default();
        // Our tokenizer reads the prompt text to the same ids.
        let text = p["text"].as_str().unwrap_or_default();
        assert_eq!(tok.encode(text)?, ids, "{name}: token ids");
        let got = policy.last_logits(&ids)?;
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("{name}: max |logit diff| {worst:.2e}");
        assert!(worst < 1e-3, "{name}: max |logit diff| {worst}");
        let greedy: Vec<i64> = serde_json::from_value(p["greedy"].clone()).unwrap_or_default();
        let params = SamplingParams {
            temperature: 0.0,
            max_new_tokens: greedy.len(),
            ..Default::default()
        };
        let out = generate(policy.model(), &[ids], &[0], &params, None)?;
        assert_eq!(out[0].tokens, greedy, "{name}: greedy continuation");
    }
    Ok(())
}

/// `spade model bench --shape smollm2-135m` times the real model's shape: the random-init
/// config equals the imported one in every field that sizes the computation.
#[test]
fn the_smollm2_bench_shape_is_the_imported_config() -> Result<()> {
    let real = smollm2()?.config().clone();
    let shape = preset::shape(preset::SMOLLM2)?;
    let dims = |c: &spade_policy::qwen3::Config| {
        (
            c.family,
            c.vocab_size,
            c.hidden_size,
            c.intermediate_size,
            c.num_hidden_layers,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
            c.tie_word_embeddings,
        )
    };
    assert_eq!(dims(&shape), dims(&real));
    assert_eq!(
        (
            shape.rope_theta,
            shape.rms_norm_eps,
            shape.max_position_embeddings
        ),
        (
            real.rope_theta,
            real.rms_norm_eps,
            real.max_position_embeddings
        )
    );
    Ok(())
}

#[test]
fn smollm2_renders_its_own_chat_template_as_transformers_does() -> Result<()> {
    let policy = smollm2()?;
    let exp = read_json(&fixture("smollm2_gguf").join("expected.json"));
    let cases = exp["chat"].as_array().cloned().unwrap_or_default();
    assert!(cases.len() >= 3);
    for case in cases {
        let msgs: Vec<Message> = case["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                let speaker = match m["role"].as_str() {
                    Some("system") => Speaker::System,
                    Some("assistant") => Speaker::Assistant,
                    _ => Speaker::User,
                };
                Message::new(speaker, m["content"].as_str().unwrap_or_default())
            })
            .collect();
        let gen_prompt = case["add_generation_prompt"].as_bool().unwrap_or(false);
        let got = policy.chat_template().render(&msgs, gen_prompt)?;
        assert_eq!(got, case["text"].as_str().unwrap_or_default());
    }
    // The worker's ChatML transcripts are this model's own format.
    assert_eq!(policy.chat_template().chatml_mismatch()?, None);
    Ok(())
}
