//! One refusal per kind of bad file, each naming what is wrong; and no panic on any prefix of
//! a valid file.

use super::*;

/// Byte offset just after the header fields (magic, version, two counts).
const HEADER: usize = 24;

#[test]
fn wrong_magic_and_versions_are_refused() {
    let mut b = tiny("llama").bytes();
    b[..4].copy_from_slice(b"GGML");
    assert!(matches!(
        refused("magic", &b, "GGUF"),
        GgufError::BadMagic { .. }
    ));
    for version in [1u32, 4] {
        let mut w = tiny("llama");
        w.version = version;
        let r = refused("version", &w.bytes(), &format!("version {version}"));
        assert_eq!(r, GgufError::UnsupportedVersion { version });
    }
}

#[test]
fn every_truncation_is_refused_without_panicking() {
    let b = tiny("llama").bytes();
    for cut in 0..b.len() {
        assert!(
            Gguf::parse(b[..cut].to_vec())
                .and_then(|g| {
                    g.tensors
                        .iter()
                        .try_for_each(|t| g.tensor_data(t).map(drop))
                })
                .is_err(),
            "a file cut at {cut} of {} bytes was accepted",
            b.len()
        );
    }
    // Cut inside the first value, and inside the last tensor info: the message names where.
    let one = Writer {
        version: 3,
        kv: vec![("general.name".into(), s("a name long enough to cut"))],
        tensors: vec![],
    };
    // Inside the string's length, then inside its bytes (a length beyond the file).
    let b1 = one.bytes();
    let key_end = HEADER + 8 + "general.name".len() + 4;
    let r = Gguf::parse(b1[..key_end + 3].to_vec()).expect_err("cut");
    assert_eq!(
        r,
        GgufError::Truncated {
            what: "the value of metadata key `general.name`".into()
        }
    );
    let r = Gguf::parse(b1[..key_end + 12].to_vec()).expect_err("cut");
    assert!(
        matches!(&r, GgufError::BadCount { what, .. } if what.contains("`general.name`")),
        "{r:?}"
    );
    let name = b"blk.0.ffn_down.weight";
    let r = refused(
        "cut-info",
        &b[..find(&b, name) + name.len() + 2],
        "blk.0.ffn_down.weight",
    );
    assert!(matches!(r, GgufError::Truncated { .. }), "{r:?}");
}

#[test]
fn tensor_data_past_the_end_names_the_tensor() {
    let w = tiny("llama");
    let last = w.tensors.last().map(|t| t.0.clone()).expect("tensors");
    let mut b = w.bytes();
    b.truncate(b.len() - 40); // into the last tensor's data
    let r = refused("past-end", &b, &last);
    assert!(matches!(r, GgufError::TensorOutOfBounds { .. }), "{r:?}");
}

#[test]
fn hostile_counts_are_refused_before_allocating() {
    let good = tiny("llama").bytes();
    // Metadata count u64::MAX.
    let mut b = good.clone();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        refused("kv-count", &b, "metadata count"),
        GgufError::BadCount { .. }
    ));
    // Tensor count 2^40.
    let mut b = good.clone();
    b[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(
        refused("tensor-count", &b, "tensor count"),
        GgufError::BadCount { .. }
    ));
    // An array claiming 2^60 strings.
    let mut w = tiny("llama");
    w.set("general.tags", Value::Array(vec![s("x")]));
    let mut b = w.bytes();
    let at = find(&b, b"general.tags") + "general.tags".len() + 4 + 4;
    b[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(matches!(
        refused("array-count", &b, "general.tags"),
        GgufError::BadCount { .. }
    ));
    // A string length beyond the file.
    let mut b = good;
    let at = find(&b, b"general.architecture") + "general.architecture".len() + 4;
    b[at..at + 8].copy_from_slice(&(1u64 << 50).to_le_bytes());
    refused("string-len", &b, "general.architecture");
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle in the file")
}

#[test]
fn bad_metadata_types_and_nesting_are_refused() {
    let mut w = tiny("llama");
    w.set("general.odd", Value::U8(0));
    let mut b = w.bytes();
    let at = find(&b, b"general.odd") + "general.odd".len();
    b[at..at + 4].copy_from_slice(&13u32.to_le_bytes());
    assert_eq!(
        refused("value-type", &b, "general.odd"),
        GgufError::UnknownValueType {
            key: "general.odd".into(),
            type_id: 13
        }
    );
    let mut deep = Value::Array(vec![Value::U8(1)]);
    for _ in 0..6 {
        deep = Value::Array(vec![deep]);
    }
    let mut w = tiny("llama");
    w.set("general.deep", deep);
    assert!(matches!(
        refused("deep", &w.bytes(), "general.deep"),
        GgufError::TooDeep { .. }
    ));
    // Nested arrays that are not too deep parse.
    let nested = Value::Array(vec![
        Value::Array(vec![s("a"), s("b")]),
        Value::Array(vec![]),
    ]);
    let mut w = tiny("llama");
    w.set("general.nested", nested.clone());
    let g = Gguf::parse(w.bytes()).expect("parse");
    assert_eq!(g.metadata.get("general.nested"), Some(&nested));
}

