//! `spade env export --run-dir`: a run directory written by the real `FileSink` becomes a pool
//! directory; bad options exit 2 naming the option.

use spade::EnvKind;
use spade::report::{EnvStatus, Envelope, EnvironmentRecord, Message};
use spade_worker::sink::{FileSink, Sink};
use std::process::{Command, Output};

fn spade(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run spade: {e}"),
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn record(id: &str, step: u64, status: EnvStatus) -> EnvironmentRecord {
    EnvironmentRecord {
        ..EnvironmentRecord::new(
            id,
            step,
            "Optimization",
            EnvKind::Game,
            status,
            format!("\"\"\"Skill: Optimization. {id}\"\"\"\n"),
        )
    }
}

fn scored(id: &str, win: f64) -> Message {
    Message::EnvironmentScored {
        env_id: id.into(),
        step: 4,
        regret: 0.5,
        win_rate_hint: 1.0,
        win_rate_no_hint: win,
        designer_reward: 0.1,
        reward_levels: 2,
    }
}

#[test]
fn a_run_directory_exports_the_filtered_environments_as_a_pool()
-> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let run = tmp.path().join("run");
    let msgs = vec![
        Message::Environment {
            record: record("e1", 0, EnvStatus::Accepted),
        },
        Message::Environment {
            record: record("e2", 0, EnvStatus::Accepted),
        },
        Message::Environment {
            record: record("e3", 0, EnvStatus::Rejected),
        },
        Message::Environment {
            record: record("e4", 8, EnvStatus::Accepted),
        },
        scored("e1", 0.25),
        scored("e2", 0.9),
        scored("e4", 0.5),
    ];
    let envs: Vec<Envelope> = msgs
        .into_iter()
        .enumerate()
        .map(|(i, m)| Envelope::new("r".to_string(), i as u64, m))
        .collect();
    FileSink::open(&run)?.deliver(&envs)?;
    let out = tmp.path().join("pool");
    let (run_s, out_s) = (run.display().to_string(), out.display().to_string());
    let o = spade(&[
        "env",
        "export",
        "--run-dir",
        &run_s,
        "--out",
        &out_s,
        "--win-rate-max",
        "0.6",
        "--step-max",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("wrote 1 environments"), "{}", text(&o));
    let index = std::fs::read_to_string(out.join("pool.jsonl"))?;
    let lines: Vec<serde_json::Value> = index
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 1, "{index}");
    assert_eq!(lines[0]["id"], "e1");
    assert_eq!(lines[0]["win_rate_no_hint"], 0.25);
    assert_eq!(lines[0]["code_file"], "e1.py");
    assert!(std::fs::read_to_string(out.join("e1.py"))?.contains("Skill: Optimization"));
    let card = std::fs::read_to_string(out.join("README.md"))?;
    assert!(card.contains("| game | Optimization | 1 |"), "{card}");
    assert!(card.contains("no-hint win rate in [0, 0.6]"), "{card}");

    // Into the same directory again: refused, nothing overwritten.
    let again = spade(&["env", "export", "--run-dir", &run_s, "--out", &out_s]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("is not empty"), "{}", text(&again));
    Ok(())
}

