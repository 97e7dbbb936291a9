//! The warm start's game family (`model.warm_start = "families"`) through the real sandbox:
//! every difficulty of the vault is accepted by the validator, the first observation names the
//! range but not the key, the key wins and another dial loses. What the CPU demo's designer is
//! taught must be what the loop accepts, or the demo shows rejections instead of a curriculum.

use crate::learning::Res;
use spade_sandbox::{EnvKind, Pool, PoolConfig, RunnerConfig, ValidationConfig, validate};
use spade_worker::warmstart::families::{self, Vault};
use std::collections::BTreeMap;

#[test]
fn every_vault_difficulty_is_accepted_and_plays_as_its_hint_says() -> Res<()> {
    let pool = Pool::new(PoolConfig::new(RunnerConfig::new(
        spade_sandbox::default_runner_path(),
    )));
    let variants = families::variants("vault", 0, families::PER_SKILL, 0)?;
    // One variant per difficulty (dials 2..=3 up to 2..=6).
    let mut by_high = BTreeMap::new();
    for v in &variants {
        let (_, high, _) = Vault::parse(&v.code).ok_or("a vault reads back")?;
        by_high.entry(high).or_insert(v);
    }
    assert_eq!(by_high.len(), 4, "{:?}", by_high.keys());
    for (high, v) in by_high {
        let report = validate(&pool, &v.code, &ValidationConfig::default());
        assert!(
            report.accepted,
            "{}: {:?}",
            v.path.display(),
            report.rejection
        );
        let (hall, _, key) = Vault::parse(&v.code).ok_or("parse")?;
        let mut s = pool.load(&v.code, Some(EnvKind::Game), None)?;
        let first = s.reset(Some(7))?;
        assert!(first.obs.contains(&hall) && first.obs.contains(&format!("2 to {high}")));
        assert!(
            !first.obs.contains(&format!("{key}.")) || key == high,
            "{}",
            first.obs
        );
        let won = s.step(&format!("I think \\boxed{{{key}}}"))?;
        assert_eq!((won.reward, won.terminated), (1.0, true), "{}", won.obs);
        s.reset(Some(7))?;
        let wrong = if key == 2 { 3 } else { 2 };
        let lost = s.step(&format!("\\boxed{{{wrong}}}"))?;
        assert_eq!((lost.reward, lost.truncated), (0.0, true), "{}", lost.obs);
        assert_eq!(v.hint, format!("KEY = {key} opens the vault."));
    }
    Ok(())
}

/// A pretrained preset's warm start (`smollm2-135m` with `model.warm_start = "families"`)
/// fine-tunes that checkpoint: the result keeps its shape, tokenizer and chat template, only
/// its weights move, and it is cached under a key of its own. Here the "pretrained" base is a
/// tiny model saved to a directory (SmolLM2 itself takes tens of minutes an epoch on 2 cores;
/// its measured warm start is in docs/benchmarks.md).
#[test]
fn a_pretrained_base_is_fine_tuned_not_replaced() -> Res<()> {
    use spade_worker::warmstart::{self, WarmStartOptions};
    let pool = Pool::new(PoolConfig::new(RunnerConfig::new(
        spade_sandbox::default_runner_path(),
    )));
    let dir = tempfile::tempdir()?;
    let texts = families::variants("vault", 0, 1, 0)?
        .into_iter()
        .map(|v| v.code)
        .chain([spade::prompt::DESIGNER_SYSTEM.to_string()])
        .collect::<Vec<_>>();
    // Another seed than the warm start's own: a model the tiny path would never build.
    let base = spade_policy::preset::tiny(&texts, 77, |_| {})?;
    let base_dir = dir.path().join("base");
    base.save(&base_dir)?;
    let opts = WarmStartOptions {
        kinds: vec![EnvKind::Game],
        seed: 0,
        epochs: 1,
        max_epochs: 1,
        min_acceptance: 0.5,
        batch_size: 1,
        lr: 1e-3,
        designer_variants: 1,
        designer_files: usize::MAX,
        // Episode 0 of each variant is played without the hint, 1 with it.
        agent_episodes: 2,
        hint_code_chars: 120,
        memory_positives: 0,
        memory_negatives: 0,
        memory_code_chars: 0,
        corpus_docs: vec![],
        measure_samples: 0,
        designer_max_new_tokens: 64,
        max_turns: 2,
        family: Some("vault".into()),
        base: Some(base_dir.clone()),
        agent_hint_only: true,
    };
    let cache = dir.path().join("cache");
    let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../envs/seed");
    let (tuned_dir, report) = warmstart::warm_start(&seeds, &cache, &pool, &opts, |_| {})?;
    assert_eq!(report.epochs, 1);
    assert!(report.designer_pairs > 0, "{report:?}");
    assert_eq!(
        report.agent_sequences, report.hint_pairs,
        "one episode a variant, the one with the hint (agent_hint_only): {report:?}"
    );
    let read =
        |p: std::path::PathBuf| std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()));
    assert_eq!(
        read(tuned_dir.join("tokenizer.json"))?,
        read(base_dir.join("tokenizer.json"))?,
        "the base's own tokenizer, not a new one"
    );
    let tuned = spade_policy::Policy::load(&tuned_dir, tch::Device::Cpu)?;
    assert_eq!(tuned.config(), base.config(), "the base's shape");
    assert_ne!(
        tuned.weights_fingerprint(),
        base.weights_fingerprint(),
        "the weights were trained"
    );
    // The tiny model's warm start on the same data (no base) is another model and cache entry.
    let (again, _) = warmstart::warm_start(&seeds, &cache, &pool, &opts, |_| {})?;
    assert_eq!(again, tuned_dir, "cached");
    let key_tiny = warmstart::cache_key(
        &[],
        &WarmStartOptions {
            base: None,
            ..opts.clone()
        },
        "k",
    );
    assert_ne!(key_tiny, warmstart::cache_key(&[], &opts, "k"));
    Ok(())
}
