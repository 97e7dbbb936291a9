//! Training the tiny preset: supervised fine-tuning learns completions and trains only them;
//! the fine-tuned model then shows stop strings at work on real text.

use spade_policy::Result;
use spade_policy::preset::{self, BUILTIN_TEXT};
use spade_policy::sample::{Finish, SamplingParams, generate};
use spade_policy::sft::{SftConfig, SftTrainer, encode_pairs};
use spade_policy::train::token_logprobs;

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
