//! Batched sampling with a KV cache: temperature, top-k, top-p, a token budget, stop tokens,
//! stop strings, and one seed per row.
//!
//! Prompts of different lengths are left-padded into one batch; the cache is preallocated for
//! prompt + budget, so each step runs the model on one new token per row. A row's randomness
//! comes only from its own seed (a SplitMix64 stream drawing one uniform number per step), so a
//! row samples the same tokens whatever else shares its batch, up to float rounding.
//!
//! The returned log-probabilities are those of the sampled tokens under `softmax(logits / T)`
//! over the full vocabulary (before top-k and top-p truncation), the quantity GRPO's importance
//! ratios need and the trainer recomputes; with `temperature == 0` (greedy) they are under
//! `softmax(logits)`.

use crate::error::{PolicyError, Result};
use crate::qwen3::Qwen3;
use crate::tokenizer::Tokenizer;
use tch::{Device, Kind, Tensor};

/// What to sample and when to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 picks the most likely token (greedy).
    pub temperature: f64,
    /// Nucleus: sample among the most likely tokens whose probabilities sum to `top_p`
    /// (after the top-k cut, as vLLM and SGLang apply them).
    pub top_p: f64,
    /// Sample among the `top_k` most likely tokens only; 0 = no cut.
    pub top_k: usize,
    /// Tokens to generate at most per row.
    pub max_new_tokens: usize,
    /// Ids that end a row (included in its tokens), e.g. `<|im_end|>`.
    pub stop_token_ids: Vec<i64>,
    /// Texts that end a row once they appear in its output (needs a tokenizer).
    pub stop_strings: Vec<String>,
}

impl SamplingParams {
    /// Tokens to decode again to find a stop string that the newest token completed: the
    /// longest stop string in bytes plus one (a match spans at most that many tokens, since
    /// every token decodes to at least one byte); 1 without stop strings.
    pub fn stop_tail(&self) -> usize {
        self.stop_strings.iter().map(String::len).max().unwrap_or(0) + 1
    }
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            // The paper samples both roles at 0.6 (spade-spec.md, "Play").
            temperature: 0.6,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 256,
            stop_token_ids: vec![],
            stop_strings: vec![],
        }
    }
}

/// Why a row stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// It produced one of `stop_token_ids`.
    StopToken,
    /// Its text contains one of `stop_strings`.
    StopString,
    /// It used the whole token budget.
    Length,
}

/// One row's output.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// Generated ids, ending with the stop token or the token that completed a stop string.
    pub tokens: Vec<i64>,
    /// Log-probability of each generated token (see the module doc).
    pub logprobs: Vec<f32>,
    /// Decoded text without special tokens, cut right after a stop string (None without a
    /// tokenizer).
    pub text: Option<String>,
    pub finish: Finish,
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and reproducible across platforms.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Picks one token per row of `logits` [B, V]; returns ids [B] and their log-probs [B].
pub(crate) fn choose(
    logits: &Tensor,
    p: &SamplingParams,
    rngs: &mut [SplitMix64],
) -> (Tensor, Tensor) {
    if p.temperature <= 0.0 {
        let next = logits.argmax(-1, true);
        let lp = logits.log_softmax(-1, Kind::Float).gather(1, &next, false);
        return (next.squeeze_dim(1), lp.squeeze_dim(1));
    }
    let logp = (logits / p.temperature).log_softmax(-1, Kind::Float);
    let probs = logp.exp();
    let vocab = probs.size().last().copied().unwrap_or(0);
    let top_k = i64::try_from(p.top_k).unwrap_or(i64::MAX);
    let cut_k = top_k > 0 && top_k < vocab;
    let (kept, order) = if p.top_p < 1.0 || cut_k {
        let (mut sorted, order) = probs.sort(-1, true);
        if cut_k {
            let _ = sorted.narrow(-1, top_k, vocab - top_k).fill_(0.0);
        }
        // Keep a token if the mass before it is below top_p of what the top-k cut left (the
        // nucleus of the renormalised top k): the most likely always stays.
        if p.top_p < 1.0 {
            let before = sorted.cumsum(-1, Kind::Float) - &sorted;
            let total = sorted.sum_dim_intlist(-1, true, Kind::Float);
            sorted = &sorted * before.lt_tensor(&(total * p.top_p)).to_kind(Kind::Float);
        }
        (sorted, Some(order))
    } else {
        (probs, None)
    };
    // Inverse-CDF sampling with each row's own uniform number: searchsorted finds the first
    // index whose cumulative mass exceeds u, so zero-mass tokens are never picked.
    let cdf = kept.cumsum(-1, Kind::Float);
    let v = cdf.size()[1];
    let u: Vec<f32> = rngs.iter_mut().map(|r| r.next_f64() as f32).collect();
    let u = crate::qwen3::upload(&u, logits.device()).unsqueeze(1) * cdf.narrow(1, v - 1, 1);
    let pos = u
        .searchsorted(&cdf, false, true, "right", None::<Tensor>)
        .clamp_max(v - 1);
    let next = match order {
        Some(o) => o.gather(1, &pos, false),
        None => pos,
    };
    let lp = logp.gather(1, &next, false);
    (next.squeeze_dim(1), lp.squeeze_dim(1))
}

