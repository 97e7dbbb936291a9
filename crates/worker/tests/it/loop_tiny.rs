//! Three steps of the tiny loop with the real sandbox and the real policy: environments are
//! generated and accepted or rejected with reasons, hint and no-hint plays are recorded, delayed
//! designer rewards arrive when the first window closes, metrics are present every step and
//! every reported number is in its range.
//!
//! The warm-started tiny model is cached by content hash and CPU kernels in
//! `$SPADE_CACHE/warmstart` (default `~/.cache/spade-studio/warmstart`), shared with `spade train`
//! and the demo; the first run on a machine trains it (minutes, until its criterion is met),
//! later runs reuse it. Tests that need its designer check that criterion first
//! ([`ready_designer`]).

use spade::config::RunConfig;
use spade::report::{EnvStatus, Message};
use spade_worker::run::{self, RunOptions};
use spade_worker::sink::FileSink;
use spade_worker::state::{self, StateStore};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The machine cache the tests share with `spade train` and the demo (`$SPADE_CACHE`, default
/// `~/.cache/spade-studio`).
pub fn cache_root() -> PathBuf {
    spade_policy::preset::cache_root()
}

pub fn cache_dir() -> PathBuf {
    cache_root().join("warmstart")
}

/// The demo configuration, cut to three steps and fewer environments (the warm start depends
/// only on fields left unchanged, so it is the demo's: keep `agent.max_turns`, which the
/// designer prompt states).
pub fn three_step_config() -> Result<RunConfig, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(repo().join("configs/tiny-demo.toml"))?;
    let mut cfg = RunConfig::from_toml_str(&text)?;
    cfg.run.steps = 3;
    cfg.run.checkpoint_every = 2;
    cfg.curriculum.active_game_skills = 2;
    cfg.curriculum.envs_per_skill = 1;
    cfg.hint.plays = 2;
    cfg.agent.global_batch = 4;
    Ok(cfg)
}

/// The warm-started tiny model of `cfg` (trained now when the cache has none), checked against
/// the warm start's criterion first: a test that needs a working tiny designer fails here with
/// the warm start's own verdict (what it measured, after how many epochs), not later with
/// "no valid environment".
pub fn ready_designer(
    cfg: &RunConfig,
    opts: &RunOptions,
) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let (dir, report) = run::prepare_warm_start(cfg, opts, &mut |e| {
        if let run::Event::Log(l) = e {
            eprintln!("{l}");
        }
    })?;
    if let Some(r) = report
        && !r.designer_ready()
    {
        return Err(format!("{} (cached at {})", r.verdict(), dir.display()).into());
    }
    Ok(dir)
}

