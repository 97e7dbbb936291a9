//! Reference tests against Hugging Face transformers: fixtures written by
//! `scripts/policy/make_fixtures.py` (random small Qwen3 models saved with `save_pretrained`,
//! their last-position logits and 32-token greedy continuations) must be reproduced here.
//! Runs on CPU in float32, and on CUDA too (in float32, against the same tolerances) when
//! libtorch sees a GPU.

use spade_policy::sample::{SamplingParams, generate};
use spade_policy::tokenizer::Tokenizer;
use spade_policy::{Policy, PolicyError, Result};
use std::path::{Path, PathBuf};
use tch::{Device, Kind};

const CASES: &[&str] = &[
    "gqa2_tied",
    "gqa4_headdim32_untied",
    "mha_bias_theta5e5",
    "sharded_untied",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn expected(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("expected.json"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn ids(v: &serde_json::Value) -> Vec<Vec<i64>> {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("bad ids {v}: {e}"))
}

fn devices() -> Vec<Device> {
    tch::set_num_threads(1);
    let mut d = vec![Device::Cpu];
    if tch::Cuda::is_available() {
        d.push(Device::Cuda(0));
    }
    d
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
                let want: Vec<f32> =
                    serde_json::from_value(want.clone()).unwrap_or_else(|e| panic!("{e}"));
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

#[test]
fn a_truncated_shard_index_names_the_missing_tensor() -> Result<()> {
    let tmp = tempdir("missing");
    for f in std::fs::read_dir(fixture("sharded_untied")).map_err(|e| PolicyError::Io {
        path: tmp.clone(),
        source: e,
    })? {
        let f = f.map_err(|e| PolicyError::Io {
            path: tmp.clone(),
            source: e,
        })?;
        // Drop the shard holding lm_head.weight, and its entry in the index.
        std::fs::copy(f.path(), tmp.join(f.file_name())).map_err(|e| PolicyError::Io {
            path: tmp.clone(),
            source: e,
        })?;
    }
    let index_path = tmp.join("model.safetensors.index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap_or_default())
            .unwrap_or_default();
    let shard = index["weight_map"]["lm_head.weight"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(m) = index["weight_map"].as_object_mut() {
        m.retain(|_, v| v.as_str() != Some(shard.as_str()));
    }
    std::fs::write(&index_path, index.to_string()).unwrap_or_default();
    match Policy::load_as(&tmp, Device::Cpu, Kind::Float) {
        Err(PolicyError::MissingTensor { name, .. }) => {
            assert!(!name.is_empty());
        }
        other => panic!("expected MissingTensor, got {other:?}"),
    }
    Ok(())
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-policy-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}
