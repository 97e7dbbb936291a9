//! `spade model bench` without the rest of the `spade` binary, for the GPU bundle
//! (`scripts/policy/gpu_build.sh`): one timed training step of a random-init Qwen3 shape,
//! printed as one JSON line (see `spade_policy::bench`).
//!
//! ```text
//! cargo run --release -p spade-policy --example train_bench -- SHAPE TOKENS [DEVICE] [THREADS] [SEQ_LEN] [STEPS]
//! ```

use spade_policy::bench::{self, BenchOptions};
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
    let shape = arg(0, "qwen3-0.6b");
    let threads = num(3, "1")?;
    spade_policy::embed::set_threads(threads);
    let o = BenchOptions {
        shape,
        tokens: num(1, "16384")?,
        device: spade_policy::device_named(&arg(2, "auto"))?,
        seq_len: num(4, "2048")?,
        steps: num(5, "3")?,
        warmup: 1,
        recompute: true,
        chunk_tokens: spade_policy::train::DEFAULT_CHUNK_TOKENS,
    };
    let m = bench::measure(&o, |i, s| eprintln!("step {}: {s:.3} s", i + 1))?;
    println!("{}", m.to_json(&o, threads));
    Ok(())
}
