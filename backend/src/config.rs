//! Server configuration: command-line flags, each with an environment variable and a default
//! that works on a developer machine set up by `scripts/setup`.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The default database is the one `scripts/setup` creates.
pub const DEFAULT_DATABASE_URL: &str = "postgres://spade:spade@127.0.0.1:5432/spade";

/// The `scheduler` section: where queued runs execute and with which resources.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Scheduling")]
pub struct SchedulerSettings {
    /// Where queued runs execute: `local` (child processes of this server), `ray` (jobs on a
    /// Ray cluster through its Jobs REST API) or `off` (queue only; another server executes).
    #[arg(long = "executor", env = "SPADE_EXECUTOR", value_enum, default_value_t = ExecutorSetting::Local)]
    pub executor: ExecutorSetting,

    /// This server's name in the job queue; jobs it claimed are re-attached by the server that
    /// starts with the same name. Default: the machine's hostname.
    #[arg(long = "scheduler-node", env = "SPADE_SCHEDULER_NODE")]
    pub node: Option<String>,

    /// The worker command; `{run}`, `{job}`, `{attempt}` and `{server}` are filled in and the
    /// run token is passed in SPADE_WORKER_TOKEN. Split on whitespace.
    #[arg(
        long = "worker-command",
        env = "SPADE_WORKER_COMMAND",
        default_value = "spade worker --run {run} --server {server}"
    )]
    pub worker_command: String,

    /// URL workers use to reach this server. Default: http://<listen address>.
    #[arg(long = "public-url", env = "SPADE_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// Local executor: CPU-only jobs that may run at once.
    #[arg(long = "cpu-slots", env = "SPADE_CPU_SLOTS", default_value_t = 1)]
    pub cpu_slots: u32,

    /// Local executor: GPUs lent to jobs (device indices 0..N). See --gpus.
    #[arg(long = "gpu-slots", env = "SPADE_GPU_SLOTS", default_value_t = 0)]
    pub gpu_slots: u32,

    /// Local executor: the GPUs lent to jobs by CUDA index, comma-separated (`0,1,2,3`); each
    /// job gets a disjoint set as its CUDA_VISIBLE_DEVICES and a run that does not fit waits,
    /// saying so. Default: 0..--gpu-slots when that is given, else the node's /dev/nvidiaN
    /// devices.
    #[arg(long = "gpus", env = "SPADE_GPUS", value_delimiter = ',')]
    pub gpus: Option<Vec<u32>>,

    /// GPUs each job asks for (0: CPU only).
    #[arg(long = "gpus-per-job", env = "SPADE_GPUS_PER_JOB", default_value_t = 0)]
    pub gpus_per_job: u32,

    /// One directory per local job (output.log, job.json, exit_status), and every run's state
    /// directory `spade-run-<id>-state` (checkpoints, report spool) for both executors: with
    /// Ray it must be the same path on every node (the head on this machine, or a shared file
    /// system).
    #[arg(long = "jobs-dir", env = "SPADE_JOBS_DIR", default_value = "data/jobs")]
    pub jobs_dir: PathBuf,

    /// Local executor: seconds between SIGTERM and SIGKILL when a job is stopped.
    #[arg(
        long = "stop-grace-secs",
        env = "SPADE_STOP_GRACE_SECS",
        default_value_t = 30
    )]
    pub stop_grace_secs: u64,

    /// Ray executor: the dashboard URL (Jobs REST API). Keep it on loopback or a private
    /// network: Ray's dashboard has no authentication by default.
    #[arg(
        long = "ray-address",
        env = "SPADE_RAY_ADDRESS",
        default_value = "http://127.0.0.1:8265"
    )]
    pub ray_address: String,

    /// Ray executor: jobs this server keeps submitted at once.
    #[arg(long = "ray-max-jobs", env = "SPADE_RAY_MAX_JOBS", default_value_t = 4)]
    pub ray_max_jobs: u32,

    /// Ray executor: CPUs reserved for each job's entrypoint.
    #[arg(
        long = "ray-num-cpus",
        env = "SPADE_RAY_NUM_CPUS",
        default_value_t = 1.0
    )]
    pub ray_num_cpus: f64,

    /// Ray executor: submission ids are `<prefix>-run-<run>-a<attempt>`; servers with separate
    /// databases sharing one cluster need distinct prefixes.
    #[arg(
        long = "ray-submission-prefix",
        env = "SPADE_RAY_SUBMISSION_PREFIX",
        default_value = "spade"
    )]
    pub ray_submission_prefix: String,

    /// Ray executor: the Python with Ray on every node, with which a run on several ranks
    /// places them one per node (a placement group); default: `python3` on the job's PATH.
    #[arg(long = "ray-python", env = "SPADE_RAY_PYTHON")]
    pub ray_python: Option<String>,

    /// Milliseconds between scheduler ticks.
    #[arg(
        long = "scheduler-poll-ms",
        env = "SPADE_SCHEDULER_POLL_MS",
        default_value_t = 1000
    )]
    pub poll_ms: u64,

    /// At start, a run whose job is gone without an exit status (it died with the container or
    /// machine while no server watched it) is queued again to resume from its last checkpoint
    /// (at most 3 times in a row); `false` fails such runs instead. Jobs that die while the
    /// server watches them fail either way.
    #[arg(
        long = "resume-lost-jobs",
        env = "SPADE_RESUME_LOST_JOBS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub resume_lost_jobs: bool,
}

