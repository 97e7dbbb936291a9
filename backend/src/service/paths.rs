//! Which files on the server machine, and which hosts on its network, a run or its worker may
//! name. Any member of any team can write a run configuration, and the worker reads what it
//! names (`model.path`, `designer.model_path`, `metrics.vendi_encoder`, `corpus.path`,
//! `ablation.fixed_env_pool`, `memory.seed_pool`, evaluation suites `qa:PATH` and `envs:DIR`),
//! runs programs from it (`vllm.venv`'s `bin/vllm`), writes into it (`vllm.weights_dir`) and
//! connects to it (`vllm.urls`), and reports errors into the run's log; a run token reports
//! checkpoints that evaluation jobs then load. An unchecked path lets a user read, probe or
//! plant files anywhere the server can (another team's checkpoints among them), and an unchecked
//! URL makes the worker a proxy into the server's network. So every such path goes through
//! one rule here: it must resolve inside roots an administrator configures (`--model-root`,
//! `--corpus-root`, `--pool-root`, `--venv-root`, `--vllm-weights-root`) or, for what a run
//! itself writes (checkpoints), inside that run's own state directory
//! (`<--jobs-dir>/spade-run-<id>-state`, [`spade_scheduler::run_state_dir`]); a relative path
//! is looked up in each root in turn. The check is lexical first (`..` removed, never touching
//! the file system for a path outside every root, so the answer says nothing about what exists
//! there), then on the canonical path (a symlink inside a root that points outside is refused).
//! An accepted path is stored resolved and absolute, which is what the worker reads wherever
//! its working directory is; what the API shows of a checkpoint is relative to its root
//! ([`PathRoots::shown_checkpoint`]), never the server's absolute path. `vllm.urls` must name
//! a loopback address or a host an administrator allows (`--vllm-url-allow`).

use super::ServiceError;
use spade::config::RunConfig;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};

/// The longest path accepted anywhere (PATH_MAX on Linux; the database's limit on a stored
/// checkpoint path, so a longer one is refused here with a 422 instead of a failed INSERT).
pub const MAX_PATH_BYTES: usize = 4096;

/// What a path names, and so which roots apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// Checkpoint directories (`model.path`, `designer.model_path`, `metrics.vendi_encoder`).
    Model,
    /// Document corpora and question files (`corpus.path`, `qa:PATH`).
    Corpus,
    /// Environment pools (`ablation.fixed_env_pool`, `memory.seed_pool`, `envs:DIR`).
    Pool,
    /// Python virtual environments whose `bin/vllm` the worker runs (`vllm.venv`).
    Venv,
    /// Directories the worker writes policy weights into for vLLM (`vllm.weights_dir`); they
    /// need not exist yet.
    VllmWeights,
}

impl PathKind {
    fn flag(self) -> &'static str {
        match self {
            PathKind::Model => "--model-root",
            PathKind::Corpus => "--corpus-root",
            PathKind::Pool => "--pool-root",
            PathKind::Venv => "--venv-root",
            PathKind::VllmWeights => "--vllm-weights-root",
        }
    }
}

/// The roots of each kind (absolute; canonical where they exist). Empty: no path of that kind
/// is accepted.
#[derive(Debug, Clone, Default)]
pub struct PathRoots {
    models: Vec<PathBuf>,
    corpora: Vec<PathBuf>,
    pools: Vec<PathBuf>,
    venvs: Vec<PathBuf>,
    vllm_weights: Vec<PathBuf>,
    /// The directory that holds every run's state directory (the local executor's
    /// `--jobs-dir`); `None`: no run has one on this server.
    run_states: Option<PathBuf>,
    /// Hosts (`host` or `host:port`, lower case) `vllm.urls` may name besides loopback.
    vllm_hosts: Vec<String>,
}

/// `path` made absolute against the current directory, with `.` and `..` removed lexically.
fn normalize(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut out = PathBuf::from("/");
    for c in absolute.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn root(dir: &Path) -> PathBuf {
    let n = normalize(dir);
    n.canonicalize().unwrap_or(n)
}

/// The canonical form of `path` where it exists; for a path that does not exist yet, its
/// deepest existing ancestor canonicalized with the rest appended (the rest is already free of
/// `..`, see [`normalize`]). `None` when not even `/` resolves.
fn canonical_or_planned(path: &Path) -> Option<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            out.extend(rest.iter().rev());
            return Some(out);
        }
        rest.push(existing.file_name()?.to_owned());
        if !existing.pop() {
            return None;
        }
    }
}

