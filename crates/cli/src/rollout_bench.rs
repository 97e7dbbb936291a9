//! `spade model bench-rollout`: one SPADE step's generation (designer attempts, hints, hint
//! plays, no-hint plays) with synthetic environments, on the batch sampler and on the engine
//! in the same run, side by side (`spade_policy::rollout_bench` describes the workload).
//! `--path engine-vllm` puts vLLM servers (started here, `spade_worker::vllm`, or
//! `--vllm-url`) beside the engine on the same weights and thread count, and times a weight
//! sync too. `--path seed-envs` plays the seed library's games in the sandbox through the
//! worker's play loop, with the environments on threads of their own and (the earlier way) on
//! the decode loop, side by side, and reports how long the model waited for them.

use anyhow::Context;
use clap::Args;
use spade_policy::engine::EngineConfig;
use spade_policy::rollout_bench::{self, Path, RolloutBenchOptions, RolloutReport};

#[derive(Debug, Args)]
pub struct RolloutBenchArgs {
    /// `tiny`, `tiny-moe` or a Qwen3 shape (qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b,
    /// qwen3-30b-a3b-4l), random weights.
    #[arg(long, default_value = "tiny")]
    pub shape: String,
    /// Environments of the step (the paper: 24 games).
    #[arg(long, default_value_t = 24)]
    pub envs: usize,
    /// No-hint plays per environment.
    #[arg(long, default_value_t = 8)]
    pub plays: usize,
    /// Hint plays per new environment (0: no regeneration phases' plays).
    #[arg(long, default_value_t = 16)]
    pub hint_plays: usize,
    /// Turns per episode at most (each episode draws 1..=N from its seed).
    #[arg(long, default_value_t = 6)]
    pub max_turns: usize,
    /// Agent tokens per turn at most; turns stop after about --mean-turn-tokens.
    #[arg(long, default_value_t = 40)]
    pub turn_tokens: usize,
    #[arg(long, default_value_t = 20)]
    pub mean_turn_tokens: usize,
    /// Designer reply budget (hints get --hint-tokens).
    #[arg(long, default_value_t = 256)]
    pub designer_tokens: usize,
    #[arg(long, default_value_t = 64)]
    pub hint_tokens: usize,
    /// Context of an episode (prompt and everything after it).
    #[arg(long, default_value_t = 4096)]
    pub context: usize,
    /// The sampler's plays per batch (the worker's agent.concurrency before the engine).
    #[arg(long, default_value_t = 8)]
    pub chunk: usize,
    /// The engine's batch width and KV-cache slots.
    #[arg(long, default_value_t = 256)]
    pub max_batch: usize,
    #[arg(long, default_value_t = 1 << 19)]
    pub kv_tokens: usize,
    /// The engine's prefill budget: prompt tokens one pass prefills (model.prefill_tokens).
    #[arg(long, default_value_t = spade_policy::engine::DEFAULT_PREFILL_TOKENS)]
    pub prefill_tokens: usize,
    /// The engine's decode window (model.decode_window): decoding passes a step runs before
    /// the sampled tokens are read back to the host; 0 = the device's default (1 on the CPU,
    /// 4 on CUDA).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=64))]
    pub decode_window: u8,
    /// sampler, engine, both (the same step on each, then the ratio), vllm, engine-vllm
    /// (the engine and vLLM servers on the same weights; needs --shape tiny, whose model has a
    /// tokenizer for the servers), or seed-envs (the seed library's games in the sandbox on the
    /// engine, environments stepped on their own threads and on the decode loop; --shape tiny).
    #[arg(long, default_value = "both")]
    pub path: String,
    /// vLLM servers to start for the vllm paths (each with --threads OMP threads).
    #[arg(long, default_value_t = 1)]
    pub vllm_servers: u32,
    /// Use this running vLLM server instead of starting one (it must read the temp dir).
    #[arg(long)]
    pub vllm_url: Option<String>,
    /// CPU cores (`1`, `0-1`, `2,3`) for the model's compute on both sides: started vLLM
    /// servers get the CPU set-up of vLLM's installation guide (TCMalloc and Intel OpenMP in
    /// LD_PRELOAD, their OpenMP threads bound to these cores with VLLM_CPU_OMP_THREADS_BIND;
    /// their API and engine-core processes stay unbound, as vLLM runs them), and the engine's
    /// thread is pinned to the same cores while it decodes. Unset: nothing is bound.
    #[arg(long)]
    pub cpu_bind: Option<String>,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// libtorch threads (CPU).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Timed repetitions of each path (the median step is reported).
    #[arg(long, default_value_t = 1)]
    pub repeats: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// seed-envs: the seed library (its games/ directory is played).
    #[arg(long, default_value = "envs/seed")]
    pub seeds: std::path::PathBuf,
    /// seed-envs: episodes in flight (sandbox runners).
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// seed-envs: how much lower the runners' CPU priority is than this process's (0-19; runs
    /// use 10, so the decoding comes first when the runners outnumber free cores).
    #[arg(long, default_value_t = spade_sandbox::runner::RUNNER_NICE,
          value_parser = clap::value_parser!(u8).range(0..=19))]
    pub runner_nice: u8,
    /// Engine paths: whether decoding rows read the KV blocks they share (a common prompt
    /// prefix) once, attended together, or each row all of its own keys (off: for comparison).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub share_reads: String,
    /// Engine paths: whether decoding rows read their KV blocks where they lie (float32 on the
    /// CPU) or gather them into a copy for libtorch's attention first (off: for comparison).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub read_in_place: String,
}

