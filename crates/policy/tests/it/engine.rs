//! The continuous-batching engine against the batch sampler it replaces: the same tokens and
//! log-probs under continuous batching, KV reuse across turns and prefix sharing, and clear
//! errors for requests that cannot be served while the others go on.

use crate::devices;
use spade_policy::engine::{Engine, EngineConfig, Request, Rollout, SeqId, generate_all};
use spade_policy::preset::{self, BUILTIN_TEXT};
use spade_policy::sample::{Completion, Finish, SamplingParams, generate};
use spade_policy::{Policy, Result};
use std::collections::BTreeMap;
use tch::Device;

pub(crate) fn tiny_on(device: Device) -> Result<Policy> {
    let p = preset::tiny(&[BUILTIN_TEXT], 11, |_| {})?;
    if device == Device::Cpu {
        Ok(p)
    } else {
        p.copy_to(device, tch::Kind::Float)
    }
}

pub(crate) fn params(temperature: f64, n: usize) -> SamplingParams {
    SamplingParams {
        temperature,
        max_new_tokens: n,
        ..Default::default()
    }
}

pub(crate) fn cfg(context: usize, kv_tokens: usize, max_batch: usize) -> EngineConfig {
    EngineConfig::new(context, kv_tokens, max_batch)
}

pub(crate) fn prompt(seed: i64, len: usize) -> Vec<i64> {
    (0..len as i64)
        .map(|i| 3 + (seed * 31 + i * 17) % 200)
        .collect()
}

pub(crate) fn close(a: &Completion, b: &Completion, what: &str) {
    assert_eq!(a.tokens, b.tokens, "{what}: tokens differ");
    assert_eq!(a.finish, b.finish, "{what}");
    for (i, (x, y)) in a.logprobs.iter().zip(&b.logprobs).enumerate() {
        assert!((x - y).abs() < 1e-4, "{what}: log-prob {i}: {x} vs {y}");
    }
}

/// Runs the engine until idle, submitting `later[k]` (sequence, request) before step k.
pub(crate) fn drive(
    e: &mut Engine<'_>,
    mut later: BTreeMap<usize, Vec<(SeqId, Request)>>,
) -> Result<BTreeMap<SeqId, Result<Completion>>> {
    let mut out = BTreeMap::new();
    let mut step = 0;
    loop {
        for (id, req) in later.remove(&step).unwrap_or_default() {
            e.submit(id, req)?;
        }
        if e.is_idle() && later.is_empty() {
            return Ok(out);
        }
        for f in e.step()? {
            out.insert(f.seq, f.result);
        }
        step += 1;
        assert!(step < 10_000, "the engine never went idle");
    }
}

#[test]
fn greedy_outputs_equal_the_batch_sampler_with_requests_joining_mid_batch() -> Result<()> {
    for dev in devices() {
        let p = tiny_on(dev)?;
        let m = p.model();
        let lens = [5usize, 17, 2, 40, 9, 23, 1, 12];
        let budgets = [24usize, 6, 30, 11, 1, 19, 27, 8];
        let mut e = Engine::new(m, None, cfg(256, 4096, 5))?;
        let mut later: BTreeMap<usize, Vec<(SeqId, Request)>> = BTreeMap::new();
        let mut want = vec![];
        for (i, (&len, &n)) in lens.iter().zip(&budgets).enumerate() {
            let toks = prompt(i as i64, len);
            let pr = params(0.0, n);
            want.push(generate(m, std::slice::from_ref(&toks), &[i as u64], &pr, None)?.remove(0));
            let id = e.open();
            // Two arrive at once, the rest one every third step: they join a running batch,
            // and with max_batch 5 some wait for a row to finish.
            let at = if i < 2 { 0 } else { i * 3 };
            later.entry(at).or_default().push((
                id,
                Request {
                    tokens: toks,
                    params: pr,
                    seed: i as u64,
                },
            ));
        }
        let got = drive(&mut e, later)?;
        assert_eq!(got.len(), lens.len());
        for (i, (_, c)) in got.into_iter().enumerate() {
            close(&c?, &want[i], &format!("{dev:?} request {i}"));
        }
        let st = e.stats();
        assert_eq!(st.generated, budgets.iter().sum::<usize>() as u64);
        // Rows leave when they stop: no pass decodes a finished row.
        assert_eq!(st.decode_rows + st.requests, st.generated, "{st:?}");
    }
    Ok(())
}