/// Where a path of `given` may lie: `roots`, each a candidate for a relative `given`.
/// `must_exist`: the path must name something that exists (what the worker reads); otherwise
/// only its existing part must resolve inside (what the worker creates).
fn resolve_in(roots: &[PathBuf], given: &str, must_exist: bool) -> Option<String> {
    let given = given.trim();
    if given.is_empty() || given.len() > MAX_PATH_BYTES {
        return None;
    }
    let given_path = Path::new(given);
    let candidates: Vec<PathBuf> = if given_path.is_absolute() {
        vec![normalize(given_path)]
    } else {
        // A path that starts with the root's own name (`envs/seed` for the root `.../envs`)
        // is what a user copies from the repository; it means the same as `seed` (issue 43:
        // the launch form refused it while `seed` worked).
        roots
            .iter()
            .flat_map(|r| {
                let mut parts = given_path.components();
                let named = r.file_name().is_some_and(|n| {
                    parts.next() == Some(Component::Normal(n)) && parts.clone().next().is_some()
                });
                let inner = named.then(|| normalize(&r.join(parts.as_path())));
                std::iter::once(normalize(&r.join(given_path))).chain(inner)
            })
            .collect()
    };
    for c in candidates {
        // Lexically first: a path outside every root is never looked up on disk.
        if !roots.iter().any(|r| c.starts_with(r)) {
            continue;
        }
        let real = if must_exist {
            c.canonicalize().ok()
        } else {
            canonical_or_planned(&c)
        };
        if let Some(real) = real
            && roots.iter().any(|r| real.starts_with(r))
        {
            return Some(real.to_string_lossy().into_owned());
        }
    }
    None
}

impl PathRoots {
    pub fn new(models: &[PathBuf], corpora: &[PathBuf], pools: &[PathBuf]) -> Self {
        Self {
            models: all(models),
            corpora: all(corpora),
            pools: all(pools),
            ..Self::default()
        }
    }

    /// Allows `vllm.venv` inside these directories (`--venv-root`).
    pub fn with_venvs(mut self, dirs: &[PathBuf]) -> Self {
        self.venvs = all(dirs);
        self
    }

    /// Allows `vllm.weights_dir` inside these directories (`--vllm-weights-root`).
    pub fn with_vllm_weights(mut self, dirs: &[PathBuf]) -> Self {
        self.vllm_weights = all(dirs);
        self
    }

    /// Runs keep their state in `<jobs_dir>/spade-run-<id>-state` (the local executor's
    /// `--jobs-dir`): their checkpoints may lie there.
    pub fn with_run_states(mut self, jobs_dir: &Path) -> Self {
        self.run_states = Some(normalize(jobs_dir));
        self
    }

    /// Allows `vllm.urls` to name these hosts (`host` or `host:port`) besides loopback
    /// (`--vllm-url-allow`).
    pub fn with_vllm_hosts(mut self, hosts: &[String]) -> Self {
        self.vllm_hosts = hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        self
    }

    fn of(&self, kind: PathKind) -> &[PathBuf] {
        match kind {
            PathKind::Model => &self.models,
            PathKind::Corpus => &self.corpora,
            PathKind::Pool => &self.pools,
            PathKind::Venv => &self.venvs,
            PathKind::VllmWeights => &self.vllm_weights,
        }
    }

    /// The absolute path `given` names inside a root of `kind`, or a 422 about `field` that
    /// names the allowed roots.
    pub fn resolve(
        &self,
        kind: PathKind,
        field: &str,
        given: &str,
    ) -> Result<String, ServiceError> {
        let roots = self.of(kind);
        let must_exist = kind != PathKind::VllmWeights;
        resolve_in(roots, given, must_exist).ok_or_else(|| {
            let allowed = if roots.is_empty() {
                format!(
                    "none on this server (an administrator allows some with {})",
                    kind.flag()
                )
            } else {
                listed(roots)
            };
            let what = if must_exist {
                "an existing file or directory"
            } else {
                "a directory"
            };
            ServiceError::invalid(
                field,
                format!(
                    "must name {what} inside the allowed roots ({allowed}), at most \
                     {MAX_PATH_BYTES} bytes; relative paths are looked up in each root"
                ),
            )
        })
    }

    /// Run `run_id`'s state directory on this server (absolute, canonical where it exists),
    /// if runs have one here.
    pub fn run_state_dir(&self, run_id: i64) -> Option<PathBuf> {
        let jobs = self.run_states.as_deref()?;
        Some(root(&spade_scheduler::run_state_dir(jobs, run_id)))
    }

    /// Where a checkpoint of run `run_id` may lie: its own state directory, then the model
    /// roots (a run's step 0 is its configured `model.path`).
    fn checkpoint_roots(&self, run_id: i64) -> Vec<PathBuf> {
        self.run_state_dir(run_id)
            .into_iter()
            .chain(self.models.iter().cloned())
            .collect()
    }

