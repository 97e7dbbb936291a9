//! Checkpoints: Rust round trips (f32, bf16, sharded), a Rust-written checkpoint loaded by
//! transformers, and the errors a user sees for broken checkpoints.

use crate::{fixture, tempdir};
use serde_json::{Value, json};
use spade_policy::checkpoint::{self, INDEX};
use spade_policy::preset::{self, BUILTIN_TEXT};
use spade_policy::{Policy, PolicyError, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use tch::{Device, Kind};

fn tiny() -> Result<Policy> {
    tch::set_num_threads(1);
    preset::tiny(&[BUILTIN_TEXT], 3, |_| {})
}

const PROMPT: &[i64] = &[5, 17, 300, 42, 9];

fn copy_dir(from: &Path, to: &Path) {
    for f in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let f = f.expect("a directory entry");
        std::fs::copy(f.path(), to.join(f.file_name())).expect("a copied checkpoint file");
    }
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let path = dir.join("config.json");
    let mut v = crate::read_json(&path);
    if let Value::Object(m) = &mut v {
        edit(m);
    }
    std::fs::write(&path, v.to_string()).expect("config.json written");
}

#[test]
fn a_saved_checkpoint_loads_back_with_identical_logits_and_tokenizer() -> Result<()> {
    let p = tiny()?;
    let dir = tempdir("roundtrip");
    p.save(&dir)?;
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(dir.join(f).exists(), "{f} not written");
    }
    let q = Policy::load(&dir, Device::Cpu)?;
    assert_eq!(q.config(), p.config());
    assert_eq!(q.last_logits(PROMPT)?, p.last_logits(PROMPT)?);
    let text = "<|im_start|>user\ndef reset(self, seed=None):<|im_end|>";
    assert_eq!(
        q.require_tokenizer()?.encode(text)?,
        p.require_tokenizer()?.encode(text)?
    );
    Ok(())
}

#[test]
fn an_untied_save_is_the_same_model_with_its_own_head() -> Result<()> {
    let p = tiny()?;
    assert!(p.config().tie_word_embeddings);
    let dir = tempdir("untied");
    p.save_untied(&dir)?;
    let cfg = crate::read_json(&dir.join("config.json"));
    assert_eq!(cfg["tie_word_embeddings"], json!(false));
    let names = checkpoint::tensor_names(&dir)?;
    assert!(names.iter().any(|n| n == "lm_head.weight"), "{names:?}");
    let q = Policy::load(&dir, Device::Cpu)?;
    assert!(!q.config().tie_word_embeddings);
    assert_eq!(q.last_logits(PROMPT)?, p.last_logits(PROMPT)?);
    Ok(())
}

#[test]
fn the_untied_weights_sent_tensor_by_tensor_are_what_an_untied_save_writes() -> Result<()> {
    let p = tiny()?;
    let dir = tempdir("untied-list");
    p.save_untied(&dir)?;
    let sent = p.untied_weights();
    let written: Vec<String> = checkpoint::tensor_names(&dir)?.into_iter().collect();
    let names: Vec<String> = sent.iter().map(|w| w.name.clone()).collect();
    assert_eq!(names, written, "the names, in the order they are sent");
    let q = Policy::load(&dir, Device::Cpu)?;
    let loaded: std::collections::HashMap<String, tch::Tensor> =
        q.var_store().variables().into_iter().collect();
    for w in &sent {
        assert_eq!(w.dtype_name(), "float32", "{}", w.name);
        assert!(w.tensor.is_contiguous(), "{}", w.name);
        let l = &loaded[&w.name];
        assert_eq!(w.shape(), l.size(), "{}", w.name);
        assert!(
            w.tensor.equal(l),
            "{} differs from the saved tensor",
            w.name
        );
    }
    // The head is the embedding itself, not a copy that could go stale.
    let head = &sent[names
        .iter()
        .position(|n| n == "lm_head.weight")
        .unwrap_or(0)];
    assert_eq!(head.name, "lm_head.weight");
    let embed = p.var_store().variables()["model.embed_tokens.weight"].shallow_clone();
    assert_eq!(head.tensor.data_ptr(), embed.data_ptr());
    Ok(())
}

