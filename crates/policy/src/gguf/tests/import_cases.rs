//! Whole imports of tiny synthesised models: names, shapes, values, the Q/K un-permutation,
//! config, tokenizer files, and the directory handling (no half-written output).

use super::*;

#[test]
fn unpermute_inverts_llama_cpp_permutation() {
    for (rows, cols, heads) in [(32, 3, 4), (16, 5, 2), (8, 1, 1), (576, 2, 9)] {
        let w = values(rows * cols, 0.5);
        let p = permute_rows(&w, rows, cols, heads);
        assert_ne!(
            p, w,
            "the permutation must move rows ({rows}x{cols}, {heads} heads)"
        );
        assert_eq!(unpermute_rows(&p, rows, cols, heads), w);
    }
    // One head of 4 rows: the converter interleaves the halves [r0 r1 | r2 r3] -> r0 r2 r1 r3.
    let w: Vec<f32> = (0..4).map(|r| r as f32).collect();
    assert_eq!(permute_rows(&w, 4, 1, 1), [0.0, 2.0, 1.0, 3.0]);
    assert_eq!(unpermute_rows(&[0.0, 2.0, 1.0, 3.0], 4, 1, 1), w);
}

#[test]
fn llama_imports_with_names_shapes_values_and_unpermuted_q_k() {
    let w = tiny("llama");
    let (out, r) = import_bytes("llama", &w.bytes());
    let summary = r.expect("import");
    assert_eq!(summary.architecture, "llama");
    assert_eq!(summary.tensors, 11);
    let tensor = |name: &str| {
        let t = w.tensors.iter().find(|t| t.0 == name).expect(name);
        let v: Vec<f32> =
            t.3.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
        (t.1.iter().rev().map(|&d| d as usize).collect::<Vec<_>>(), v)
    };
    let plain = [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        (
            "blk.0.attn_norm.weight",
            "model.layers.0.input_layernorm.weight",
        ),
        (
            "blk.0.ffn_norm.weight",
            "model.layers.0.post_attention_layernorm.weight",
        ),
        (
            "blk.0.attn_v.weight",
            "model.layers.0.self_attn.v_proj.weight",
        ),
        (
            "blk.0.attn_output.weight",
            "model.layers.0.self_attn.o_proj.weight",
        ),
        (
            "blk.0.ffn_gate.weight",
            "model.layers.0.mlp.gate_proj.weight",
        ),
        ("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"),
        (
            "blk.0.ffn_down.weight",
            "model.layers.0.mlp.down_proj.weight",
        ),
    ];
    let mut params = 0;
    for (g, hf) in plain {
        let want = tensor(g);
        assert_eq!(read_f32(&out, hf), want, "{g} -> {hf}");
        params += want.1.len() as u64;
    }
    // q and k come back in Hugging Face's row order: permuting them again gives the file's.
    for (g, hf, heads) in [
        (
            "blk.0.attn_q.weight",
            "model.layers.0.self_attn.q_proj.weight",
            HEADS,
        ),
        (
            "blk.0.attn_k.weight",
            "model.layers.0.self_attn.k_proj.weight",
            KV_HEADS,
        ),
    ] {
        let (shape, file) = tensor(g);
        let (got_shape, got) = read_f32(&out, hf);
        assert_eq!(got_shape, shape);
        assert_ne!(got, file, "{g} was not un-permuted");
        assert_eq!(permute_rows(&got, shape[0], shape[1], heads as usize), file);
        params += got.len() as u64;
    }
    assert_eq!(summary.parameters, params);

    let c = json_of(&out.join("config.json"));
    for (k, v) in [
        ("architectures", serde_json::json!(["LlamaForCausalLM"])),
        ("model_type", "llama".into()),
        ("hidden_size", HIDDEN.into()),
        ("intermediate_size", FFN.into()),
        ("num_hidden_layers", 1.into()),
        ("num_attention_heads", HEADS.into()),
        ("num_key_value_heads", KV_HEADS.into()),
        ("head_dim", HEAD_DIM.into()),
        ("max_position_embeddings", 256.into()),
        ("rope_theta", 100_000.0.into()),
        ("tie_word_embeddings", true.into()),
        ("vocab_size", 8.into()),
        ("bos_token_id", 1.into()),
        ("eos_token_id", 2.into()),
        ("pad_token_id", 2.into()),
        ("attention_bias", false.into()),
        ("hidden_act", "silu".into()),
        ("torch_dtype", "float32".into()),
    ] {
        assert_eq!(c[k], v, "config.json `{k}`");
    }
    assert!((c["rms_norm_eps"].as_f64().unwrap_or(0.0) - 1e-5).abs() < 1e-12);
    let g = json_of(&out.join("generation_config.json"));
    assert_eq!(
        (&g["bos_token_id"], &g["eos_token_id"]),
        (&1.into(), &2.into())
    );

    let tc = json_of(&out.join("tokenizer_config.json"));
    assert_eq!(tc["chat_template"], TEMPLATE);
    assert_eq!(tc["bos_token"], "<|im_start|>");
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert_eq!(tc["pad_token"], "<|im_end|>");
    let tok = crate::tokenizer::Tokenizer::from_file(&out.join("tokenizer.json")).expect("load");
    assert_eq!(tok.vocab_size(), 8);
    // Specials stay whole, merges apply, the leading space merges through "Ġ ab".
    assert_eq!(
        tok.encode("<|im_start|>ab ab<|im_end|>").expect("encode"),
        [1, 6, 7, 2]
    );
    assert_eq!(tok.decode(&[1, 6, 7, 2], true).expect("decode"), "ab ab");
}