    /// A checkpoint path a run token reported for run `run_id` (or that an evaluation is about
    /// to load), resolved: it must exist inside that run's own state directory or a model root,
    /// so a run can neither point evaluations at another run's weights nor probe the file
    /// system. A 422 about `field` otherwise.
    pub fn checkpoint(
        &self,
        run_id: i64,
        field: &str,
        given: &str,
    ) -> Result<String, ServiceError> {
        resolve_in(&self.checkpoint_roots(run_id), given, true).ok_or_else(|| {
            ServiceError::invalid(
                field,
                format!(
                    "must name an existing checkpoint directory inside this run's state \
                     directory or a model root, at most {MAX_PATH_BYTES} bytes"
                ),
            )
        })
    }

    /// What people see of a stored checkpoint path: relative to the run's state directory or
    /// to its model root (as `model.path` may be written), else only its last component; never
    /// the server's absolute path.
    pub fn shown_checkpoint(&self, run_id: i64, stored: &str) -> String {
        let path = Path::new(stored);
        for r in self.checkpoint_roots(run_id) {
            if let Ok(rest) = path.strip_prefix(&r)
                && !rest.as_os_str().is_empty()
            {
                return rest.to_string_lossy().into_owned();
            }
        }
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// An evaluation suite name with its path (if any) resolved: `qa:`, `mc:` and `code:` files are corpora,
    /// `envs:` directories pools; named suites are unchanged.
    pub fn suite(&self, field: &str, suite: &str) -> Result<String, ServiceError> {
        // Question files (boxed answers, multiple choice, code problems) live under the
        // corpus root like training corpora; the prefixes are the ones `spade::suites::check`
        // accepts, so a new kind of file cannot pass here unchecked.
        if let Some((prefix, p)) = spade::suites::FILE_PREFIXES
            .iter()
            .find_map(|pre| suite.strip_prefix(pre).map(|p| (pre, p)))
        {
            Ok(format!(
                "{prefix}{}",
                self.resolve(PathKind::Corpus, field, p)?
            ))
        } else if let Some(p) = suite.strip_prefix(spade::suites::POOL_PREFIX) {
            Ok(format!(
                "{}{}",
                spade::suites::POOL_PREFIX,
                self.resolve(PathKind::Pool, field, p)?
            ))
        } else {
            Ok(suite.to_owned())
        }
    }

    /// A `vllm.urls` entry the worker may connect to: an `http(s)` URL without credentials
    /// whose host is a loopback address (`localhost`, 127.0.0.0/8, `::1`) or allowed by
    /// `--vllm-url-allow`. Parsed as the worker's HTTP client parses it (the `url` crate), so
    /// the host checked is the host connected to.
    pub fn vllm_url(&self, field: &str, given: &str) -> Result<(), ServiceError> {
        let refused = || {
            let allowed = if self.vllm_hosts.is_empty() {
                "none besides loopback on this server (an administrator allows hosts with \
                 --vllm-url-allow)"
                    .to_owned()
            } else {
                self.vllm_hosts.join(", ")
            };
            ServiceError::invalid(
                field,
                format!(
                    "must be an http(s) URL of a loopback address (127.0.0.1, ::1, localhost) \
                     or of an allowed host ({allowed})"
                ),
            )
        };
        let url = url::Url::parse(given.trim()).map_err(|_| refused())?;
        if !matches!(url.scheme(), "http" | "https")
            || !url.username().is_empty()
            || url.password().is_some()
        {
            return Err(refused());
        }
        let loopback = match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
            None => return Err(refused()),
        };
        if loopback {
            return Ok(());
        }
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let with_port = url
            .port_or_known_default()
            .map(|p| format!("{host}:{p}"))
            .unwrap_or_else(|| host.clone());
        if self
            .vllm_hosts
            .iter()
            .any(|a| *a == host || *a == with_port)
        {
            Ok(())
        } else {
            Err(refused())
        }
    }

    /// Resolves every path of a run configuration in place and checks its vLLM URLs (see the
    /// module doc); the first path or URL outside what is allowed is refused, named by its key
    /// path.
    pub fn check_config(&self, cfg: &mut RunConfig) -> Result<(), ServiceError> {
        if let Some(p) = &cfg.model.path {
            cfg.model.path = Some(self.resolve(PathKind::Model, "config.model.path", p)?);
        }
        if let Some(p) = &cfg.designer.model_path {
            cfg.designer.model_path =
                Some(self.resolve(PathKind::Model, "config.designer.model_path", p)?);
        }
        if let Some(p) = &cfg.metrics.vendi_encoder {
            cfg.metrics.vendi_encoder =
                Some(self.resolve(PathKind::Model, "config.metrics.vendi_encoder", p)?);
        }
        if let Some(p) = &cfg.corpus.path {
            cfg.corpus.path = Some(self.resolve(PathKind::Corpus, "config.corpus.path", p)?);
        }
        if let Some(p) = &cfg.ablation.fixed_env_pool {
            cfg.ablation.fixed_env_pool =
                Some(self.resolve(PathKind::Pool, "config.ablation.fixed_env_pool", p)?);
        }
        if let Some(p) = &cfg.memory.seed_pool {
            cfg.memory.seed_pool =
                Some(self.resolve(PathKind::Pool, "config.memory.seed_pool", p)?);
        }
        for (i, s) in cfg.eval.suites.iter_mut().enumerate() {
            *s = self.suite(&format!("config.eval.suites[{i}]"), s)?;
        }
        // Absent, both keys mean what the administrator set up: the worker's own vLLM venv and
        // the run's state directory.
        if let Some(p) = &cfg.vllm.venv {
            cfg.vllm.venv = Some(self.resolve(PathKind::Venv, "config.vllm.venv", p)?);
        }
        if let Some(p) = &cfg.vllm.weights_dir {
            cfg.vllm.weights_dir =
                Some(self.resolve(PathKind::VllmWeights, "config.vllm.weights_dir", p)?);
        }
        for (i, u) in cfg.vllm.urls.iter().enumerate() {
            self.vllm_url(&format!("config.vllm.urls[{i}]"), u)?;
        }
        Ok(())
    }
}

