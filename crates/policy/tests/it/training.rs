//! Training the tiny preset: supervised fine-tuning learns completions and trains only them;
//! the fine-tuned model then shows stop strings at work on real text.

use spade_policy::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
use spade_policy::preset::{self, BUILTIN_TEXT};
use spade_policy::sample::{Finish, SamplingParams, generate};
use spade_policy::sft::{SftConfig, SftTrainer, encode_pairs};
use spade_policy::train::OptimConfig;
use spade_policy::train::token_logprobs;
use spade_policy::{Policy, Result};
use tch::Kind;

fn pairs() -> Vec<(String, String)> {
    let ask = |s: &str| format!("<|im_start|>user\n{s}<|im_end|>\n<|im_start|>assistant\n");
    vec![
        (
            ask("Write a guessing game."),
            "class GuessNumberEnv:".to_string(),
        ),
        (
            ask("What does reset return?"),
            "an observation and an info dict".to_string(),
        ),
    ]
}

#[test]
fn sft_loss_counts_only_completion_tokens() -> Result<()> {
    tch::set_num_threads(1);
    let p = preset::tiny(&[BUILTIN_TEXT], 1, |_| {})?;
    let data = encode_pairs(p.require_tokenizer()?, &pairs(), 512)?;
    let ids: Vec<Vec<i64>> = data.iter().map(|s| s.ids.clone()).collect();
    let lp = token_logprobs(p.model(), &ids, 1.0)?;
    let (mut nll, mut n) = (0.0, 0);
    for (s, l) in data.iter().zip(&lp) {
        for (i, m) in s.loss_mask.iter().enumerate().skip(1) {
            if *m {
                nll -= f64::from(l[i]);
                n += 1;
            }
        }
    }
    let mut tr = SftTrainer::new(&p, SftConfig::default())?;
    let loss = tr.step(&p, &data)?;
    assert!(
        (loss - nll / n as f64).abs() < 1e-4,
        "{loss} vs {}",
        nll / n as f64
    );
    Ok(())
}

#[test]
fn sft_teaches_the_tiny_model_its_completions() -> Result<()> {
    tch::set_num_threads(1);
    let p = preset::tiny(&[BUILTIN_TEXT], 2, |_| {})?;
    let tok = p.require_tokenizer()?;
    let data = encode_pairs(tok, &pairs(), 512)?;
    let mut tr = SftTrainer::new(&p, SftConfig::default())?;
    let losses = tr.fit(&p, &data, 40, 2, |_, _, _| {})?;
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    assert!(last < 0.1 * first, "loss {first} -> {last}");
    let params = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 16,
        stop_token_ids: tok.token_id("<|im_end|>").into_iter().collect(),
        ..Default::default()
    };
    for (prompt, completion) in pairs() {
        let out = generate(p.model(), &[tok.encode(&prompt)?], &[0], &params, Some(tok))?;
        assert_eq!(out[0].text.as_deref(), Some(completion.as_str()));
        assert_eq!(out[0].finish, Finish::StopToken);
    }
    // Stop strings cut the text right after them and end the row early.
    let stop = SamplingParams {
        stop_strings: vec!["Env".into(), " info".into()],
        ..params
    };
    let prompts: Vec<Vec<i64>> = pairs()
        .iter()
        .map(|(p, _)| tok.encode(p))
        .collect::<Result<_>>()?;
    let out = generate(p.model(), &prompts, &[0, 0], &stop, Some(tok))?;
    let texts: Vec<&str> = out
        .iter()
        .map(|o| o.text.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(
        texts,
        ["class GuessNumberEnv", "an observation and an info"]
    );
    assert!(out.iter().all(|o| o.finish == Finish::StopString));
    Ok(())
}

#[test]
fn grpo_and_sft_steps_train_on_every_device_and_refresh_a_bf16_sampler() -> Result<()> {
    let cpu = preset::tiny(&[BUILTIN_TEXT], 4, |_| {})?;
    let dir = crate::tempdir("devices");
    cpu.save(&dir)?;
    for dev in crate::devices() {
        // Float32 weights train; a bf16 copy samples (as a GPU run would) and is refreshed.
        let p = Policy::load_as(&dir, dev, Kind::Float)?;
        let mut sampler = p.copy_to(dev, Kind::BFloat16)?;
        let tok = p.require_tokenizer()?;
        let prompt = tok.encode("<|im_start|>user\nplay<|im_end|>\n<|im_start|>assistant\n")?;
        let params = SamplingParams {
            temperature: 0.6,
            max_new_tokens: 12,
            ..Default::default()
        };
        let out = generate(
            sampler.model(),
            &[prompt.clone(), prompt.clone()],
            &[1, 2],
            &params,
            Some(tok),
        )?;
        let samples: Vec<GrpoSample> = out
            .iter()
            .zip([1.0, -1.0])
            .map(|(c, a)| GrpoSample::from_completion(&prompt, c, a))
            .collect();
        let before = sampler.last_logits(&prompt)?;
        let mut grpo = GrpoTrainer::new(
            &p,
            GrpoConfig {
                optim: OptimConfig {
                    lr: 1e-3,
                    ..Default::default()
                },
                ..Default::default()
            },
        )?;
        let st = grpo.step(&p, &samples)?;
        assert!(st.loss.is_finite() && st.grad_norm > 0.0, "{dev:?}: {st:?}");
        // bf16 sampling vs float32 training: ratios stay near 1.
        assert!((st.mean_ratio - 1.0).abs() < 0.1, "{dev:?}: {st:?}");
        let mut sft = SftTrainer::new(&p, SftConfig::default())?;
        let loss = sft.step(&p, &encode_pairs(tok, &pairs(), 64)?)?;
        assert!(loss.is_finite(), "{dev:?}");
        sampler.copy_weights_from(&p)?;
        assert_ne!(
            before,
            sampler.last_logits(&prompt)?,
            "{dev:?}: sampler not refreshed"
        );
    }
    Ok(())
}
