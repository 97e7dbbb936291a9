//! The engine's paged cache and chunked prefill (issue 42, items 1 and 2): the same tokens as
//! the dense cache of `sample::generate` whatever the block size and prefill budget, a shared
//! prompt prefix stored once (counted in blocks), eviction and re-admission equal to an
//! uninterrupted episode, and a long designer request that no longer narrows the batch.

use crate::devices;
use crate::engine::{cfg, close, drive, params, prompt, tiny_on};
use spade_policy::engine::{Engine, EngineConfig, Request, Rollout, SeqId, generate_all};
use spade_policy::qwen3::{PagedCache, Segment};
use spade_policy::sample::{Completion, SamplingParams, generate};
use spade_policy::{PolicyError, Result};
use std::collections::BTreeMap;
use tch::Device;

fn with(context: usize, kv: usize, batch: usize, block: usize, prefill: usize) -> EngineConfig {
    EngineConfig {
        block_tokens: block,
        prefill_tokens: prefill,
        ..cfg(context, kv, batch)
    }
}

#[test]
fn every_block_size_and_prefill_budget_samples_what_the_dense_cache_does() -> Result<()> {
    // On CUDA too where libtorch sees a GPU (the pool is then allocated whole at the start).
    for dev in devices() {
        let p = tiny_on(dev)?;
        every_block_size_on(p.model(), dev)?;
    }
    Ok(())
}