/// Samples a continuation of every prompt. `seeds` has one seed per prompt.
pub fn generate(
    model: &Qwen3,
    prompts: &[Vec<i64>],
    seeds: &[u64],
    params: &SamplingParams,
    tokenizer: Option<&Tokenizer>,
) -> Result<Vec<Completion>> {
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(PolicyError::InvalidInput("empty prompt".into()));
    }
    if seeds.len() != prompts.len() {
        return Err(PolicyError::InvalidInput(format!(
            "{} seeds for {} prompts",
            seeds.len(),
            prompts.len()
        )));
    }
    if !params.stop_strings.is_empty() && tokenizer.is_none() {
        return Err(PolicyError::InvalidInput(
            "stop strings need a tokenizer".into(),
        ));
    }
    let b = prompts.len();
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(b * width);
    let mut real = Vec::with_capacity(b * width);
    for p in prompts {
        let pad = width - p.len();
        ids.extend(std::iter::repeat_n(0, pad).chain(p.iter().copied()));
        real.extend((0..width).map(|i| i >= pad));
    }
    let dev = model.device();
    let shape = [b as i64, width as i64];
    let ids = Tensor::from_slice(&ids).view(shape).to_device(dev);
    let real = Tensor::from_slice(&real).view(shape).to_device(dev);
    let mut rngs: Vec<SplitMix64> = seeds.iter().map(|&s| SplitMix64::new(s)).collect();
    let mut rows: Vec<Row> = (0..b).map(|_| Row::default()).collect();
    let tail = params.stop_tail();

    // Checkpoints pad the embedding past the tokenizer (Qwen3: 151,936 rows for ~151,700 tokens;
    // the tiny preset rounds up to a multiple of 64). Those rows decode to nothing, so they must
    // never be sampled: their logits are masked to -inf, which also removes them from the
    // log-probabilities reported for GRPO.
    // Training masks the same rows (`Qwen3::mask_padded_vocab`), so its log-probs agree.
    let usable = Some(
        tokenizer
            .map_or(model.usable_vocab(), |t| t.vocab_size() as i64)
            .min(model.usable_vocab()),
    );
    let mask_padding = |logits: Tensor| -> Tensor {
        let n = logits.size().last().copied().unwrap_or(0);
        match usable {
            Some(u) if u > 0 && u < n => {
                let _ = logits.narrow(-1, u, n - u).fill_(f64::NEG_INFINITY);
                logits
            }
            _ => logits,
        }
    };

    tch::no_grad(|| -> Result<()> {
        let mut cache = model.new_cache(b as i64, (width + params.max_new_tokens) as i64);
        let h = model.forward_cached(&ids, Some(&real), &mut cache)?;
        let mut logits = mask_padding(model.logits(&h.select(1, -1)));
        for step in 0..params.max_new_tokens {
            let (next, lp) = choose(&logits, params, &mut rngs);
            let next_v = Vec::<i64>::try_from(next.to_device(Device::Cpu))?;
            let lp_v = Vec::<f32>::try_from(lp.to_device(Device::Cpu))?;
            for (r, row) in rows.iter_mut().enumerate() {
                if row.finish.is_some() {
                    continue;
                }
                row.tokens.push(next_v[r]);
                row.logprobs.push(lp_v[r]);
                if params.stop_token_ids.contains(&next_v[r]) {
                    row.finish = Some(Finish::StopToken);
                } else if let Some(t) = tokenizer.filter(|_| tail > 1) {
                    let from = row.tokens.len().saturating_sub(tail);
                    let text = t.decode(&row.tokens[from..], false)?;
                    if params
                        .stop_strings
                        .iter()
                        .any(|s| text.contains(s.as_str()))
                    {
                        row.finish = Some(Finish::StopString);
                    }
                }
            }
            if step + 1 == params.max_new_tokens || rows.iter().all(|r| r.finish.is_some()) {
                break;
            }
            let h = model.forward_cached_unchecked(&next.unsqueeze(1), None, &mut cache)?;
            logits = mask_padding(model.logits(&h.select(1, -1)));
        }
        Ok(())
    })?;

    rows.into_iter()
        .map(|row| {
            let text = match tokenizer {
                Some(t) => Some(cut_at_stop(
                    t.decode(&row.tokens, true)?,
                    &params.stop_strings,
                )),
                None => None,
            };
            Ok(Completion {
                tokens: row.tokens,
                logprobs: row.logprobs,
                text,
                finish: row.finish.unwrap_or(Finish::Length),
            })
        })
        .collect()
}

