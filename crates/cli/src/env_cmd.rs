//! `spade env check` and `spade env play`: an environment file through the real sandbox.

use anyhow::Context;
use spade_sandbox::protocol::EnvKind;
use spade_sandbox::{Pool, PoolConfig, Report, RunnerConfig, ValidationConfig};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

fn pool() -> Pool {
    let mut cfg = PoolConfig::new(RunnerConfig::new(spade_sandbox::default_runner_path()));
    // One environment at a time: no runner needs to be started ahead of demand.
    cfg.max_runners = 1;
    cfg.warm = 0;
    Pool::new(cfg)
}

/// Reads an environment source; an unreadable or non-UTF-8 file is a usage error (exit 2).
fn read_source(file: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not UTF-8 text (invalid byte at offset {})",
            file.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// Where `check` takes its extra seeds from.
pub enum Seeds {
    /// Draw this many from the operating system's randomness.
    Draw(usize),
    /// Replay these.
    Given(Vec<i64>),
    /// Replay the `seeds` of a JSON report.
    FromReport(PathBuf),
}

fn seeds_of_report(path: &Path) -> anyhow::Result<Vec<i64>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the report {}", path.display()))?;
    let report: Report = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a `spade env check --json` report",
            path.display()
        )
    })?;
    Ok(report.seeds)
}

pub fn check(
    file: &Path,
    json: bool,
    kind: Option<EnvKind>,
    budget_secs: u64,
    seeds: Seeds,
) -> anyhow::Result<ExitCode> {
    let source = read_source(file)?;
    let (drawn_seeds, seeds) = match seeds {
        Seeds::Draw(n) => (n, None),
        Seeds::Given(s) => (s.len(), Some(s)),
        Seeds::FromReport(p) => {
            let s = seeds_of_report(&p)?;
            (s.len(), Some(s))
        }
    };
    let cfg = ValidationConfig {
        budget: Duration::from_secs(budget_secs),
        kind,
        drawn_seeds,
        seeds,
        ..ValidationConfig::default()
    };
    let report = spade_sandbox::validate(&pool(), &source, &cfg);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(file, &report);
    }
    Ok(if report.accepted {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_report(file: &Path, r: &Report) {
    let name = r.class_name.as_deref().unwrap_or("?");
    let kind = match r.kind {
        Some(EnvKind::Game) => "game",
        Some(EnvKind::ToolUse) => "tool use",
        None => "?",
    };
    let verdict = if r.accepted { "ACCEPTED" } else { "REJECTED" };
    println!(
        "{verdict}  {} ({name}, {kind}) in {} ms",
        file.display(),
        r.elapsed_ms
    );
    for c in &r.checks {
        let mark = if c.passed { "ok  " } else { "FAIL" };
        println!("  {mark} {:?}", c.check);
    }
    if let Some(rej) = &r.rejection {
        println!("reason: {}", rej.reason.as_str());
        if let Some(seed) = rej.seed {
            println!("seed: {seed}");
        }
        println!("{}", rej.message);
    }
    let seeds: Vec<String> = r.seeds.iter().map(i64::to_string).collect();
    if seeds.is_empty() {
        println!("drawn seeds: none");
    } else {
        println!(
            "drawn seeds: {} (replay with --seeds {})",
            seeds.join(", "),
            seeds.join(",")
        );
    }
    if !r.solution_turns.is_empty() {
        println!("solution turns (seeds 0, 1, 2): {:?}", r.solution_turns);
    }
    let layers: Vec<String> = r
        .layers
        .iter()
        .filter_map(|l| serde_json::to_value(l).ok())
        .map(|v| v.to_string().trim_matches('"').to_owned())
        .collect();
    println!("isolation: {}", layers.join(", "));
}

pub fn play(file: &Path, seed: i64, actions: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let source = read_source(file)?;
    let pool = pool();
    let mut env = match pool.load(&source, None, None) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cannot load {}: {e}", file.display());
            return Ok(ExitCode::from(1));
        }
    };
    let mut log = Vec::new();
    let reset = env.reset(Some(seed))?;
    if !json {
        println!(
            "{} (seed {seed})\n--- observation\n{}",
            env.class_name, reset.obs
        );
    }
    let scripted = !actions.is_empty();
    let mut i = 0;
    loop {
        let action = if scripted {
            match actions.get(i) {
                Some(a) => a.clone(),
                None => break,
            }
        } else if i < env.max_turns as usize {
            let s = env.solution()?;
            match env.kind {
                EnvKind::Game => format!("\\boxed{{{s}}}"),
                EnvKind::ToolUse => s,
            }
        } else {
            break;
        };
        let step = env.step(&action)?;
        if !json {
            println!(
                "--- action {}: {action}\nreward {} terminated {} truncated {}\n{}",
                i + 1,
                step.reward,
                step.terminated,
                step.truncated,
                step.obs
            );
        }
        let done = step.terminated || step.truncated;
        log.push(serde_json::json!({ "action": action, "result": step }));
        i += 1;
        if done {
            break;
        }
    }
    if json {
        let out = serde_json::json!({
            "class_name": env.class_name,
            "seed": seed,
            "reset": reset,
            "turns": log,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(ExitCode::SUCCESS)
}