fn every_block_size_on(m: &spade_policy::qwen3::Qwen3, dev: Device) -> Result<()> {
    let prompts: Vec<Vec<i64>> = (0..7).map(|i| prompt(i, 5 + 9 * i as usize)).collect();
    let seeds: Vec<u64> = (0..7).map(|i| 40 + i).collect();
    for temperature in [0.0, 0.8] {
        let pr = SamplingParams {
            temperature,
            top_p: 0.9,
            max_new_tokens: 17,
            ..Default::default()
        };
        let want = generate(m, &prompts, &seeds, &pr, None)?;
        // Blocks of one slot, of an odd size, of the default; prompts cut into pieces of 5
        // tokens (several steps each, mixed with other turns' decoding) or prefilled whole.
        for (block, prefill) in [(1, 4096), (3, 5), (16, 5), (16, 4096), (64, 11)] {
            let mut e = Engine::new(m, None, with(128, 2048, 4, block, prefill))?;
            let got = generate_all(&mut e, &prompts, &seeds, &pr)?;
            for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                close(
                    x,
                    y,
                    &format!("{dev:?} T {temperature}, block {block}, prefill {prefill}, {i}"),
                );
            }
            let st = e.stats();
            let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
            assert_eq!(st.prefilled, prompt_tokens as u64, "{st:?}");
            if prefill == 5 {
                // The longest prompt (59 tokens) alone takes 12 passes of 5.
                assert!(st.prefill_passes >= 12, "{st:?}");
                // Decoding went on while prompts were cut into pieces: some pass did both.
                assert!(
                    st.decode_passes + st.prefill_passes > st.decode_passes.max(st.prefill_passes),
                    "{st:?}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn a_shared_prompt_prefix_is_stored_once() -> Result<()> {
    let p = tiny_on(Device::Cpu)?;
    let m = p.model();
    let play = |system: &[i64], i: i64| {
        let mut t = system.to_vec();
        t.extend(prompt(20 + i, 4 + i as usize));
        t
    };
    let system = prompt(3, 64);
    let shared: Vec<Vec<i64>> = (0..8).map(|i| play(&system, i)).collect();
    // The negative control: every play with a system prompt of its own.
    let distinct: Vec<Vec<i64>> = (0..8).map(|i| play(&prompt(30 + i, 64), i)).collect();
    let seeds: Vec<u64> = (0..8).collect();
    let pr = params(0.0, 10);
    // Each play holds its prompt and 9 of its 10 tokens (the last is never fed back).
    let own = |p: &Vec<i64>| (p.len() + 9).div_ceil(16);
    let alone: usize = shared.iter().map(own).sum();
    // The system prompt's 4 blocks once, then each play's blocks past it.
    let once = 4 + shared.iter().map(|p| own(p) - 4).sum::<usize>();
    for (case, prompts, keep, blocks, taken) in [
        ("distinct prompts", &distinct, false, alone, 0),
        // Submitted together: the first play prefills the system prompt, the others wait a
        // pass and list its blocks.
        ("submitted together", &shared, false, once, 7 * 64),
        ("a kept prefix", &shared, true, once, 8 * 64),
    ] {
        let want = generate(m, prompts, &seeds, &pr, None)?;
        let mut e = Engine::new(m, None, with(256, 4096, 8, 16, 4096))?;
        if keep {
            e.keep_prefix(&system)?;
        }
        let got = generate_all(&mut e, prompts, &seeds, &pr)?;
        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
            close(x, y, &format!("{case}, play {i}"));
        }
        let st = e.stats();
        assert_eq!(st.peak_blocks as usize, blocks, "{case}: {st:?}");
        assert_eq!(st.shared, taken, "{case}: {st:?}");
        let prompt_tokens: u64 = prompts.iter().map(|p| p.len() as u64).sum();
        let kept = if keep { 64 } else { 0 };
        assert_eq!(st.prefilled, prompt_tokens + kept - taken, "{case}: {st:?}");
    }
    Ok(())
}

/// Plays `turns` turns of one greedy episode on `e`; before every turn after the first,
/// `between` may run other work on the engine. Returns the completions.
fn episode(
    e: &mut Engine<'_>,
    turns: u64,
    mut between: impl FnMut(&mut Engine<'_>) -> Result<()>,
) -> Result<Vec<Completion>> {
    let id = e.open();
    let mut tokens = prompt(1, 40);
    let mut out = vec![];
    for turn in 0..turns {
        if turn > 0 {
            between(e)?;
        }
        let req = Request {
            tokens: tokens.clone(),
            params: params(0.0, 9),
            seed: turn,
        };
        let mut got = drive(e, BTreeMap::from([(0, vec![(id, req)])]))?;
        let c = got
            .remove(&id)
            .ok_or_else(|| PolicyError::InvalidInput("no answer".into()))??;
        tokens.extend(&c.tokens);
        tokens.extend(prompt(10 + turn as i64, 6));
        out.push(c);
    }
    Ok(out)
}

#[test]
fn eviction_and_readmission_equal_an_uninterrupted_episode() -> Result<()> {
    let p = tiny_on(Device::Cpu)?;
    let m = p.model();
    let quiet = {
        let mut e = Engine::new(m, None, with(128, 4096, 4, 8, 4096))?;
        episode(&mut e, 4, |_| Ok(()))?
    };
    // A budget of 16 blocks of 8: each turn, three one-shot calls of the whole context take
    // every block, so the paused episode's blocks are given up and it prefills again.
    let mut e = Engine::new(m, None, with(128, 128, 4, 8, 4096))?;
    let crowded = episode(&mut e, 4, |e| {
        let prompts: Vec<Vec<i64>> = (0..3).map(|i| prompt(70 + i, 60)).collect();
        generate_all(e, &prompts, &[1, 2, 3], &params(0.0, 60)).map(|_| ())
    })?;
    for (t, (x, y)) in crowded.iter().zip(&quiet).enumerate() {
        close(x, y, &format!("turn {t}"));
    }
    let st = e.stats();
    assert!(st.evictions >= 3, "{st:?}");
    assert!(st.peak_slots <= 128, "{st:?}");
    Ok(())
}

#[test]
fn a_long_designer_request_beside_200_plays_leaves_the_batch_wide() -> Result<()> {
    // The paper's KV budget (262,144 slots) and a designer turn reaching about 26k slots (its
    // prompt and 16k-token budget and more): a dense cache sized every row to that reach and
    // held 10 rows. Paged, the plays beside it take only what they reach.
    let p = tiny_on(Device::Cpu)?;
    let m = p.model();
    let mut e = Engine::new(m, None, cfg(26_624, 262_144, 256))?;
    let designer = e.open();
    e.submit(
        designer,
        Request {
            tokens: prompt(1, 100),
            params: params(0.8, 26_000),
            seed: 0,
        },
    )?;
    let plays: Vec<SeqId> = (0..200).map(|_| e.open()).collect();
    for (i, &id) in plays.iter().enumerate() {
        e.submit(
            id,
            Request {
                tokens: prompt(2 + i as i64, 48),
                params: params(0.8, 1000),
                seed: i as u64,
            },
        )?;
    }
    // Admission happens before the pass: two steps show how many run at once (one play's
    // prompt starts like the designer's, so it waits a pass to share those blocks).
    e.step()?;
    e.step()?;
    let st = e.stats().clone();
    assert_eq!(st.peak_batch, 201, "{st:?}");
    // Memory follows what is held (two passes' prompt pieces of 2,048 tokens, a block or two
    // per turn), not the reserved reach (about 26k slots for the designer).
    assert!(
        e.blocks_in_use() <= 2 * 2048 / 16 + 2 * 201,
        "{} blocks in use",
        e.blocks_in_use()
    );
    for id in plays.into_iter().chain([designer]) {
        e.close(id);
    }
    assert_eq!(e.blocks_in_use(), 0);
    assert!(e.is_idle());
    Ok(())
}

/// Decoding rows that share blocks read them once (`PagedCache::set_share_reads`, cascade
/// attention), and rows that read their blocks in place (`PagedCache::set_read_in_place`, the
/// CPU kernel), alone or together: the same logits as every row gathering all of its keys, for
/// rows under a shared system prompt, under two shared environment prompts, alone, and sharing
/// too little to count; on CUDA too where a GPU is visible.
#[test]
fn rows_reading_shared_blocks_once_or_in_place_get_the_logits_of_gathering_them_all() -> Result<()>
{
    for dev in devices() {
        let p = tiny_on(dev)?;
        let m = p.model();
        let mut cache = m.new_paged_cache(16);
        cache.grow(64);
        // Prompt passes whose logits nobody reads.
        let fill =
            |cache: &mut PagedCache, segs: &[Segment<'_>]| m.forward_paged(cache, segs).map(drop);
        // Blocks 0-9: a system prompt of 160 tokens; 10-25 and 26-41: two environments' prompts
        // of 256 tokens; 42-49: each play's own tail (one block); 50-52: two rows alone.
        let system: Vec<u32> = (0..10).collect();
        let env = |b: u32| -> Vec<u32> { system.iter().copied().chain(b..b + 16).collect() };
        let toks = |seed: i64, n: usize| prompt(seed, n);
        fill(
            &mut cache,
            &[Segment {
                table: &system,
                start: 0,
                tokens: &toks(1, 160),
                logits: false,
            }],
        )?;
        for (k, b) in [(0, 10), (1, 26)] {
            fill(
                &mut cache,
                &[Segment {
                    table: &env(b),
                    start: 160,
                    tokens: &toks(2 + k, 256),
                    logits: false,
                }],
            )?;
        }
        let mut tables: Vec<Vec<u32>> = (0..8u32)
            .map(|i| {
                let mut t = env(if i < 4 { 10 } else { 26 });
                t.push(42 + i);
                t
            })
            .collect();
        tables.push(vec![50, 51]);
        tables.push(vec![50, 52]);
        let tails: Vec<Vec<i64>> = (0..10)
            .map(|i| toks(10 + i, 1 + (i as usize * 3) % 11))
            .collect();
        let starts: Vec<usize> = (0..10).map(|i| if i < 8 { 416 } else { 16 }).collect();
        for i in 0..10 {
            let (t, s) = (&tables[i], starts[i]);
            // Rows 8 and 9 first write their shared block 50 (row 8's prompt).
            if i == 8 {
                fill(
                    &mut cache,
                    &[Segment {
                        table: t,
                        start: 0,
                        tokens: &toks(20, 16),
                        logits: false,
                    }],
                )?;
            }
            fill(
                &mut cache,
                &[Segment {
                    table: t,
                    start: s,
                    tokens: &tails[i],
                    logits: false,
                }],
            )?;
        }
        let next: Vec<i64> = (0..10).map(|i| 5 + i).collect();
        let segs: Vec<Segment<'_>> = (0..10)
            .map(|i| Segment {
                table: &tables[i],
                start: starts[i] + tails[i].len(),
                tokens: &next[i..i + 1],
                logits: true,
            })
            .collect();
        // Every row gathering all of its keys for libtorch's attention: the reference.
        cache.set_share_reads(false);
        cache.set_read_in_place(false);
        let all = m.forward_paged(&mut cache, &segs)?;
        // The padded vocabulary is -inf in all.
        let finite = all.isfinite();
        let (y, scale) = {
            let y = all.masked_select(&finite);
            let scale = y.abs().max().double_value(&[]);
            (y, scale)
        };
        // Shared blocks once (gathered or read in place), and every row's keys read in place
        // (on CPU; elsewhere in place falls back to the gather).
        for (share, in_place) in [(true, false), (true, true), (false, true)] {
            cache.set_share_reads(share);
            cache.set_read_in_place(in_place);
            let got = m.forward_paged(&mut cache, &segs)?;
            let what = format!("{dev:?}, shared once {share}, in place {in_place}");
            assert!(
                got.isfinite().equal(&finite),
                "{what}: not the same finite logits"
            );
            let diff = (got.masked_select(&finite) - &y)
                .abs()
                .max()
                .double_value(&[]);
            assert!(
                diff < 1e-4 * scale.max(1.0),
                "{what}: logits differ by {diff} (largest {scale})"
            );
        }
    }
    Ok(())
}
