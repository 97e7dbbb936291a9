//! The fixed-environment baselines (spec, "Baselines"): fixed-env GRPO plays a pool of
//! environments validated once, never generating; the RLVE baseline plays every RLVE
//! environment at an adaptive difficulty. Loading and validating the pool, the draw of each
//! step's environments, the windows their tallies restart with, and RLVE's difficulty rule.

use super::Loop;
use super::fnv;
use super::metrics::RlveStats;
use crate::state::{LiveEnv, Window};
use crate::{WorkerError, seeds};
use spade::EnvKind;
use spade::config::RunConfig;
use std::collections::BTreeSet;
use std::time::Duration;

/// Fixed-env GRPO: the pool indices a step plays, `n` of `pool`, drawn without replacement
/// until the pool is exhausted, then from a fresh shuffle that leaves out what this draw already
/// took (the reference, `spade/slime/spade_rollout.py`, `_select_static_games_without_replacement`).
/// `remaining` and `passes` carry the order between steps (`passes` = 0: nothing drawn yet).
/// `n` = 0 or `n >= pool` plays the whole pool.
pub(crate) fn draw_fixed(
    remaining: &mut Vec<usize>,
    passes: &mut u64,
    pool: usize,
    n: usize,
    seed: u64,
) -> Vec<usize> {
    if n == 0 || n >= pool {
        return (0..pool).collect();
    }
    let shuffled = |pass: u64| {
        let mut v: Vec<usize> = (0..pool).collect();
        v.sort_by_key(|&i| seeds::derive(seed, &[seeds::tag::FIXED_POOL, pass, i as u64]));
        v
    };
    if *passes == 0 {
        *remaining = shuffled(0);
        *passes = 1;
    }
    let take = n.min(remaining.len());
    let mut selected: Vec<usize> = remaining.drain(..take).collect();
    if selected.len() < n {
        let mut refill = shuffled(*passes);
        *passes += 1;
        refill.retain(|i| !selected.contains(i));
        let needed = n - selected.len();
        selected.extend(refill.drain(..needed));
        *remaining = refill;
    }
    selected
}

/// Starts a new window of a fixed-env environment: its tallies restart, so a fixed-env run's
/// metrics cover the same k-step windows as a SPADE run's instead of the whole run. A broken
/// environment stays retired.
pub(crate) fn restart_tallies(env: &mut LiveEnv) {
    env.hint_returns.clear();
    env.hint_wins = 0;
    env.no_hint_returns.clear();
    env.no_hint_wins = 0;
    env.first_no_hint_step = None;
    env.first_step_returns.clear();
    env.first_step_wins = 0;
    env.reward_levels.clear();
}

/// A fixed-env run's pool, validated: its one window, what was refused and why, and for the
/// RLVE baseline the per-environment difficulty it starts from.
#[derive(Debug, Default)]
pub(crate) struct FixedPool {
    pub window: Window,
    pub problems: Vec<spade::pool::PoolProblem>,
    pub rlve: Option<spade::rlve::AdaptiveDifficulty>,
}

