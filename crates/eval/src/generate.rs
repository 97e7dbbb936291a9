//! Batched answers from the policy: chat-template prompts, the model's context respected,
//! greedy by default (evaluation should not depend on sampling luck unless asked).

use crate::error::EvalError;
use serde::{Deserialize, Serialize};
use spade_policy::Policy;
use spade_policy::chat::{Message, Speaker, render};
use spade_policy::sample::{SamplingParams, generate};
use spade_policy::tokenizer::{IM_END, Tokenizer};

/// How answers are sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// 0 is greedy (the default for evaluation).
    pub temperature: f64,
    pub top_p: f64,
    /// Tokens per reply (per turn for environments).
    pub max_new_tokens: usize,
    /// Prompts per forward batch.
    pub batch_size: usize,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            max_new_tokens: 1024,
            batch_size: 8,
        }
    }
}

impl Sampling {
    pub fn validate(&self) -> Result<(), EvalError> {
        let bad = |option, reason: String| Err(EvalError::InvalidOption { option, reason });
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(
                "temperature",
                format!("must be >= 0 (0 is greedy), got {}", self.temperature),
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", format!("must be in (0, 1], got {}", self.top_p));
        }
        if self.max_new_tokens == 0 {
            return bad("max_new_tokens", "must be at least 1".into());
        }
        if self.batch_size == 0 {
            return bad("batch_size", "must be at least 1".into());
        }
        Ok(())
    }
}

/// A policy with its tokenizer and sampling settings.
#[derive(Debug)]
pub struct Generator<'a> {
    policy: &'a Policy,
    tok: &'a Tokenizer,
    sampling: Sampling,
    stop_ids: Vec<i64>,
    context: usize,
}

impl<'a> Generator<'a> {
    pub fn new(policy: &'a Policy, sampling: Sampling) -> Result<Self, EvalError> {
        sampling.validate()?;
        let tok = policy.require_tokenizer()?;
        let mut stop_ids = policy.config().eos_token_ids.clone();
        stop_ids.extend(tok.token_id(IM_END));
        let context = usize::try_from(policy.config().max_position_embeddings).unwrap_or(0);
        Ok(Self {
            policy,
            tok,
            sampling,
            stop_ids,
            context,
        })
    }

    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// The chat prompt for one question: system prompt, user message, assistant turn open.
    pub fn chat(system: &str, user: &str) -> String {
        render(
            &[
                Message::new(Speaker::System, system),
                Message::new(Speaker::User, user),
            ],
            true,
        )
    }

    /// Replies to rendered `prompts`, one seed each. A prompt that leaves no room in the
    /// model's context gives `Err(reason)` for its row instead of failing the batch.
    pub fn complete(
        &self,
        prompts: &[String],
        seeds: &[u64],
    ) -> Result<Vec<Result<String, String>>, EvalError> {
        if seeds.len() != prompts.len() {
            return Err(EvalError::InvalidOption {
                option: "seeds",
                reason: format!("{} seeds for {} prompts", seeds.len(), prompts.len()),
            });
        }
        let mut out: Vec<Result<String, String>> = Vec::with_capacity(prompts.len());
        let mut fits: Vec<(usize, Vec<i64>)> = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            let ids = self.tok.encode(p)?;
            if ids.is_empty() || ids.len() + 1 > self.context {
                out.push(Err(format!(
                    "the prompt has {} tokens; the model's context is {}",
                    ids.len(),
                    self.context
                )));
            } else {
                out.push(Err(String::new()));
                fits.push((i, ids));
            }
        }
        for chunk in fits.chunks(self.sampling.batch_size) {
            let longest = chunk.iter().map(|(_, ids)| ids.len()).max().unwrap_or(0);
            let params = SamplingParams {
                temperature: self.sampling.temperature,
                top_p: self.sampling.top_p,
                top_k: 0,
                // Longer prompts shorten the budget rather than overrun the context.
                max_new_tokens: self.sampling.max_new_tokens.min(self.context - longest),
                stop_token_ids: self.stop_ids.clone(),
                stop_strings: vec![],
            };
            let ids: Vec<Vec<i64>> = chunk.iter().map(|(_, ids)| ids.clone()).collect();
            let row_seeds: Vec<u64> = chunk.iter().map(|(i, _)| seeds[*i]).collect();
            // Decoded here rather than by `generate`: the embedding has more rows than the
            // tokenizer has tokens (rounded up to a multiple of 64, as Qwen does), and an
            // untrained model can sample those rows; they carry no text and are dropped.
            let completions = generate(self.policy.model(), &ids, &row_seeds, &params, None)?;
            let vocab = self.tok.vocab_size() as i64;
            for ((i, _), c) in chunk.iter().zip(completions) {
                let known: Vec<i64> = c.tokens.into_iter().filter(|&t| t < vocab).collect();
                out[*i] = Ok(self.tok.decode(&known, true)?);
            }
        }
        Ok(out)
    }
}

/// A seed for one reply, from the run's seed and the reply's coordinates (task, item, turn),
/// so that sampling with a temperature is reproducible and rows do not share randomness.
pub fn reply_seed(seed: u64, task: &str, item: u64, turn: u64) -> u64 {
    let mut h = fnv1a(task.as_bytes()) ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h = h.wrapping_add(item.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    h.wrapping_add(turn.wrapping_mul(0x94D0_49BB_1331_11EB))
}

/// FNV-1a, 64 bit: a stable hash of names for seeds (std's hasher may change between releases).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