#[test]
fn missing_and_mistyped_keys_are_named() {
    let mut w = tiny("llama");
    w.remove("llama.embedding_length");
    assert_eq!(
        refused("missing-key", &w.bytes(), "llama.embedding_length"),
        GgufError::MissingKey {
            key: "llama.embedding_length".into()
        }
    );
    let mut w = tiny("llama");
    w.set("llama.block_count", s("thirty"));
    assert!(matches!(
        refused("typed-key", &w.bytes(), "llama.block_count"),
        GgufError::KeyType { .. }
    ));
    let mut w = tiny("llama");
    w.set("llama.attention.head_count_kv", Value::U32(3));
    refused("kv-divisor", &w.bytes(), "llama.attention.head_count_kv");
    let mut w = tiny("llama");
    w.set("tokenizer.ggml.model", s("llama"));
    refused("spm", &w.bytes(), "tokenizer.ggml.model");
    let mut w = tiny("llama");
    w.set("tokenizer.ggml.pre", s("mystery"));
    refused("pre", &w.bytes(), "tokenizer.ggml.pre");
    let mut w = tiny("llama");
    w.set("tokenizer.ggml.eos_token_id", Value::U32(8));
    refused("eos-range", &w.bytes(), "tokenizer.ggml.eos_token_id");
    let mut w = tiny("llama");
    w.set("general.alignment", Value::U32(24));
    refused("alignment", &w.bytes(), "general.alignment");
    let mut w = tiny("llama");
    w.set("llama.rope.scaling.type", s("yarn"));
    refused("rope-scaling", &w.bytes(), "llama.rope.scaling.type");
}

#[test]
fn unknown_architecture_is_refused() {
    let mut w = tiny("llama");
    w.set("general.architecture", s("mamba"));
    assert_eq!(
        refused("arch", &w.bytes(), "mamba"),
        GgufError::UnsupportedArchitecture {
            arch: "mamba".into()
        }
    );
}

#[test]
fn unsupported_and_unknown_tensor_types_are_named() {
    let mut w = tiny("llama");
    // 32 x 64 elements of Q4_K would be 144-byte blocks of 256; the type is refused first.
    w.tensor("blk.0.ffn_up.weight", &[HIDDEN, FFN], 12, vec![0; 1152]);
    let r = refused("q4k", &w.bytes(), "blk.0.ffn_up.weight");
    assert!(r.to_string().contains("Q4_K"), "{r}");
    let mut w = tiny("llama");
    w.tensor("blk.0.ffn_up.weight", &[HIDDEN, FFN], 99, vec![0; 64]);
    assert!(matches!(
        refused("type99", &w.bytes(), "blk.0.ffn_up.weight"),
        GgufError::UnknownTensorType { type_id: 99, .. }
    ));
}

#[test]
fn missing_unexpected_and_misshapen_tensors_are_named() {
    let mut w = tiny("llama");
    w.tensors.retain(|t| t.0 != "blk.0.ffn_up.weight");
    assert_eq!(
        refused("missing-tensor", &w.bytes(), "blk.0.ffn_up.weight"),
        GgufError::MissingTensor {
            tensor: "blk.0.ffn_up.weight".into()
        }
    );
    let mut w = tiny("llama");
    w.f32_tensor("rope_freqs.weight", &[4], &[1.0; 4]);
    assert!(matches!(
        refused("unexpected", &w.bytes(), "rope_freqs.weight"),
        GgufError::UnexpectedTensor { .. }
    ));
    let mut w = tiny("llama");
    w.f32_tensor("blk.1.attn_norm.weight", &[HIDDEN], &[1.0; 32]);
    refused("layer-out-of-range", &w.bytes(), "blk.1.attn_norm.weight");
    // llama has no q bias.
    let mut w = tiny("llama");
    w.f32_tensor("blk.0.attn_q.bias", &[32], &[0.0; 32]);
    refused("llama-bias", &w.bytes(), "blk.0.attn_q.bias");
    let mut w = tiny("llama");
    w.f32_tensor("blk.0.ffn_down.weight", &[HIDDEN, FFN], &values(2048, 1.0));
    let r = refused("shape", &w.bytes(), "blk.0.ffn_down.weight");
    assert!(matches!(r, GgufError::BadTensor { .. }), "{r:?}");
    let mut w = tiny("llama");
    w.tensor("output_norm.weight", &[30], 0, vec![0; 120]);
    refused("shape-norm", &w.bytes(), "output_norm.weight");
    // A row that is not whole blocks (checked by the reader: no llama shape here has one).
    let mut w = tiny("llama");
    w.tensor("odd", &[16], 2, vec![0; 18]);
    let g = Gguf::parse(w.bytes()).expect("parse");
    let odd = g.tensors.iter().find(|t| t.name == "odd").expect("odd");
    let r = g.tensor_data(odd).expect_err("half a Q4_0 block");
    assert!(
        r.to_string().contains("`odd`") && r.to_string().contains("block"),
        "{r}"
    );
    let mut w = tiny("llama");
    w.f32_tensor("output_norm.weight", &[HIDDEN], &[1.0; 32]);
    w.tensors.push(w.tensors[0].clone());
    assert!(matches!(
        refused("duplicate", &w.bytes(), "token_embd.weight"),
        GgufError::Duplicate { .. }
    ));
}

#[test]
fn misaligned_offsets_and_too_many_dims_are_refused() {
    let w = tiny("llama");
    let mut b = w.bytes();
    // The second tensor info's offset field: after its name, n_dims, one dim and its type.
    let name = b"output_norm.weight";
    let at = find(&b, name) + name.len() + 4 + 8 + 4;
    let offset = u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    b[at..at + 8].copy_from_slice(&(offset + 4).to_le_bytes());
    let r = refused("misaligned", &b, "output_norm.weight");
    assert!(r.to_string().contains("multiple of 32"), "{r}");

    let mut w = tiny("llama");
    w.f32_tensor("output_norm.weight", &[2, 2, 2, 2, 2], &[0.0; 32]);
    refused("dims", &w.bytes(), "output_norm.weight");
}
