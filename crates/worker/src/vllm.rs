//! vLLM servers as the rollout backend (`model.rollout = "vllm"`, the `[vllm]` section).
//!
//! A [`Fleet`] is the set of servers one run uses: started here (`vllm serve` beside the worker,
//! [`server`]) or already running. Its [`VllmRollout`] implements the engine's
//! [`Rollout`](spade_policy::engine::Rollout) so `play` drives it like the engine: token ids
//! in (`/v1/completions` with `prompt` as a list of ids), the sampled ids
//! (`return_token_ids`) and their log-probs out. Every turn of one sequence goes to the server
//! its `open` chose (round robin over sequences), so that server's prefix cache holds the
//! episode; sequences spread over the servers.
//!
//! Log-probs: vLLM's default (`raw_logprobs`) is before temperature. Started servers run with
//! `--logprobs-mode processed_logprobs`, which is after temperature and top-p/top-k; without a
//! cut (`top_p = 1`, `top_k = 0`) that is `log softmax(logits / T)`, the quantity the sampler
//! and the trainer compute. With the reference's cut (`agent.top_p = 0.95`, `top_k = 20`, the
//! defaults) the server's log-probs are those of the renormalised cut distribution, higher than
//! the trainer's for the same token, while the engine reports the full distribution's: a run on
//! vLLM that wants them equal sets the cut off (not measured here: the vLLM suite is slow). The vocabulary rows a tokenizer cannot produce (`Qwen3::usable_vocab`
//! and up) get a logit bias of -100 (vLLM's floor) since the trainer gives them no
//! probability. Servers the run did not start must run in that mode too: [`Fleet::connect`]
//! checks it by comparing a probe's log-probs against tch.
//!
//! Weight sync ([`Fleet::sync`]): the policy is written as Hugging Face safetensors under
//! `weights_dir` (untied: vLLM 0.32's in-place reload keeps a tied head's old values, see
//! `Policy::save_untied`), then every server is paused (`/pause?mode=wait`, which drains and clears
//! its KV and prefix caches), reloads in place (`/collective_rpc` `reload_weights` with
//! `weights_path`, the dev routes of `VLLM_SERVER_DEV_MODE=1`), gets the version label
//! (`/update_weight_version`), is resumed, and must report that label (`/weight_info`) and
//! reproduce tch's log-probs of a probe. A rollout remembers the version it started on and
//! fails if the fleet's changes under it, so one step's episodes never mix two versions.
//!
//! With `vllm.weight_sync = "nccl"` (or `auto` where it can run: the policy on a GPU of the CUDA
//! build, servers started here) the weights go GPU to GPU instead ([`nccl`]): the servers are
//! started with vLLM's NCCL weight transfer, and a sync pauses them, broadcasts every tensor
//! from the trainer's GPU while they load it, labels and resumes them; the same version and
//! probe checks follow. Nothing is written. Not run anywhere yet (see [`nccl`]).
//!
//! Failures: a server this run started whose process exits, whose requests keep failing, or
//! which stops answering `/health` (or stays paused) while requests wait is killed and started
//! again on the same port with the current weights ([`Fleet::restart`], at most
//! [`MAX_RESTARTS`] times a run). It must report the current version and reproduce the last
//! sync's probe (same tokens, log-probs within the sync's tolerance) before its turns are sent
//! again; requests carry their own seeds, so a resent turn samples what the lost one would have.
//! A server the run was pointed at by URL is not restarted: its failure ends the run with its
//! URL, as does a restart that fails or one past the limit (with the log's tail).

mod nccl;
mod sync;
use sync::write_weights;
mod options;
pub mod rollout;
pub mod server;
mod training;

pub use options::FleetOptions;
pub use training::{SyncStats, for_run, logprob_gap, rescore, sync_after_update};

pub use rollout::VllmRollout;
use rollout::{Turn, complete, completion_body};
use server::Server;
use spade_policy::engine::Request;
use spade_policy::tokenizer::Tokenizer;
use spade_policy::{Policy, PolicyError};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The vLLM release whose routes and request bodies this module was written against
/// (read from its installed source; `scripts/setup-vllm` installs it). Servers of another
/// major.minor are refused: the dev and RL routes change between releases.
pub const VLLM_VERSION: &str = "0.32";