#[test]
fn untied_output_becomes_lm_head() {
    let mut w = tiny("llama");
    let lm = values(8 * HIDDEN as usize, 9.0);
    w.f32_tensor("output.weight", &[HIDDEN, 8], &lm);
    let (out, r) = import_bytes("untied", &w.bytes());
    r.expect("import");
    assert_eq!(
        read_f32(&out, "lm_head.weight"),
        (vec![8, HIDDEN as usize], lm)
    );
    assert_eq!(
        json_of(&out.join("config.json"))["tie_word_embeddings"],
        false
    );
}

#[test]
fn qwen2_keeps_row_order_and_maps_biases() {
    let w = tiny("qwen2");
    let (out, r) = import_bytes("qwen2", &w.bytes());
    r.expect("import");
    let raw = |name: &str| -> Vec<f32> {
        let t = w.tensors.iter().find(|t| t.0 == name).expect(name);
        t.3.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    for (g, hf) in [
        ("blk.0.attn_q.weight", "self_attn.q_proj.weight"),
        ("blk.0.attn_k.weight", "self_attn.k_proj.weight"),
        ("blk.0.attn_q.bias", "self_attn.q_proj.bias"),
        ("blk.0.attn_k.bias", "self_attn.k_proj.bias"),
        ("blk.0.attn_v.bias", "self_attn.v_proj.bias"),
    ] {
        assert_eq!(
            read_f32(&out, &format!("model.layers.0.{hf}")).1,
            raw(g),
            "{g}"
        );
    }
    let c = json_of(&out.join("config.json"));
    assert_eq!(c["architectures"], serde_json::json!(["Qwen2ForCausalLM"]));
    assert_eq!(c["model_type"], "qwen2");
}

#[test]
fn version_2_files_import_too() {
    let mut w = tiny("llama");
    w.version = 2;
    import_bytes("v2", &w.bytes()).1.expect("a v2 file imports");
}

#[test]
fn occupied_out_is_refused_and_replace_swaps_only_on_success() {
    let dir = tempdir("occupied");
    let file = dir.join("m.gguf");
    std::fs::write(&file, tiny("llama").bytes()).expect("write");
    let out = dir.join("ckpt");
    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::write(out.join("keep.txt"), "old").expect("write");
    let r = import(&file, &out, |_, _| {});
    assert!(
        matches!(&r, Err(PolicyError::InvalidInput(m)) if m.contains("not empty")),
        "{r:?}"
    );
    assert!(out.join("keep.txt").exists());

    // A failing import with replace leaves the old directory and no temporary one.
    let broken = dir.join("broken.gguf");
    let mut w = tiny("llama");
    w.remove("llama.block_count");
    std::fs::write(&broken, w.bytes()).expect("write");
    assert!(import_replacing(&broken, &out, |_, _| {}).is_err());
    assert!(out.join("keep.txt").exists());
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let mut seen = vec![];
    import_replacing(&file, &out, |k, n| seen.push((k, n))).expect("replace");
    assert!(!out.join("keep.txt").exists());
    assert!(out.join("model.safetensors").exists());
    assert_eq!(seen.len(), 11);
    assert_eq!(seen.last(), Some(&(11, 11)));
}