#[test]
fn bf16_checkpoints_load_into_float32_within_bf16_precision() -> Result<()> {
    let p = tiny()?;
    let dir = tempdir("bf16");
    p.save_as(&dir, Kind::BFloat16)?;
    assert_eq!(
        crate::read_json(&dir.join("config.json"))["torch_dtype"],
        "bfloat16"
    );
    let size = std::fs::metadata(dir.join("model.safetensors")).map(|m| m.len());
    let params = p.config().num_parameters() as u64;
    assert!(
        size.is_ok_and(|s| s < params * 2 + 100_000),
        "not 2 bytes a weight"
    );
    let q = Policy::load_as(&dir, Device::Cpu, Kind::Float)?;
    let (a, b) = (p.last_logits(PROMPT)?, q.last_logits(PROMPT)?);
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(worst > 0.0 && worst < 0.05, "max diff {worst}");
    Ok(())
}

#[test]
fn sharded_saves_write_an_index_and_load_back() -> Result<()> {
    let p = tiny()?;
    let dir = tempdir("shards");
    p.save(&dir)?;
    checkpoint::save_weights(p.var_store(), &dir, Kind::Float, 2_000_000)?;
    let index = crate::read_json(&dir.join(INDEX));
    let files: std::collections::BTreeSet<&str> = index["weight_map"]
        .as_object()
        .map(|m| m.values().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(files.len() >= 4, "{files:?}");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let q = Policy::load(&dir, Device::Cpu)?;
    assert_eq!(q.last_logits(PROMPT)?, p.last_logits(PROMPT)?);
    Ok(())
}

/// The Python of the torch venv (see scripts/policy/make_fixtures.py), if installed.
pub(crate) fn torch_python() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("SPADE_TORCH_PYTHON").map(PathBuf::from),
        std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".cache/spade-studio/venv-torch/bin/python")),
    ];
    // A venv with torch but without transformers (bench-train needs only torch) cannot run
    // the check: say so instead of failing on the import.
    candidates.into_iter().flatten().find(|p| {
        p.exists()
            && Command::new(p)
                .args(["-c", "import transformers, safetensors"])
                .output()
                .is_ok_and(|o| o.status.success())
    })
}

/// Runs scripts/policy/check_rust_checkpoint.py on `dir` (which holds the Rust side's
/// expected.json) and returns its report; fails the test when transformers disagrees.
pub(crate) fn check_in_transformers(python: &Path, dir: &Path) -> String {
    let script = crate::crate_dir().join("../../scripts/policy/check_rust_checkpoint.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(dir)
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    report
}

#[test]
fn a_rust_checkpoint_loads_in_transformers_with_the_same_logits() -> Result<()> {
    let Some(python) = torch_python() else {
        eprintln!(
            "SKIPPED: no torch venv with transformers and safetensors (set SPADE_TORCH_PYTHON or \
             create ~/.cache/spade-studio/venv-torch); transformers was not run"
        );
        return Ok(());
    };
    let p = tiny()?;
    let dir = tempdir("to-hf");
    p.save(&dir)?;
    let tok = p.require_tokenizer()?;
    let prompts = [PROMPT.to_vec(), vec![1, 2, 3]];
    let logits: Vec<Vec<f32>> = prompts
        .iter()
        .map(|q| p.last_logits(q))
        .collect::<Result<_>>()?;
    let texts: Vec<Value> = [
        "def step(self, action):\n    return obs",
        "<|im_start|>user\nhi<|im_end|>",
    ]
    .iter()
    .map(|t| Ok(json!({"text": t, "ids": tok.encode(t)?})))
    .collect::<Result<_>>()?;
    let expected = json!({"prompts": prompts, "last_logits": logits, "texts": texts});
    checkpoint::write_json(&dir.join("expected.json"), &expected)?;
    let report = check_in_transformers(&python, &dir);
    assert!(report.contains("Qwen3ForCausalLM"), "{report}");
    Ok(())
}

/// Fixture `case` after one SFT step (so the file holds weights transformers never saw), saved
/// by us, must load in transformers as `arch` with our last-position logits.
fn trained_fixture_loads_in_transformers(python: &Path, case: &str, arch: &str) -> Result<()> {
    let p = Policy::load_as(&fixture(case), Device::Cpu, Kind::Float)?;
    let mut t = spade_policy::sft::SftTrainer::new(&p, Default::default())?;
    let seq: Vec<i64> = (0..16).map(|i| (i * 13 + 1) % 256).collect();
    t.step(
        &p,
        &[spade_policy::train::MaskedSeq::prompt_completion(
            &seq[..4],
            &seq[4..],
        )],
    )?;
    let dir = tempdir(&format!("{case}-to-hf"));
    p.save(&dir)?;
    let prompts = [vec![5, 17, 200, 42, 9], vec![1, 2, 3]];
    let logits: Vec<Vec<f32>> = prompts
        .iter()
        .map(|q| p.last_logits(q))
        .collect::<Result<_>>()?;
    let expected = json!({"prompts": prompts, "last_logits": logits});
    checkpoint::write_json(&dir.join("expected.json"), &expected)?;
    let report = check_in_transformers(python, &dir);
    assert!(report.contains(arch), "{case}: {report}");
    Ok(())
}

#[test]
fn a_rust_saved_moe_checkpoint_loads_in_transformers_with_the_same_logits() -> Result<()> {
    let Some(python) = torch_python() else {
        eprintln!("SKIPPED: no torch venv with transformers and safetensors; see above");
        return Ok(());
    };
    trained_fixture_loads_in_transformers(&python, "moe_dense_layer", "Qwen3MoeForCausalLM")
}

#[test]
fn rust_saved_llama_and_qwen2_checkpoints_load_in_transformers_with_the_same_logits() -> Result<()>
{
    let Some(python) = torch_python() else {
        eprintln!("SKIPPED: no torch venv with transformers and safetensors; see above");
        return Ok(());
    };
    trained_fixture_loads_in_transformers(&python, "llama_bias_rope_llama3", "LlamaForCausalLM")?;
    trained_fixture_loads_in_transformers(&python, "qwen2_bias_untied", "Qwen2ForCausalLM")
}

fn load_err(dir: &Path) -> PolicyError {
    match Policy::load_as(dir, Device::Cpu, Kind::Float) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e,
    }
}

