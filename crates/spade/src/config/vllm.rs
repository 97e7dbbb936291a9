//! The `[vllm]` section: external vLLM servers as the rollout backend (`model.rollout =
//! "vllm"`), either already running (`urls`) or started by the worker beside itself (`start`).
//! Its checks are with the others, in `check` (`check_vllm`).

use serde::{Deserialize, Serialize};

/// vLLM servers that serve generation when `model.rollout = "vllm"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VllmSection {
    /// Base URLs of servers that already run (`http://host:port`), used data-parallel: the
    /// turns of one episode go to one server (its prefix cache), episodes spread over them.
    /// They must serve `model.path`'s architecture and read `weights_dir` (the flags they need:
    /// docs/worker.md, "vLLM as the rollout backend").
    pub urls: Vec<String>,
    /// Servers the worker starts itself (`vllm serve` beside it on 127.0.0.1, ports `port`,
    /// `port + 1`, ...); 0 = use `urls`.
    pub start: u32,
    /// First port of the servers the worker starts.
    pub port: u16,
    /// Virtual environment whose `bin/vllm` starts them; absent = `$SPADE_CACHE/venv-vllm`
    /// (what `scripts/setup --vllm` installs).
    pub venv: Option<String>,
    /// CPU threads of each started server (its `OMP_NUM_THREADS`); 0 = the worker's.
    pub threads: u32,
    /// KV-cache GiB of each started server on CPU (`VLLM_CPU_KVCACHE_SPACE`).
    pub kv_cache_gib: u32,
    /// CUDA devices the started servers share out, in order: server `i` gets the `i`-th run of
    /// `tensor_parallel` of them as its `CUDA_VISIBLE_DEVICES` (with `[0, 1, 2, 3]`, two servers
    /// of 2: `0,1` and `2,3`). Leave out the trainer's device to keep it for the update. Empty =
    /// no split: every started server sees the worker's devices (one server, or CPU).
    pub gpus: Vec<u32>,
    /// GPUs per started server (its `--tensor-parallel-size`).
    pub tensor_parallel: u32,
    /// Directory the policy is written to after every update for the servers to load (every
    /// server must read it at the same path; `/dev/shm/...` when colocated); absent = the
    /// run's state directory.
    pub weights_dir: Option<String>,
    /// Seconds to wait for every server's `/health` before the first step.
    pub startup_timeout_s: u32,
    /// Seconds one completion may take before its server counts as hung (the run fails).
    pub request_timeout_s: u32,
    /// How updated weights reach the servers.
    pub weight_sync: WeightSync,
}

/// How the policy's weights reach the servers after an update (`vllm.weight_sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightSync {
    /// NCCL where it can run (the policy on a GPU of a CUDA build with NCCL, and servers this
    /// worker started beside it), else disk.
    #[default]
    Auto,
    /// Safetensors under `weights_dir`, which every server reloads.
    Disk,
    /// GPU to GPU: the servers join an NCCL communicator with the trainer (vLLM's
    /// weight-transfer engine, started with `--weight-transfer-config {"backend": "nccl"}`) and
    /// the trainer broadcasts every tensor; nothing is written. A run that cannot use it fails
    /// at its start with the reason.
    Nccl,
}

impl Default for VllmSection {
    fn default() -> Self {
        Self {
            urls: vec![],
            start: 0,
            port: 8300,
            venv: None,
            threads: 0,
            kv_cache_gib: 1,
            gpus: vec![],
            tensor_parallel: 1,
            weights_dir: None,
            startup_timeout_s: 600,
            request_timeout_s: 600,
            weight_sync: WeightSync::Auto,
        }
    }
}

impl VllmSection {
    /// GPUs a job of this run must be given for its started servers: `vllm.gpus` indexes the
    /// devices the job gets (`CUDA_VISIBLE_DEVICES`, as the local executor or Ray sets it), so
    /// the highest index plus one; 0 without a split (servers reached by URL, or sharing the
    /// job's devices), where the executor's own per-job count applies.
    pub fn job_gpus(&self, rollout_is_vllm: bool) -> u32 {
        if !rollout_is_vllm || self.start == 0 {
            return 0;
        }
        self.gpus.iter().max().map_or(0, |m| m.saturating_add(1))
    }
}
