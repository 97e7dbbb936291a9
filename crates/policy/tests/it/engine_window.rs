//! The engine's decode window (issue 42, item 2: tokens chosen on the device, the host reading
//! them back once every few passes): any window draws the tokens of reading after every pass,
//! with turns stopping inside a window (stop tokens, stop strings, budgets of 1 to 16), turns
//! joining mid-window, shared prompts and multi-turn episodes whose caches must have been cut
//! back at their stops; and a longer window reads back less often.

use crate::devices;
use crate::engine::{cfg, close, drive, prompt, tiny_on};
use spade_policy::engine::{
    DEFAULT_CUDA_DECODE_WINDOW, Engine, EngineConfig, EngineStats, Request, Rollout, SeqId,
};
use spade_policy::qwen3::Qwen3;
use spade_policy::sample::{Completion, Finish, SamplingParams};
use spade_policy::tokenizer::Tokenizer;
use spade_policy::{PolicyError, Result};
use std::collections::BTreeMap;
use tch::Device;

const EPISODES: usize = 9;
const TURNS: usize = 3;

/// The rules of episode `i`: its budget, its stops, the temperature.
fn rules(i: usize, temperature: f64, stops: &[i64], stop_strings: &[String]) -> SamplingParams {
    let budgets = [1usize, 2, 5, 9, 13, 16, 3, 7, 11];
    SamplingParams {
        temperature,
        top_p: 0.9,
        max_new_tokens: budgets[i % budgets.len()],
        // Every other episode stops on tokens, every third on strings too.
        stop_token_ids: if i.is_multiple_of(2) {
            stops.to_vec()
        } else {
            vec![]
        },
        stop_strings: if i.is_multiple_of(3) {
            stop_strings.to_vec()
        } else {
            vec![]
        },
        ..Default::default()
    }
}

/// Plays `EPISODES` episodes of `TURNS` turns through one engine whose decode window is
/// `window` and KV budget `kv` slots: half of them share a system prompt, they join a step
/// apart, and each turn's request is the episode so far (its replies and a few observation
/// tokens).
fn play(
    m: &Qwen3,
    tok: Option<&Tokenizer>,
    window: usize,
    temperature: f64,
    stops: &[i64],
    stop_strings: &[String],
    kv: usize,
) -> Result<(Vec<Vec<Completion>>, EngineStats)> {
    let config = EngineConfig {
        decode_window: window,
        block_tokens: 4,
        ..cfg(128, kv, 6)
    };
    let mut e = Engine::new(m, tok, config)?;
    let system = prompt(5, 13);
    let ids: Vec<SeqId> = (0..EPISODES).map(|_| e.open()).collect();
    let mut context: Vec<Vec<i64>> = (0..EPISODES)
        .map(|i| {
            let mut t = if i.is_multiple_of(2) {
                system.clone()
            } else {
                vec![]
            };
            t.extend(prompt(30 + i as i64, 3 + 2 * i));
            t
        })
        .collect();
    let mut out = vec![vec![]; EPISODES];
    for turn in 0..TURNS {
        let mut later: BTreeMap<usize, Vec<(SeqId, Request)>> = BTreeMap::new();
        for (i, id) in ids.iter().enumerate() {
            let req = Request {
                tokens: context[i].clone(),
                params: rules(i, temperature, stops, stop_strings),
                seed: (100 * turn + i) as u64,
            };
            later.entry(i % 4).or_default().push((*id, req));
        }
        let mut got = drive(&mut e, later)?;
        for (i, id) in ids.iter().enumerate() {
            let c = got
                .remove(id)
                .ok_or_else(|| PolicyError::InvalidInput(format!("episode {i}: no answer")))??;
            context[i].extend(&c.tokens);
            context[i].extend(prompt(60 + (turn * EPISODES + i) as i64, 2));
            out[i].push(c);
        }
    }
    Ok((out, e.stats().clone()))
}