#[test]
fn three_steps_of_the_tiny_loop() -> Result<(), Box<dyn std::error::Error>> {
    spade_policy::embed::set_threads(1);
    let cfg = three_step_config()?;
    let out = tempfile::tempdir()?;
    let mut opts = RunOptions::new("it-loop", repo().join("envs/seed"), cache_dir());
    opts.concurrency = Some(4);
    ready_designer(&cfg, &opts)?;
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let mut log = Vec::new();
    let outcome = run::run(&cfg, &opts, &store, &mut sink, &mut |e| {
        log.push(format!("{e:?}"))
    })?;
    assert_eq!(outcome.steps, 3);

    // `read_all` sorts by seq, so the order is checked on the files as written: the sink
    // delivers in seq order (a resumed sink skips what it already wrote by seq), and no seq is
    // used twice, across files too.
    let mut every_seq = Vec::new();
    for name in spade_worker::sink::RUN_FILES {
        let Ok(text) = std::fs::read_to_string(out.path().join(name)) else {
            continue;
        };
        let seqs = text
            .lines()
            .map(|l| serde_json::from_str::<spade::report::Envelope>(l).map(|e| e.seq))
            .collect::<Result<Vec<u64>, _>>()?;
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{name} was written out of seq order: {seqs:?}"
        );
        every_seq.extend(seqs);
    }
    let written = every_seq.len();
    every_seq.sort_unstable();
    every_seq.dedup();
    assert_eq!(every_seq.len(), written, "a seq was used twice");
    let all = FileSink::read_all(out.path())?;
    let steps: Vec<u64> = all
        .iter()
        .filter_map(|e| match &e.message {
            Message::Metrics { step, .. } => Some(*step),
            _ => None,
        })
        .collect();
    assert_eq!(
        steps,
        [0, 1, 2],
        "one metrics report per step, in step order"
    );

    let (mut accepted, mut rejected, mut scored, mut plays, mut metrics) = (0, 0, 0, 0, vec![]);
    let mut updates = 0u64;
    let mut designer_steps = vec![];
    let mut checkpoints = vec![];
    for e in &all {
        match &e.message {
            Message::Environment { record } => match record.status {
                EnvStatus::Accepted => {
                    accepted += 1;
                    assert!(record.hint.is_some(), "accepted environments carry a hint");
                    assert!(record.rejection_reason.is_none());
                }
                EnvStatus::Rejected => {
                    rejected += 1;
                    let reason = record.rejection_reason.as_deref().unwrap_or("");
                    assert!(!reason.is_empty(), "a rejection names its reason");
                    assert!(record.rejection_message.is_some());
                    assert!((1..=cfg.designer.attempts).contains(&record.attempts));
                }
                EnvStatus::BrokenInPlay => {
                    panic!("a new environment is never reported broken: {record:?}")
                }
            },
            Message::EnvironmentScored {
                regret,
                win_rate_hint,
                win_rate_no_hint,
                designer_reward,
                step,
                ..
            } => {
                scored += 1;
                assert!((-2.0..=2.0).contains(regret), "regret {regret}");
                assert!((0.0..=1.0).contains(win_rate_hint));
                assert!((0.0..=1.0).contains(win_rate_no_hint));
                assert!(
                    (-0.5..=1.0).contains(designer_reward),
                    "reward {designer_reward}"
                );
                assert!(
                    *step == 2,
                    "scored when a window closes (step 2) or is flushed (step 2, the last): {step}"
                );
            }
            Message::Plays { records } => {
                for p in records {
                    plays += 1;
                    assert!(
                        (-1.0..=1.0).contains(&p.episode_return),
                        "{}",
                        p.episode_return
                    );
                    assert!(p.turns <= cfg.agent.max_turns);
                    assert!(!p.transcript.is_empty());
                    assert!(!p.won || p.episode_return == 1.0);
                }
            }
            Message::Metrics { step, values, .. } => {
                assert!(values.contains_key("envs"));
                assert!(values.contains_key("acceptance_rate_run"), "{values:?}");
                for (k, v) in values {
                    assert!(v.is_finite(), "{k} = {v}");
                }
                if let Some(l) = values.get("learnable_share") {
                    assert!((0.0..=1.0).contains(l));
                }
                metrics.push(*step);
                // One batch, one optimizer update per step: the designer samples of a closing
                // window join the step's agent samples (spade_rollout.py), no second step.
                assert!(!values.contains_key("designer_loss"), "{values:?}");
                updates += u64::from(values.contains_key("loss"));
                if values.get("designer_samples").is_some_and(|n| *n > 0.0) {
                    designer_steps.push(*step);
                    assert!(values.contains_key("loss"), "trained in the step's update");
                }
            }
            // Evaluation jobs read reported checkpoints from another working directory.
            Message::Checkpoint { step, path, .. } => {
                let p = std::path::Path::new(path);
                assert!(
                    p.is_absolute(),
                    "checkpoint {step} at a relative path {path}"
                );
                assert!(p.join("config.json").is_file(), "checkpoint {step}: {path}");
                checkpoints.push(*step);
            }
            _ => {}
        }
    }
    assert_eq!(metrics, vec![0, 1, 2], "one metrics record per step");
    assert_eq!(
        checkpoints.first(),
        Some(&0),
        "the starting model is checkpoint 0: {checkpoints:?}"
    );
    assert!(accepted + rejected >= 4, "two regenerations of two slots");
    assert!(
        accepted > 0,
        "the warm-started designer wrote no valid environment in {} attempts",
        accepted + rejected
    );
    assert!(plays > 0, "plays are recorded");
    assert!(scored > 0, "delayed designer rewards are reported");
    let (_, st) = store.load()?.ok_or("no checkpoint")?;
    assert_eq!(st.step, 3);
    assert!(
        out.path()
            .join("checkpoints/step-2/model.safetensors")
            .exists()
    );
    // The optimiser state is checkpointed with the weights and restores into a fresh trainer.
    assert!(
        out.path()
            .join("checkpoints/step-2")
            .join(state::OPTIMIZER)
            .exists()
    );
    let latest = store.latest();
    let policy = spade_policy::Policy::load(&latest, spade_policy::default_device())?;
    let mut trainer = spade_policy::grpo::GrpoTrainer::new(&policy, Default::default())?;
    assert!(state::load_optimizer(&mut trainer, &latest, true)?.is_some());
    assert_eq!(
        trainer.optimizer().step_count(),
        updates,
        "one AdamW step per reported GRPO update"
    );
    assert!(updates <= 3, "at most one update per step: {updates}");
    assert!(
        designer_steps.iter().all(|s| *s == 2),
        "designer samples train when a window closes and in the last step: {designer_steps:?}"
    );
    Ok(())
}

