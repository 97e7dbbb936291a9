//! Learning regression (issue 15): the RL machinery must improve a reward, and must not when the
//! update is switched off. A sign error in an advantage, a loss mask over the wrong tokens or an
//! importance ratio that cancels the gradient all pass every formula test; they fail here.
//!
//! The set-up is the fixed-environment GRPO baseline through the real loop (`run::run`, the
//! sandbox, the policy, the trainer), on a pool of three one-turn games: "which of doors 1, 2, 3
//! of the <name> hall is lucky", each with a fixed lucky door. The tiny model is first taught the
//! answer format by SFT on the same halls with the lucky door drawn per seed, so it answers
//! `\boxed{d}` with d roughly uniform: a starting no-hint win rate near 1/3, measured, not
//! assumed. GRPO then has to learn each hall's door from the reward alone.
//!
//! Negative control: the same run with the learning rate at 1e-12 (the configuration requires
//! lr > 0), which takes the same code path with an update too small to change any sample.

use crate::loop_tiny::cache_root;
use spade::config::RunConfig;
use spade::report::Message;
use spade_policy::sft::{SftConfig, SftTrainer};
use spade_policy::train::OptimConfig;
use spade_sandbox::{EnvKind, Pool, PoolConfig, RunnerConfig};
use spade_worker::run::{self, RunOptions};
use spade_worker::sink::FileSink;
use spade_worker::state::StateStore;
use spade_worker::warmstart::{self, WarmStartOptions};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// (hall name, skill, lucky door in the pool; None = drawn per seed, SFT only).
const HALLS: [(&str, &str, Option<u8>); 6] = [
    ("amber", "Pattern Recognition", Some(3)),
    ("cobalt", "Logical Deduction", Some(3)),
    ("ivory", "Mathematical Reasoning", Some(3)),
    ("jade", "Pattern Recognition", None),
    ("scarlet", "Logical Deduction", None),
    ("umber", "Mathematical Reasoning", None),
];

fn hall_game(name: &str, skill: &str, door: &str) -> String {
    let cls = format!("{}{}HallEnv", name[..1].to_uppercase(), &name[1..]);
    format!(
        r#""""Skill: {skill}. Mechanic: single-answer (1 try). Name the lucky door of the {name} hall."""
import random


def last_boxed(text):
    end = len(text)
    while (start := text.rfind("\\boxed{{", 0, end)) >= 0:
        close = text.find("}}", start)
        if close >= 0:
            return text[start + 7:close].strip()
        end = start
    return None


class {cls}:
    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = 1

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.door = {door}
        self.turn, self.over = 0, False
        return ("The {name} hall has three doors: 1, 2 and 3. One of them is lucky.\n"
                "Answer with \\boxed{{door}}."), {{"turn": 0}}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {{"turn": self.turn}}
        self.turn, self.over = 1, True
        if last_boxed(action) == str(self.door):
            return "Correct, that door is lucky.", 1.0, True, False, {{"turn": 1}}
        return f"Wrong. The lucky door was {{self.door}}.", 0.0, True, False, {{"turn": 1}}

    def solution(self):
        return str(self.door)

    def close(self):
        pass
"#
    )
}

pub(crate) fn write(dir: &Path, file: &str, code: &str) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(file), code)?;
    Ok(())
}

/// Bumped whenever the fixture's training changes (its texts are hashed anyway).
const FIXTURE_VERSION: u32 = 1;

/// Where a fixture model trained on `texts` is cached: by content (like the warm start), since
/// its SFT is a minute of CPU that every run of the test would repeat. `texts` must cover every
/// input of the fixture's training; `version` covers the code that trains it.
pub(crate) fn cached_model_dir(prefix: &str, version: u32, texts: &[String]) -> PathBuf {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(version.to_le_bytes());
    // Trained weights differ between CPU kernel sets (issue 35): a fixture trained with other
    // kernels is another fixture.
    h.update(spade_policy::kernels::fingerprint().as_bytes());
    h.update([0]);
    for t in texts {
        h.update(t.as_bytes());
        h.update([0]);
    }
    let key: String = h
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    cache_root().join(format!("{prefix}-{key}"))
}

pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub(crate) pool_dir: PathBuf,
    pub(crate) model_dir: PathBuf,
}

