//! A frozen designer from another checkpoint (`designer.model_path`): it writes the
//! environments, hints and verdicts while the agent trains alone. Here the "other checkpoint" is
//! a copy of the warm-started tiny model (the only one here that writes valid environments), so
//! the run is the three-step tiny loop with the designer role moved to a model that never
//! trains: its weights fingerprint is the same before and after, no designer sample joins a
//! GRPO batch, and the agent's weights move.

use crate::loop_tiny::{cache_root, ready_designer, three_step_config};
use spade::report::{EnvStatus, Message};
use spade_policy::Policy;
use spade_worker::run::{self, Event, RunOptions};
use spade_worker::sink::FileSink;
use spade_worker::state::StateStore;
use std::path::Path;

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        if e.file_type()?.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// The form and the API refuse this configuration with the same `spade::config` rule.
#[test]
fn the_worker_refuses_a_trained_designer_at_another_temperature()
-> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = three_step_config()?;
    cfg.designer.temperature = cfg.agent.temperature + 0.3;
    let out = tempfile::tempdir()?;
    let opts = RunOptions::new("it-temp", "envs/seed".into(), out.path().join("cache"));
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    match run::run(&cfg, &opts, &store, &mut sink, &mut |_| {}) {
        Err(spade_worker::WorkerError::Config(m)) => {
            assert!(
                m.contains("designer.temperature") && m.contains("agent.temperature"),
                "{m}"
            )
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("ran with two temperatures"),
    }
    Ok(())
}

#[test]
fn a_frozen_designer_from_another_checkpoint_never_changes_while_the_agent_trains()
-> Result<(), Box<dyn std::error::Error>> {
    spade_policy::embed::set_threads(1);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cfg = three_step_config()?;
    let mut opts = RunOptions::new(
        "it-frozen-designer",
        repo.join("envs/seed"),
        cache_root().join("warmstart"),
    );
    opts.concurrency = Some(4);
    let base = ready_designer(&cfg, &opts)?;
    let work = tempfile::tempdir()?;
    let designer_dir = work.path().join("designer");
    copy_dir(&base, &designer_dir)?;
    let before = Policy::load(&designer_dir, spade_policy::default_device())?.weights_fingerprint();
    cfg.designer.model_path = Some(designer_dir.display().to_string());
    assert!(!cfg.trains_designer());

    let out = work.path().join("run");
    let mut sink = FileSink::open(&out)?;
    let store = StateStore::new(&out);
    let mut logs = vec![];
    let outcome = run::run(&cfg, &opts, &store, &mut sink, &mut |e| {
        if let Event::Log(l) = e {
            logs.push(l)
        }
    })?;
    assert_eq!(outcome.steps, 3);
    let unchanged = logs
        .iter()
        .find(|l| l.starts_with("frozen designer unchanged"))
        .ok_or_else(|| format!("no end-of-run check in {logs:?}"))?;
    assert!(unchanged.ends_with(&before), "{unchanged} vs {before}");
    let after = Policy::load(&designer_dir, spade_policy::default_device())?.weights_fingerprint();
    assert_eq!(after, before, "the designer's checkpoint was rewritten");

    let (mut accepted, mut scored, mut plays, mut updates) = (0, 0, 0, 0);
    for e in FileSink::read_all(&out)? {
        match &e.message {
            Message::Environment { record } if record.status == EnvStatus::Accepted => {
                accepted += 1
            }
            Message::EnvironmentScored { .. } => scored += 1,
            Message::Plays { records } => plays += records.len(),
            Message::Metrics { values, .. } => {
                assert!(
                    !values.contains_key("designer_samples"),
                    "a designer sample was trained: {values:?}"
                );
                assert!(!values.contains_key("designer_reward_trained_mean"));
                // An update happens exactly when the agent has samples: none is the designer's.
                let agent = values.get("agent_samples").copied().unwrap_or(0.0);
                assert_eq!(values.contains_key("loss"), agent > 0.0, "{values:?}");
                updates += usize::from(agent > 0.0);
            }
            _ => {}
        }
    }
    assert!(
        accepted > 0,
        "the frozen designer wrote no valid environment"
    );
    assert!(
        plays > 0,
        "the agent played the frozen designer's environments"
    );
    assert!(
        scored > 0,
        "its environments are still scored (designer rewards reported)"
    );
    // The tiny agent rarely wins in three steps (all-lose groups carry no GRPO signal); when it
    // got signal, its weights moved and the designer's did not.
    let agent = Policy::load(&store.latest(), spade_policy::default_device())?;
    if updates > 0 {
        assert_ne!(
            agent.weights_fingerprint(),
            before,
            "the agent did not move"
        );
    } else {
        assert_eq!(
            agent.weights_fingerprint(),
            before,
            "no update, yet the agent moved"
        );
        eprintln!("note: the tiny agent had no GRPO signal in 3 steps (no win in any group)");
    }
    Ok(())
}
