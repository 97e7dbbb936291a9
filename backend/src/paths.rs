//! Which files on the server machine a run configuration may name. Any member of any team can
//! write a run configuration, and the worker reads what it names (`model.path`,
//! `designer.model_path`, `metrics.vendi_encoder`, `corpus.path`, `ablation.fixed_env_pool`,
//! `memory.seed_pool`, evaluation suites `qa:PATH` and `envs:DIR`) and reports errors into the
//! run's log, so an unchecked path lets a user read or probe any file the server can. Paths must
//! therefore resolve inside roots an administrator configures (`--model-root`,
//! `--corpus-root`, `--pool-root`); a relative path is looked up in each root in turn. The check
//! is lexical first (`..` removed, never touching the file system for a path outside every root,
//! so the answer says nothing about what exists there), then on the canonical path (a symlink
//! inside a root that points outside is refused). An accepted path is stored resolved and
//! absolute, which is what the worker reads wherever its working directory is.

use crate::error::AppError;
use spade::config::RunConfig;
use std::path::{Component, Path, PathBuf};

/// What a path names, and so which roots apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// Checkpoint directories (`model.path`, `designer.model_path`, `metrics.vendi_encoder`).
    Model,
    /// Document corpora and question files (`corpus.path`, `qa:PATH`).
    Corpus,
    /// Environment pools (`ablation.fixed_env_pool`, `memory.seed_pool`, `envs:DIR`).
    Pool,
}

impl PathKind {
    fn flag(self) -> &'static str {
        match self {
            PathKind::Model => "--model-root",
            PathKind::Corpus => "--corpus-root",
            PathKind::Pool => "--pool-root",
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

impl PathRoots {
    pub fn new(models: &[PathBuf], corpora: &[PathBuf], pools: &[PathBuf]) -> Self {
        let all = |v: &[PathBuf]| v.iter().map(|d| root(d)).collect();
        Self {
            models: all(models),
            corpora: all(corpora),
            pools: all(pools),
        }
    }

    fn of(&self, kind: PathKind) -> &[PathBuf] {
        match kind {
            PathKind::Model => &self.models,
            PathKind::Corpus => &self.corpora,
            PathKind::Pool => &self.pools,
        }
    }

    /// The absolute path `given` names inside a root of `kind`, or a 422 about `field` that
    /// names the allowed roots.
    pub fn resolve(&self, kind: PathKind, field: &str, given: &str) -> Result<String, AppError> {
        let roots = self.of(kind);
        let refused = || {
            let allowed = if roots.is_empty() {
                format!(
                    "none on this server (an administrator allows some with {})",
                    kind.flag()
                )
            } else {
                roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            AppError::invalid(
                field,
                format!(
                    "must name an existing file or directory inside the allowed roots ({allowed}); \
                     relative paths are looked up in each root"
                ),
            )
        };
        let given_path = Path::new(given.trim());
        if given.trim().is_empty() {
            return Err(refused());
        }
        let candidates: Vec<PathBuf> = if given_path.is_absolute() {
            vec![normalize(given_path)]
        } else {
            roots
                .iter()
                .map(|r| normalize(&r.join(given_path)))
                .collect()
        };
        for c in candidates {
            if !roots.iter().any(|r| c.starts_with(r)) {
                continue;
            }
            if let Ok(real) = c.canonicalize()
                && roots.iter().any(|r| real.starts_with(r))
            {
                return Ok(real.to_string_lossy().into_owned());
            }
        }
        Err(refused())
    }

    /// An evaluation suite name with its path (if any) resolved: `qa:` files are corpora,
    /// `envs:` directories pools; named suites are unchanged.
    pub fn suite(&self, field: &str, suite: &str) -> Result<String, AppError> {
        if let Some(p) = suite.strip_prefix("qa:") {
            Ok(format!("qa:{}", self.resolve(PathKind::Corpus, field, p)?))
        } else if let Some(p) = suite.strip_prefix("envs:") {
            Ok(format!("envs:{}", self.resolve(PathKind::Pool, field, p)?))
        } else {
            Ok(suite.to_owned())
        }
    }

    /// Resolves every path of a run configuration in place (see the module doc); the first path
    /// outside the roots is refused, named by its key path.
    pub fn check_config(&self, cfg: &mut RunConfig) -> Result<(), AppError> {
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
        Ok(())
    }
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
        let abs = roots.resolve(PathKind::Model, "f", &real.to_string_lossy())?;
        assert_eq!(Path::new(&abs), real);
        for bad in [
            "/etc/passwd",
            "../secret",
            "qwen3-4b/../../secret",
            "escape",
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
