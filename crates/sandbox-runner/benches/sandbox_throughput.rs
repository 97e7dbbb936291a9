//! Throughput of playing environments: in-process Python vs the sandbox pool vs a fresh
//! interpreter per episode, on the same seed-library environments and the same policy (each
//! environment's own `solution()`), one episode at a time (one Python thread everywhere).
//!
//! Run: `cargo bench -p spade-sandbox-runner --bench sandbox_throughput [-- EPISODES REPEATS]`
//! (defaults: 48 episodes per environment, as in one k = 4 window of the spec; 3 repeats).
//! Prints steps per second for each mode (median over repeats) and the ratios.

use spade_sandbox::{EnvKind, Pool, PoolConfig, Runner, RunnerConfig};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const RUNNER: &str = env!("CARGO_BIN_EXE_spade-sandbox-runner");

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn seed_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = glob(&workspace().join("envs/seed"));
    v.sort();
    v
}

fn glob(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(glob(&p));
        } else if p.extension().is_some_and(|x| x == "py") {
            out.push(p);
        }
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// (a) a plain Python loop in one interpreter: exec each source, play `episodes` episodes.
fn in_process(files: &[PathBuf], episodes: usize) -> f64 {
    let py = workspace().join(".deps/venv/bin/python3");
    let script = workspace().join("envs/bench_inprocess.py");
    let out = Command::new(py)
        .arg(script)
        .arg(episodes.to_string())
        .args(files)
        .env("OPENBLAS_NUM_THREADS", "1")
        .output()
        .expect("run the in-process benchmark script");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|_| {
        panic!(
            "bad output from bench_inprocess.py: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["steps"].as_f64().unwrap_or(0.0) / v["seconds"].as_f64().unwrap_or(f64::NAN)
}

/// (b) the pool: one runner per environment, `episodes` episodes each, one round trip per
/// episode (`play_solution`) or per call (`per_step`).
fn pooled(pool: &Pool, sources: &[String], episodes: usize, per_step: bool) -> f64 {
    let mut steps = 0usize;
    let t0 = Instant::now();
    for src in sources {
        let mut env = pool.load(src, None, None).expect("load");
        for ep in 0..episodes {
            if per_step {
                env.reset(Some(ep as i64)).expect("reset");
                for _ in 0..env.max_turns {
                    let s = env.solution().expect("solution");
                    let a = if env.kind == EnvKind::Game {
                        format!("\\boxed{{{s}}}")
                    } else {
                        s
                    };
                    let r = env.step(&a).expect("step");
                    steps += 1;
                    if r.terminated || r.truncated {
                        break;
                    }
                }
            } else {
                let t = env
                    .play_solution(ep as i64, Duration::from_secs(30))
                    .expect("play");
                steps += t.turns.len();
            }
        }
    }
    steps as f64 / t0.elapsed().as_secs_f64()
}

/// (c) a fresh interpreter (runner) per episode.
fn fresh_per_episode(sources: &[String], episodes: usize) -> f64 {
    let cfg = RunnerConfig::new(RUNNER);
    let mut steps = 0usize;
    let t0 = Instant::now();
    for src in sources {
        for ep in 0..episodes {
            let mut r = Runner::start(&cfg).expect("start");
            let (_, _, max_turns) = r
                .load(src, None, None, Duration::from_secs(30))
                .expect("load");
            let t = r
                .play_solution(ep as i64, max_turns, Duration::from_secs(30))
                .expect("play");
            steps += t.turns.len();
        }
    }
    steps as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    // spec "One training step": 16 hint plays plus 8 no-hint plays per step over a k = 4 window
    // give 48 episodes per generated environment.
    let episodes = args.first().copied().unwrap_or(48);
    let repeats = args.get(1).copied().unwrap_or(3);
    let files = seed_files();
    let sources: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("read"))
        .collect();
    println!(
        "{} seed environments, {episodes} episodes each, median of {repeats} repeats; one Python thread in every mode, runners one at a time",
        files.len()
    );
    let mut cfg = PoolConfig::new(RunnerConfig::new(RUNNER));
    cfg.max_runners = 2;
    cfg.warm = 1;
    let pool = Pool::new(cfg);
    let (mut a, mut b, mut b1, mut c) = (vec![], vec![], vec![], vec![]);
    for _ in 0..repeats {
        a.push(in_process(&files, episodes));
        b.push(pooled(&pool, &sources, episodes, false));
        b1.push(pooled(&pool, &sources, episodes, true));
        // A fresh interpreter per episode is slow: a fifth of the episodes keeps it bounded.
        c.push(fresh_per_episode(&sources, (episodes / 5).max(1)));
    }
    let (a, b, b1, c) = (median(a), median(b), median(b1), median(c));
    println!("(a) in-process Python loop          {a:>10.0} steps/s");
    println!(
        "(b) pool, one round trip per episode {b:>10.0} steps/s   b/a = {:.2}   b/c = {:.1}",
        b / a,
        b / c
    );
    println!(
        "(b') pool, round trips per call       {b1:>10.0} steps/s   b'/a = {:.2}   b'/c = {:.1}",
        b1 / a,
        b1 / c
    );
    println!("(c) fresh interpreter per episode    {c:>10.0} steps/s");
}