/// Every path but `seed-envs` (`crate::rollout_bench_envs`).
pub fn run(a: &RolloutBenchArgs) -> anyhow::Result<()> {
    let paths: Vec<Path> = match a.path.as_str() {
        "both" => vec![Path::Sampler, Path::Engine],
        "sampler" => vec![Path::Sampler],
        "engine" => vec![Path::Engine],
        "vllm" => vec![Path::External],
        "engine-vllm" => vec![Path::Engine, Path::External],
        other => anyhow::bail!(
            "--path `{other}`: expected sampler, engine, both, vllm, engine-vllm or seed-envs"
        ),
    };
    let vllm = paths.contains(&Path::External);
    // Checked before anything starts.
    let cores = a.cpu_bind.as_deref().map(parse_cores).transpose()?;
    if vllm && a.shape != "tiny" {
        anyhow::bail!(
            "--path {}: vLLM needs --shape tiny (a model with a tokenizer)",
            a.path
        );
    }
    spade_policy::embed::set_threads(a.threads);
    let device = spade_policy::device_named(&a.device)?;
    let o = RolloutBenchOptions {
        shape: a.shape.clone(),
        envs: a.envs,
        plays: a.plays,
        hint_plays: a.hint_plays,
        max_turns: a.max_turns,
        turn_tokens: a.turn_tokens,
        mean_turn_tokens: a.mean_turn_tokens,
        designer_tokens: a.designer_tokens,
        hint_tokens: a.hint_tokens,
        context: a.context,
        chunk: a.chunk,
        max_batch: a.max_batch,
        kv_tokens: a.kv_tokens,
        prefill_tokens: a.prefill_tokens,
        decode_window: usize::from(a.decode_window),
        device,
        seed: a.seed,
        ..RolloutBenchOptions::default()
    };
    let policy = if vllm {
        // The same tiny architecture with a tokenizer, which a vLLM server needs.
        spade_policy::preset::tiny(&[spade_policy::preset::BUILTIN_TEXT], a.seed, |_| {})?
    } else {
        rollout_bench::model(&o).with_context(|| format!("model of shape {}", a.shape))?
    };
    let fleet = if vllm {
        Some(start_vllm(a, &policy)?)
    } else {
        None
    };
    println!(
        "bench-rollout: {} on {device:?} ({} threads), {} envs x {} plays (+{} hint plays), up \
         to {} turns of <= {} tokens",
        a.shape, a.threads, a.envs, a.plays, a.hint_plays, a.max_turns, a.turn_tokens
    );
    let pinning = match &cores {
        Some(c) => format!("its thread pinned to cores {c:?} while it decodes; default allocator"),
        None => "unpinned".into(),
    };
    let window = EngineConfig {
        decode_window: usize::from(a.decode_window),
        ..EngineConfig::new(1, 1, 1)
    }
    .window_on(device);
    println!(
        "engine: {} libtorch thread(s), {pinning}; shared KV blocks read once: {}; blocks read \
         in place: {}; decode window: {window} pass(es) a host read",
        a.threads, a.share_reads, a.read_in_place
    );
    // The paths take turns, repetition by repetition, so a machine whose load changes slows
    // them alike.
    let mut runs: Vec<Vec<RolloutReport>> = paths.iter().map(|_| vec![]).collect();
    for rep in 0..a.repeats.max(1) {
        for (&path, done) in paths.iter().zip(&mut runs) {
            let on = |p: &rollout_bench::PhaseReport| {
                eprintln!(
                    "  {} #{}: {:<10} {:>8.2} s  {:>7} tokens  {:>5} calls",
                    label(path),
                    rep + 1,
                    p.phase,
                    p.wall_s,
                    p.generated,
                    p.calls
                );
            };
            let r = match (&fleet, path) {
                (Some((f, _)), Path::External) => {
                    let mut r = f.rollout(policy.require_tokenizer()?);
                    rollout_bench::run_external(&policy, &o, &mut r, on)?
                }
                _ => {
                    let _pinned = cores.as_deref().map(Pinned::to).transpose()?;
                    rollout_bench::run(&policy, &o, path, on)?
                }
            };
            done.push(r);
        }
    }
    let mut best: Vec<RolloutReport> = vec![];
    for (&path, mut runs) in paths.iter().zip(runs) {
        runs.sort_by(|x, y| x.wall_s().total_cmp(&y.wall_s()));
        let median = runs.swap_remove(runs.len() / 2);
        println!(
            "{:<8} step {:>8.2} s  {:>8} tokens  {:>8.1} tokens/s  (median of {})",
            label(path),
            median.wall_s(),
            median.generated(),
            median.tokens_per_s(),
            a.repeats.max(1)
        );
        best.push(median);
    }
    if let (Some((f, dir)), [e, v]) = (&fleet, best.as_slice()) {
        let t = std::time::Instant::now();
        let sync = f.sync(&policy, "bench")?;
        println!(
            "vllm / engine: {:.2}x tokens/s, step time {:.2}x ({} vLLM server(s), {} thread(s) \
             each; engine {} thread(s)); weight sync {:.2} s (write {:.2} s, load {:.2} s)",
            v.tokens_per_s() / e.tokens_per_s().max(1e-9),
            v.wall_s() / e.wall_s().max(1e-9),
            f.urls().len(),
            a.threads,
            a.threads,
            t.elapsed().as_secs_f64(),
            sync.write_s,
            sync.load_s
        );
        // What the server made of its CPU set-up (thread binding, preloads), from its log.
        let log = std::fs::read_to_string(dir.join("logs/server-0.log")).unwrap_or_default();
        for line in log
            .lines()
            .filter(|l| {
                let l = l.to_lowercase();
                ["threads_bind", "core ids", "iomp", "tcmalloc", "ld_preload"]
                    .iter()
                    .any(|k| l.contains(k))
            })
            .take(12)
        {
            println!("vllm server log: {}", line.trim());
        }
        f.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    } else if let [s, e] = best.as_slice() {
        let (same, all) = rollout_bench::agreement(s, e);
        println!(
            "engine / sampler: {:.2}x tokens/s, step time {:.2}x; {same} of {all} turns sampled \
             the same tokens on both paths",
            e.tokens_per_s() / s.tokens_per_s().max(1e-9),
            e.wall_s() / s.wall_s().max(1e-9),
        );
    }
    Ok(())
}