/// Fixed-env GRPO: reads the pool `ablation.fixed_env_pool` names (see [`crate::pool`] for its
/// three forms), validates every environment in the sandbox, and returns the accepted ones of
/// the configured kinds as one window for the whole run, with what was refused and why. Called
/// before the warm start: a pool that cannot be played costs seconds, not the designer's SFT.
pub(crate) fn load_fixed_pool(
    cfg: &RunConfig,
    sandbox: &spade_sandbox::Pool,
) -> Result<FixedPool, WorkerError> {
    if cfg.ablation.rlve {
        return load_rlve_pool(cfg, sandbox);
    }
    let Some(dir) = cfg.ablation.fixed_env_pool.clone() else {
        return Ok(FixedPool::default());
    };
    let loaded = crate::pool::read_pool(std::path::Path::new(&dir))?;
    let mut problems = loaded.problems;
    let vcfg = crate::pool::validation_config(cfg);
    let (valid, rejected) = crate::pool::validate_pool(sandbox, loaded.envs, &vcfg);
    problems.extend(rejected);
    let mut window = Window::default();
    for v in valid {
        if !cfg.curriculum.kinds.contains(&v.kind) {
            continue;
        }
        // The pool's hint is not shown: fixed-env GRPO plays without hints (the reference's
        // baseline), the hint stays in the pool for whoever wants it.
        window
            .envs
            .push(fixed_env(v.env.id, v.env.skill, v.kind, v.env.code));
    }
    if window.envs.is_empty() {
        let mut text = format!(
            "ablation.fixed_env_pool: no valid environments of the configured kinds ({}) in {dir}",
            cfg.curriculum
                .kinds
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for p in &problems {
            text.push_str(&format!("\n  {p}"));
        }
        return Err(WorkerError::Config(text));
    }
    Ok(FixedPool {
        window,
        problems,
        rlve: None,
    })
}

/// The skill name RLVE environments are reported under (RLVE has no skills of the spec).
pub const RLVE_SKILL: &str = "RLVE";

/// The fixed-environment RLVE baseline: every environment of the installed `rlve-gym` (asked of
/// a runner, since the package is Python) is a live game for the whole run, answered in
/// `\boxed{}` like our games, starting at RLVE's initial difficulty (the step's draw then
/// sets each drawn environment's source at a difficulty of its window, `rlve_level`).
fn load_rlve_pool(
    cfg: &RunConfig,
    sandbox: &spade_sandbox::Pool,
) -> Result<FixedPool, WorkerError> {
    let limit = Duration::from_secs_f64(cfg.sandbox.validation_timeout_s);
    let ids = {
        // The leased runner is killed when dropped: the modules this imported reach no
        // environment.
        let mut leased = sandbox.checkout()?;
        spade_sandbox::rlve::identifiers(&mut leased.runner, limit)?
    };
    let difficulty = spade::rlve::AdaptiveDifficulty::new(
        spade::rlve::DifficultyParams::default(),
        ids.iter().cloned(),
    );
    let envs: Vec<LiveEnv> = ids
        .iter()
        .map(|id| {
            let code = rlve_code(id, difficulty.params.initial);
            fixed_env(
                format!("{RLVE_PREFIX}{id}"),
                RLVE_SKILL.into(),
                EnvKind::Game,
                code,
            )
        })
        .collect();
    if envs.is_empty() {
        return Err(WorkerError::Config(
            "ablation.rlve: the sandbox's venv has no RLVE environments (install rlve-gym)".into(),
        ));
    }
    let window = Window {
        envs,
        ..Window::default()
    };
    Ok(FixedPool {
        window,
        problems: vec![],
        rlve: Some(difficulty),
    })
}

/// An RLVE environment's id is this and its identifier.
pub const RLVE_PREFIX: &str = "rlve-";

/// The source an RLVE environment is played from at `difficulty`.
pub fn rlve_code(identifier: &str, difficulty: u32) -> String {
    spade_sandbox::rlve::source_with(identifier, difficulty, spade_sandbox::rlve::Markers::Boxed)
}

/// The difficulty RLVE environment `env_id` is played at in `step`: uniform over its window
/// (RLVE draws one per problem; here one per environment and step, since a step's plays of an
/// environment load one source), from the run seed and the step.
pub fn rlve_level(
    d: &spade::rlve::AdaptiveDifficulty,
    run_seed: u64,
    step: u64,
    env_id: &str,
) -> Option<u32> {
    let window = d.window(env_id.strip_prefix(RLVE_PREFIX)?)?;
    let (low, high) = (*window.start(), *window.end());
    let span = u64::from(high - low) + 1;
    let draw = seeds::derive(run_seed, &[seeds::tag::RLVE_LEVEL, step, fnv(env_id)]) % span;
    Some(low + draw as u32)
}

/// A pool environment with no plays yet (also the start of a generated one, and the blank
/// environment tests start from).
pub(crate) fn fixed_env(env_id: String, skill: String, kind: EnvKind, code: String) -> LiveEnv {
    LiveEnv {
        env_id,
        skill,
        kind,
        code,
        hint: String::new(),
        generated_step: 0,
        parent_env_id: None,
        hint_returns: vec![],
        hint_wins: 0,
        no_hint_returns: vec![],
        no_hint_wins: 0,
        first_no_hint_step: None,
        first_step_returns: vec![],
        first_step_wins: 0,
        reward_levels: vec![],
        failed: None,
        broken_seed: None,
        reveals_solution: false,
    }
}

impl Loop<'_> {
    /// Fixed-env GRPO: restarts the pool's tallies where a SPADE run's window would close (every
    /// k steps of the first configured kind), so the metrics cover the same windows, and draws
    /// the environments of this step (`ablation.fixed_env_envs_per_step`, the reference's 24).
    /// Returns the ids of the step's environments (None: no pool, every live one plays).
    pub(super) fn select_fixed(&mut self) -> Option<BTreeSet<String>> {
        let step = self.state.step;
        let k = self
            .cfg
            .curriculum
            .kinds
            .first()
            .map_or(1, |kind| self.cfg.regenerate_every(*kind))
            .max(1);
        let seed = self.cfg.run.seed;
        let n = self.cfg.ablation.fixed_env_envs_per_step;
        let st = &mut self.state;
        let window = st.windows.get_mut("fixed")?;
        if step > 0 && step.is_multiple_of(k) {
            window.envs.iter_mut().for_each(restart_tallies);
        }
        let picks = draw_fixed(
            &mut st.fixed_remaining,
            &mut st.fixed_passes,
            window.envs.len(),
            n,
            seed,
        );
        // The RLVE baseline plays each drawn environment at a difficulty of its window.
        if let Some(d) = &st.rlve {
            for &i in &picks {
                let Some(env) = window.envs.get_mut(i) else {
                    continue;
                };
                let level = rlve_level(d, seed, step, &env.env_id);
                let id = env.env_id.strip_prefix(RLVE_PREFIX);
                if let (Some(level), Some(id)) = (level, id) {
                    env.code = rlve_code(id, level);
                }
            }
        }
        Some(
            picks
                .into_iter()
                .filter_map(|i| window.envs.get(i).map(|e| e.env_id.clone()))
                .collect(),
        )
    }
}

