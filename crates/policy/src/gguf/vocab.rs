//! A GGUF's byte-level BPE vocabulary (`tokenizer.ggml.model = gpt2`) as `tokenizer.json` and
//! `tokenizer_config.json`.
//!
//! The tokens, merges and special tokens come from the file; the pre-tokenizer does not (a GGUF
//! names it only by `tokenizer.ggml.pre`), so it is rebuilt from llama.cpp's table of those
//! names (`llama-vocab.cpp`), which is what the merges were learnt with. For `smollm` that is
//! "isolate every digit, then GPT-2's regex", as in SmolLM2's own `tokenizer.json`. (transformers'
//! GGUF loader, as of 5.24, falls back to GPT-2's regex alone for `smollm`; the two encode
//! whitespace before a digit differently, e.g. `"  1"` is `ĠĠ 1` here and `Ġ Ġ 1` there. The
//! fixture test records both.) Names outside the table are refused rather than guessed.

use super::{Gguf, GgufError, Value};
use crate::tokenizer::QWEN_SPLIT_REGEX;
use serde_json::{Map, json};

/// Llama 3's split regex (its `tokenizer.json`; llama.cpp's `llama-bpe`).
const LLAMA3_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp's token types (`llama_token_type`).
const CONTROL: i128 = 3;
const USER_DEFINED: i128 = 4;

/// Special token ids from the metadata (`None` when the file names none).
#[derive(Debug, Clone, Default)]
pub(super) struct SpecialIds {
    pub bos: Option<u64>,
    pub eos: Option<u64>,
    pub pad: Option<u64>,
    pub unk: Option<u64>,
}

/// The tokenizer files' contents.
#[derive(Debug)]
pub(super) struct Built {
    pub json: String,
    pub config: serde_json::Value,
    pub ids: SpecialIds,
}

fn key_err(key: &str, expected: &str, found: impl Into<String>) -> GgufError {
    GgufError::KeyType {
        key: key.to_string(),
        expected: expected.to_string(),
        found: found.into(),
    }
}

/// GPT-2's byte-to-character table (`bytes_to_unicode`): printable bytes map to themselves,
/// the others to U+0100 onwards in byte order.
fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let printable = matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
        let code = if printable {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        *slot = char::from_u32(code).unwrap_or('\0');
    }
    table
}

fn pre_tokenizer(pre: &str, add_prefix_space: bool) -> Result<serde_json::Value, GgufError> {
    let byte_level = |use_regex: bool| {
        json!({"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": true,
               "use_regex": use_regex})
    };
    let split = |regex: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]})
    };
    Ok(match pre {
        "default" | "gpt-2" | "gpt2" => byte_level(true),
        "smollm" | "starcoder" | "refact" | "codeshell" => json!({"type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)]}),
        "qwen2" | "deepseek-r1-qwen" => split(QWEN_SPLIT_REGEX),
        "llama-bpe" | "llama3" | "llama-v3" | "smaug-bpe" => split(LLAMA3_SPLIT_REGEX),
        other => {
            return Err(key_err(
                "tokenizer.ggml.pre",
                "one of default, gpt-2, smollm, starcoder, refact, codeshell, qwen2, \
                 deepseek-r1-qwen, llama-bpe, llama3, smaug-bpe",
                format!("{other:?}"),
            ));
        }
    })
}

fn strings<'a>(key: &str, values: &'a [Value]) -> Result<Vec<&'a str>, GgufError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Str(s) => Ok(s.as_str()),
            other => Err(key_err(&format!("{key}[{i}]"), "string", other.type_name())),
        })
        .collect()
}

fn special_id(g: &Gguf, key: &str, n_tokens: usize) -> Result<Option<u64>, GgufError> {
    match g.optional(key, Gguf::get_u64)? {
        Some(id) if id >= n_tokens as u64 => Err(key_err(
            key,
            &format!("a token id below {n_tokens}"),
            id.to_string(),
        )),
        id => Ok(id),
    }
}

