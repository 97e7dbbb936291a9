//! GGUF files synthesised here (a tiny writer below): every dequantised type against known
//! values, imports of tiny llama and qwen2 models, and one refusal per kind of malformed file,
//! each naming the key or tensor at fault.

use super::*;
use crate::error::PolicyError;
use safetensors::SafeTensors;
use std::path::PathBuf;

// ------------------------------------------------------------------------- a tiny GGUF writer

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::Str(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend(x.to_le_bytes()),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::Str(s) => put_str(out, s),
        Value::Array(items) => {
            // Element type of an empty array: string, as writers use for empty token lists.
            out.extend(items.first().map_or(8, type_id).to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for i in items {
                put_value(out, i);
            }
        }
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
    }
}

/// A GGUF under construction: metadata in order, tensors with their raw data.
#[derive(Debug, Clone)]
struct Writer {
    version: u32,
    kv: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

impl Writer {
    fn set(&mut self, key: &str, v: Value) -> &mut Self {
        self.kv.retain(|(k, _)| k != key);
        self.kv.push((key.to_string(), v));
        self
    }

    fn remove(&mut self, key: &str) -> &mut Self {
        self.kv.retain(|(k, _)| k != key);
        self
    }

    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.retain(|t| t.0 != name);
        self.tensors
            .push((name.to_string(), dims.to_vec(), ty, data));
        self
    }

    fn f32_tensor(&mut self, name: &str, dims: &[u64], values: &[f32]) -> &mut Self {
        self.tensor(
            name,
            dims,
            0,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    fn bytes(&self) -> Vec<u8> {
        let align = 32usize;
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(&mut out, k);
            out.extend(type_id(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        for (name, dims, ty, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(ty.to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            offset += data.len().div_ceil(align) * align;
        }
        out.resize(out.len().div_ceil(align) * align, 0);
        for (_, _, _, data) in &self.tensors {
            out.extend(data);
            out.resize(out.len().div_ceil(align) * align, 0);
        }
        out
    }
}

fn s(v: &str) -> Value {
    Value::Str(v.to_string())
}

/// Deterministic, distinct values for a tensor.
fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32) * 0.37 + seed).sin()).collect()
}

const HIDDEN: u64 = 32;
const HEADS: u64 = 4;
const KV_HEADS: u64 = 2;
const HEAD_DIM: u64 = 8;
const FFN: u64 = 64;
const TOKENS: [&str; 8] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "a",
    "b",
    "Ġ",
    "ab",
    "Ġab",
];
const TEMPLATE: &str =
    "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}";