#[test]
fn broken_checkpoints_give_errors_that_name_the_problem() {
    let dir = tempdir("broken");
    assert!(matches!(load_err(&dir), PolicyError::MissingConfig { .. }));
    std::fs::write(dir.join("config.json"), "{ not json").unwrap();
    assert!(matches!(
        load_err(&dir),
        PolicyError::MalformedConfig { .. }
    ));

    copy_dir(&fixture("gqa2_tied"), &dir);
    edit_config(&dir, |m| {
        m.insert("model_type".into(), json!("mistral"));
        m.insert("architectures".into(), json!(["MistralForCausalLM"]));
    });
    let e = load_err(&dir).to_string();
    assert!(
        e.contains("unsupported architecture") && e.contains("mistral"),
        "{e}"
    );

    // A Qwen3 checkpoint whose config says Llama: its q/k norms have no place in a Llama.
    copy_dir(&fixture("gqa2_tied"), &dir);
    edit_config(&dir, |m| {
        m.insert("model_type".into(), json!("llama"));
        m.insert("architectures".into(), json!(["LlamaForCausalLM"]));
    });
    match load_err(&dir) {
        PolicyError::UnexpectedTensor { name, .. } => assert!(name.contains("_norm"), "{name}"),
        e => panic!("{e}"),
    }

    copy_dir(&fixture("gqa2_tied"), &dir);
    edit_config(&dir, |m| {
        m.insert("tie_word_embeddings".into(), json!(false));
    });
    match load_err(&dir) {
        PolicyError::MissingTensor { name, .. } => assert_eq!(name, "lm_head.weight"),
        e => panic!("{e}"),
    }

    copy_dir(&fixture("gqa2_tied"), &dir);
    edit_config(&dir, |m| {
        m.insert("intermediate_size".into(), json!(97));
    });
    match load_err(&dir) {
        PolicyError::ShapeMismatch {
            name,
            expected,
            found,
        } => {
            assert!(name.contains(".mlp."), "{name}");
            assert!(
                expected.contains(&97) && found.contains(&96),
                "{expected:?} {found:?}"
            );
        }
        e => panic!("{e}"),
    }

    copy_dir(&fixture("gqa2_tied"), &dir);
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    assert!(matches!(load_err(&dir), PolicyError::NoWeights { .. }));
}
