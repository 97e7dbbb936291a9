//! Environment pools end to end: a run directory's environments exported as a pool, imported
//! as `ablation.fixed_env_pool` and played by a training step; a pool whose environments cannot
//! be played is refused before the warm start, with one reason per environment.
//!
//! The run directory is written through the real `FileSink` with the learning fixture's three
//! one-turn halls (accepted) and one environment the sandbox rejects, as a run that accepted it
//! would have reported it: what an export of a real run contains, without minutes of designer
//! generation.

use crate::learning::{Res, config, fixture};
use spade::EnvKind;
use spade::pool::{Card, PoolFilter};
use spade::report::{EnvStatus, Envelope, EnvironmentRecord, Message};
use spade_worker::pool::{PoolWriter, run_dir_environments};
use spade_worker::run::{self, Event, RunOptions};
use spade_worker::sink::{FileSink, Sink};
use spade_worker::state::StateStore;
use std::path::Path;
use std::time::Instant;

/// No `reset`: the sandbox rejects it at its first check.
const BROKEN: &str =
    "class NoResetEnv:\n    def step(self, action):\n        return '', 0.0, True, False, {}\n";

fn record(env_id: &str, step: u64, code: &str) -> EnvironmentRecord {
    EnvironmentRecord {
        hint: Some("count the doors".into()),
        ..EnvironmentRecord::new(
            env_id,
            step,
            "Pattern Recognition",
            EnvKind::Game,
            EnvStatus::Accepted,
            code,
        )
    }
}

