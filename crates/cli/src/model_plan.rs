//! `spade model plan`: the worker's memory plan (`spade_policy::memplan`) for model shapes on
//! GPU nodes, one rank's share with N data-parallel ranks (ZeRO-2: the optimizer state split,
//! the weights and gradients whole on every rank; ZeRO-3: the gradients split too and one layer
//! whole at a time during an update, the next one's gather and the previous one's gradient
//! sums on their way), and whether it fits each card with room for a KV cache.
//! The README's table of which models fit which nodes is this command's output.

use clap::Args;
use spade::config::RunConfig;
use spade_policy::memplan::{self, MemoryPlan};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Shapes to plan (repeatable); default qwen3-4b, qwen3-8b and qwen3-30b-a3b.
    #[arg(long = "shape")]
    pub shapes: Vec<String>,
    /// Rank counts (repeatable); default 1 and 8.
    #[arg(long = "ranks")]
    pub ranks: Vec<u64>,
    /// ZeRO stages to plan for more than one rank (repeatable, 2 or 3); default both.
    #[arg(long = "zero-stage")]
    pub zero_stages: Vec<u8>,
    /// Cards as NAME=MIB, the total memory nvidia-smi reports (repeatable); default
    /// "H100 80GB=81559" and "H200 141GB=143771".
    #[arg(long = "gpu")]
    pub gpus: Vec<String>,
    /// The share of a card's memory the run may use (`model.gpu_memory_fraction`).
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_fraction: f64,
    /// Print a Markdown table.
    #[arg(long)]
    pub markdown: bool,
}

/// One card: its name and total bytes.
fn card(spec: &str) -> anyhow::Result<(String, u64)> {
    let (name, mib) = spec
        .rsplit_once('=')
        .ok_or_else(|| anyhow::anyhow!("--gpu {spec:?}: expected NAME=MIB"))?;
    let mib: u64 = mib
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("--gpu {spec:?}: {mib:?} is not a number of MiB"))?;
    Ok((name.trim().to_string(), mib << 20))
}

pub fn run(a: &PlanArgs) -> anyhow::Result<()> {
    let shapes: Vec<String> = if a.shapes.is_empty() {
        ["qwen3-4b", "qwen3-8b", "qwen3-30b-a3b"]
            .map(String::from)
            .to_vec()
    } else {
        a.shapes.clone()
    };
    let ranks = if a.ranks.is_empty() {
        vec![1, 8]
    } else {
        a.ranks.clone()
    };
    if let Some(r) = ranks.iter().find(|&&r| r == 0) {
        anyhow::bail!("--ranks {r}: at least 1");
    }
    let stages = if a.zero_stages.is_empty() {
        vec![2, 3]
    } else {
        a.zero_stages.clone()
    };
    if let Some(z) = stages.iter().find(|&&z| !matches!(z, 2 | 3)) {
        anyhow::bail!("--zero-stage {z}: 2 or 3");
    }
    let gpus = if a.gpus.is_empty() {
        vec![
            "H100 80GB=81559".to_string(),
            "H200 141GB=143771".to_string(),
        ]
    } else {
        a.gpus.clone()
    };
    let gpus = gpus
        .iter()
        .map(|g| card(g))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if !(0.0..=1.0).contains(&a.gpu_memory_fraction) || a.gpu_memory_fraction == 0.0 {
        anyhow::bail!(
            "--gpu-memory-fraction {}: a share in (0, 1]",
            a.gpu_memory_fraction
        );
    }
    // The paper's recipe as the configuration's defaults set it: bf16 weights, packed
    // micro-batches, recompute, no KL reference.
    let mut cfg = RunConfig::default();
    if a.markdown {
        let heads: Vec<&str> = gpus.iter().map(|(n, _)| n.as_str()).collect();
        println!(
            "| model | ranks | ZeRO | per rank before the KV cache (ZeRO-3: its larger phase) | {} |",
            heads.join(" | ")
        );
        println!("|---|---|---|---|{}", "---|".repeat(heads.len()));
    }
    for shape in &shapes {
        let c = spade_policy::preset::shape(shape)?;
        let rows = ranks.iter().flat_map(|&n| match n {
            1 => vec![(1, 0)],
            _ => stages.iter().map(|&z| (n, z)).collect(),
        });
        for (n, stage) in rows {
            cfg.run.zero_stage = stage.max(2);
            // bf16 weights, as on a GPU.
            let plan = MemoryPlan::new(&c, &spade_worker::run::recipe(&cfg, 2, n));
            let zero = match stage {
                0 => "-".to_string(),
                z => z.to_string(),
            };
            let verdicts: Vec<String> = gpus
                .iter()
                .map(|(_, total)| {
                    let budget = memplan::budget(*total, *total, a.gpu_memory_fraction);
                    match plan.kv_slots_within(budget) {
                        Some(slots) => format!(
                            "fits: {} KV slots ({})",
                            slots,
                            memplan::gib(slots * plan.kv_slot_bytes)
                        ),
                        None => format!(
                            "does not fit ({} over {})",
                            memplan::gib(plan.fixed_bytes().saturating_sub(budget)),
                            memplan::gib(budget)
                        ),
                    }
                })
                .collect();
            if a.markdown {
                println!(
                    "| {shape} ({:.1} B) | {n} | {zero} | {} | {} |",
                    plan.parameters as f64 / 1e9,
                    memplan::gib(plan.fixed_bytes()),
                    verdicts.join(" | ")
                );
            } else {
                println!("{}", plan.table(0, None));
                for ((name, _), v) in gpus.iter().zip(&verdicts) {
                    println!("  on {name}: {v}");
                }
                println!();
            }
        }
    }
    Ok(())
}
