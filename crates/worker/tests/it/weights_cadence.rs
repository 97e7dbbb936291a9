//! The resume point every `run.weights_every` steps: weights and `state.json` are written only
//! on the steps they should be (the cadence, a kept checkpoint, the end), a step's reports reach
//! the sink only with the write that includes it, and a crash between two writes resumes from
//! the last one without losing or duplicating a report.
//!
//! The runs are the learning test's fixed-env GRPO on one-turn door games (its cached
//! format-taught model and pool, `crate::learning::fixture`): a step takes seconds. The crash is
//! a sink that fails when the next step begins, as a killed worker stops there; nothing after
//! the failure touches the state directory, which is all a resume reads.

use crate::learning::{self, Fixture, Res};
use spade::config::RunConfig;
use spade::report::{Envelope, Message};
use spade_worker::WorkerError;
use spade_worker::run::{self, Event, RunOptions};
use spade_worker::sink::{Delivery, FileSink, Sink};
use spade_worker::state::{self, StateStore};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

fn cadence_config(
    f: &Fixture,
    steps: u64,
    weights_every: u64,
    checkpoint_every: u64,
) -> Res<RunConfig> {
    let mut cfg = learning::config(f, 1, 3e-4, steps)?;
    cfg.run.weights_every = weights_every;
    cfg.run.checkpoint_every = checkpoint_every;
    // Every commit writes the optimiser state, so it tells which steps a resume point holds.
    cfg.run.optimizer_every = 1;
    // Two plays per hall: enough for a non-zero advantage most steps, and quick.
    cfg.agent.global_batch = 6;
    let issues = cfg.validate();
    assert!(issues.is_empty(), "{issues:?}");
    Ok(cfg)
}

fn options(label: &str, cache: &Path) -> RunOptions {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut opts = RunOptions::new(label, repo.join("envs/seed"), cache.to_path_buf());
    opts.concurrency = Some(2);
    opts
}

/// The step of the resume point on disk (`checkpoints/latest/state.json`), if any.
fn resume_step(store: &StateStore) -> Option<u64> {
    let text = std::fs::read_to_string(store.latest().join("state.json")).ok()?;
    serde_json::from_str::<serde_json::Value>(&text).ok()?["step"].as_u64()
}

/// Steps whose metrics the run directory holds, in `seq` order.
fn metric_steps(all: &[Envelope]) -> Vec<u64> {
    all.iter()
        .filter_map(|e| match &e.message {
            Message::Metrics { step, .. } => Some(*step),
            _ => None,
        })
        .collect()
}

/// GRPO updates the run directory reports (one AdamW step each).
fn updates(all: &[Envelope]) -> u64 {
    all.iter()
        .filter(|e| matches!(&e.message, Message::Metrics { values, .. } if values.contains_key("loss")))
        .count() as u64
}

/// AdamW steps of the optimiser state in the resume point.
fn optimizer_steps(store: &StateStore) -> Res<u64> {
    let latest = store.latest();
    let policy = spade_policy::Policy::load(&latest, spade_policy::default_device())?;
    let mut trainer = spade_policy::grpo::GrpoTrainer::new(&policy, Default::default())?;
    assert!(state::load_optimizer(&mut trainer, &latest, true)?.is_some());
    Ok(trainer.optimizer().step_count())
}

#[test]
fn weights_are_written_every_n_steps_at_kept_checkpoints_and_at_the_end() -> Res<()> {
    spade_policy::embed::set_threads(1);
    let f = learning::fixture();
    // Five steps, weights every 3, a kept checkpoint every 4: resume points after steps 3
    // (the cadence), 4 (the checkpoint) and 5 (the end), none after 1 or 2.
    let cfg = cadence_config(f, 5, 3, 4)?;
    let out = tempfile::tempdir()?;
    let opts = options("it-weights-every", &out.path().join("cache"));
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    // After each step: (step, committed, step of the resume point on disk, steps reported).
    let mut seen = Vec::new();
    let mut failures = Vec::new();
    run::run(&cfg, &opts, &store, &mut sink, &mut |e| {
        if let Event::Step {
            step, committed, ..
        } = e
        {
            match FileSink::read_all(out.path()) {
                Ok(all) => seen.push((step, committed, resume_step(&store), metric_steps(&all))),
                Err(e) => failures.push(e.to_string()),
            }
        }
    })?;
    assert!(failures.is_empty(), "{failures:?}");
    let expected = vec![
        (0, false, None, vec![]),
        (1, false, None, vec![]),
        (2, true, Some(3), vec![0, 1, 2]),
        (3, true, Some(4), vec![0, 1, 2, 3]),
        // The last step's write is the end's, after the step's report.
        (4, false, Some(4), vec![0, 1, 2, 3]),
    ];
    assert_eq!(
        seen, expected,
        "(step, committed, resume point on disk, steps reported) after each step"
    );
    assert_eq!(resume_step(&store), Some(5));
    let all = FileSink::read_all(out.path())?;
    assert_eq!(metric_steps(&all), vec![0, 1, 2, 3, 4]);
    let kept: Vec<bool> = [3, 4, 5]
        .iter()
        .map(|s| {
            store
                .checkpoints()
                .join(format!("step-{s}/model.safetensors"))
                .exists()
        })
        .collect();
    assert_eq!(kept, [false, true, true], "kept checkpoints step-3, -4, -5");
    assert_eq!(optimizer_steps(&store)?, updates(&all));
    Ok(())
}

