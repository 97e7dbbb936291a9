//! `tokenizer.json` through Hugging Face's `tokenizers` crate, and the byte-level BPE trainer
//! behind the tiny preset.
//!
//! Token ids are `i64` here (libtorch's index kind); special tokens written in a text (e.g.
//! `<|im_start|>`) encode to their ids, as in Qwen's chat templates. Encoding never adds
//! special tokens of its own (Qwen3's tokenizer adds none either).

use crate::error::{PolicyError, Result};
use std::path::Path;
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

/// Qwen2/Qwen3's pre-tokenizer regex (from their `tokenizer.json`): contractions, letter runs
/// with one leading non-letter, single digits, punctuation runs, newlines, spaces.
pub const QWEN_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// End of text; also the padding token of Qwen models.
pub const END_OF_TEXT: &str = "<|endoftext|>";
/// Opens a chat turn.
pub const IM_START: &str = "<|im_start|>";
/// Closes a chat turn; the end-of-sequence token of chat models.
pub const IM_END: &str = "<|im_end|>";

/// A loaded tokenizer.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

fn tk_err(context: &str, e: impl std::fmt::Display) -> PolicyError {
    PolicyError::Tokenizer(format!("{context}: {e}"))
}

impl Tokenizer {
    /// Reads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| tk_err(&path.display().to_string(), e))?;
        Ok(Self { inner })
    }

    /// Writes `tokenizer.json` (pretty, as transformers writes it).
    pub fn save(&self, path: &Path) -> Result<()> {
        self.inner
            .save(path, true)
            .map_err(|e| tk_err(&path.display().to_string(), e))
    }

    /// The tokenizer as `tokenizer.json` text.
    pub fn to_json(&self) -> Result<String> {
        self.inner
            .to_string(true)
            .map_err(|e| tk_err("serialize", e))
    }

    /// Token ids of `text`; special tokens in the text map to their ids.
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| tk_err("encode", e))?;
        Ok(enc.get_ids().iter().map(|&i| i64::from(i)).collect())
    }

    /// The text of `ids`, optionally without special tokens. Ids outside the vocabulary are an
    /// error rather than silently dropped.
    pub fn decode(&self, ids: &[i64], skip_special_tokens: bool) -> Result<String> {
        let n = self.vocab_size() as i64;
        let ids = ids
            .iter()
            .map(|&i| {
                if (0..n).contains(&i) {
                    Ok(i as u32)
                } else {
                    Err(PolicyError::InvalidInput(format!(
                        "token id {i} outside the tokenizer's {n} tokens"
                    )))
                }
            })
            .collect::<Result<Vec<u32>>>()?;
        self.inner
            .decode(&ids, skip_special_tokens)
            .map_err(|e| tk_err("decode", e))
    }

    /// The id of a token (e.g. [`IM_END`]), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<i64> {
        self.inner.token_to_id(token).map(i64::from)
    }

    /// Number of tokens, added (special) tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Trains a byte-level BPE with Qwen's pre-tokenizer on `texts`, with `vocab_size` tokens
    /// in all: [`END_OF_TEXT`], [`IM_START`], [`IM_END`] (ids 0, 1, 2), the 256 byte symbols,
    /// then merges. The result depends only on the texts and their order: the trainer breaks
    /// ties between equally frequent pairs by pair id.
    pub fn train_bpe<S: AsRef<str> + Send + Sync>(texts: &[S], vocab_size: usize) -> Result<Self> {
        let specials = [END_OF_TEXT, IM_START, IM_END];
        if vocab_size < 256 + specials.len() {
            return Err(PolicyError::InvalidInput(format!(
                "vocab_size {vocab_size} is smaller than 256 bytes + {} special tokens",
                specials.len()
            )));
        }
        let split = Split::new(
            SplitPattern::Regex(QWEN_SPLIT_REGEX.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| tk_err("regex", e))?;
        let byte_level = ByteLevel::new(false, false, false);
        let mut inner = tokenizers::Tokenizer::new(BPE::default());
        inner
            .with_pre_tokenizer(Some(Sequence::new(vec![split.into(), byte_level.into()])))
            .with_decoder(Some(ByteLevel::default()));
        let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
            .show_progress(false)
            .vocab_size(vocab_size)
            .min_frequency(2)
            .special_tokens(
                specials
                    .iter()
                    .map(|s| AddedToken::from(*s, true))
                    .collect(),
            )
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build()
            .into();
        inner
            .train(&mut trainer, texts.iter().map(|t| t.as_ref()))
            .map_err(|e| tk_err("train", e))?;
        Ok(Self { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Vec<String> {
        (0..50)
            .map(|i| {
                format!("def step(self, action):\n    return 'obs {i}', 1.0, True, False, {{}}\n")
            })
            .collect()
    }

    #[test]
    fn bpe_training_is_deterministic_and_round_trips_text() -> Result<()> {
        let a = Tokenizer::train_bpe(&corpus(), 300)?;
        let b = Tokenizer::train_bpe(&corpus(), 300)?;
        assert_eq!(a.to_json()?, b.to_json()?);
        assert_eq!(a.vocab_size(), 300);
        assert_eq!(
            (
                a.token_id(END_OF_TEXT),
                a.token_id(IM_START),
                a.token_id(IM_END)
            ),
            (Some(0), Some(1), Some(2))
        );
        let text = "<|im_start|>agent\ndef step(self, action): ünïcode ✓<|im_end|>";
        let ids = a.encode(text)?;
        assert_eq!(ids[0], 1);
        assert_eq!(ids.last(), Some(&2));
        // Merges were learnt: the frequent line encodes to fewer tokens than bytes.
        assert!(a.encode("    return 'obs 7'")?.len() < 12);
        assert_eq!(a.decode(&ids, false)?, text);
        assert!(!a.decode(&ids, true)?.contains("<|im_start|>"));
        Ok(())
    }

    #[test]
    fn out_of_range_ids_are_refused() -> Result<()> {
        let t = Tokenizer::train_bpe(&corpus(), 280)?;
        assert!(t.decode(&[5, 280], false).is_err());
        assert!(t.decode(&[-1], false).is_err());
        Ok(())
    }
}