impl SchedulerSettings {
    /// The GPUs the local executor lends: `--gpus`, else `0..--gpu-slots`, else the node's
    /// `/dev/nvidiaN` devices (none on a machine without NVIDIA's driver).
    pub fn lent_gpus(&self) -> Vec<u32> {
        if let Some(g) = &self.gpus {
            return g.clone();
        }
        if self.gpu_slots > 0 {
            return (0..self.gpu_slots).collect();
        }
        detected_gpus()
    }
}

/// Indices of `/dev/nvidia0`, `/dev/nvidia1`, ... (not `nvidiactl`, `nvidia-uvm`).
pub fn detected_gpus() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/dev") else {
        return Vec::new();
    };
    let mut v: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| spade_types::nvidia_device_index(&n))
        .collect();
    v.sort_unstable();
    v
}

/// `--executor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorSetting {
    Off,
    Local,
    Ray,
}

#[derive(Clone, Parser)]
#[command(
    name = "spade-server",
    version,
    about = "SPADE Studio web service: the dashboard, the REST API under /api/v1, worker ingestion and job scheduling."
)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "SPADE_ADDR", default_value = "127.0.0.1:3000")]
    pub addr: SocketAddr,

    #[command(flatten)]
    pub scheduler: SchedulerSettings,

    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL, hide_env_values = true)]
    pub database_url: String,

    /// Directory holding the built site (pkg/ with the wasm bundle and CSS, plus public files);
    /// scripts/build-site writes it.
    #[arg(long, env = "SPADE_SITE_ROOT", default_value = "site")]
    pub site_root: PathBuf,

    /// Apply pending database migrations at start-up.
    #[arg(long, env = "SPADE_MIGRATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub migrate: bool,

    /// On a database without users: create a demo account and queue one run of the tiny CPU
    /// demo (configs/tiny-demo.toml) for the scheduler; print how to log in at every start.
    #[arg(long, env = "SPADE_DEMO", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub demo: bool,

    /// Directory for server state (the generated JWT secret lives in `jwt_secret` there).
    #[arg(long, env = "SPADE_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,

    /// Secret that signs access tokens (at least 32 bytes). When absent, one is generated and
    /// kept in the data directory.
    #[arg(long, env = "SPADE_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,

    /// Who may register: `open` (anyone) or `closed` (only the first user, who becomes admin).
    #[arg(long, env = "SPADE_REGISTRATION", value_enum, default_value_t = RegistrationMode::Open)]
    pub registration: RegistrationMode,

    /// Directories run configurations may name checkpoints in (`model.path`); repeat the flag
    /// or separate with `:` in the variable. Anything outside every root is refused.
    #[arg(
        long = "model-root",
        env = "SPADE_MODEL_ROOTS",
        value_delimiter = ':',
        default_value = "data/models"
    )]
    pub model_roots: Vec<PathBuf>,

    /// Directories run configurations may name corpora and question files in (`corpus.path`,
    /// `qa:PATH`, `mc:PATH` and `code:PATH` suites).
    #[arg(
        long = "corpus-root",
        env = "SPADE_CORPUS_ROOTS",
        value_delimiter = ':',
        default_value = "data/corpora:corpus"
    )]
    pub corpus_roots: Vec<PathBuf>,

    /// Directories run configurations may name environment pools in (`ablation.fixed_env_pool`,
    /// `envs:DIR` suites).
    #[arg(
        long = "pool-root",
        env = "SPADE_POOL_ROOTS",
        value_delimiter = ':',
        default_value = "data/pools:envs"
    )]
    pub pool_roots: Vec<PathBuf>,

    /// Directories `vllm.venv` may name (a virtual environment whose `bin/vllm` the worker
    /// runs as this server's user). Without the key the worker uses its own
    /// `$SPADE_CACHE/venv-vllm`.
    #[arg(
        long = "venv-root",
        env = "SPADE_VENV_ROOTS",
        value_delimiter = ':',
        default_value = "data/venvs"
    )]
    pub venv_roots: Vec<PathBuf>,

    /// Directories `vllm.weights_dir` may name (where the worker writes the policy for its
    /// vLLM servers, e.g. under `/dev/shm`). Without the key it is the run's state directory.
    #[arg(
        long = "vllm-weights-root",
        env = "SPADE_VLLM_WEIGHTS_ROOTS",
        value_delimiter = ':',
        default_value = "data/vllm-weights"
    )]
    pub vllm_weights_roots: Vec<PathBuf>,

    /// Hosts (`host` or `host:port`) `vllm.urls` may name besides loopback addresses; repeat
    /// the flag or separate with `,` in the variable. Anything else is refused, so a run cannot
    /// make its worker connect into this server's network.
    #[arg(
        long = "vllm-url-allow",
        env = "SPADE_VLLM_URL_ALLOW",
        value_delimiter = ','
    )]
    pub vllm_url_allow: Vec<String>,

    /// Mark cookies `Secure` (set this when the server is reached over HTTPS).
    #[arg(long, env = "SPADE_SECURE_COOKIES", default_value_t = false, action = clap::ArgAction::Set)]
    pub secure_cookies: bool,
}