/// Builds the tokenizer files from `g`'s metadata, for a model of `vocab_size` embeddings.
pub(super) fn build(g: &Gguf, vocab_size: u64, context: u64) -> Result<Built, GgufError> {
    let model = g.get_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(key_err(
            "tokenizer.ggml.model",
            "\"gpt2\" (byte-level BPE; sentencepiece vocabularies are not supported)",
            format!("{model:?}"),
        ));
    }
    let tokens = strings(
        "tokenizer.ggml.tokens",
        g.get_array("tokenizer.ggml.tokens")?,
    )?;
    if tokens.is_empty() || tokens.len() as u64 > vocab_size {
        return Err(key_err(
            "tokenizer.ggml.tokens",
            &format!("1 to {vocab_size} tokens (the embedding's rows)"),
            tokens.len().to_string(),
        ));
    }
    let types: Vec<i128> = match g.optional("tokenizer.ggml.token_type", Gguf::get_array)? {
        None => vec![1; tokens.len()],
        Some(a) if a.len() == tokens.len() => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_i128().ok_or_else(|| {
                    key_err(
                        &format!("tokenizer.ggml.token_type[{i}]"),
                        "an integer",
                        v.type_name(),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        Some(a) => {
            return Err(key_err(
                "tokenizer.ggml.token_type",
                &format!("{} entries, one per token", tokens.len()),
                a.len().to_string(),
            ));
        }
    };
    let merges = strings(
        "tokenizer.ggml.merges",
        g.get_array("tokenizer.ggml.merges")?,
    )?;
    if let Some(i) = merges.iter().position(|m| m.split(' ').count() != 2) {
        return Err(key_err(
            &format!("tokenizer.ggml.merges[{i}]"),
            "two tokens separated by one space",
            format!("{:?}", merges[i]),
        ));
    }
    let ids = SpecialIds {
        bos: special_id(g, "tokenizer.ggml.bos_token_id", tokens.len())?,
        eos: special_id(g, "tokenizer.ggml.eos_token_id", tokens.len())?,
        pad: special_id(g, "tokenizer.ggml.padding_token_id", tokens.len())?,
        unk: special_id(g, "tokenizer.ggml.unknown_token_id", tokens.len())?,
    };
    let add_bos = g
        .optional("tokenizer.ggml.add_bos_token", Gguf::get_bool)?
        .unwrap_or(false);
    let add_prefix_space = g
        .optional("tokenizer.ggml.add_space_prefix", Gguf::get_bool)?
        .unwrap_or(false);
    let pre = g
        .optional("tokenizer.ggml.pre", Gguf::get_str)?
        .unwrap_or("default");
    let chat_template = g.optional("tokenizer.chat_template", Gguf::get_str)?;

    // Tokens are stored in GPT-2's byte alphabet; one that is not (a llama.cpp mislabel) is
    // respelled from its UTF-8 bytes, and not made special, as transformers does.
    let chars = byte_chars();
    let alphabet: std::collections::HashSet<char> = chars.iter().copied().collect();
    let in_alphabet = |t: &str| t.chars().all(|c| alphabet.contains(&c));
    let mut vocab = Map::new();
    for (i, t) in tokens.iter().enumerate() {
        let spelled = if in_alphabet(t) {
            (*t).to_string()
        } else {
            t.bytes().map(|b| chars[b as usize]).collect()
        };
        vocab.insert(spelled, json!(i));
    }
    let mut added = vec![];
    let mut decoder = Map::new();
    for (i, (t, ty)) in tokens.iter().zip(&types).enumerate() {
        let special = *ty == CONTROL && in_alphabet(t);
        if special || (*ty == USER_DEFINED && vocab.contains_key(*t)) {
            let entry = json!({"content": t, "single_word": false, "lstrip": false,
                               "rstrip": false, "normalized": false, "special": special});
            decoder.insert(i.to_string(), entry.clone());
            let mut with_id = json!({"id": i});
            if let (Some(o), Some(e)) = (with_id.as_object_mut(), entry.as_object()) {
                o.extend(e.clone());
            }
            added.push(with_id);
        }
    }
    let name = |id: Option<u64>| id.map(|i| tokens[i as usize]);
    let post_processor = match (add_bos, name(ids.bos)) {
        (true, Some(bos)) => json!({"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [ids.bos], "tokens": [bos]}}}),
        _ => json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false,
                    "use_regex": true}),
    };
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer(pre, add_prefix_space)?,
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                    "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges},
    });
    let json = serde_json::to_string_pretty(&tokenizer).map_err(|e| GgufError::Tokenizer {
        reason: e.to_string(),
    })?;
    // The tokenizers crate is the judge of whether the file loads.
    json.parse::<tokenizers::Tokenizer>()
        .map_err(|e| GgufError::Tokenizer {
            reason: format!("the rebuilt tokenizer.json does not load: {e}"),
        })?;
    let config = json!({
        "add_bos_token": add_bos,
        "add_prefix_space": add_prefix_space,
        "added_tokens_decoder": decoder,
        "bos_token": name(ids.bos),
        "eos_token": name(ids.eos),
        "pad_token": name(ids.pad),
        "unk_token": name(ids.unk),
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": false,
        "model_max_length": context,
        // Loads tokenizer.json as written (a model class's tokenizer could rebuild its own
        // pre-tokenizer).
        "tokenizer_class": "PreTrainedTokenizerFast",
    });
    Ok(Built { json, config, ids })
}
