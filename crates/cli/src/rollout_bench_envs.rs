//! `spade model bench-rollout --path seed-envs`: the rollout phase on real environments. The
//! seed library's games are played in the sandbox through the worker's play loop on the engine
//! (`spade_worker::play::play_envs_measured`), once with the environments stepped on threads
//! of their own while the engine decodes (what runs use) and once on the decode loop itself
//! (`PlayOptions::envs_inline`, how play ran before), alternating, `--repeats` times each. It
//! prints each run, the medians, the ratio, and how long the decode loop waited for
//! environments; both ways must play the same episodes token for token.

use crate::rollout_bench::RolloutBenchArgs;
use anyhow::Context;
use spade_sandbox::{EnvKind, Pool, PoolConfig, RunnerConfig};
use spade_worker::play::{self, Backend, EngineLimits, Episode, PlayJob, PlayOptions};
use std::time::Instant;

struct Run {
    wall_s: f64,
    wait_s: f64,
    tokens: u64,
    /// Plays that failed (an environment past its time limit, say) or lost their generation.
    failed: usize,
    episodes: Vec<Vec<Episode>>,
}

pub fn run(a: &RolloutBenchArgs) -> anyhow::Result<()> {
    if a.shape != "tiny" {
        anyhow::bail!("--path seed-envs: needs --shape tiny (a model with a tokenizer)");
    }
    let dir = a.seeds.join("games");
    // One directory per skill.
    let mut files: Vec<std::path::PathBuf> = vec![];
    for skill in std::fs::read_dir(&dir)
        .with_context(|| format!("--seeds: reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
    {
        let Ok(entries) = std::fs::read_dir(&skill) else {
            continue;
        };
        files.extend(
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "py")),
        );
    }
    files.sort();
    files.truncate(a.envs);
    if files.is_empty() {
        anyhow::bail!("--seeds: no games in {}", dir.display());
    }
    let codes = files
        .iter()
        .map(|f| std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display())))
        .collect::<anyhow::Result<Vec<String>>>()?;
    spade_policy::embed::set_threads(a.threads);
    let device = spade_policy::device_named(&a.device)?;
    let tiny = spade_policy::preset::tiny(&[spade_policy::preset::BUILTIN_TEXT], a.seed, |_| {})?;
    let policy = if device == tiny.device() {
        tiny
    } else {
        tiny.copy_to(device, spade_policy::default_kind(device))?
    };
    let mut runner = RunnerConfig::new(spade_sandbox::default_runner_path());
    runner.nice = a.runner_nice;
    let mut cfg = PoolConfig::new(runner);
    cfg.max_runners = a.concurrency.max(1);
    cfg.warm = 0;
    let pool = Pool::new(cfg);
    let jobs: Vec<PlayJob<'_>> = codes
        .iter()
        .enumerate()
        .map(|(i, code)| PlayJob {
            first_index: 0,
            code,
            kind: EnvKind::Game,
            hint: None,
            seeds: (0..a.plays as i64).collect(),
            sample_seed: a.seed ^ (i as u64),
        })
        .collect();
    let opts = |inline: bool| PlayOptions {
        max_turns: u32::try_from(a.max_turns).unwrap_or(u32::MAX),
        max_new_tokens: a.turn_tokens,
        max_context: a.context,
        max_episode_tokens: a.context,
        // Every reply steps its game (a random model rarely writes \boxed{}).
        raw_actions: true,
        // A game that breaks the contract fails its own play; the others go on.
        stop_at_violation: false,
        backend: Backend::Engine(EngineLimits {
            kv_tokens: a.kv_tokens,
            max_batch: a.max_batch,
            prefill_tokens: a.prefill_tokens,
            decode_window: usize::from(a.decode_window),
        }),
        envs_inline: inline,
        ..PlayOptions::default()
    };
    println!(
        "bench-rollout seed-envs: {} games of {} x {} plays, up to {} turns of <= {} tokens, \
         {} in flight, tiny model on {device:?} ({} libtorch thread(s)); environments in \
         their own sandbox runner processes, {} nice below this one; shared KV blocks read \
         once: {}; blocks read in place: {}",
        files.len(),
        dir.display(),
        a.plays,
        a.max_turns,
        a.turn_tokens,
        a.concurrency,
        a.threads,
        a.runner_nice,
        a.share_reads,
        a.read_in_place
    );
    // One untimed play first: the runners' first start and the model's first passes.
    let (warm, _) = play::play_envs_measured(&policy, &pool, &jobs, &opts(false), a.concurrency)?;
    // Plays that all fail (no runner, a broken venv) would time nothing and print 0 tokens/s.
    let plays: Vec<&Episode> = warm.iter().flatten().collect();
    if plays
        .iter()
        .all(|e| e.failure.is_some() || e.error.is_some())
    {
        let first = plays
            .iter()
            .find_map(|e| e.failure.as_ref().map(|f| f.describe()).or(e.error.clone()))
            .unwrap_or_else(|| "no plays".into());
        anyhow::bail!(
            "bench-rollout seed-envs: all {} plays failed, so there is nothing to time; the \
             first: {first}",
            plays.len()
        );
    }
    let mut runs: [Vec<Run>; 2] = [vec![], vec![]];
    for rep in 0..a.repeats.max(1) {
        // Alternating, so both ways see the same drift in the machine's load.
        for (k, inline) in [(0, true), (1, false)] {
            let t = Instant::now();
            let (episodes, m) =
                play::play_envs_measured(&policy, &pool, &jobs, &opts(inline), a.concurrency)?;
            let r = Run {
                wall_s: t.elapsed().as_secs_f64(),
                wait_s: m.env_wait_s.unwrap_or(0.0),
                tokens: m.engine.map_or(0, |e| e.generated),
                failed: episodes
                    .iter()
                    .flatten()
                    .filter(|e| e.failure.is_some() || e.error.is_some())
                    .count(),
                episodes,
            };
            eprintln!(
                "  {:<14} #{}: {:>7.2} s  waited for environments {:>7.2} s  {:>7} tokens  {} \
                 failed plays",
                label(inline),
                rep + 1,
                r.wall_s,
                r.wait_s,
                r.tokens,
                r.failed
            );
            runs[k].push(r);
        }
    }
    // Repetition by repetition (a play that failed under load differs from its twin).
    let pairs: Vec<(usize, usize)> = runs[0]
        .iter()
        .zip(&runs[1])
        .map(|(a, b)| agreement(&a.episodes, &b.episodes))
        .collect();
    let mut medians = vec![];
    for (k, inline) in [(0, true), (1, false)] {
        let rs = &mut runs[k];
        rs.sort_by(|x, y| x.wall_s.total_cmp(&y.wall_s));
        let m = &rs[rs.len() / 2];
        println!(
            "{:<14} {:>7.2} s  waited for environments {:>7.2} s ({:.0}%)  {:>8.1} tokens/s  \
             (median of {})",
            label(inline),
            m.wall_s,
            m.wait_s,
            100.0 * m.wait_s / m.wall_s.max(1e-9),
            m.tokens as f64 / m.wall_s.max(1e-9),
            rs.len()
        );
        medians.push(m.wall_s);
    }
    let same: Vec<String> = pairs.iter().map(|(s, a)| format!("{s}/{a}")).collect();
    println!(
        "env threads / decode loop: {:.2}x faster; episodes that played the same tokens both \
         ways, per repetition: {}",
        medians[0] / medians[1].max(1e-9),
        same.join(", ")
    );
    Ok(())
}

fn label(inline: bool) -> &'static str {
    if inline {
        "on decode loop"
    } else {
        "env threads"
    }
}

/// Episodes whose token traces are equal on both ways, of all.
fn agreement(a: &[Vec<Episode>], b: &[Vec<Episode>]) -> (usize, usize) {
    let pairs = a.iter().flatten().zip(b.iter().flatten());
    let all = a.iter().map(Vec::len).sum();
    (pairs.filter(|(x, y)| x.ids == y.ids).count(), all)
}