/// A one-layer model of `arch` with float32 tensors and a complete vocabulary.
fn tiny(arch: &str) -> Writer {
    let mut w = Writer {
        version: 3,
        kv: vec![],
        tensors: vec![],
    };
    let k = |n: &str| format!("{arch}.{n}");
    w.set("general.architecture", s(arch))
        .set(&k("block_count"), Value::U32(1))
        .set(&k("context_length"), Value::U32(256))
        .set(&k("embedding_length"), Value::U32(HIDDEN as u32))
        .set(&k("feed_forward_length"), Value::U32(FFN as u32))
        .set(&k("attention.head_count"), Value::U32(HEADS as u32))
        .set(&k("attention.head_count_kv"), Value::U32(KV_HEADS as u32))
        .set(&k("rope.freq_base"), Value::F32(100_000.0))
        .set(&k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5))
        .set("tokenizer.ggml.model", s("gpt2"))
        .set("tokenizer.ggml.pre", s("smollm"))
        .set(
            "tokenizer.ggml.tokens",
            Value::Array(TOKENS.iter().map(|t| s(t)).collect()),
        )
        .set(
            "tokenizer.ggml.token_type",
            Value::Array([3, 3, 3, 1, 1, 1, 1, 1].map(Value::I32).to_vec()),
        )
        .set(
            "tokenizer.ggml.merges",
            Value::Array(vec![s("a b"), s("Ġ ab")]),
        )
        .set("tokenizer.ggml.bos_token_id", Value::U32(1))
        .set("tokenizer.ggml.eos_token_id", Value::U32(2))
        .set("tokenizer.ggml.padding_token_id", Value::U32(2))
        .set("tokenizer.chat_template", s(TEMPLATE));
    let v = TOKENS.len() as u64;
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    // GGUF dims are innermost first: [cols, rows].
    let mut seed = 0.0;
    let mut add = |w: &mut Writer, name: &str, dims: &[u64]| {
        seed += 1.0;
        let n = dims.iter().product::<u64>() as usize;
        w.f32_tensor(name, dims, &values(n, seed));
    };
    add(&mut w, "token_embd.weight", &[HIDDEN, v]);
    add(&mut w, "output_norm.weight", &[HIDDEN]);
    add(&mut w, "blk.0.attn_norm.weight", &[HIDDEN]);
    add(&mut w, "blk.0.attn_q.weight", &[HIDDEN, q]);
    add(&mut w, "blk.0.attn_k.weight", &[HIDDEN, kv]);
    add(&mut w, "blk.0.attn_v.weight", &[HIDDEN, kv]);
    add(&mut w, "blk.0.attn_output.weight", &[q, HIDDEN]);
    add(&mut w, "blk.0.ffn_norm.weight", &[HIDDEN]);
    add(&mut w, "blk.0.ffn_gate.weight", &[HIDDEN, FFN]);
    add(&mut w, "blk.0.ffn_up.weight", &[HIDDEN, FFN]);
    add(&mut w, "blk.0.ffn_down.weight", &[FFN, HIDDEN]);
    if arch == "qwen2" {
        add(&mut w, "blk.0.attn_q.bias", &[q]);
        add(&mut w, "blk.0.attn_k.bias", &[kv]);
        add(&mut w, "blk.0.attn_v.bias", &[kv]);
    }
    w
}

// ------------------------------------------------------------------------------ test helpers

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-gguf-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// Imports `w` into a fresh directory; returns that directory or the error.
fn import_bytes(tag: &str, bytes: &[u8]) -> (PathBuf, crate::Result<ImportSummary>) {
    let dir = tempdir(tag);
    let file = dir.join("model.gguf");
    std::fs::write(&file, bytes).expect("write the test file");
    let out = dir.join("ckpt");
    let r = import(&file, &out, |_, _| {});
    (out, r)
}

/// The GGUF reason of a refused import, with its message checked to name `named`.
fn refused(tag: &str, bytes: &[u8], named: &str) -> GgufError {
    let (out, r) = import_bytes(tag, bytes);
    let Err(PolicyError::Gguf { reason, .. }) = r else {
        panic!("{tag}: expected a GGUF refusal, got {r:?}");
    };
    let message = reason.to_string();
    assert!(
        message.contains(named),
        "{tag}: `{message}` does not name `{named}`"
    );
    assert!(
        !out.exists(),
        "{tag}: a refused import left {}",
        out.display()
    );
    reason
}

fn read_f32(dir: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(dir.join("model.safetensors")).expect("model.safetensors");
    let st = SafeTensors::deserialize(&bytes).expect("parse safetensors");
    let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert_eq!(t.dtype(), safetensors::Dtype::F32);
    let v = t
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (t.shape().to_vec(), v)
}

fn json_of(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read json")).expect("parse json")
}

/// llama.cpp's converter permutation (numpy: `w.reshape(n_head, 2, rows // n_head // 2, cols)
/// .swapaxes(1, 2).reshape(rows, cols)`), written independently of [`unpermute_rows`].
fn permute_rows(w: &[f32], rows: usize, cols: usize, n_head: usize) -> Vec<f32> {
    let half = rows / n_head / 2;
    let mut out = Vec::with_capacity(w.len());
    for h in 0..n_head {
        for i in 0..half {
            for j in 0..2 {
                let src = (h * 2 * half + j * half + i) * cols;
                out.extend_from_slice(&w[src..src + cols]);
            }
        }
    }
    out
}

mod dequantisation;
mod import_cases;
mod malformed;