/// A run directory with the fixture's halls (scored) and [`BROKEN`].
fn run_dir(pool_dir: &Path, out: &Path) -> Res<Vec<String>> {
    let mut files: Vec<_> = std::fs::read_dir(pool_dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut msgs = vec![];
    let mut ids = vec![];
    for (i, f) in files.iter().enumerate() {
        let id = format!("s0-game-{i}");
        msgs.push(Message::Environment {
            record: record(&id, 0, &std::fs::read_to_string(f)?),
        });
        msgs.push(Message::EnvironmentScored {
            env_id: id.clone(),
            step: 4,
            regret: 0.5,
            win_rate_hint: 0.75,
            win_rate_no_hint: 0.25,
            designer_reward: 0.3,
            reward_levels: 2,
        });
        ids.push(id);
    }
    msgs.push(Message::Environment {
        record: record("s0-game-broken", 0, BROKEN),
    });
    let envs: Vec<Envelope> = msgs
        .into_iter()
        .enumerate()
        .map(|(i, m)| Envelope::new("it-pool-source".to_string(), i as u64, m))
        .collect();
    FileSink::open(out)?.deliver(&envs)?;
    Ok(ids)
}

#[test]
fn an_exported_run_imports_as_a_fixed_pool_and_a_training_step_plays_it() -> Res<()> {
    spade_policy::embed::set_threads(1);
    let f = fixture();
    let tmp = tempfile::tempdir()?;
    let source = tmp.path().join("source-run");
    let halls = run_dir(&f.pool_dir, &source)?;

    // Export: what `spade env export --run-dir` does.
    let envs = run_dir_environments(&source, "source-run")?;
    let filter = PoolFilter {
        status: Some(EnvStatus::Accepted),
        ..PoolFilter::default()
    };
    let pool_dir = tmp.path().join("pool");
    let mut w = PoolWriter::create(&pool_dir, Card::default())?;
    for e in envs.entries.into_iter().filter(|e| filter.matches(e)) {
        w.add(e)?;
    }
    assert_eq!(w.finish()?.counts.values().sum::<usize>(), halls.len() + 1);

    // Import: the pool directory as the fixed-env baseline's pool, one step.
    let mut cfg = config(f, 1, 3e-4, 1)?;
    cfg.ablation.fixed_env_pool = Some(pool_dir.display().to_string());
    cfg.ablation.fixed_env_envs_per_step = 0;
    cfg.agent.global_batch = 6;
    let out = tempfile::tempdir()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut opts = RunOptions::new("it-pool", repo.join("envs/seed"), out.path().join("cache"));
    opts.concurrency = Some(2);
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let outcome = run::run(&cfg, &opts, &store, &mut sink, &mut |_| {})?;
    assert_eq!(outcome.steps, 1);

    let mut played = std::collections::BTreeSet::new();
    let mut plays = 0;
    let mut warnings = vec![];
    // The service stores plays only of environments the run reported before them (issue 36).
    let mut reported = std::collections::BTreeSet::new();
    for e in FileSink::read_all(out.path())? {
        match e.message {
            Message::Environment { record } => {
                assert_eq!(record.status, EnvStatus::Accepted, "{record:?}");
                reported.insert(record.env_id);
            }
            Message::Plays { records } => {
                plays += records.len();
                for p in &records {
                    assert!(
                        reported.contains(&p.env_id),
                        "{} played before it was reported (seq {})",
                        p.env_id,
                        e.seq
                    );
                }
                played.extend(records.into_iter().map(|p| p.env_id));
            }
            Message::Log { line, .. } => warnings.push(line),
            _ => {}
        }
    }
    let expected: std::collections::BTreeSet<String> = halls.into_iter().collect();
    assert_eq!(
        played, expected,
        "every valid pool environment, by its pool id"
    );
    let refused: Vec<&String> = warnings
        .iter()
        .filter(|l| l.contains("left out") && l.contains("s0-game-broken"))
        .collect();
    assert_eq!(refused.len(), 1, "{warnings:?}");
    eprintln!("{plays} plays of {played:?}; {}", refused[0]);
    assert!(
        refused[0].contains("rejected by the sandbox") && refused[0].contains("pool.jsonl:"),
        "the rejection names its line and reason: {}",
        refused[0]
    );
    Ok(())
}

#[test]
fn a_pool_without_a_playable_environment_is_refused_before_the_warm_start() -> Res<()> {
    let tmp = tempfile::tempdir()?;
    std::fs::write(tmp.path().join("a.py"), "class A:\n    pass\n")?;
    std::fs::write(
        tmp.path().join("b.py"),
        format!("\"\"\"Skill: Optimization. x\"\"\"\n{BROKEN}"),
    )?;
    let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
    cfg.ablation.fixed_env_pool = Some(tmp.path().display().to_string());
    cfg.ablation.no_corpus = false;
    let out = tempfile::tempdir()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // A cache of its own: a warm start here would train from scratch (minutes), so a pass in
    // seconds shows that none started.
    let opts = RunOptions::new(
        "it-pool-bad",
        repo.join("envs/seed"),
        out.path().join("cache"),
    );
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let started = Instant::now();
    let mut log = vec![];
    let err = match run::run(&cfg, &opts, &store, &mut sink, &mut |e| {
        if let Event::Log(l) = e {
            log.push(l);
        }
    }) {
        Ok(_) => return Err("a pool with nothing playable ran".into()),
        Err(e) => e.to_string(),
    };
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
    eprintln!("refused in {:?}: {err}", started.elapsed());
    assert!(!log.iter().any(|l| l.contains("warm")), "{log:?}");
    assert!(err.contains("no valid environments"), "{err}");
    assert!(err.contains("a.py: line 1: expected a docstring"), "{err}");
    assert!(
        err.contains("b.py: fixed-1: rejected by the sandbox"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_seed_pool_gives_its_valid_scored_environments_as_memory_records() -> Res<()> {
    let f = fixture();
    let tmp = tempfile::tempdir()?;
    let source = tmp.path().join("source-run");
    let halls = run_dir(&f.pool_dir, &source)?;
    let mut entries = run_dir_environments(&source, "source-run")?.entries;
    // The last hall unscored: valid code, but nothing to choose it as an example by.
    let unscored = halls.last().cloned().unwrap_or_default();
    for e in entries.iter_mut().filter(|e| e.id == unscored) {
        e.win_rate_no_hint = None;
        e.regret = None;
    }
    let pool_dir = tmp.path().join("pool");
    let mut w = PoolWriter::create(&pool_dir, Card::default())?;
    for e in entries {
        w.add(e)?;
    }
    w.finish()?;
    let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
    cfg.memory.seed_pool = Some(pool_dir.display().to_string());
    let sandbox = spade_sandbox::Pool::new(spade_sandbox::PoolConfig::new(
        spade_sandbox::RunnerConfig::new(spade_sandbox::default_runner_path()),
    ));
    let (records, problems) = spade_worker::pool::seed_memory(&cfg, &sandbox)?;
    let ids: Vec<&str> = records.iter().map(|r| r.env_id.as_str()).collect();
    assert_eq!(
        ids,
        halls[..halls.len() - 1]
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );
    assert!(
        records
            .iter()
            .all(|r| r.win_rate == 0.25 && r.regret == 0.5 && r.step == 0)
    );
    let msgs: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs.iter()
            .any(|m| m.contains("s0-game-broken: rejected by the sandbox")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(
            |m| m.contains(&unscored) && m.contains("expected `win_rate_no_hint` and `regret`")
        ),
        "{msgs:?}"
    );

    // A run whose seed pool has nothing usable stops before the warm start, saying why.
    std::fs::write(pool_dir.join("pool.jsonl"), "{\"id\": 1}\n")?;
    let out = tempfile::tempdir()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let opts = RunOptions::new(
        "it-seed-bad",
        repo.join("envs/seed"),
        out.path().join("cache"),
    );
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let started = Instant::now();
    let err = match run::run(&cfg, &opts, &store, &mut sink, &mut |_| {}) {
        Ok(_) => return Err("a run with an unusable seed pool ran".into()),
        Err(e) => e.to_string(),
    };
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
    assert!(
        err.contains("memory.seed_pool: no valid, scored environments"),
        "{err}"
    );
    assert!(
        err.contains("pool.jsonl:1: expected one JSON object"),
        "{err}"
    );
    Ok(())
}