#[derive(Debug, Default)]
struct Row {
    tokens: Vec<i64>,
    logprobs: Vec<f32>,
    finish: Option<Finish>,
}

/// The text up to and including the earliest stop string in it.
pub(crate) fn cut_at_stop(text: String, stops: &[String]) -> String {
    let end = stops
        .iter()
        .filter_map(|s| text.find(s.as_str()).map(|i| i + s.len()))
        .min();
    match end {
        Some(e) => text[..e].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_reference_sequence() {
        // First outputs for seed 0 from the reference C implementation (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // probs 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps the first two tokens only.
        let logits = Tensor::from_slice(&[0.5f32, 0.3, 0.15, 0.05])
            .log()
            .view([1, 4]);
        let p = SamplingParams {
            temperature: 1.0,
            top_p: 0.7,
            ..Default::default()
        };
        let mut rng = [SplitMix64::new(7)];
        let mut seen = [0usize; 4];
        for _ in 0..400 {
            let (next, lp) = choose(&logits, &p, &mut rng);
            let i = next.int64_value(&[0]) as usize;
            seen[i] += 1;
            let expected = [0.5f64, 0.3, 0.15, 0.05][i].ln();
            assert!((lp.double_value(&[0]) - expected).abs() < 1e-5);
        }
        assert_eq!(seen[2] + seen[3], 0, "{seen:?}");
        // 0.5 / 0.8 of the nucleus: 250 expected of 400.
        assert!((200..300).contains(&seen[0]), "{seen:?}");
    }

    #[test]
    fn top_k_keeps_the_k_most_likely_and_top_p_reads_what_it_left() {
        // probs 0.5, 0.3, 0.15, 0.05.
        let logits = Tensor::from_slice(&[0.5f32, 0.3, 0.15, 0.05])
            .log()
            .view([1, 4]);
        let draw = |p: &SamplingParams| {
            let mut rng = [SplitMix64::new(11)];
            let mut seen = [0usize; 4];
            for _ in 0..400 {
                let (next, lp) = choose(&logits, p, &mut rng);
                let i = next.int64_value(&[0]) as usize;
                seen[i] += 1;
                // The reported log-prob stays the full distribution's, whatever the cut.
                let expected = [0.5f64, 0.3, 0.15, 0.05][i].ln();
                assert!((lp.double_value(&[0]) - expected).abs() < 1e-5);
            }
            seen
        };
        // top_k 2: tokens 0 and 1 in the ratio 0.5 : 0.3 (250 of 400 expected for token 0).
        let seen = draw(&SamplingParams {
            temperature: 1.0,
            top_k: 2,
            ..Default::default()
        });
        assert_eq!(seen[2] + seen[3], 0, "{seen:?}");
        assert!((200..300).contains(&seen[0]), "{seen:?}");
        assert!(seen[1] > 0, "{seen:?}");
        // top_k 2 then top_p 0.6: the top two renormalised are 0.625 and 0.375, so the mass
        // before token 1 (0.625) is past 0.6 and only token 0 stays. A top_p read on the
        // unrenormalised probabilities (0.5 before token 1) would keep both.
        let seen = draw(&SamplingParams {
            temperature: 1.0,
            top_k: 2,
            top_p: 0.6,
            ..Default::default()
        });
        assert_eq!(seen, [400, 0, 0, 0]);
        // top_k at or past the vocabulary cuts nothing: every token is drawn.
        let seen = draw(&SamplingParams {
            temperature: 1.0,
            top_k: 4,
            ..Default::default()
        });
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    #[test]
    fn greedy_picks_the_argmax() {
        let logits = Tensor::from_slice(&[0.1f32, 2.0, -1.0, 1.9, 0.0, 5.0]).view([2, 3]);
        let p = SamplingParams {
            temperature: 0.0,
            ..Default::default()
        };
        let (next, _) = choose(&logits, &p, &mut [SplitMix64::new(0), SplitMix64::new(1)]);
        assert_eq!(Vec::<i64>::try_from(next).ok(), Some(vec![1, 2]));
    }

    #[test]
    fn text_is_cut_after_the_earliest_stop_string() {
        let stops = vec!["</answer>".to_string(), "}".to_string()];
        assert_eq!(
            cut_at_stop("a \\boxed{4} b</answer>".into(), &stops),
            "a \\boxed{4}"
        );
        assert_eq!(cut_at_stop("plain".into(), &stops), "plain");
    }
}