/// RLVE's difficulty rule after a step's plays: each answer counts at the difficulty its
/// environment was played at this step; the metrics say where the difficulties stand.
pub(super) fn rlve_update(
    d: &mut spade::rlve::AdaptiveDifficulty,
    run_seed: u64,
    step: u64,
    wins: &[(String, Vec<bool>)],
) -> RlveStats {
    let mut samples = Vec::new();
    for (env_id, won) in wins {
        let (Some(id), Some(level)) = (
            env_id.strip_prefix(RLVE_PREFIX),
            rlve_level(d, run_seed, step, env_id),
        ) else {
            continue;
        };
        samples.extend(won.iter().map(|&correct| spade::rlve::Sample {
            env: id,
            difficulty: level,
            correct,
        }));
    }
    let checks = d.update(samples);
    let levels: Vec<f64> = d.difficulties().map(f64::from).collect();
    let n = levels.len().max(1) as f64;
    RlveStats {
        checks: checks.len(),
        raised: checks.iter().filter(|c| c.raised).count(),
        difficulty_mean: levels.iter().sum::<f64>() / n,
        difficulty_max: levels.iter().copied().fold(0.0, f64::max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_pool_is_drawn_without_replacement_until_exhausted() {
        // Pool of 5, 2 per step (the reference: 24 of 7,872). Steps 1 and 2 take four distinct
        // environments; step 3 takes the fifth and one of a fresh shuffle, never the fifth
        // twice: the pool is exhausted before any environment comes back.
        let (mut remaining, mut passes) = (vec![], 0);
        let draws: Vec<Vec<usize>> = (0..5)
            .map(|_| draw_fixed(&mut remaining, &mut passes, 5, 2, 42))
            .collect();
        let first_four: Vec<usize> = draws[..2].concat();
        let mut sorted = first_four.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 4, "{draws:?}");
        let fifth = (0..5).find(|i| !first_four.contains(i)).unwrap_or(99);
        assert_eq!(
            draws[2][0], fifth,
            "the pass ends with the one left: {draws:?}"
        );
        assert_ne!(draws[2][1], fifth, "no environment twice in one draw");
        let mut counts = [0; 5];
        for d in &draws[..3] {
            for &i in d {
                counts[i] += 1;
            }
        }
        assert!(counts.iter().all(|&c| c >= 1), "{counts:?}");
        // Reproducible: the same seed draws the same.
        let (mut r2, mut p2) = (vec![], 0);
        assert_eq!(draw_fixed(&mut r2, &mut p2, 5, 2, 42), draws[0]);
        // 0 (or a pool no larger than n) plays the whole pool each step.
        assert_eq!(draw_fixed(&mut vec![], &mut 0, 3, 0, 1), vec![0, 1, 2]);
        assert_eq!(draw_fixed(&mut vec![], &mut 0, 3, 24, 1), vec![0, 1, 2]);
    }

    #[test]
    fn a_fixed_env_window_restarts_its_tallies_and_keeps_broken_environments_retired() {
        let mut e = LiveEnv {
            env_id: "fixed-0".into(),
            skill: "Optimization".into(),
            kind: EnvKind::Game,
            code: String::new(),
            hint: String::new(),
            generated_step: 0,
            parent_env_id: None,
            hint_returns: vec![],
            hint_wins: 0,
            // Four steps of plays: 3 of 8 won.
            no_hint_returns: vec![1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0],
            no_hint_wins: 3,
            first_no_hint_step: Some(0),
            first_step_returns: vec![1.0, 0.0],
            first_step_wins: 1,
            reward_levels: vec!["0".into(), "1".into()],
            failed: Some("timeout".into()),
            broken_seed: Some(7),
            reveals_solution: false,
        };
        restart_tallies(&mut e);
        assert!(e.no_hint_returns.is_empty() && e.no_hint_wins == 0);
        assert!(e.first_no_hint_step.is_none() && e.first_step_returns.is_empty());
        assert!(e.reward_levels.is_empty());
        assert_eq!(e.broken_seed, Some(7), "still retired");
        assert!(e.failed.is_some());
    }
    #[test]
    fn an_rlve_environment_gets_harder_once_nine_in_ten_answers_at_its_difficulty_win() {
        use spade::rlve::{AdaptiveDifficulty, DifficultyParams};
        let mut d = AdaptiveDifficulty::new(DifficultyParams::default(), ["A", "B"]);
        // 128 answers (RLVE's 8 prompts x 16) over steps, 120 of them right, all at difficulty 0
        // (the only one of the window at the start).
        let won: Vec<bool> = (0..64).map(|i| i % 16 != 0).collect();
        let wins = vec![("rlve-A".to_string(), won.clone())];
        let m = rlve_update(&mut d, 7, 0, &wins);
        assert_eq!((d.difficulty("A"), m.checks), (Some(0), 0));
        let m = rlve_update(&mut d, 7, 1, &wins);
        assert_eq!(d.difficulty("A"), Some(1));
        assert_eq!((m.raised, m.difficulty_mean), (1, 0.5));
        // B's answers are mostly wrong: checked, not raised.
        let wins = vec![("rlve-B".to_string(), vec![false; 128])];
        let m = rlve_update(&mut d, 7, 2, &wins);
        assert_eq!((d.difficulty("B"), m.checks, m.raised), (Some(0), 1, 0));
    }

    #[test]
    fn an_rlve_environment_is_played_within_its_window_reproducibly() {
        use spade::rlve::{AdaptiveDifficulty, DifficultyParams, Sample};
        let mut d = AdaptiveDifficulty::new(DifficultyParams::default(), ["A"]);
        for level in 0..6 {
            let right = std::iter::repeat_n(
                Sample {
                    env: "A",
                    difficulty: level,
                    correct: true,
                },
                128,
            );
            d.update(right);
        }
        assert_eq!(d.difficulty("A"), Some(6));
        let levels: Vec<u32> = (0..200)
            .filter_map(|step| rlve_level(&d, 11, step, "rlve-A"))
            .collect();
        assert_eq!(levels.len(), 200);
        assert!(levels.iter().all(|l| (3..=6).contains(l)), "{levels:?}");
        assert!(
            (3..=6).all(|l| levels.contains(&l)),
            "every level of the window is drawn"
        );
        assert_eq!(
            rlve_level(&d, 11, 5, "rlve-A"),
            rlve_level(&d, 11, 5, "rlve-A")
        );
        assert_eq!(rlve_level(&d, 11, 5, "fixed-0"), None);
    }
}
