//! `spade vendi --kernel FILE.json`: the Vendi score of a similarity matrix given as a square
//! JSON array of arrays (symmetric, K_ii = 1, positive semi-definite), computed by
//! `spade::metrics::vendi`, the same code the worker logs diversity with.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct VendiArgs {
    /// JSON file with a square, symmetric similarity matrix (K_ii = 1).
    #[arg(long)]
    kernel: PathBuf,
    /// Print {"vendi": ..., "n": ..., "vendi_per_n": ...} instead of the bare score.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &VendiArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.kernel)
        .with_context(|| format!("cannot read {}", args.kernel.display()))?;
    let kernel = spade::metrics::vendi::kernel_from_json(&text)
        .with_context(|| format!("{} is not a valid similarity matrix", args.kernel.display()))?;
    let score = spade::metrics::vendi::vendi_score(&kernel)
        .with_context(|| format!("{}", args.kernel.display()))?;
    let n = kernel.len();
    if args.json {
        let out = serde_json::json!({"vendi": score, "n": n, "vendi_per_n": score / n as f64});
        println!("{out}");
    } else {
        println!("{score}");
    }
    Ok(ExitCode::SUCCESS)
}
