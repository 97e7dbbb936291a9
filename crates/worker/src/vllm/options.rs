//! How a fleet is started: which servers, on which devices, with what limits, from a run's
//! configuration.

use super::*;

/// How to reach (or start) the servers.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Servers that already run; empty when `start` > 0.
    pub urls: Vec<String>,
    /// Servers to start here.
    pub start: u32,
    pub port: u16,
    /// Where `bin/vllm` is.
    pub venv: PathBuf,
    /// OMP threads per started server.
    pub threads: u32,
    pub kv_cache_gib: u32,
    /// CUDA devices split between started servers (`vllm.gpus`; empty: no split).
    pub gpus: Vec<u32>,
    /// GPUs per started server.
    pub tensor_parallel: u32,
    /// `--max-model-len` of started servers.
    pub max_model_len: usize,
    pub weights_dir: PathBuf,
    /// Started servers' logs.
    pub log_dir: PathBuf,
    pub startup_timeout: Duration,
    pub request_timeout: Duration,
    /// Started servers run on GPUs (the run trains on CUDA, or `vllm.gpus` splits devices):
    /// they get vLLM's GPU defaults (CUDA graphs, chunked prefill) instead of the CPU
    /// workarounds.
    pub on_gpu: bool,
    /// How weights reach the servers (`vllm.weight_sync`; [`Fleet::connect`] decides `auto`).
    pub weight_sync: spade::config::WeightSync,
    /// More environment for started servers (a benchmark's CPU set-up: `LD_PRELOAD`,
    /// `VLLM_CPU_OMP_THREADS_BIND`).
    pub env: Vec<(String, String)>,
}

impl FleetOptions {
    /// Server `i`'s `CUDA_VISIBLE_DEVICES`: its run of `tensor_parallel` devices of `gpus`
    /// (None without a split, or past the list, which the configuration check refuses).
    ///
    /// `gpus` are indices into the devices the worker itself was given: when its
    /// `CUDA_VISIBLE_DEVICES` is set (Ray sets it to the GPUs it placed the job on, an operator
    /// may set it by hand), index `k` is that list's `k`-th entry, so `[1, 2]` on a job Ray gave
    /// `4,5,6,7` starts the server on physical `5,6`, never on a GPU another job holds. Unset,
    /// the indices are the machine's devices. An index past the worker's list is an error.
    pub fn devices_of(&self, i: u32) -> Result<Option<String>, VllmError> {
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        self.devices_within(i, visible.as_deref())
    }

    /// [`Self::devices_of`] with the worker's device list given.
    pub fn devices_within(
        &self,
        i: u32,
        visible: Option<&str>,
    ) -> Result<Option<String>, VllmError> {
        let tp = self.tensor_parallel.max(1) as usize;
        let start = i as usize * tp;
        let Some(run) = self.gpus.get(start..start + tp) else {
            return Ok(None);
        };
        let given: Option<Vec<&str>> = visible
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| v.split(',').map(str::trim).collect());
        let mut out = Vec::with_capacity(run.len());
        for &k in run {
            match &given {
                None => out.push(k.to_string()),
                Some(list) => match list.get(k as usize) {
                    Some(d) => out.push((*d).to_owned()),
                    None => {
                        return Err(VllmError(format!(
                            "vllm.gpus names device {k}, but this worker was given {} GPU(s) \
                             (CUDA_VISIBLE_DEVICES={}); vllm.gpus indexes the worker's devices",
                            list.len(),
                            list.join(",")
                        )));
                    }
                },
            }
        }
        Ok(Some(out.join(",")))
    }

    /// The venv scripts/setup-vllm makes: `$SPADE_CACHE/venv-vllm`, else under
    /// `~/.cache/spade-studio`.
    pub fn default_venv() -> PathBuf {
        std::env::var_os("SPADE_CACHE")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/spade-studio"))
            })
            .unwrap_or_else(|| PathBuf::from(".deps"))
            .join("venv-vllm")
    }

    /// The `[vllm]` section of `cfg`, with the run's directories for what it leaves open.
    pub fn from_config(cfg: &spade::config::RunConfig, state_dir: &Path) -> Self {
        let v = &cfg.vllm;
        let venv = v
            .venv
            .as_ref()
            .map(PathBuf::from)
            .unwrap_or_else(Self::default_venv);
        FleetOptions {
            urls: v.urls.clone(),
            start: v.start,
            port: v.port,
            venv,
            threads: v.threads,
            kv_cache_gib: v.kv_cache_gib,
            gpus: v.gpus.clone(),
            tensor_parallel: v.tensor_parallel.max(1),
            max_model_len: cfg.model.max_context as usize,
            weights_dir: v
                .weights_dir
                .as_ref()
                .map(PathBuf::from)
                .unwrap_or_else(|| state_dir.join("vllm-weights")),
            log_dir: state_dir.join("vllm-logs"),
            startup_timeout: Duration::from_secs(v.startup_timeout_s.into()),
            request_timeout: Duration::from_secs(v.request_timeout_s.into()),
            // `for_run` also counts a policy that `auto` put on a GPU.
            on_gpu: !v.gpus.is_empty()
                || spade::config::device_gpus(&cfg.model.device).is_some_and(|n| n > 0),
            weight_sync: v.weight_sync,
            env: vec![],
        }
    }
}
