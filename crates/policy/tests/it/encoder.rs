//! The sentence encoder of the Vendi score's `sentence` kernel against transformers: random
//! RoBERTa (with pooler, as the Vendi authors' SimCSE model) and BERT (without: the first
//! token) fixtures from `scripts/policy/make_encoder_fixtures.py`.

use crate::{fixture, read_json, tempdir};
use spade_policy::encoder::Encoder;
use spade_policy::{PolicyError, Result};
use tch::Device;

#[test]
fn encoder_embeddings_match_transformers_within_1e_4() -> Result<()> {
    tch::set_num_threads(1);
    for (name, pooling) in [
        ("encoder_roberta_pooler", "pooler"),
        ("encoder_bert_cls", "cls"),
    ] {
        let dir = fixture(name);
        let exp = read_json(&dir.join("expected.json"));
        let enc = Encoder::load(&dir, Device::Cpu)?;
        assert_eq!(enc.pooling(), pooling, "{name}");
        let cases = exp["cases"].as_array().unwrap_or_else(|| panic!("{name}"));
        for case in cases {
            let text = case["text"].as_str().unwrap_or_default();
            let ids: Vec<i64> = serde_json::from_value(case["ids"].clone()).unwrap();
            assert_eq!(enc.encode(text)?, ids, "{name}: ids of {:.30}", text);
            let want: Vec<f32> = serde_json::from_value(case["embedding"].clone()).unwrap();
            let got = enc.embed(&[text])?.swap_remove(0);
            assert_eq!(got.len(), want.len());
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "{name}: max |diff| {worst} for {:.30}", text);
        }
    }
    Ok(())
}

#[test]
fn broken_encoder_directories_name_the_problem() {
    let dir = tempdir("encoder-broken");
    let err = |d: &std::path::Path| match Encoder::load(d, Device::Cpu) {
        Ok(_) => panic!("loaded {}", d.display()),
        Err(e) => e,
    };
    assert!(matches!(err(&dir), PolicyError::MissingConfig { .. }));
    let src = fixture("encoder_bert_cls");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    // No tokenizer.json.
    let e = err(&dir).to_string();
    assert!(e.contains("tokenizer.json"), "{e}");
    // A decoder checkpoint where an encoder was expected.
    std::fs::copy(
        fixture("gqa2_tied").join("config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    let e = err(&dir).to_string();
    assert!(
        e.contains("\"qwen3\"") && e.contains("sentence encoder"),
        "{e}"
    );
}