fn all(dirs: &[PathBuf]) -> Vec<PathBuf> {
    dirs.iter().map(|d| root(d)).collect()
}

fn listed(roots: &[PathBuf]) -> String {
    roots
        .iter()
        .map(|r| r.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_inside_roots_and_nowhere_else() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let models = dir.path().join("models");
        std::fs::create_dir_all(models.join("qwen3-4b"))?;
        std::fs::create_dir_all(dir.path().join("secret"))?;
        std::os::unix::fs::symlink(dir.path().join("secret"), models.join("escape"))?;
        let roots = PathRoots::new(std::slice::from_ref(&models), &[], &[]);
        let real = models.canonicalize()?.join("qwen3-4b");
        let ok = roots.resolve(PathKind::Model, "f", "qwen3-4b")?;
        assert_eq!(Path::new(&ok), real);
        // The root's own name in front, as copied from a checkout, means the same.
        let named = roots.resolve(PathKind::Model, "f", "models/qwen3-4b")?;
        assert_eq!(Path::new(&named), real);
        let abs = roots.resolve(PathKind::Model, "f", &real.to_string_lossy())?;
        assert_eq!(Path::new(&abs), real);
        for bad in [
            "/etc/passwd",
            "../secret",
            "qwen3-4b/../../secret",
            "escape",
            "models/escape",
            "models/../secret",
            "models",
            "missing",
            "",
            "/",
        ] {
            let e = roots
                .resolve(PathKind::Model, "config.model.path", bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.starts_with("`config.model.path`")
                    && e.contains(&models.canonicalize()?.display().to_string()),
                "{bad:?}: {e}"
            );
        }
        let none = roots
            .resolve(PathKind::Corpus, "config.corpus.path", "x.jsonl")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(none.contains("--corpus-root"), "{none}");
        Ok(())
    }

    /// The attack: a member names a server file as the frozen designer's checkpoint or the
    /// Vendi encoder (both read by the worker, errors reported into the run's log).
    #[test]
    fn every_model_path_of_a_config_is_held_to_the_model_roots()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let models = dir.path().join("models");
        std::fs::create_dir_all(models.join("qwen3-8b"))?;
        std::fs::create_dir_all(models.join("simcse"))?;
        let roots = PathRoots::new(std::slice::from_ref(&models), &[], &[]);
        for (key, set) in [
            (
                "config.designer.model_path",
                (|c: &mut RunConfig, p: &str| c.designer.model_path = Some(p.into()))
                    as fn(&mut RunConfig, &str),
            ),
            ("config.metrics.vendi_encoder", |c, p| {
                c.metrics.vendi_encoder = Some(p.into())
            }),
        ] {
            for bad in ["/etc", "../models/../../", "/proc/self"] {
                let mut cfg = RunConfig::default();
                set(&mut cfg, bad);
                let e = roots
                    .check_config(&mut cfg)
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                assert!(e.starts_with(&format!("`{key}`")), "{key} = {bad:?}: {e}");
            }
            let mut cfg = RunConfig::default();
            set(&mut cfg, "qwen3-8b");
            roots.check_config(&mut cfg)?;
        }
        let mut cfg = RunConfig::default();
        cfg.designer.model_path = Some("qwen3-8b".into());
        cfg.metrics.vendi_encoder = Some("simcse".into());
        roots.check_config(&mut cfg)?;
        let canon = models.canonicalize()?;
        assert_eq!(
            cfg.designer.model_path.as_deref(),
            Some(canon.join("qwen3-8b").to_str().unwrap_or_default())
        );
        assert_eq!(
            cfg.metrics.vendi_encoder.as_deref(),
            Some(canon.join("simcse").to_str().unwrap_or_default())
        );
        Ok(())
    }
}