#[test]
fn a_decode_window_draws_the_tokens_of_reading_after_every_pass() -> Result<()> {
    for dev in devices() {
        let p = tiny_on(dev)?;
        let (m, tok) = (p.model(), p.tokenizer());
        for temperature in [0.0, 0.8] {
            // Stops that fire inside windows: tokens the unstopped episodes draw early on.
            let (pilot, _) = play(m, tok, 1, temperature, &[], &[], 4096)?;
            let stops: Vec<i64> = pilot
                .iter()
                .filter_map(|turns| turns[0].tokens.get(2).copied())
                .take(3)
                .collect();
            let stop_strings: Vec<String> = match tok {
                Some(t) => pilot
                    .iter()
                    .filter_map(|turns| turns[1].tokens.get(3..5))
                    .filter_map(|two| t.decode(two, false).ok())
                    .filter(|s| !s.trim().is_empty())
                    .take(2)
                    .collect(),
                None => vec![],
            };
            let (want, one) = play(m, tok, 1, temperature, &stops, &stop_strings, 4096)?;
            let stopped = want
                .iter()
                .flatten()
                .filter(|c| c.finish != Finish::Length)
                .count();
            assert!(
                stopped >= 3,
                "{dev:?} T={temperature}: only {stopped} turns stopped before their budgets \
                 (stops {stops:?}, {stop_strings:?}): the check would not see a window's stops"
            );
            // A window of 1 reads after every pass that decoded.
            assert!(one.reads >= one.decode_passes, "{dev:?}: {one:?}");
            for window in [2, 4, 7] {
                let (got, st) = play(m, tok, window, temperature, &stops, &stop_strings, 4096)?;
                // Sampled (T > 0), a draw that falls on a boundary between two tokens may move
                // with a pass's float rounding (the engine's module doc), and the episode's
                // later turns with it: one episode may, a broken window moves them all.
                let mut moved = vec![];
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    for (t, (x, y)) in a.iter().zip(b).enumerate() {
                        let what =
                            format!("{dev:?} T={temperature} window {window} episode {i} turn {t}");
                        if temperature > 0.0 && x.tokens != y.tokens {
                            moved.push(what);
                            break;
                        }
                        close(x, y, &what);
                    }
                }
                assert!(moved.len() <= 1, "{moved:?}");
                if moved.is_empty() {
                    assert_eq!(st.generated, one.generated, "{dev:?} window {window}");
                }
                // Fewer reads of the drawn tokens: the point of the window.
                assert!(
                    (st.reads as f64) < 0.8 * one.reads as f64,
                    "{dev:?} T={temperature} window {window}: {} reads against {} with a window \
                     of 1",
                    st.reads,
                    one.reads
                );
            }
        }
    }
    Ok(())
}

#[test]
fn under_a_small_kv_budget_a_window_evicts_and_readmits_to_the_same_tokens() -> Result<()> {
    let p = tiny_on(Device::Cpu)?;
    let (m, tok) = (p.model(), p.tokenizer());
    // 160 slots for 6 rows of up to 16 new tokens beside contexts of 20-80: paused episodes
    // give up their blocks and prefill again on their next turn.
    // Greedy: a re-admitted episode prefills again, so its keys are computed another way and
    // may round apart; only a near tie could move an argmax.
    let (want, one) = play(m, tok, 1, 0.0, &[], &[], 160)?;
    assert!(one.evictions > 0, "the budget evicted nothing: {one:?}");
    for window in [3, 5] {
        let (got, st) = play(m, tok, window, 0.0, &[], &[], 160)?;
        assert!(st.evictions > 0, "window {window}: {st:?}");
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            for (t, (x, y)) in a.iter().zip(b).enumerate() {
                close(x, y, &format!("window {window} episode {i} turn {t}"));
            }
        }
    }
    Ok(())
}

#[test]
fn a_window_left_to_the_engine_reads_after_every_pass_on_the_cpu_only() {
    let auto = cfg(64, 64, 1);
    assert_eq!(auto.decode_window, 0);
    assert_eq!(auto.window_on(Device::Cpu), 1);
    assert_eq!(auto.window_on(Device::Cuda(0)), DEFAULT_CUDA_DECODE_WINDOW);
    let set = EngineConfig {
        decode_window: 3,
        ..auto
    };
    assert_eq!(set.window_on(Device::Cpu), 3);
    assert_eq!(set.window_on(Device::Cuda(0)), 3);
}