#[test]
fn seeded_sampling_is_reproducible_and_matches_the_sampler() -> Result<()> {
    let p = tiny_on(Device::Cpu)?;
    let m = p.model();
    let prompts: Vec<Vec<i64>> = (0..6).map(|i| prompt(i, 3 + 4 * i as usize)).collect();
    let seeds: Vec<u64> = (0..6).map(|i| 1000 + i).collect();
    let pr = SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        max_new_tokens: 20,
        ..Default::default()
    };
    let run = || -> Result<Vec<Completion>> {
        let mut e = Engine::new(m, None, cfg(128, 1024, 4))?;
        generate_all(&mut e, &prompts, &seeds, &pr)
    };
    let (a, b) = (run()?, run()?);
    assert_eq!(a, b, "the same seeds must sample the same tokens");
    let sampler = generate(m, &prompts, &seeds, &pr, None)?;
    for (i, (x, y)) in a.iter().zip(&sampler).enumerate() {
        close(x, y, &format!("row {i}"));
    }
    let other = {
        let mut e = Engine::new(m, None, cfg(128, 1024, 4))?;
        generate_all(&mut e, &prompts, &[7; 6], &pr)?
    };
    assert_ne!(a, other, "other seeds, other samples");
    Ok(())
}

#[test]
fn a_multi_turn_episode_with_kv_reuse_equals_prefilling_the_transcript() -> Result<()> {
    for dev in devices() {
        let p = tiny_on(dev)?;
        let m = p.model();
        let mut e = Engine::new(m, None, cfg(512, 2048, 4))?;
        let id = e.open();
        let mut tokens = prompt(1, 30);
        let mut reference = vec![];
        for turn in 0..4u64 {
            let pr = SamplingParams {
                temperature: 0.0,
                max_new_tokens: 12,
                stop_token_ids: vec![5],
                ..Default::default()
            };
            let req = Request {
                tokens: tokens.clone(),
                params: pr.clone(),
                seed: turn,
            };
            let mut got = drive(&mut e, BTreeMap::from([(0, vec![(id, req)])]))?;
            let c = got
                .remove(&id)
                .ok_or_else(|| spade_policy::PolicyError::InvalidInput("no answer".into()))??;
            let full = generate(m, std::slice::from_ref(&tokens), &[turn], &pr, None)?.remove(0);
            close(&c, &full, &format!("{dev:?} turn {turn}"));
            reference.push(full);
            // The episode goes on: the reply, then an observation of a few tokens.
            tokens.extend(&c.tokens);
            tokens.extend(prompt(10 + turn as i64, 7));
        }
        let st = e.stats();
        // Turn k reuses everything but the last sampled token: no transcript re-prefilled.
        let prefilled_if_not_reused: u64 = 30 + (30 + 12 + 7) + (30 + 2 * 19) + (30 + 3 * 19);
        assert!(
            st.prefilled < prefilled_if_not_reused / 2 && st.reused > 0,
            "{dev:?}: {st:?}"
        );
        // A caller that rewrites its history gets the answer for the new history.
        let edited = prompt(99, 20);
        let pr = params(0.0, 6);
        let req = Request {
            tokens: edited.clone(),
            params: pr.clone(),
            seed: 0,
        };
        let mut got = drive(&mut e, BTreeMap::from([(0, vec![(id, req)])]))?;
        let c = got
            .remove(&id)
            .ok_or_else(|| spade_policy::PolicyError::InvalidInput("no answer".into()))??;
        close(
            &c,
            &generate(m, &[edited], &[0], &pr, None)?[0],
            "rewritten history",
        );
    }
    Ok(())
}

