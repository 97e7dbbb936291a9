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
