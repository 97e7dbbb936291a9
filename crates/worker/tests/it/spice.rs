//! A SPICE run (`run.algorithm = "spice"`) end to end on the tiny model and the bundled corpus:
//! the warm start teaches the task format, then four steps of challenger attempts, reasoner
//! answers, rewards and one GRPO update each, through the real loop and policy. With the
//! challenger frozen (`ablation.frozen_designer`) the same run trains only the reasoner; with
//! `model.rollout = "vllm"` (`SPADE_TEST_VLLM=1`) it samples on a vLLM server.

use crate::loop_tiny::cache_root;
use spade::config::RunConfig;
use spade::report::{EnvStatus, Message};
use spade_policy::Policy;
use spade_worker::run::{self, Event, RunOptions};
use spade_worker::sink::FileSink;
use spade_worker::state::StateStore;
use std::collections::BTreeMap;
use std::path::Path;

fn spice_config() -> Result<RunConfig, Box<dyn std::error::Error>> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(repo.join("configs/tiny-spice.toml"))?;
    let mut cfg = RunConfig::from_toml_str(&text)?;
    // The configuration's own 8 documents a step, over STEPS steps: with 2 steps of 6 a warm
    // start that met its criterion (2 of 7 of the challenger's tasks answered right some of
    // the time) still drew 10 tasks the reasoner never got right, on a fresh AMD EPYC
    // (2026-12-06), so no reasoner sample to check; a step takes about 4 s.
    cfg.run.steps = STEPS;
    assert_eq!(
        cfg.spice.tasks_per_step, 8,
        "configs/tiny-spice.toml changed"
    );
    Ok(cfg)
}

fn options(id: &str) -> RunOptions {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut opts = RunOptions::new(id, repo.join("envs/seed"), cache_root().join("warmstart"));
    opts.warm_epochs = WARM_EPOCHS;
    opts
}

/// Steps of the test runs.
const STEPS: u64 = 4;

/// Epochs of the SPICE warm start in these tests (the pairs are short; see the run's log).
const WARM_EPOCHS: usize = 12;

/// Per step: the metrics; and the stored tasks and plays of the run.
struct Seen {
    metrics: Vec<BTreeMap<String, f64>>,
    accepted: Vec<spade::report::EnvironmentRecord>,
    rejected: usize,
    plays: Vec<spade::report::PlayRecord>,
}

fn run_spice(
    cfg: &RunConfig,
    id: &str,
    out: &Path,
) -> Result<(Seen, Vec<String>), Box<dyn std::error::Error>> {
    let opts = options(id);
    // The warm start's criterion first: a reasoner that never answers right gives no samples,
    // and the checks below would fail later with a vaguer message.
    let (dir, report) = run::prepare_warm_start(cfg, &opts, &mut |e| {
        if let Event::Log(l) = e {
            eprintln!("{l}");
        }
    })?;
    if let Some(r) = report
        && !r.designer_ready()
    {
        return Err(format!(
            "the SPICE warm start (cached at {}) stopped at {} epochs without meeting its \
             criterion: {}/{} challenger samples parse (needs {}), and the reasoner must answer \
             a quarter of the held-back tasks and one of the challenger's own tasks right some \
             of the time; checks {:?}",
            dir.display(),
            r.epochs,
            r.accepted,
            r.measured,
            r.needed,
            r.checks
        )
        .into());
    }
    let mut sink = FileSink::open(out)?;
    let store = StateStore::new(out);
    let mut logs = vec![];
    let outcome = run::run(cfg, &opts, &store, &mut sink, &mut |e| {
        if let Event::Log(l) = e {
            eprintln!("{l}");
            logs.push(l)
        }
    })?;
    assert_eq!(outcome.steps, STEPS);
    let mut seen = Seen {
        metrics: vec![],
        accepted: vec![],
        rejected: 0,
        plays: vec![],
    };
    for e in FileSink::read_all(out)? {
        match e.message {
            Message::Environment { record } if record.status == EnvStatus::Accepted => {
                seen.accepted.push(record)
            }
            Message::Environment { .. } => seen.rejected += 1,
            Message::Plays { records } => seen.plays.extend(records),
            Message::Metrics { values, .. } => seen.metrics.push(values),
            _ => {}
        }
    }
    Ok((seen, logs))
}

fn total(seen: &Seen, key: &str) -> f64 {
    seen.metrics.iter().filter_map(|m| m.get(key)).sum()
}