#[test]
fn plays_of_one_environment_share_their_prompt_prefix() -> Result<()> {
    let p = tiny_on(Device::Cpu)?;
    let m = p.model();
    let system = prompt(3, 48);
    let prompts: Vec<Vec<i64>> = (0..8)
        .map(|i| {
            let mut t = system.clone();
            t.extend(prompt(20 + i, 4 + i as usize));
            t
        })
        .collect();
    let seeds: Vec<u64> = (0..8).collect();
    let pr = params(0.0, 10);
    let mut e = Engine::new(m, None, cfg(256, 4096, 8))?;
    let _kept = e.keep_prefix(&system)?;
    let got = generate_all(&mut e, &prompts, &seeds, &pr)?;
    let want = generate(m, &prompts, &seeds, &pr, None)?;
    for (i, (x, y)) in got.iter().zip(&want).enumerate() {
        close(x, y, &format!("play {i}"));
    }
    let st = e.stats();
    assert_eq!(st.shared, 8 * 48, "{st:?}");
    assert_eq!(
        st.prefilled,
        48 + (0..8).map(|i| 4 + i as u64).sum::<u64>(),
        "{st:?}"
    );
    Ok(())
}

#[test]
fn a_small_kv_budget_queues_requests_and_gives_up_paused_rows_but_answers_all() -> Result<()> {
    let p = tiny_on(Device::Cpu)?;
    let m = p.model();
    // Room for two sequences of the whole context: eight requests are served two at a time.
    let mut e = Engine::new(m, None, cfg(64, 128, 8))?;
    let prompts: Vec<Vec<i64>> = (0..8).map(|i| prompt(i, 10 + i as usize)).collect();
    let seeds: Vec<u64> = (0..8).collect();
    let pr = params(0.0, 40);
    // Paused sequences hold rows until a newcomer needs them.
    let paused: Vec<SeqId> = (0..3).map(|_| e.open()).collect();
    for (k, id) in paused.iter().enumerate() {
        e.submit(
            *id,
            Request {
                tokens: prompt(50 + k as i64, 8),
                params: params(0.0, 2),
                seed: 0,
            },
        )?;
    }
    drive(&mut e, BTreeMap::new())?;
    let got = generate_all(&mut e, &prompts, &seeds, &pr)?;
    let want = generate(m, &prompts, &seeds, &pr, None)?;
    for (i, (x, y)) in got.iter().zip(&want).enumerate() {
        close(x, y, &format!("request {i}"));
        // Budgets are clipped to the context.
        assert!(x.tokens.len() <= 64 - prompts[i].len());
    }
    let st = e.stats();
    assert!(st.evictions >= 1, "{st:?}");
    assert!(st.peak_slots <= 128, "{st:?}");
    Ok(())
}

#[test]
fn bad_requests_get_a_clear_error_and_the_others_go_on() -> Result<()> {
    let p = tiny_on(Device::Cpu)?;
    let m = p.model();
    let vocab = m.config().vocab_size;
    let mut e = Engine::new(m, None, cfg(32, 256, 4))?;
    let (good, bad, long) = (e.open(), e.open(), e.open());
    let pr = params(0.0, 8);
    let err = e
        .submit(
            long,
            Request {
                tokens: prompt(0, 32),
                params: pr.clone(),
                seed: 0,
            },
        )
        .err()
        .map(|x| x.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("32 tokens") && err.contains("context of 32"),
        "{err}"
    );
    let mut toks = prompt(1, 5);
    toks[2] = vocab + 7;
    let err = e
        .submit(
            bad,
            Request {
                tokens: toks,
                params: pr.clone(),
                seed: 0,
            },
        )
        .err()
        .map(|x| x.to_string())
        .unwrap_or_default();
    assert!(err.contains("outside the vocabulary"), "{err}");
    e.submit(
        good,
        Request {
            tokens: prompt(2, 5),
            params: pr.clone(),
            seed: 0,
        },
    )?;
    let busy = e.submit(
        good,
        Request {
            tokens: prompt(2, 5),
            params: pr.clone(),
            seed: 0,
        },
    );
    assert!(busy.is_err(), "a second turn while one runs");
    let got = drive(&mut e, BTreeMap::new())?;
    let c = got
        .into_values()
        .next()
        .ok_or_else(|| spade_policy::PolicyError::InvalidInput("no answer".into()))??;
    assert_eq!(c.tokens.len(), 8);
    assert_eq!(c.finish, Finish::Length);
    assert!(
        Engine::new(m, None, cfg(64, 32, 4)).is_err(),
        "a budget below one context"
    );
    Ok(())
}