/// A sink that fails (like a killed worker) when the run reports that step `at` begins.
struct CrashingSink {
    inner: FileSink,
    at: u64,
}

impl Sink for CrashingSink {
    fn deliver(&mut self, envelopes: &[Envelope]) -> Result<Delivery, WorkerError> {
        let begins = envelopes
            .iter()
            .any(|e| matches!(&e.message, Message::Progress { step, .. } if *step == self.at));
        if begins {
            return Err(WorkerError::Service(format!(
                "crash as step {} begins",
                self.at
            )));
        }
        self.inner.deliver(envelopes)
    }

    fn flush(&mut self, patience: Duration) -> Result<Delivery, WorkerError> {
        self.inner.flush(patience)
    }
}

#[test]
fn a_crash_between_weight_writes_resumes_from_the_last_write() -> Res<()> {
    spade_policy::embed::set_threads(1);
    let f = learning::fixture();
    // Four steps, weights every 2: the resume point after step 2; step 2 (0-based) is done but
    // not written when the worker dies as step 3 begins.
    let cfg = cadence_config(f, 4, 2, 100)?;
    let out = tempfile::tempdir()?;
    let cache = out.path().join("cache");
    let store = StateStore::new(out.path());
    let mut sink = CrashingSink {
        inner: FileSink::open(out.path())?,
        at: 3,
    };
    let crashed = run::run(
        &cfg,
        &options("it-crash", &cache),
        &store,
        &mut sink,
        &mut |_| {},
    );
    let e = crashed.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("crash as step 3 begins"), "{e}");
    let before = FileSink::read_all(out.path())?;
    assert_eq!(resume_step(&store), Some(2), "the resume point is step 2's");
    assert_eq!(
        metric_steps(&before),
        vec![0, 1],
        "step 2's report waits for a write that never came"
    );
    assert_eq!(
        optimizer_steps(&store)?,
        updates(&before),
        "the resume point's optimiser has the updates of the steps it reports"
    );

    let mut resume = options("it-crash", &cache);
    resume.resume = true;
    let mut sink = FileSink::open(out.path())?;
    let mut logs = Vec::new();
    let outcome = run::run(&cfg, &resume, &store, &mut sink, &mut |e| {
        if let Event::Log(l) = e {
            logs.push(l);
        }
    })?;
    assert_eq!(outcome.steps, 4);
    assert!(
        logs.iter().any(|l| l.starts_with("resuming at step 2 ")),
        "{logs:?}"
    );
    let after = FileSink::read_all(out.path())?;
    for e in &before {
        assert!(
            after.contains(e),
            "envelope {} was lost or rewritten",
            e.seq
        );
    }
    let mut seqs: Vec<u64> = after.iter().map(|e| e.seq).collect();
    let n = seqs.len();
    seqs.dedup();
    assert_eq!(seqs.len(), n, "a seq appears twice");
    assert_eq!(metric_steps(&after), vec![0, 1, 2, 3], "each step once");
    // A fixed-env run reports no environments, so its plays are what a replayed step would
    // duplicate.
    let mut plays: BTreeMap<u64, usize> = BTreeMap::new();
    for e in &after {
        if let Message::Plays { records } = &e.message
            && let Some(p) = records.first()
        {
            *plays.entry(p.step).or_default() += 1;
        }
    }
    assert_eq!(plays.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert!(plays.values().all(|&n| n == 1), "plays twice: {plays:?}");
    assert!(
        after
            .iter()
            .any(|e| matches!(&e.message, Message::Finished { .. })),
        "the resumed run finished"
    );
    // The end's optimiser holds one AdamW step per reported update: the two steps the crash
    // lost were trained once, by the resumed run, from the weights of step 2.
    assert_eq!(resume_step(&store), Some(4));
    assert_eq!(optimizer_steps(&store)?, updates(&after));
    Ok(())
}
