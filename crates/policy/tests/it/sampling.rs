//! Sampling as a user sees it: per-row seeds, budgets, stop tokens, and log-probs
//! that agree with a teacher-forced pass (what GRPO's ratios rely on). Stop strings are
//! tested in `training.rs`, where a fine-tuned model writes real text.

use crate::devices;
use spade_policy::preset::{self, BUILTIN_TEXT};
use spade_policy::sample::{Finish, SamplingParams, generate};
use spade_policy::train::token_logprobs;
use spade_policy::{Policy, Result};

fn tiny() -> Result<Policy> {
    tch::set_num_threads(1);
    preset::tiny(&[BUILTIN_TEXT], 11, |_| {})
}

fn params(temperature: f64, n: usize) -> SamplingParams {
    SamplingParams {
        temperature,
        max_new_tokens: n,
        ..Default::default()
    }
}

#[test]
fn a_row_samples_the_same_tokens_whatever_shares_its_batch() -> Result<()> {
    let p = tiny()?;
    let (a, b) = (vec![3, 50, 7, 81, 9, 10], vec![12, 13]);
    let pr = params(1.0, 24);
    let alone = generate(p.model(), std::slice::from_ref(&a), &[5], &pr, None)?;
    let batched = generate(p.model(), &[b.clone(), a.clone()], &[6, 5], &pr, None)?;
    assert_eq!(alone[0].tokens, batched[1].tokens);
    let other_seed = generate(p.model(), &[a], &[99], &pr, None)?;
    assert_ne!(alone[0].tokens, other_seed[0].tokens);
    assert_eq!(alone[0].tokens.len(), 24);
    assert_eq!(alone[0].finish, Finish::Length);
    Ok(())
}

#[test]
fn sampled_logprobs_equal_a_teacher_forced_pass_at_the_same_temperature() -> Result<()> {
    let p = tiny()?;
    for dev in devices() {
        let p = if dev.is_cuda() {
            Policy::new(
                p.config(),
                dev,
                tch::Kind::Float,
                spade_policy::qwen3::WeightInit::Zeros,
                None,
            )?
        } else {
            tiny()?
        };
        let prompts = vec![vec![4, 8, 15, 16, 23, 42], vec![7, 7]];
        let out = generate(p.model(), &prompts, &[1, 2], &params(0.7, 16), None)?;
        for (prompt, c) in prompts.iter().zip(&out) {
            let mut seq = prompt.clone();
            seq.extend(&c.tokens);
            let lp = token_logprobs(p.model(), &[seq], 0.7)?.remove(0);
            for (i, l) in c.logprobs.iter().enumerate() {
                let forced = lp[prompt.len() + i];
                assert!((l - forced).abs() < 1e-4, "token {i}: {l} vs {forced}");
            }
        }
    }
    Ok(())
}

#[test]
fn a_stop_token_ends_a_row_and_is_kept() -> Result<()> {
    let p = tiny()?;
    let tok = p.require_tokenizer()?;
    let prompt = tok.encode("class GuessNumberEnv:\n    def reset(self")?;
    let greedy = generate(
        p.model(),
        std::slice::from_ref(&prompt),
        &[0],
        &params(0.0, 12),
        Some(tok),
    )?;
    let full = &greedy[0];
    // Stop on the 4th greedy token as a stop token ...
    let stop = SamplingParams {
        stop_token_ids: vec![full.tokens[3]],
        ..params(0.0, 12)
    };
    let first = full
        .tokens
        .iter()
        .position(|&t| t == full.tokens[3])
        .unwrap_or(3);
    let out = generate(
        p.model(),
        std::slice::from_ref(&prompt),
        &[0],
        &stop,
        Some(tok),
    )?;
    assert_eq!(out[0].finish, Finish::StopToken);
    assert_eq!(out[0].tokens, full.tokens[..=first]);
    Ok(())
}

#[test]
fn rows_past_the_tokenizer_are_never_sampled() -> Result<()> {
    // The tiny preset pads its embedding to a multiple of 64 rows; at a high temperature an
    // unmasked sampler picks those rows within a few hundred tokens and decoding then fails.
    let p = tiny()?;
    let tok = p.require_tokenizer()?;
    let usable = tok.vocab_size() as i64;
    assert!(usable < p.config().vocab_size, "the preset no longer pads");
    let prompts: Vec<Vec<i64>> = (0..8).map(|i| vec![5 + i, 40, 41]).collect();
    let seeds: Vec<u64> = (0..8).collect();
    let out = generate(p.model(), &prompts, &seeds, &params(3.0, 256), Some(tok))?;
    for c in &out {
        assert!(c.tokens.iter().all(|&t| (0..usable).contains(&t)));
        assert!(c.text.is_some());
    }
    Ok(())
}

#[test]
fn training_logprobs_equal_the_samplers_with_a_padded_vocabulary() -> Result<()> {
    // A model with 37 more vocabulary rows than its tokenizer has tokens, as Qwen3 pads its
    // embedding: the sampler never picks them, so training must not count their mass.
    let tiny = tiny()?;
    let tok = tiny.require_tokenizer()?.clone();
    let mut cfg = tiny.config().clone();
    cfg.vocab_size = tok.vocab_size() as i64 + 37;
    for dev in devices() {
        tch::manual_seed(11);
        let p = Policy::new(
            &cfg,
            dev,
            tch::Kind::Float,
            spade_policy::qwen3::WeightInit::Normal { std: 0.05 },
            Some(tok.clone()),
        )?;
        let prompts = vec![
            tok.encode("class GuessNumberEnv:")?,
            tok.encode("def step")?,
        ];
        let out = generate(p.model(), &prompts, &[3, 4], &params(0.6, 12), Some(&tok))?;
        for (prompt, c) in prompts.iter().zip(&out) {
            let mut seq = prompt.clone();
            seq.extend(&c.tokens);
            let lp = token_logprobs(p.model(), &[seq], 0.6)?.remove(0);
            for (i, l) in c.logprobs.iter().enumerate() {
                let trained = lp[prompt.len() + i];
                assert!(
                    (l - trained).abs() < 1e-5,
                    "{dev:?} token {i}: sampler {l} vs training {trained}"
                );
            }
        }
    }
    Ok(())
}