#[test]
fn bad_export_options_exit_2_naming_the_option() {
    let o = spade(&[
        "env",
        "export",
        "--run-dir",
        "/nonexistent",
        "--out",
        "/tmp/x",
        "--status",
        "good",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("--status: expected accepted"),
        "{}",
        text(&o)
    );
    let o = spade(&[
        "env",
        "export",
        "--run-dir",
        "/nonexistent",
        "--out",
        "/tmp/x",
        "--win-rate-min",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("--win-rate-min must be within 0..=1"),
        "{}",
        text(&o)
    );
    let o = spade(&[
        "env",
        "export",
        "--run-dir",
        "/nonexistent",
        "--out",
        "/tmp/x",
        "--without-verdict",
        "meh",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("--without-verdict: expected good"),
        "{}",
        text(&o)
    );
    let o = spade(&["env", "export", "--out", "/tmp/x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--run-dir"), "{}", text(&o));
    let o = spade(&[
        "env",
        "export",
        "--run-dir",
        "/nonexistent",
        "--out",
        "/tmp/x",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("/nonexistent has no environments.jsonl"),
        "{}",
        text(&o)
    );
}

/// An exported pool loads in Gymnasium: `envs/check_gym.py --pool` registers every id and runs
/// `check_env` on `gymnasium.make("spade/<id>")`, in the venv of `scripts/setup` (Gymnasium 1.4).
#[test]
fn an_exported_pool_passes_gymnasiums_check_env() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".deps/venv/bin/python3");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup",
        python.display()
    );
    let tmp = tempfile::tempdir()?;
    let run = tmp.path().join("run");
    let seeds = [
        (
            "g-coin",
            EnvKind::Game,
            "Optimization",
            "envs/seed/games/optimization/coin_change.py",
        ),
        (
            "g-tool",
            EnvKind::ToolUse,
            "Tool Selection",
            "envs/seed/tooluse/smart_home.py",
        ),
    ];
    let mut msgs = vec![];
    for (id, kind, skill, file) in seeds {
        let mut r = record(id, 0, EnvStatus::Accepted);
        r.kind = kind;
        r.skill = skill.into();
        r.code = std::fs::read_to_string(root.join(file))?;
        msgs.push(Message::Environment { record: r });
    }
    let envs: Vec<Envelope> = msgs
        .into_iter()
        .enumerate()
        .map(|(i, m)| Envelope::new("r".to_string(), i as u64, m))
        .collect();
    FileSink::open(&run)?.deliver(&envs)?;
    let out = tmp.path().join("pool");
    let o = spade(&[
        "env",
        "export",
        "--run-dir",
        &run.display().to_string(),
        "--out",
        &out.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let check = Command::new(&python)
        .arg(root.join("envs/check_gym.py"))
        .arg("--pool")
        .arg(&out)
        .output()?;
    let t = text(&check);
    assert_eq!(check.status.code(), Some(0), "{t}");
    assert!(
        t.contains("OK    spade/g-coin") && t.contains("OK    spade/g-tool"),
        "{t}"
    );
    Ok(())
}

/// The Python with Hugging Face `datasets` (the torch venv, `$SPADE_TORCH_PYTHON` or
/// `~/.cache/spade-studio/venv-torch`), if one has it.
fn datasets_python() -> Option<std::path::PathBuf> {
    let candidates = [
        std::env::var_os("SPADE_TORCH_PYTHON").map(std::path::PathBuf::from),
        std::env::var_os("HOME")
            .map(|h| std::path::PathBuf::from(h).join(".cache/spade-studio/venv-torch/bin/python")),
    ];
    candidates.into_iter().flatten().find(|p| {
        p.exists()
            && Command::new(p)
                .args(["-c", "import datasets"])
                .output()
                .is_ok_and(|o| o.status.success())
    })
}

/// The pool's `pool.jsonl` is a Hugging Face dataset as it is: `load_dataset("json", ...)`
/// reads one row per environment with every field a column.
#[test]
fn an_exported_pool_loads_with_hugging_face_datasets() -> Result<(), Box<dyn std::error::Error>> {
    let Some(python) = datasets_python() else {
        eprintln!(
            "SKIPPED: no Python with `datasets` (pip install datasets into \
             ~/.cache/spade-studio/venv-torch or set SPADE_TORCH_PYTHON); not loaded"
        );
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let run = tmp.path().join("run");
    let msgs = vec![
        Message::Environment {
            record: record("e1", 0, EnvStatus::Accepted),
        },
        Message::Environment {
            record: record("e2", 1, EnvStatus::Accepted),
        },
        scored("e1", 0.25),
    ];
    let envs: Vec<Envelope> = msgs
        .into_iter()
        .enumerate()
        .map(|(i, m)| Envelope::new("r".to_string(), i as u64, m))
        .collect();
    FileSink::open(&run)?.deliver(&envs)?;
    let out = tmp.path().join("pool");
    let o = spade(&[
        "env",
        "export",
        "--run-dir",
        &run.display().to_string(),
        "--out",
        &out.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let script = "import json, sys\n\
                  from datasets import load_dataset\n\
                  d = load_dataset('json', data_files=sys.argv[1], split='train')\n\
                  print(json.dumps({'rows': d.num_rows, 'columns': d.column_names, \
                  'ids': list(d['id'])}))\n";
    let cache = tmp.path().join("hf-cache");
    let r = Command::new(&python)
        .args(["-c", script])
        .arg(out.join("pool.jsonl"))
        .env("HF_DATASETS_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .output()?;
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("{}"))?;
    assert_eq!(v["rows"], 2, "{v}");
    assert_eq!(v["ids"], serde_json::json!(["e1", "e2"]));
    let columns: Vec<String> = serde_json::from_value(v["columns"].clone())?;
    for c in [
        "id",
        "kind",
        "skill",
        "code_file",
        "win_rate_no_hint",
        "status",
        "run",
        "step",
    ] {
        assert!(
            columns.iter().any(|x| x == c),
            "{c} missing from {columns:?}"
        );
    }
    Ok(())
}
