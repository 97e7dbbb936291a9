//! One vLLM server of a [`Fleet`](super::Fleet): a process started here (its own process
//! group, its output in a log file whose tail every failure quotes) or a URL of one that runs
//! elsewhere; health, version and model checks; the small control requests of a sync.

use super::{FleetOptions, SERVED_NAME, VLLM_VERSION, VResult, VllmError};
use crate::http::{Posted, post_json};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes of a server's log quoted in an error.
const LOG_TAIL_BYTES: u64 = 3000;

pub(super) struct Server {
    pub(super) url: String,
    child: Mutex<Option<Child>>,
    log: Option<PathBuf>,
}

impl Server {
    /// A server that runs already.
    pub(super) fn remote(url: &str) -> Self {
        Server {
            url: url.trim_end_matches('/').to_string(),
            child: Mutex::new(None),
            log: None,
        }
    }

    /// `vllm serve weights` on 127.0.0.1, port `opts.port + i`, in its own process group
    /// (vLLM forks an engine-core process; stopping the group stops both).
    pub(super) fn spawn(opts: &FleetOptions, weights: &Path, i: u32) -> VResult<Self> {
        let (child, log) = launch(opts, weights, i, false)?;
        Ok(Server {
            url: format!("http://127.0.0.1:{}", u32::from(opts.port) + i),
            child: Mutex::new(Some(child)),
            log: Some(log),
        })
    }

    /// Kills this started server's process group (whatever state it is in: a stopped process
    /// ignores SIGTERM) and starts it again on the same port with `weights`, appending to the
    /// same log so the tail of the dead one stays readable above the new start.
    pub(super) fn respawn(&self, opts: &FleetOptions, weights: &Path, i: u32) -> VResult<()> {
        self.kill();
        let (child, _) = launch(opts, weights, i, true)?;
        if let Ok(mut g) = self.child.lock() {
            *g = Some(child);
        }
        Ok(())
    }