/// The pool and the format-taught model, made once per test binary (the checkpoint cadence
/// tests run on it too: a fixed-env step of one-turn games takes seconds).
pub(crate) fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| match make_fixture() {
        Ok(f) => f,
        Err(e) => panic!("learning fixture: {e}"),
    })
}

fn make_fixture() -> Res<Fixture> {
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let pool_dir = dir.path().join("pool");
    let sft_dir = dir.path().join("sft");
    let mut texts = vec![
        spade::prompt::agent_system(spade::EnvKind::Game).to_string(),
        "\\boxed{1} \\boxed{2} \\boxed{3}".to_string(),
    ];
    for (name, skill, door) in HALLS {
        let drawn = hall_game(name, skill, "rng.randint(1, 3)");
        write(&sft_dir, &format!("{name}.py"), &drawn)?;
        texts.push(drawn);
        if let Some(d) = door {
            let fixed = hall_game(name, skill, &d.to_string());
            write(&pool_dir, &format!("{name}.py"), &fixed)?;
        }
    }
    let model_dir = cached_model_dir("learning-fixture", FIXTURE_VERSION, &texts);
    if model_dir.join("config.json").exists() {
        return Ok(Fixture {
            _dir: dir,
            pool_dir,
            model_dir,
        });
    }
    let policy = spade_policy::preset::tiny(&texts, 7, |_| {})?;
    let tok = policy.require_tokenizer()?.clone();
    let seeds = warmstart::read_seeds(&sft_dir)?;
    let opts = WarmStartOptions {
        kinds: vec![EnvKind::Game],
        seed: 7,
        epochs: 0,
        max_epochs: 0,
        min_acceptance: 0.0,
        batch_size: 8,
        lr: 0.0,
        designer_variants: 0,
        designer_files: seeds.len(),
        agent_episodes: 16,
        hint_code_chars: 0,
        memory_positives: 0,
        memory_negatives: 0,
        memory_code_chars: 0,
        corpus_docs: vec![],
        measure_samples: 0,
        designer_max_new_tokens: 0,
        max_turns: 1,
        family: None,
        base: None,
        agent_hint_only: false,
    };
    let pool = Pool::new(PoolConfig::new(RunnerConfig::new(
        spade_sandbox::default_runner_path(),
    )));
    let (data, counts) = warmstart::build_data(&tok, &pool, &seeds, &opts)?;
    assert_eq!(counts[2], 6 * 16, "every SFT episode played: {counts:?}");
    let cfg = SftConfig {
        optim: OptimConfig {
            lr: 3e-3,
            weight_decay: 0.0,
            ..OptimConfig::default()
        },
        micro_batch: 8,
        max_len: 512,
    };
    let mut sft = SftTrainer::new(&policy, cfg)?;
    let losses = sft.fit(&policy, &data, 6, 8, |_, _, _| {})?;
    let tmp = dir.path().join("model");
    policy.save(&tmp)?;
    std::fs::create_dir_all(cache_root())?;
    match std::fs::rename(&tmp, &model_dir) {
        Ok(()) => {}
        // Another process cached the same fixture first: keep theirs.
        Err(_) if model_dir.join("config.json").exists() => {}
        Err(e) => return Err(e.into()),
    }
    eprintln!(
        "learning fixture: {} SFT sequences, loss {:.3} -> {:.3}, {:.1} s",
        data.len(),
        losses.first().copied().unwrap_or(f64::NAN),
        losses.last().copied().unwrap_or(f64::NAN),
        started.elapsed().as_secs_f64()
    );
    Ok(Fixture {
        _dir: dir,
        pool_dir,
        model_dir,
    })
}

pub(crate) fn config(f: &Fixture, seed: u64, lr: f64, steps: u64) -> Res<RunConfig> {
    let mut cfg = RunConfig::tiny_cpu_demo();
    cfg.run.steps = steps;
    cfg.run.seed = seed;
    cfg.run.checkpoint_every = steps;
    cfg.model.path = Some(f.model_dir.display().to_string());
    cfg.model.agent_max_new_tokens = 12;
    cfg.ablation.fixed_env_pool = Some(f.pool_dir.display().to_string());
    // 3 halls x 8 plays: groups large enough that z-scored advantages carry signal.
    cfg.agent.global_batch = 24;
    cfg.grpo.lr = lr;
    cfg.eval.every_steps = 0;
    cfg.eval.base_model = false;
    let issues = cfg.validate();
    assert!(issues.is_empty(), "{issues:?}");
    Ok(cfg)
}