fn label(p: Path) -> &'static str {
    match p {
        Path::External => "vllm",
        other => other.as_str(),
    }
}

/// The vLLM servers of the vllm paths, loaded with `policy`, and their scratch directory.
fn start_vllm(
    a: &RolloutBenchArgs,
    policy: &spade_policy::Policy,
) -> anyhow::Result<(spade_worker::vllm::Fleet, std::path::PathBuf)> {
    let dir = std::env::temp_dir().join(format!("spade-bench-vllm-{}", std::process::id()));
    let venv = spade_worker::vllm::FleetOptions::default_venv();
    let env = match &a.cpu_bind {
        Some(cores) => vllm_cpu_env(&venv, cores)?,
        None => vec![],
    };
    let o = spade_worker::vllm::FleetOptions {
        urls: a.vllm_url.iter().cloned().collect(),
        start: if a.vllm_url.is_some() {
            0
        } else {
            a.vllm_servers.max(1)
        },
        port: 8450,
        venv,
        threads: u32::try_from(a.threads).unwrap_or(1),
        kv_cache_gib: 2,
        gpus: vec![],
        tensor_parallel: 1,
        max_model_len: a.context,
        weights_dir: dir.join("weights"),
        log_dir: dir.join("logs"),
        startup_timeout: std::time::Duration::from_secs(1800),
        request_timeout: std::time::Duration::from_secs(1800),
        // As the policy it is compared with: the CPU workarounds only on the CPU.
        on_gpu: policy.device().is_cuda(),
        weight_sync: spade::config::WeightSync::Auto,
        env,
    };
    for (k, v) in &o.env {
        println!("vllm server environment: {k}={v}");
    }
    let t = std::time::Instant::now();
    let f = spade_worker::vllm::Fleet::connect(&o, policy, "step-0", &mut |l| eprintln!("{l}"))?;
    println!(
        "vllm: {} server(s) ready in {:.1} s",
        f.urls().len(),
        t.elapsed().as_secs_f64()
    );
    Ok((f, dir))
}