#[test]
fn a_tiny_spice_run_stores_tasks_plays_them_and_trains_both_roles()
-> Result<(), Box<dyn std::error::Error>> {
    spade_policy::embed::set_threads(1);
    let cfg = spice_config()?;
    let work = tempfile::tempdir()?;
    let out = work.path().join("run");
    let (seen, logs) = run_spice(&cfg, "it-spice", &out)?;
    let warm = logs
        .iter()
        .find(|l| l.contains("challenger samples parse") || l.contains("spice warm start: cached"))
        .ok_or("no warm-start line")?;
    eprintln!("{warm}");

    assert_eq!(seen.metrics.len() as u64, STEPS);
    let tasks = total(&seen, "spice/tasks");
    assert!(
        tasks >= 1.0,
        "no valid task in {STEPS} steps: {:?}",
        seen.metrics
    );
    assert_eq!(seen.accepted.len() as f64, tasks);
    assert_eq!(
        (seen.accepted.len() + seen.rejected) as u64,
        STEPS * u64::from(cfg.spice.tasks_per_step),
        "one record per document"
    );
    let g = cfg.spice.group_size as usize;
    for t in &seen.accepted {
        assert!(t.skill.starts_with("spice_"), "{}", t.skill);
        assert!(t.code.starts_with("# SPICE task"), "{}", t.code);
        assert!(t.code.contains("## Document excerpt"));
        let plays: Vec<_> = seen.plays.iter().filter(|p| p.env_id == t.env_id).collect();
        assert_eq!(plays.len(), g, "{} answers of {}", plays.len(), t.env_id);
        let pass = plays.iter().filter(|p| p.won).count() as f64 / g as f64;
        assert_eq!(t.win_rate_no_hint, Some(pass));
        let reward = t.designer_reward.ok_or("no challenger reward")?;
        let var = pass * (1.0 - pass);
        let want = (-(var - 0.25f64).powi(2) / 0.02).exp();
        assert!((reward - want).abs() < 1e-9, "{reward} vs {want}");
        // The reasoner never sees the document.
        assert!(
            plays
                .iter()
                .all(|p| !p.transcript[0].content.contains("Document:"))
        );
    }
    for m in &seen.metrics {
        for k in [
            "spice/attempts",
            "spice/invalid_rate",
            "challenger_samples",
            "reasoner_samples",
        ] {
            assert!(m.contains_key(k), "{k} missing from {m:?}");
        }
    }
    // Both roles trained: challenger samples (valid tasks against the invalid reward) and
    // reasoner samples (groups with right and wrong answers) joined the updates.
    assert!(
        total(&seen, "challenger_samples") > 0.0,
        "{:?}",
        seen.metrics
    );
    assert!(total(&seen, "reasoner_samples") > 0.0, "{:?}", seen.metrics);
    assert!(seen.metrics.iter().any(|m| m.contains_key("loss")));
    let base = run::prepare_base_model(&cfg, &options("it-spice"), &mut |_| {})?;
    let before = Policy::load(&base, spade_policy::default_device())?.weights_fingerprint();
    let store = StateStore::new(&out);
    let (dir, _) = store.load()?.ok_or("no checkpoint")?;
    let after = Policy::load(&dir, spade_policy::default_device())?.weights_fingerprint();
    assert_ne!(before, after, "the weights did not move");
    Ok(())
}

#[test]
fn a_frozen_challenger_trains_only_the_reasoner() -> Result<(), Box<dyn std::error::Error>> {
    spade_policy::embed::set_threads(1);
    let mut cfg = spice_config()?;
    cfg.ablation.frozen_designer = true;
    let work = tempfile::tempdir()?;
    let (seen, _) = run_spice(&cfg, "it-spice-frozen", &work.path().join("run"))?;
    assert_eq!(
        total(&seen, "challenger_samples"),
        0.0,
        "{:?}",
        seen.metrics
    );
    assert!(total(&seen, "spice/attempts") >= 12.0);
    Ok(())
}

/// The same run with `model.rollout = "vllm"` and a server the run starts (`SPADE_TEST_VLLM=1`,
/// vLLM from `scripts/setup --vllm`): the challenger's tasks and the reasoner's answers come from
/// the server, the trainer rescores them with its own log-probs (the gap is reported), and the
/// server gets the weights of every update.
#[test]
fn a_spice_run_samples_on_a_vllm_server() -> Result<(), Box<dyn std::error::Error>> {
    if crate::vllm::skipped() {
        return Ok(());
    }
    spade_policy::embed::set_threads(1);
    let mut cfg = spice_config()?;
    crate::vllm::one_started_server(&mut cfg, 8399);
    assert_eq!(cfg.validate(), vec![]);
    let work = tempfile::tempdir()?;
    let (seen, logs) = run_spice(&cfg, "it-spice-vllm", &work.path().join("run"))?;
    let updates = seen
        .metrics
        .iter()
        .filter(|m| m.contains_key("loss"))
        .count();
    assert!(updates > 0, "no update: {:?}", seen.metrics);
    // The starting weights, then one sync per update.
    let synced = logs
        .iter()
        .filter(|l| l.contains("vllm: weights step-"))
        .count();
    assert_eq!(synced, 1 + updates, "{logs:#?}");
    let gaps: Vec<f64> = seen
        .metrics
        .iter()
        .filter_map(|m| m.get("vllm_logprob_gap_max").copied())
        .collect();
    eprintln!("vllm_logprob_gap_max by step: {gaps:?}");
    assert!(!gaps.is_empty(), "no rescored sample: {:?}", seen.metrics);
    assert!(gaps.iter().all(|&g| g < 2e-3), "{gaps:?}");
    assert!(total(&seen, "spice/tasks") >= 1.0, "{:?}", seen.metrics);
    assert!(
        std::net::TcpStream::connect("127.0.0.1:8399").is_err(),
        "the server outlived the run"
    );
    Ok(())
}

#[test]
fn spice_settings_out_of_range_name_their_key() {
    let text = "[run]\nalgorithm = \"spice\"\n[model]\npath = \"m\"\n[spice]\ngroup_size = 1\nmax_attempts = 0\n[ablation]\nrlve = true\n";
    let e = RunConfig::from_toml_str(text)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    for key in ["spice.group_size", "spice.max_attempts", "ablation.rlve"] {
        assert!(e.contains(key), "{key} not named in: {e}");
    }
}