/// The name started servers serve the policy under.
pub const SERVED_NAME: &str = "spade-policy";

/// Why the fleet failed: a message naming the server and what it said.
#[derive(Debug, thiserror::Error)]
#[error("vLLM: {0}")]
pub struct VllmError(pub String);

impl From<VllmError> for PolicyError {
    fn from(e: VllmError) -> Self {
        PolicyError::Backend(e.0)
    }
}

impl From<VllmError> for crate::WorkerError {
    fn from(e: VllmError) -> Self {
        crate::WorkerError::Policy(PolicyError::Backend(e.0))
    }
}

type VResult<T> = std::result::Result<T, VllmError>;

/// What one weight sync did.
#[derive(Debug, Clone)]
pub struct SyncReport {
    pub version: String,
    /// How the weights went: "disk" or "nccl".
    pub path: &'static str,
    /// Writing the safetensors (0 through NCCL).
    pub write_s: f64,
    /// Pause, reload (or broadcast), resume and the checks, all servers.
    pub load_s: f64,
    /// Largest |vLLM - tch| log-prob over the probe's tokens, over all servers.
    pub probe_gap: f64,
}

/// The servers of one run.
pub struct Fleet {
    servers: Vec<Server>,
    /// Completions: bounded by `vllm.request_timeout_s`.
    client: reqwest::blocking::Client,
    model: String,
    version: Mutex<String>,
    weights_dir: PathBuf,
    /// `{"id": -100}` for every vocabulary row no token maps to.
    pad_bias: serde_json::Map<String, serde_json::Value>,
    /// Largest |vLLM - tch| probe log-prob a sync accepts.
    probe_tolerance: f64,
    /// The last synced weights directory (removed when the next one is loaded).
    current_dir: Mutex<Option<PathBuf>>,
    /// How the servers were started (None: reached by URL, never restarted).
    spawn: Option<FleetOptions>,
    restarts: AtomicU32,
    /// One restart at a time.
    restarting: Mutex<()>,
    /// The last sync's probe as the first server answered it and tch scored it: what a
    /// restarted server must reproduce.
    probe: Mutex<Option<Probe>>,
    /// Restarts not yet logged by the run ([`Fleet::take_notes`]).
    notes: Mutex<Vec<String>>,
    /// The trainer's end of the servers' NCCL weight transfer (`vllm.weight_sync` "nccl").
    nccl: Option<nccl::NcclSync>,
}

/// Restarts of servers a run may make before a failure ends it.
pub const MAX_RESTARTS: u32 = 3;

/// A probe completion and tch's log-probs of its tokens.
#[derive(Debug, Clone)]
struct Probe {
    body: serde_json::Value,
    tokens: Vec<i64>,
    want: Vec<f32>,
}