/// TCMalloc from Debian's package `libtcmalloc-minimal4`.
const TCMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4";

/// vLLM's CPU set-up (its installation guide: TCMalloc and Intel OpenMP preloaded, OpenMP
/// threads bound to `cores`); a library that is missing is named with how to install it.
fn vllm_cpu_env(venv: &std::path::Path, cores: &str) -> anyhow::Result<Vec<(String, String)>> {
    let iomp = venv.join("lib/libiomp5.so");
    for (lib, how) in [
        (
            std::path::Path::new(TCMALLOC),
            "apt-get install libtcmalloc-minimal4",
        ),
        (iomp.as_path(), "scripts/setup-vllm (intel-openmp)"),
    ] {
        if !lib.is_file() {
            anyhow::bail!("--cpu-bind: {} is missing ({how})", lib.display());
        }
    }
    Ok(vec![
        (
            "LD_PRELOAD".into(),
            format!("{TCMALLOC}:{}", iomp.display()),
        ),
        ("VLLM_CPU_OMP_THREADS_BIND".into(), cores.to_string()),
    ])
}

/// The cores of a list such as `1`, `0-3` or `0,2-3`.
fn parse_cores(list: &str) -> anyhow::Result<Vec<usize>> {
    let bad = || anyhow::anyhow!("--cpu-bind `{list}`: expected cores such as 1, 0-3 or 0,2-3");
    let mut cores = vec![];
    for part in list.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi): (usize, usize) = (
            lo.trim().parse().map_err(|_| bad())?,
            hi.trim().parse().map_err(|_| bad())?,
        );
        if lo > hi || hi >= rustix::thread::CpuSet::MAX_CPU {
            return Err(bad());
        }
        cores.extend(lo..=hi);
    }
    if cores.is_empty() {
        return Err(bad());
    }
    Ok(cores)
}

/// This thread pinned to some cores until dropped, when it may run anywhere again.
struct Pinned {
    before: rustix::thread::CpuSet,
}

impl Pinned {
    fn to(cores: &[usize]) -> anyhow::Result<Self> {
        let before = rustix::thread::sched_getaffinity(None)?;
        let mut set = rustix::thread::CpuSet::new();
        for &c in cores {
            set.set(c);
        }
        rustix::thread::sched_setaffinity(None, &set)
            .with_context(|| format!("cannot pin the engine's thread to cores {cores:?}"))?;
        Ok(Self { before })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = rustix::thread::sched_setaffinity(None, &self.before);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_cores;

    #[test]
    fn core_lists_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(parse_cores("1").ok(), Some(vec![1]));
        assert_eq!(parse_cores("0-2,5").ok(), Some(vec![0, 1, 2, 5]));
        for bad in ["", "a", "3-1", "1,", "-1"] {
            let e = parse_cores(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("expected cores"), "{bad}: {e}");
        }
    }
}
