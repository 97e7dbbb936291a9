//! `spade model bench-rollout` without the rest of the `spade` binary, for the GPU bundle
//! (`scripts/policy/gpu_build.sh`): one step's generation on the engine (and, with `both`, the
//! batch sampler) for a random-init shape, printed as one JSON line per path.
//!
//! ```text
//! cargo run --release -p spade-policy --example rollout_bench -- SHAPE ENVS PLAYS CONTEXT [DEVICE] [PATHS] [TURN_TOKENS]
//! ```
//! PATHS: engine, sampler or both. ENVS x PLAYS episodes run at once on the engine.

use spade_policy::rollout_bench::{self, Path, RolloutBenchOptions};
use spade_policy::{PolicyError, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let num = |i: usize, default: &str| -> Result<usize> {
        let v = arg(i, default);
        v.parse().map_err(|_| {
            PolicyError::InvalidInput(format!("argument {}: `{v}` is not a count", i + 1))
        })
    };
    let context = num(3, "4096")?;
    let o = RolloutBenchOptions {
        shape: arg(0, "qwen3-0.6b"),
        envs: num(1, "24")?,
        plays: num(2, "8")?,
        context,
        device: spade_policy::device_named(&arg(4, "auto"))?,
        turn_tokens: num(6, "256")?,
        mean_turn_tokens: num(6, "256")? / 2,
        // Long contexts: a longer system prompt and observations, as multi-turn tool use has.
        system_tokens: context / 8,
        observation_tokens: context / 32,
        max_batch: 512,
        ..RolloutBenchOptions::default()
    };
    let paths = match arg(5, "engine").as_str() {
        "both" => vec![Path::Sampler, Path::Engine],
        "sampler" => vec![Path::Sampler],
        _ => vec![Path::Engine],
    };
    let policy = rollout_bench::model(&o)?;
    for path in paths {
        let r = rollout_bench::run(&policy, &o, path, |p| {
            eprintln!(
                "{} {}: {:.2} s, {} tokens",
                path.as_str(),
                p.phase,
                p.wall_s,
                p.generated
            )
        })?;
        println!(
            "{}",
            serde_json::json!({
                "shape": o.shape, "path": path.as_str(), "envs": o.envs, "plays": o.plays,
                "context": o.context, "step_s": r.wall_s(), "generated": r.generated(),
                "tokens_per_s": r.tokens_per_s(),
                "phases": r.phases.iter().map(|p| serde_json::json!({
                    "phase": p.phase, "s": p.wall_s, "tokens": p.generated, "calls": p.calls
                })).collect::<Vec<_>>(),
            })
        );
    }
    Ok(())
}