/// `runs` side by side, one thread each (2 cores, one torch thread each): `f(config, label)`'s
/// result per run, in order; a panicking run is an error of its own.
pub(crate) fn side_by_side<T: Send>(
    runs: &[(String, RunConfig)],
    f: impl Fn(&RunConfig, &str) -> Res<T> + Sync,
) -> Vec<Res<T>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .map(|(label, cfg)| s.spawn(|| f(cfg, label)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a run panicked".into())))
            .collect()
    })
}

/// No-hint win rate of every step of one run. With `LEARNING_DEBUG` set, the run's log lines
/// and every play's actions are printed.
pub(crate) fn win_rates(cfg: &RunConfig, label: &str) -> Res<Vec<f64>> {
    let started = Instant::now();
    let out = tempfile::tempdir()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut opts = RunOptions::new(label, repo.join("envs/seed"), out.path().join("cache"));
    opts.concurrency = Some(2);
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let debug = std::env::var_os("LEARNING_DEBUG").is_some();
    run::run(cfg, &opts, &store, &mut sink, &mut |e| {
        if let (true, run::Event::Log(l)) = (debug, e) {
            eprintln!("{label}: {l}");
        }
    })?;
    let mut per_step = std::collections::BTreeMap::<u64, (u32, u32)>::new();
    for e in FileSink::read_all(out.path())? {
        if let Message::Plays { records } = e.message {
            for p in records.iter().filter(|p| !p.with_hint) {
                if debug {
                    let actions: Vec<&str> = p
                        .transcript
                        .iter()
                        .filter(|t| t.role == spade::report::TurnRole::Assistant)
                        .map(|t| t.content.as_str())
                        .collect();
                    eprintln!(
                        "{label} step {} {} {actions:?} won={}",
                        p.step, p.env_id, p.won
                    );
                }
                let slot = per_step.entry(p.step).or_default();
                slot.0 += u32::from(p.won);
                slot.1 += 1;
            }
        }
    }
    assert_eq!(per_step.len() as u64, cfg.run.steps, "plays in every step");
    let rates: Vec<f64> = per_step
        .values()
        .map(|&(w, n)| f64::from(w) / f64::from(n))
        .collect();
    eprintln!(
        "{label}: win rate per step {:?} ({:.1} s)",
        rates.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>(),
        started.elapsed().as_secs_f64()
    );
    Ok(rates)
}

pub(crate) fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

const STEPS: u64 = 10;
/// The tiny model's RL learning rate here: 1e-4 moves too little in 10 steps of 24 plays, 1e-3
/// overshoots into a degenerate `\boxed{boxed{...` within three steps (both measured).
const LR: f64 = 3e-4;

/// Starting win rate (first two steps) and final one (last three).
fn start_end(r: &[f64]) -> (f64, f64) {
    (mean(&r[..2]), mean(&r[r.len() - 3..]))
}

#[test]
fn grpo_raises_the_no_hint_win_rate_and_a_zero_update_does_not() -> Res<()> {
    spade_policy::embed::set_threads(1);
    let f = fixture();
    // The three runs are independent: run them side by side (2 cores, one torch thread each).
    let runs: Vec<(String, RunConfig)> = vec![
        ("grpo seed 1".into(), config(f, 1, LR, STEPS)?),
        ("grpo seed 2".into(), config(f, 2, LR, STEPS)?),
        ("control lr 1e-12".into(), config(f, 1, 1e-12, STEPS)?),
    ];
    let results = side_by_side(&runs, win_rates);
    for ((label, _), r) in runs.iter().zip(results) {
        let r = r?;
        let (start, end) = start_end(&r);
        if label.starts_with("control") {
            assert!(
                end < start + 0.1,
                "{label}: win rate {start:.2} -> {end:.2} without a real update ({r:?})"
            );
            continue;
        }
        assert!(
            (0.1..=0.6).contains(&start),
            "{label}: starting win rate {start:.2} outside 0.1..0.6 ({r:?})"
        );
        assert!(
            end >= start + 0.2,
            "{label}: win rate {start:.2} -> {end:.2}, expected a rise of at least 0.2 ({r:?})"
        );
    }
    Ok(())
}