    /// SIGKILL to a started server's group, and reap it.
    fn kill(&self) {
        let Ok(mut g) = self.child.lock() else {
            return;
        };
        let Some(mut c) = g.take() else {
            return;
        };
        if let Some(pgid) = i32::try_from(c.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = c.wait();
    }

    /// Polls `/health` until it answers 200; fails at once when the process exits, and after
    /// `timeout` with the log's tail.
    pub(super) fn wait_healthy(
        &self,
        client: &reqwest::blocking::Client,
        timeout: Duration,
    ) -> VResult<()> {
        let t0 = Instant::now();
        let url = format!("{}/health", self.url);
        loop {
            self.check_alive()?;
            let last = match client.get(&url).timeout(Duration::from_secs(5)).send() {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => format!("answered {}", r.status()),
                Err(e) => e.to_string(),
            };
            if t0.elapsed() >= timeout {
                return Err(VllmError(format!(
                    "{url} not healthy after {} s (vllm.startup_timeout_s); last: {last}{}",
                    timeout.as_secs(),
                    self.log_tail_note()
                )));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.child.lock().ok()?.as_ref().map(Child::id)
    }

    /// Fails when a started server's process has exited, quoting its log.
    pub(super) fn check_alive(&self) -> VResult<()> {
        let Ok(mut g) = self.child.lock() else {
            return Ok(());
        };
        let Some(c) = g.as_mut() else {
            return Ok(());
        };
        match c.try_wait() {
            Ok(Some(status)) => {
                *g = None;
                Err(VllmError(format!(
                    "the server at {} exited ({status}){}",
                    self.url,
                    self.log_tail_note()
                )))
            }
            _ => Ok(()),
        }
    }

    /// `/health` answers 200 and `/is_paused` says false, each within 5 s; else the error says
    /// which and quotes the log.
    pub(super) fn watch(&self, client: &reqwest::blocking::Client) -> VResult<()> {
        let quick = Duration::from_secs(5);
        let health = format!("{}/health", self.url);
        match client.get(&health).timeout(quick).send() {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => {
                return Err(VllmError(format!(
                    "{health} answered {} while requests were waiting{}",
                    r.status(),
                    self.log_tail_note()
                )));
            }
            Err(e) => {
                return Err(VllmError(format!(
                    "{health} did not answer while requests were waiting: {e}{}",
                    self.log_tail_note()
                )));
            }
        }
        let paused = format!("{}/is_paused", self.url);
        let v: serde_json::Value = client
            .get(&paused)
            .timeout(quick)
            .send()
            .and_then(|r| r.json())
            .map_err(|e| VllmError(format!("GET {paused}: {e}")))?;
        if v.get("is_paused").and_then(|p| p.as_bool()) == Some(true) {
            return Err(VllmError(format!(
                "{} is paused (a weight sync did not finish), so its requests would wait \
                 forever; POST {}/resume or restart it",
                self.url, self.url
            )));
        }
        Ok(())
    }

    /// `GET /version` must name a release of [`VLLM_VERSION`]'s major.minor.
    pub(super) fn check_version(&self, client: &reqwest::blocking::Client) -> VResult<()> {
        let v = self.get_json(client, "/version")?;
        let found = v
            .get("version")
            .and_then(|x| x.as_str())
            .ok_or_else(|| VllmError(format!("{}/version has no \"version\": {v}", self.url)))?;
        let ok = found == VLLM_VERSION || found.starts_with(&format!("{VLLM_VERSION}."));
        if !ok {
            return Err(VllmError(format!(
                "{} runs vLLM {found}; this worker speaks the routes of vLLM {VLLM_VERSION}.x \
                 (scripts/setup --vllm installs it)",
                self.url
            )));
        }
        // The weight-sync routes exist only in dev mode.
        let r = client
            .get(format!("{}/weight_info", self.url))
            .send()
            .map_err(|e| VllmError(format!("GET {}/weight_info: {e}", self.url)))?;
        if r.status().as_u16() == 404 {
            return Err(VllmError(format!(
                "{} has no /weight_info: start it with VLLM_SERVER_DEV_MODE=1 so the weights \
                 can be synced",
                self.url
            )));
        }
        Ok(())
    }

    /// The one model `GET /v1/models` lists.
    pub(super) fn model_name(&self, client: &reqwest::blocking::Client) -> VResult<String> {
        let v = self.get_json(client, "/v1/models")?;
        let ids: Vec<&str> = v
            .get("data")
            .and_then(|d| d.as_array())
            .map(|a| a.iter().filter_map(|m| m.get("id")?.as_str()).collect())
            .unwrap_or_default();
        match ids.as_slice() {
            [one] => Ok((*one).to_string()),
            [] => Err(VllmError(format!(
                "{}/v1/models lists no model: {v}",
                self.url
            ))),
            many => Err(VllmError(format!(
                "{} serves {} models ({many:?}); a rollout server serves one",
                self.url,
                many.len()
            ))),
        }
    }

    /// `GET /get_world_size`: the workers (ranks) this server has, across data parallelism.
    pub(super) fn world_size(&self, client: &reqwest::blocking::Client) -> VResult<usize> {
        let v = self.get_json(client, "/get_world_size")?;
        v.get("world_size")
            .and_then(serde_json::Value::as_u64)
            .filter(|&n| n > 0)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                VllmError(format!(
                    "{}/get_world_size has no positive \"world_size\": {v}",
                    self.url
                ))
            })
    }

    /// `GET /weight_info`'s `weight_version`.
    pub(super) fn weight_version(&self, client: &reqwest::blocking::Client) -> VResult<String> {
        let v = self.get_json(client, "/weight_info")?;
        Ok(match v.get("weight_version") {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => String::new(),
        })
    }

    /// POST a JSON body; a refusal or repeated failure names the route and the answer.
    pub(super) fn post(
        &self,
        client: &reqwest::blocking::Client,
        route: &str,
        body: &serde_json::Value,
    ) -> VResult<reqwest::blocking::Response> {
        let url = format!("{}{route}", self.url);
        match post_json(client, &url, "", body) {
            Posted::Done(r) => Ok(r),
            Posted::Refused(m) => Err(VllmError(m)),
            Posted::Retry(why) => Err(VllmError(format!(
                "POST {url} failed: {why}{}",
                self.log_tail_note()
            ))),
        }
    }

    fn get_json(
        &self,
        client: &reqwest::blocking::Client,
        route: &str,
    ) -> VResult<serde_json::Value> {
        let url = format!("{}{route}", self.url);
        let r = client
            .get(&url)
            .send()
            .map_err(|e| VllmError(format!("GET {url}: {e}{}", self.log_tail_note())))?;
        let status = r.status();
        if !status.is_success() {
            return Err(VllmError(format!("GET {url} answered {status}")));
        }
        r.json()
            .map_err(|e| VllmError(format!("GET {url}: not JSON: {e}")))
    }

    /// "; log tail of PATH: ..." for started servers, "" for others.
    pub(super) fn log_tail_note(&self) -> String {
        match &self.log {
            Some(p) => format!("; the tail of its log {}:\n{}", p.display(), tail(p)),
            None => String::new(),
        }
    }

    /// SIGTERM to a started server's group, SIGKILL after 10 s.
    pub(super) fn stop(&self) {
        let Ok(mut g) = self.child.lock() else {
            return;
        };
        let Some(mut c) = g.take() else {
            return;
        };
        let Ok(pid) = i32::try_from(c.id()) else {
            return;
        };
        let Some(pgid) = rustix::process::Pid::from_raw(pid) else {
            return;
        };
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::TERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = c.try_wait() {
                // The engine core may outlive the API server by a moment.
                std::thread::sleep(Duration::from_millis(300));
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        let _ = c.wait();
    }
}

/// Starts `vllm serve weights` for server `i` (see [`Server::spawn`]); its output goes to
/// `server-{i}.log`, truncated or appended to.
fn launch(opts: &FleetOptions, weights: &Path, i: u32, append: bool) -> VResult<(Child, PathBuf)> {
    let port = u32::from(opts.port) + i;
    let bin = opts.venv.join("bin/vllm");
    if !bin.is_file() {
        return Err(VllmError(format!(
            "no vLLM at {} (vllm.venv): install it with `scripts/setup --vllm`",
            bin.display()
        )));
    }
    std::fs::create_dir_all(&opts.log_dir)
        .map_err(|e| VllmError(format!("cannot create {}: {e}", opts.log_dir.display())))?;
    let log = opts.log_dir.join(format!("server-{i}.log"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(&log)
        .map_err(|e| VllmError(format!("cannot create {}: {e}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(|e| VllmError(format!("cannot share {}: {e}", log.display())))?;
    let dtype = dtype_of(weights);
    let mut cmd = Command::new(&bin);
    cmd.arg("serve")
        .arg(weights)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--served-model-name", SERVED_NAME])
        .args(["--dtype", &dtype])
        .args(["--max-model-len", &opts.max_model_len.to_string()])
        // The trainer compares against log softmax(logits / T): see the module doc.
        .args(["--logprobs-mode", "processed_logprobs"])
        // The checkpoint's generation_config.json must not change request defaults.
        .args(["--generation-config", "vllm"])
        // The pause / reload / version routes of a weight sync.
        .env("VLLM_SERVER_DEV_MODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0);
    if !opts.on_gpu {
        // CUDA graphs and torch.compile are GPU-side speed-ups; on CPU they only delay start.
        cmd.arg("--enforce-eager")
            // vLLM 0.32 on CPU crashes its engine when a seeded request's prefill is split
            // over steps ("CPU Generator does not use offset", gpu_model_runner.py
            // `_bookkeeping_sync`): whole prefills only, and a step budget that holds one.
            .arg("--no-enable-chunked-prefill")
            .args([
                "--max-num-batched-tokens",
                &opts.max_model_len.max(8192).to_string(),
            ])
            .env("VLLM_CPU_KVCACHE_SPACE", opts.kv_cache_gib.to_string());
    }
    if opts.threads > 0 {
        cmd.env("OMP_NUM_THREADS", opts.threads.to_string());
    }
    cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
    if let Some(devices) = opts.devices_of(i)? {
        cmd.env("CUDA_VISIBLE_DEVICES", devices);
    }
    if opts.tensor_parallel > 1 {
        cmd.args(["--tensor-parallel-size", &opts.tensor_parallel.to_string()]);
    }
    if opts.weight_sync == spade::config::WeightSync::Nccl {
        // The routes of vllm/entrypoints/rl/online/api_router.py, backed by this engine.
        cmd.args(["--weight-transfer-config", r#"{"backend": "nccl"}"#]);
    }
    let child = cmd
        .spawn()
        .map_err(|e| VllmError(format!("cannot start {}: {e}", bin.display())))?;
    Ok((child, log))
}

/// The dtype the checkpoint in `dir` was written in (`config.json`'s `dtype`), float32 else.
fn dtype_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| {
            v.get("dtype")
                .or_else(|| v.get("torch_dtype"))
                .and_then(|d| d.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "float32".into())
}

/// The last [`LOG_TAIL_BYTES`] of a file, or why it cannot be read.
fn tail(path: &Path) -> String {
    let read = || -> std::io::Result<String> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    read().unwrap_or_else(|e| format!("(cannot read it: {e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(venv: &Path, log_dir: &Path, gpus: Vec<u32>, tensor_parallel: u32) -> FleetOptions {
        FleetOptions {
            urls: vec![],
            start: 2,
            port: 9100,
            venv: venv.to_path_buf(),
            threads: 0,
            kv_cache_gib: 1,
            gpus,
            tensor_parallel,
            max_model_len: 1024,
            weights_dir: log_dir.join("weights"),
            log_dir: log_dir.to_path_buf(),
            startup_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            on_gpu: false,
            weight_sync: spade::config::WeightSync::Disk,
            env: vec![],
        }
    }

    /// What a started server is given, read back from a stand-in `vllm` that prints its
    /// devices and arguments into the server's log and exits.
    fn launched(opts: &FleetOptions, i: u32) -> std::io::Result<String> {
        let (mut child, log) = launch(opts, Path::new("/weights"), i, false)
            .map_err(|e| std::io::Error::other(e.0))?;
        child.wait()?;
        std::fs::read_to_string(log)
    }

    #[test]
    fn vllm_gpus_index_the_devices_the_worker_was_given() {
        let dir = std::path::PathBuf::from("/nonexistent");
        let split = options(&dir, &dir, vec![1, 2, 0, 3], 2);
        // Nothing given: the indices are the machine's devices.
        assert_eq!(
            split.devices_within(0, None).ok().flatten().as_deref(),
            Some("1,2")
        );
        assert_eq!(
            split.devices_within(1, Some("")).ok().flatten().as_deref(),
            Some("0,3")
        );
        // Ray placed the job on physical 4-7: the servers land on those, in the list's order.
        let ray = Some("4, 5,6,7");
        assert_eq!(
            split.devices_within(0, ray).ok().flatten().as_deref(),
            Some("5,6")
        );
        assert_eq!(
            split.devices_within(1, ray).ok().flatten().as_deref(),
            Some("4,7")
        );
        // Device UUIDs pass through as they are.
        let uuids = Some("GPU-a,GPU-b,GPU-c,GPU-d");
        assert_eq!(
            split.devices_within(1, uuids).ok().flatten().as_deref(),
            Some("GPU-a,GPU-d")
        );
        // Past the servers there is no split; past the worker's devices an error naming both.
        assert_eq!(split.devices_within(2, ray).ok().flatten(), None);
        let err = split
            .devices_within(1, Some("4,5"))
            .map(|_| ())
            .expect_err("device 3 of a worker given 2")
            .0;
        assert!(
            err.contains("device 3") && err.contains("2 GPU(s)") && err.contains("4,5"),
            "{err}"
        );
    }

    #[test]
    fn started_servers_get_their_own_devices_and_tensor_parallel_size() -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir()?;
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin)?;
        let vllm = bin.join("vllm");
        std::fs::write(
            &vllm,
            "#!/bin/sh\necho \"devices=${CUDA_VISIBLE_DEVICES-unset} args=$*\"\n",
        )?;
        std::fs::set_permissions(&vllm, std::fs::Permissions::from_mode(0o755))?;
        let logs = dir.path().join("logs");

        let split = options(dir.path(), &logs, vec![1, 2, 3, 4], 2);
        let first = launched(&split, 0)?;
        let second = launched(&split, 1)?;
        assert!(first.contains("devices=1,2 "), "{first}");
        assert!(second.contains("devices=3,4 "), "{second}");
        assert!(first.contains("--tensor-parallel-size 2"), "{first}");
        assert!(second.contains("--port 9101"), "{second}");

        // No split: the servers see what the worker sees, and no tensor-parallel flag.
        let plain = options(dir.path(), &logs, vec![], 1);
        let out = launched(&plain, 1)?;
        assert!(out.contains("--port 9101"), "{out}");
        assert!(!out.contains("--tensor-parallel-size"), "{out}");
        let inherited = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into());
        assert!(out.contains(&format!("devices={inherited} ")), "{out}");
        // On CPU the workarounds; on GPUs vLLM's own defaults (CUDA graphs, chunked prefill).
        assert!(
            out.contains("--enforce-eager --no-enable-chunked-prefill"),
            "{out}"
        );
        let gpu = FleetOptions {
            on_gpu: true,
            ..split
        };
        let out = launched(&gpu, 0)?;
        assert!(out.contains("devices=1,2 "), "{out}");
        assert!(
            !out.contains("--enforce-eager") && !out.contains("chunked-prefill"),
            "{out}"
        );
        assert!(!out.contains("--max-num-batched-tokens"), "{out}");
        assert!(!out.contains("--weight-transfer-config"), "{out}");
        // Synced through NCCL: vLLM's weight-transfer engine on, as JSON the server parses.
        let nccl = FleetOptions {
            weight_sync: spade::config::WeightSync::Nccl,
            ..gpu
        };
        let out = launched(&nccl, 0)?;
        assert!(
            out.contains(r#"--weight-transfer-config {"backend": "nccl"}"#),
            "{out}"
        );
        Ok(())
    }
}