/// `--registration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RegistrationMode {
    Open,
    Closed,
}

impl From<RegistrationMode> for spade_db::users::Registration {
    fn from(m: RegistrationMode) -> Self {
        match m {
            RegistrationMode::Open => spade_db::users::Registration::Open,
            RegistrationMode::Closed => spade_db::users::Registration::FirstUserOnly,
        }
    }
}

// Hand-written so that the database password never reaches a log line.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("addr", &self.addr)
            .field("scheduler", &self.scheduler)
            .field(
                "database_url",
                &spade_db::redact_password(&self.database_url),
            )
            .field("site_root", &self.site_root)
            .field("migrate", &self.migrate)
            .field("demo", &self.demo)
            .field("data_dir", &self.data_dir)
            .field(
                "jwt_secret",
                &self.jwt_secret.as_ref().map(|_| "*** (configured)"),
            )
            .field("registration", &self.registration)
            .field("secure_cookies", &self.secure_cookies)
            .field("model_roots", &self.model_roots)
            .field("corpus_roots", &self.corpus_roots)
            .field("pool_roots", &self.pool_roots)
            .field("venv_roots", &self.venv_roots)
            .field("vllm_weights_roots", &self.vllm_weights_roots)
            .field("vllm_url_allow", &self.vllm_url_allow)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_the_database_password_and_jwt_secret() {
        let cfg = Config::parse_from([
            "spade-server",
            "--database-url",
            "postgres://u:topsecret@h/d",
            "--jwt-secret",
            "jwtsecretjwtsecretjwtsecretjwtsecret",
        ]);
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("topsecret"), "{shown}");
        assert!(shown.contains("u:***@h/d"), "{shown}");
        assert!(!shown.contains("jwtsecret"), "{shown}");
    }
}
