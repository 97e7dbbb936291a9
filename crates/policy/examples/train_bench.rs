//! `spade model bench` without the rest of the `spade` binary, for the GPU bundle
//! (`scripts/policy/gpu_build.sh`): one timed training step of a random-init shape, printed as
//! one JSON line (see `spade_policy::bench`). It takes `spade model bench`'s flags, so
//! `scripts/policy/bench-train --spade PATH` runs either:
//!
//! ```text
//! cargo run --release -p spade-policy --example train_bench -- --shape SHAPE [--tokens N]
//!     [--seq-len L] [--steps N] [--warmup N] [--no-recompute] [--chunk-tokens N]
//!     [--device auto|cpu|cuda] [--threads N] [--json]
//! ```

use spade_policy::bench::{self, BenchOptions};
use spade_policy::{PolicyError, Result};

fn main() -> Result<()> {
    let mut o = BenchOptions {
        shape: "qwen3-0.6b".into(),
        tokens: 16_384,
        seq_len: 2048,
        warmup: 1,
        steps: 3,
        recompute: true,
        chunk_tokens: spade_policy::train::DEFAULT_CHUNK_TOKENS,
        device: spade_policy::device_named("auto")?,
        micro_batch_tokens: None,
        zero3: false,
    };
    let mut threads = 1;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| PolicyError::InvalidInput(format!("{flag} needs a value")))
        };
        let count = |v: String| -> Result<usize> {
            v.parse()
                .map_err(|_| PolicyError::InvalidInput(format!("{flag}: `{v}` is not a count")))
        };
        match flag.as_str() {
            "--shape" => o.shape = value()?,
            "--tokens" => o.tokens = count(value()?)?,
            "--seq-len" => o.seq_len = count(value()?)?,
            "--steps" => o.steps = count(value()?)?,
            "--warmup" => o.warmup = count(value()?)?,
            "--chunk-tokens" => o.chunk_tokens = count(value()?)?,
            "--threads" => threads = count(value()?)?,
            "--device" => o.device = spade_policy::device_named(&value()?)?,
            "--no-recompute" => o.recompute = false,
            // The output is always JSON; accepted so the flags are `spade model bench`'s.
            "--json" => {}
            other => {
                return Err(PolicyError::InvalidInput(format!(
                    "unknown argument {other}"
                )));
            }
        }
    }
    spade_policy::embed::set_threads(threads);
    let m = bench::measure(&o, None, |i, s| {
        eprintln!("train_bench: step {} took {s:.3} s", i + 1)
    })?;
    println!("{}", m.to_json(&o, threads));
    Ok(())
}