impl Fleet {
    /// Starts or reaches the servers, waits for their health, checks their version and routes,
    /// and loads `policy`'s weights into every one (version `label`). `on` hears progress.
    pub fn connect(
        opts: &FleetOptions,
        policy: &Policy,
        label: &str,
        on: &mut dyn FnMut(String),
    ) -> VResult<Fleet> {
        let t0 = Instant::now();
        let mut opts = opts.clone();
        opts.weight_sync = nccl::resolve(&opts, policy.device())?;
        let opts = &opts;
        let first_dir = opts.weights_dir.join(format!("policy-{label}"));
        let mut servers = Vec::new();
        if opts.start > 0 {
            // Started servers load the current weights themselves; the sync below then only
            // labels and checks them.
            write_weights(policy, &first_dir)?;
            for i in 0..opts.start {
                servers.push(Server::spawn(opts, &first_dir, i)?);
            }
            on(format!(
                "vllm: started {} server(s) on ports {}..{} (logs in {})",
                opts.start,
                opts.port,
                u32::from(opts.port) + opts.start - 1,
                opts.log_dir.display()
            ));
        } else {
            for u in &opts.urls {
                servers.push(Server::remote(u));
            }
        }
        let control = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(600))
            .build()
            .map_err(|e| VllmError(format!("cannot build an HTTP client: {e}")))?;
        for s in &servers {
            s.wait_healthy(&control, opts.startup_timeout)?;
        }
        on(format!(
            "vllm: {} server(s) healthy after {:.1} s",
            servers.len(),
            t0.elapsed().as_secs_f64()
        ));
        let mut model = None;
        for s in &servers {
            s.check_version(&control)?;
            let m = s.model_name(&control)?;
            match &model {
                None => model = Some(m),
                Some(first) if *first != m => {
                    return Err(VllmError(format!(
                        "{} serves model {m:?} but {} serves {first:?}: every server of a run \
                         must serve the same model",
                        s.url, servers[0].url
                    )));
                }
                Some(_) => {}
            }
        }
        let model =
            model.ok_or_else(|| VllmError("no servers: set vllm.urls or vllm.start".into()))?;
        let nccl = match (opts.weight_sync, policy.device()) {
            (spade::config::WeightSync::Nccl, spade_policy::Device::Cuda(gpu)) => {
                let link = nccl::NcclSync::connect(&servers, &control, gpu, opts.startup_timeout)?;
                on(format!(
                    "vllm: weight sync through NCCL from cuda:{gpu} to {} server(s)",
                    servers.len()
                ));
                Some(link)
            }
            _ => None,
        };
        let client = reqwest::blocking::Client::builder()
            .timeout(opts.request_timeout)
            .build()
            .map_err(|e| VllmError(format!("cannot build an HTTP client: {e}")))?;
        let m = policy.model();
        let rows = m.config().vocab_size;
        let pad_bias = (m.usable_vocab()..rows)
            .map(|id| (id.to_string(), serde_json::json!(-100.0)))
            .collect();
        let probe_tolerance = if policy.kind().elt_size_in_bytes() == 4 {
            PROBE_TOLERANCE_F32
        } else {
            PROBE_TOLERANCE_HALF
        };
        let fleet = Fleet {
            servers,
            client,
            model,
            version: Mutex::new(String::new()),
            weights_dir: opts.weights_dir.clone(),
            pad_bias,
            probe_tolerance,
            current_dir: Mutex::new(None),
            spawn: (opts.start > 0).then(|| opts.clone()),
            restarts: AtomicU32::new(0),
            restarting: Mutex::new(()),
            probe: Mutex::new(None),
            notes: Mutex::new(Vec::new()),
            nccl,
        };
        let report = if opts.start > 0 {
            fleet.label_loaded(policy, label, first_dir)?
        } else {
            fleet.sync(policy, label)?
        };
        on(format!(
            "vllm: weights {} on {} server(s) (probe log-prob gap {:.2e}), ready after {:.1} s",
            report.version,
            fleet.servers.len(),
            report.probe_gap,
            t0.elapsed().as_secs_f64()
        ));
        Ok(fleet)
    }

    /// The servers' base URLs.
    pub fn urls(&self) -> Vec<&str> {
        self.servers.iter().map(|s| s.url.as_str()).collect()
    }

    /// The version label every server reports now (the last sync's).
    pub fn version(&self) -> String {
        self.version.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// A rollout over these servers, on the current weights.
    pub fn rollout<'a>(&'a self, tok: &'a Tokenizer) -> VllmRollout<'a> {
        VllmRollout::new(self, tok)
    }

    /// Kills server `i` and starts it again with the current weights (see the module doc);
    /// `why` is what went wrong with it. Err when it was not started here, when the run has
    /// used its [`MAX_RESTARTS`], or when the new process does not come up serving the current
    /// version and the probe: then `why` and the reason it was not brought back.
    pub fn restart(&self, i: usize, why: &str) -> VResult<()> {
        let _one = self.restarting.lock();
        let s = self
            .servers
            .get(i)
            .ok_or_else(|| VllmError(format!("no server {i}")))?;
        let Some(opts) = &self.spawn else {
            return Err(VllmError(format!(
                "{why} ({} was reached by URL, so this run does not restart it)",
                s.url
            )));
        };
        let n = self.restarts.fetch_add(1, Ordering::SeqCst) + 1;
        if n > MAX_RESTARTS {
            return Err(VllmError(format!(
                "{why} (not restarted: this run restarted its servers {MAX_RESTARTS} times \
                 already)"
            )));
        }
        if self.nccl.is_some() {
            return Err(VllmError(format!(
                "{why} (not restarted: with vllm.weight_sync = \"nccl\" the servers and the \
                 trainer share one NCCL communicator, which a new server process cannot join; \
                 servers synced through \"disk\" are restarted)"
            )));
        }
        let dir = self
            .current_dir
            .lock()
            .ok()
            .and_then(|d| d.clone())
            .ok_or_else(|| VllmError(format!("{why} (no synced weights to restart with)")))?;
        let t0 = Instant::now();
        let back = || -> VResult<()> {
            let index = u32::try_from(i).map_err(|_| VllmError(format!("server {i}")))?;
            s.respawn(opts, &dir, index)?;
            s.wait_healthy(&self.client, opts.startup_timeout)?;
            let version = self.version();
            s.post(
                &self.client,
                "/update_weight_version",
                &serde_json::json!({"new_version": version}),
            )?;
            let got = s.weight_version(&self.client)?;
            if got != version {
                return Err(VllmError(format!(
                    "it reports weight version {got:?}, not {version:?}"
                )));
            }
            self.check_probe(s)
        };
        back().map_err(|e| {
            VllmError(format!(
                "{why}; restarting {} failed: {}{}",
                s.url,
                e.0,
                s.log_tail_note()
            ))
        })?;
        let first = why.lines().next().unwrap_or_default();
        if let Ok(mut notes) = self.notes.lock() {
            notes.push(format!(
                "vllm: restarted {} ({n} of at most {MAX_RESTARTS}) in {:.1} s after: {first}",
                s.url,
                t0.elapsed().as_secs_f64()
            ));
        }
        Ok(())
    }

    /// The last sync's probe, asked of `s`: the same tokens and log-probs within tolerance.
    fn check_probe(&self, s: &Server) -> VResult<()> {
        let Some(p) = self.probe.lock().ok().and_then(|p| p.clone()) else {
            return Ok(());
        };
        let url = format!("{}/v1/completions", s.url);
        let c = match complete(&self.client, &url, &p.body, p.tokens.len().max(1)) {
            Turn::Done(c) => c,
            Turn::Refused(m) | Turn::Fatal(m) => return Err(VllmError(format!("the probe: {m}"))),
        };
        let (_, gap, _) = logprob_gap(&c.logprobs, &p.want, &vec![true; p.want.len()]);
        if c.tokens != p.tokens || !gap.is_finite() || gap > self.probe_tolerance {
            return Err(VllmError(format!(
                "it does not serve the synced weights: its probe sampled {:?} (log-prob gap \
                 {gap:.3e}) where the others sampled {:?}",
                c.tokens, p.tokens
            )));
        }
        Ok(())
    }

    /// Restarts so far in this run.
    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::SeqCst)
    }

    /// The restarts since the last call, one line each, for the run's log.
    pub fn take_notes(&self) -> Vec<String> {
        self.notes
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default()
    }

    /// Process ids of the servers this fleet started (None for the others): each leads its
    /// process group. For tests that kill one, and for the benchmark's report.
    pub fn server_pids(&self) -> Vec<Option<u32>> {
        self.servers.iter().map(Server::pid).collect()
    }

    /// Stops the servers this fleet started (their process groups). Running servers it was
    /// pointed at are left alone.
    pub fn shutdown(&self) {
        for s in &self.servers {
            s.stop();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Probe log-probs of float32 weights agree with tch to float rounding (measured: see
/// docs/benchmarks.md, "The vLLM rollout backend"); bf16 weights round far more.
const PROBE_TOLERANCE_F32: f64 = 2e-3;
const PROBE_TOLERANCE_HALF: f64 = 0.15;

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("urls", &self.urls())
            .field("model", &self.model)
            .field("version", &self.version())
            .finish()
    }
}
