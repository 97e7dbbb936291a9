//! `spade train` end to end with a kill: the child is SIGKILLed mid-run, `--resume` finishes the
//! run, and every step and environment that was written before the kill appears exactly once
//! in the outputs (nothing acknowledged is lost, nothing is duplicated).
//!
//! Uses the warm-started tiny model cached in `$SPADE_CACHE/warmstart` (shared with the demo and
//! the worker's tests; trained on first use).

use spade::config::RunConfig;
use spade::report::Message;
use spade_worker::sink::FileSink;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn spade() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spade"));
    c.current_dir(repo()).env("OMP_NUM_THREADS", "1");
    c
}

#[test]
fn a_killed_run_resumes_without_losing_or_duplicating_outputs()
-> Result<(), Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(repo().join("configs/tiny-demo.toml"))?;
    let mut cfg = RunConfig::from_toml_str(&text)?;
    cfg.run.steps = 3;
    cfg.run.checkpoint_every = 1;
    cfg.curriculum.active_game_skills = 2;
    cfg.curriculum.envs_per_skill = 1;
    cfg.hint.plays = 2;
    cfg.agent.global_batch = 4;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("run.toml");
    std::fs::write(&config, cfg.to_toml())?;
    let out = dir.path().join("run");

    let mut child = spade()
        .args(["train", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    // Wait for the first committed step, then kill the worker in the middle of the next one.
    let started = Instant::now();
    let metrics = out.join("metrics.jsonl");
    loop {
        let lines = std::fs::read_to_string(&metrics).map_or(0, |t| t.lines().count());
        if lines >= 1 {
            break;
        }
        if let Some(status) = child.try_wait()? {
            return Err(format!("spade train exited early: {status}").into());
        }
        // From an empty cache the warm start trains here first, until its criterion is met
        // (up to 24 epochs: 15-25 minutes of one core on a loaded 2-core machine).
        if started.elapsed() > Duration::from_secs(2700) {
            let _ = child.kill();
            return Err("no step committed within 45 minutes".into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        child.try_wait()?.is_none(),
        "the run finished before it could be killed; the test needs a run in flight"
    );
    child.kill()?; // SIGKILL
    child.wait()?;
    let before = FileSink::read_all(&out)?;
    assert!(!before.is_empty());
    let state = std::fs::read_to_string(out.join("checkpoints/latest/state.json"))?;
    let step = serde_json::from_str::<serde_json::Value>(&state)?["step"]
        .as_u64()
        .ok_or("state.json has no step")?;
    assert!(step < 3, "killed mid-run: {step} of 3 steps committed");
    assert!(
        !before
            .iter()
            .any(|e| matches!(&e.message, Message::Finished { .. })),
        "the killed run must not have finished"
    );

    let resumed = spade()
        .args(["train", "--resume", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&out)
        .output()?;
    assert!(
        resumed.status.success(),
        "resume failed: {}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let after = FileSink::read_all(&out)?;

    // Nothing written before the kill is lost or changed.
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
    let mut steps = Vec::new();
    let mut envs: BTreeMap<String, usize> = BTreeMap::new();
    let mut plays: BTreeMap<(u64, bool), usize> = BTreeMap::new();
    for e in &after {
        match &e.message {
            Message::Metrics { step, .. } => steps.push(*step),
            Message::Environment { record } => *envs.entry(record.env_id.clone()).or_default() += 1,
            Message::Plays { records } => {
                if let Some(p) = records.first() {
                    *plays.entry((p.step, p.with_hint)).or_default() += 1;
                }
            }
            _ => {}
        }
    }
    assert_eq!(steps, vec![0, 1, 2], "each step's metrics exactly once");
    assert!(!envs.is_empty());
    assert!(
        envs.values().all(|&n| n == 1),
        "an environment reported twice: {envs:?}"
    );
    assert!(
        plays.values().all(|&n| n == 1),
        "a step's plays reported twice: {plays:?}"
    );
    assert!(
        after
            .iter()
            .any(|e| matches!(&e.message, Message::Finished { .. })),
        "the resumed run finished"
    );
    Ok(())
}

#[test]
fn train_refuses_a_used_directory_without_resume() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[model]\npreset = \"tiny\"\n")?;
    std::fs::write(dir.path().join("something"), "x")?;
    let out = spade()
        .args(["train", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(dir.path())
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--resume"), "{err}");
    Ok(())
}

#[test]
fn train_names_the_bad_key_of_a_config() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[hint]\nplays = 16\ntemperatur = 0.3\n")?;
    let out = spade()
        .args(["train", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(dir.path().join("o"))
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("temperatur"), "{err}");
    Ok(())
}

/// `spade train` on the config `text` (with the environment `env`), which must fail at its
/// start: within 30 s and without a checkpoint. Its standard error.
fn fails_at_start(text: &str, env: &[(&str, &Path)]) -> Result<String, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("c.toml");
    std::fs::write(&config, text)?;
    let mut cmd = spade();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let out = cmd
        .args(["train", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(dir.path().join("o"))
        .output()?;
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // Nothing was trained or written as a checkpoint.
    assert!(!dir.path().join("o/checkpoints/latest").exists());
    Ok(err)
}

/// The CI build links the CPU libtorch only: a run that asks for CUDA must fail at its start,
/// in seconds, naming the binary and the fix, never train on the CPU instead.
#[test]
fn a_cuda_run_on_a_cpu_build_fails_at_its_start_naming_the_binary()
-> Result<(), Box<dyn std::error::Error>> {
    let err = fails_at_start("[model]\npreset = \"tiny\"\ndevice = \"cuda\"\n", &[])?;
    assert!(err.contains("model.device = \"cuda\""), "{err}");
    assert!(err.contains("built without CUDA"), "{err}");
    assert!(err.contains(env!("CARGO_BIN_EXE_spade")), "{err}");
    assert!(err.contains("scripts/build-cuda"), "{err}");
    Ok(())
}

/// A run whose sandbox runner cannot start fails at its start naming the runner, instead of
/// failing every environment as if its code were at fault.
#[test]
fn a_run_without_its_sandbox_runner_fails_at_its_start_naming_it()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("no-such-runner");
    let err = fails_at_start(
        "[model]\npreset = \"tiny\"\n",
        &[("SPADE_SANDBOX_RUNNER", &missing)],
    )?;
    assert!(err.contains("cannot start the sandbox runner"), "{err}");
    assert!(err.contains(&*missing.to_string_lossy()), "{err}");
    assert!(err.contains("SPADE_SANDBOX_RUNNER"), "{err}");
    Ok(())
}

#[test]
fn doctor_says_this_build_has_no_cuda() -> Result<(), Box<dyn std::error::Error>> {
    let out = spade().args(["doctor", "--json"]).output()?;
    assert!(out.status.success());
    let facts: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(facts["cuda_built"], false);
    assert_eq!(facts["cuda_devices"], 0);
    assert_eq!(facts["auto_device"], "cpu");
    assert!(
        facts["libtorch"]
            .as_str()
            .is_some_and(|v| v.starts_with("2."))
    );
    let text = spade().arg("doctor").output()?;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("CUDA backend"), "{text}");
    assert!(text.contains("not linked"), "{text}");
    Ok(())
}

/// A fixed-environment run of a fresh tiny model (no warm start) on two seed games, 2 steps;
/// returns the run directory and its standard error.
fn fixed_env_run(
    dir: &Path,
    extra: &[&str],
) -> Result<(PathBuf, std::process::Output), Box<dyn std::error::Error>> {
    let model = dir.join("model");
    if !model.join("config.json").exists() {
        let init = spade()
            .args(["model", "init", "--out"])
            .arg(&model)
            .output()?;
        assert!(init.status.success(), "{init:?}");
    }
    let config = dir.join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nsteps = 2\n[model]\npath = \"{}\"\npreset = \"tiny\"\nagent_max_new_tokens = 8\n\
             [agent]\nmax_turns = 1\nglobal_batch = 4\n[hint]\nplays = 2\n\
             [ablation]\nfixed_env_pool = \"envs/seed\"\nfixed_env_envs_per_step = 2\n\
             [eval]\nevery_steps = 0\nbase_model = false\n",
            model.display()
        ),
    )?;
    let out_dir = dir.join(format!("run{}", extra.len()));
    let out = spade()
        .args(["train", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&out_dir)
        .args(extra)
        .output()?;
    Ok((out_dir, out))
}

/// `--no-checkpoints` (scripts/gpu-check at the 4B shape, whose optimizer state alone would
/// fill the GPU machine's disk): the run reports every step and finishes, and writes no
/// checkpoint; the same run without it writes its resume point and end snapshot.
#[test]
fn a_run_without_checkpoints_reports_every_step_and_writes_no_checkpoint()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (run, out) = fixed_env_run(dir.path(), &["--no-checkpoints"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("checkpoints: none"), "{err}");
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl"))?;
    assert_eq!(metrics.lines().count(), 2, "{metrics}");
    let events = FileSink::read_all(&run)?;
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.message, Message::Finished { .. })),
        "the run reported its end"
    );
    let checkpoints = run.join("checkpoints");
    let written: Vec<_> = std::fs::read_dir(&checkpoints)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(written.is_empty(), "checkpoints written: {written:?}");

    // The control: without the flag, the end's resume point and snapshot are there.
    let (run, out) = fixed_env_run(dir.path(), &[])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(run.join("checkpoints/latest/model.safetensors").exists());
    assert!(run.join("checkpoints/step-2").is_dir());

    // A run that evaluates checkpoints, or resumes one, cannot go without them.
    let config = dir.path().join("eval.toml");
    std::fs::write(
        &config,
        "[model]\npreset = \"tiny\"\n[eval]\nevery_steps = 2\n",
    )?;
    for (flags, named) in [
        (&["--no-checkpoints"][..], "eval.every_steps"),
        (&["--no-checkpoints", "--resume"][..], "--resume"),
    ] {
        let refused = spade()
            .arg("train")
            .args(flags)
            .arg("--config")
            .arg(&config)
            .arg("--out")
            .arg(dir.path().join("eval"))
            .output()?;
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{flags:?}: {err}");
        assert!(err.contains(named), "{flags:?}: {err}");
    }
    Ok(())
}