/// Tool use through the whole loop: the fixed-environment baseline over the seed library's
/// tool-use tasks, so the agent's `<tool_call>` / `<answer>` replies meet real tool-use
/// environments in the sandbox (the tiny designer cannot write tool-use code yet).
#[test]
fn two_steps_of_the_agent_on_a_fixed_tool_use_pool() -> Result<(), Box<dyn std::error::Error>> {
    spade_policy::embed::set_threads(1);
    let mut cfg = three_step_config()?;
    cfg.run.steps = 2;
    cfg.curriculum.kinds = vec![spade::EnvKind::ToolUse];
    // The demo's designer ablation does not apply without a designer, and its warm start's
    // family is a game: a tool-use run warm-starts on the seed library.
    cfg.ablation.no_corpus = false;
    cfg.model.warm_start = spade::config::WarmStartData::Seeds;
    // One task keeps the test short: each play is up to the task's own turn limit of tiny-model
    // replies (six tasks took 463 s here).
    cfg.hint.plays = 1;
    cfg.agent.global_batch = 2;
    let pool = tempfile::tempdir()?;
    // The pool has the seed library's layout (`games/`, `tooluse/`).
    std::fs::create_dir(pool.path().join("tooluse"))?;
    std::fs::copy(
        repo().join("envs/seed/tooluse/smart_home.py"),
        pool.path().join("tooluse/smart_home.py"),
    )?;
    cfg.ablation.fixed_env_pool = Some(pool.path().to_string_lossy().into_owned());
    let out = tempfile::tempdir()?;
    let mut opts = RunOptions::new("it-tooluse", repo().join("envs/seed"), cache_dir());
    opts.concurrency = Some(4);
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let outcome = run::run(&cfg, &opts, &store, &mut sink, &mut |_| {})?;
    assert_eq!(outcome.steps, 2);
    let all = FileSink::read_all(out.path())?;
    let mut plays = 0;
    for e in &all {
        if let Message::Plays { records } = &e.message {
            for p in records {
                plays += 1;
                assert!(
                    (-1.0..=1.0).contains(&p.episode_return),
                    "{}",
                    p.episode_return
                );
                assert!(p.turns >= 1 && p.turns <= cfg.agent.max_turns);
                // The first message is the task's first instruction, then the agent's reply.
                assert!(p.transcript.len() >= 2, "{:?}", p.transcript);
            }
        }
        if let Message::Environment { record } = &e.message {
            assert_eq!(record.kind, spade::EnvKind::ToolUse);
        }
    }
    assert!(plays > 0, "the agent played the tool-use pool");
    Ok(())
}

/// The fixed-environment RLVE baseline through the whole loop: RLVE's environments from the
/// venv's `rlve-gym`, two drawn per step, played by the agent in the sandbox with `\boxed{}`
/// answers scored by RLVE's own scorers.
#[test]
fn two_steps_of_the_agent_on_rlve() -> Result<(), Box<dyn std::error::Error>> {
    spade_policy::embed::set_threads(1);
    let mut cfg = three_step_config()?;
    cfg.run.steps = 2;
    cfg.curriculum.kinds = vec![spade::EnvKind::Game];
    // The demo's designer ablation does not apply without a designer, and its warm start's
    // family is a game: a tool-use run warm-starts on the seed library.
    cfg.ablation.no_corpus = false;
    cfg.model.warm_start = spade::config::WarmStartData::Seeds;
    cfg.ablation.rlve = true;
    cfg.ablation.fixed_env_envs_per_step = 2;
    cfg.hint.plays = 1;
    cfg.agent.global_batch = 2;
    assert!(cfg.validate().is_empty(), "{:?}", cfg.validate());
    let out = tempfile::tempdir()?;
    let mut opts = RunOptions::new("it-rlve", repo().join("envs/seed"), cache_dir());
    opts.concurrency = Some(2);
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let outcome = run::run(&cfg, &opts, &store, &mut sink, &mut |_| {})?;
    assert_eq!(outcome.steps, 2);
    let all = FileSink::read_all(out.path())?;
    let mut plays = 0;
    for e in &all {
        if let Message::Plays { records } = &e.message {
            for p in records {
                plays += 1;
                assert!(p.env_id.starts_with("rlve-"), "{}", p.env_id);
                assert!(
                    (-1.0..=1.0).contains(&p.episode_return),
                    "{}",
                    p.episode_return
                );
                assert_eq!(p.turns, 1, "an RLVE problem is one reply");
                let first = p
                    .transcript
                    .first()
                    .map(|m| m.content.as_str())
                    .unwrap_or("");
                assert!(first.contains("\\boxed{}"), "{first:.200}");
            }
        }
    }
    assert_eq!(plays, 2 * 2, "two environments a step, one play each");
    let mut steps_with_difficulty = 0;
    for e in &all {
        if let Message::Metrics { values, .. } = &e.message
            && let Some(&mean) = values.get("rlve_difficulty_mean")
        {
            steps_with_difficulty += 1;
            // Far fewer than RLVE's 128 answers per check: every difficulty is still 0.
            assert_eq!(mean, 0.0);
        }
    }
    assert_eq!(steps_with_difficulty, 2);
    Ok(())
}
