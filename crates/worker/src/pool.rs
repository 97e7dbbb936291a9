//! Environment pools on disk (the format is [`spade::pool`]): reading what
//! `ablation.fixed_env_pool` names, checking every environment in the sandbox before a run
//! spends anything on it, writing a pool directory, and collecting a run directory's
//! environments for `spade env export`.
//!
//! A pool is read in one of three forms: a directory with `pool.jsonl` (its skills and kinds come
//! from the JSONL), a `.jsonl` file (code files relative to it, or code inline), or a plain
//! directory of `.py` files (searched recursively; the skill from each file's
//! `"""Skill: ..."""` docstring, the kind detected by the sandbox). Whatever cannot be used is
//! reported as a [`PoolProblem`] naming the file, the line and what was expected; the rest loads.

use crate::WorkerError;
use spade::EnvKind;
use spade::pool::{self, Card, POOL_CARD, POOL_JSONL, PoolEntry, PoolProblem};
use spade::report::{EnvStatus, Envelope, Message};
use spade_sandbox::{Pool, ValidationConfig};
use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

/// One environment of a pool, read but not yet validated.
#[derive(Debug, Clone)]
pub struct PoolEnv {
    pub id: String,
    pub skill: String,
    /// `None` (a plain directory): the sandbox detects it.
    pub kind: Option<EnvKind>,
    pub code: String,
    pub hint: Option<String>,
    /// Its scores, when the pool has them (a pool.jsonl; a plain directory has none).
    pub win_rate_no_hint: Option<f64>,
    pub regret: Option<f64>,
    /// Where it came from, for messages: the `.py` file, or `pool.jsonl:LINE`.
    pub origin: String,
}

/// What [`read_pool`] found.
#[derive(Debug, Default)]
pub struct LoadedPool {
    pub envs: Vec<PoolEnv>,
    pub problems: Vec<PoolProblem>,
}

/// Reads the pool at `path` (any of the three forms). Fails only when `path` itself cannot be
/// read; a bad line or file becomes a problem and the rest loads.
pub fn read_pool(path: &Path) -> Result<LoadedPool, WorkerError> {
    let meta = std::fs::metadata(path).map_err(|e| WorkerError::io(path, e))?;
    if meta.is_dir() {
        let index = path.join(POOL_JSONL);
        if index.is_file() {
            read_jsonl(&index, path)
        } else {
            read_plain(path)
        }
    } else {
        let base = path.parent().unwrap_or(Path::new("."));
        read_jsonl(path, base)
    }
}

fn read_jsonl(index: &Path, base: &Path) -> Result<LoadedPool, WorkerError> {
    let text = std::fs::read_to_string(index).map_err(|e| WorkerError::io(index, e))?;
    let file = index.display().to_string();
    let (entries, mut problems) = pool::parse_jsonl(&file, &text);
    let mut envs = Vec::with_capacity(entries.len());
    for (line, e) in entries {
        let origin = format!("{file}:{line}");
        let code = match (e.code, &e.code_file) {
            (Some(code), _) => code,
            (None, Some(f)) => {
                let p = base.join(f);
                match inside(base, &p).and_then(|()| read_utf8(&p)) {
                    Ok(c) => c,
                    Err(message) => {
                        problems.push(PoolProblem {
                            file: file.clone(),
                            line: Some(line),
                            message: format!("{}: `code_file` {f:?}: {message}", e.id),
                        });
                        continue;
                    }
                }
            }
            // `check_entry` refused entries with neither.
            (None, None) => continue,
        };
        envs.push(PoolEnv {
            id: e.id,
            skill: e.skill,
            kind: Some(e.kind),
            code,
            hint: e.hint,
            win_rate_no_hint: e.win_rate_no_hint,
            regret: e.regret,
            origin,
        });
    }
    problems.sort_by_key(|p| p.line);
    Ok(LoadedPool { envs, problems })
}

/// `p` must resolve inside `base`: `code_file` has no `..` (checked with the entry), and a
/// symlink in the pool that points elsewhere would still make the worker read, and the
/// validator quote back, a file outside the pool.
fn inside(base: &Path, p: &Path) -> Result<(), String> {
    let canon = |x: &Path| {
        std::fs::canonicalize(x).map_err(|e| format!("cannot read {}: {e}", x.display()))
    };
    if canon(p)?.starts_with(canon(base)?) {
        Ok(())
    } else {
        Err(format!(
            "{} resolves outside the pool directory",
            p.display()
        ))
    }
}

fn read_utf8(p: &Path) -> Result<String, String> {
    let bytes = std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{} is not UTF-8 text (invalid byte at offset {})",
            p.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

fn read_plain(dir: &Path) -> Result<LoadedPool, WorkerError> {
    let mut files = Vec::new();
    crate::warmstart::collect_py(dir, &mut files)?;
    files.sort();
    let mut out = LoadedPool::default();
    for (i, path) in files.iter().enumerate() {
        let file = path.display().to_string();
        let problem = |message: String| PoolProblem {
            file: file.clone(),
            line: None,
            message,
        };
        let code = match read_utf8(path) {
            Ok(c) => c,
            Err(m) => {
                out.problems.push(problem(m));
                continue;
            }
        };
        let Some(skill) = pool::skill_from_docstring(&code) else {
            out.problems.push(problem(
                "line 1: expected a docstring `\"\"\"Skill: <one of the spec's skills>. ...\"\"\"` \
                 (a plain directory's files name their skill there; a pool.jsonl names it in \
                 `skill`)"
                    .into(),
            ));
            continue;
        };
        out.envs.push(PoolEnv {
            // The position among the directory's files, as before pools had ids: a run's seeds
            // derive from the id, so an old pool plays the same episodes.
            id: format!("fixed-{i}"),
            skill: skill.to_owned(),
            kind: None,
            code,
            hint: None,
            win_rate_no_hint: None,
            regret: None,
            origin: file,
        });
    }
    Ok(out)
}

/// An environment the sandbox accepted, with the kind it was checked as.
#[derive(Debug, Clone)]
pub struct ValidEnv {
    pub env: PoolEnv,
    pub kind: EnvKind,
}

/// Validates every environment in the sandbox (against its JSONL kind when it has one) and
/// returns the accepted ones and one problem per rejection, with the validator's reason.
pub fn validate_pool(
    sandbox: &Pool,
    envs: Vec<PoolEnv>,
    vcfg: &ValidationConfig,
) -> (Vec<ValidEnv>, Vec<PoolProblem>) {
    let mut ok = Vec::new();
    let mut problems = Vec::new();
    for env in envs {
        let mut cfg = vcfg.clone();
        cfg.kind = env.kind;
        let report = spade_sandbox::validate(sandbox, &env.code, &cfg);
        match (&report.rejection, report.kind) {
            (None, Some(k)) if report.accepted => {
                let kind = k;
                ok.push(ValidEnv { env, kind });
            }
            (rejection, _) => {
                let why = rejection.as_ref().map_or_else(
                    || "not accepted".to_owned(),
                    |r| {
                        format!(
                            "{} ({}): {}",
                            crate::designer::snake(&r.reason),
                            crate::designer::snake(&r.check),
                            r.message
                        )
                    },
                );
                problems.push(PoolProblem {
                    file: env.origin.clone(),
                    line: None,
                    message: format!("{}: rejected by the sandbox: {why}", env.id),
                });
            }
        }
    }
    (ok, problems)
}

/// How pool environments are validated: the run's sandbox budget and step limit, the
/// validator's own drawn seeds (as for generated environments).
pub fn validation_config(cfg: &spade::config::RunConfig) -> ValidationConfig {
    ValidationConfig {
        budget: std::time::Duration::from_secs_f64(cfg.sandbox.validation_timeout_s),
        call_timeout: std::time::Duration::from_secs_f64(cfg.sandbox.step_timeout_s),
        ..ValidationConfig::default()
    }
}

/// `memory.seed_pool`: the pool's valid, scored environments as memory records (step 0, code
/// as the memory cuts it), and what was left out and why. Fails when nothing is left: a run
/// asked to start from examples does not silently start without them.
pub fn seed_memory(
    cfg: &spade::config::RunConfig,
    sandbox: &Pool,
) -> Result<(Vec<spade::memory::MemoryRecord>, Vec<PoolProblem>), WorkerError> {
    let Some(path) = cfg.memory.seed_pool.as_deref() else {
        return Ok((vec![], vec![]));
    };
    let loaded = read_pool(Path::new(path))?;
    let mut problems = loaded.problems;
    let (valid, rejected) = validate_pool(sandbox, loaded.envs, &validation_config(cfg));
    problems.extend(rejected);
    let mut records = Vec::new();
    for v in valid {
        let (Some(win_rate), Some(regret)) = (v.env.win_rate_no_hint, v.env.regret) else {
            problems.push(PoolProblem {
                file: v.env.origin.clone(),
                line: None,
                message: format!(
                    "{}: expected `win_rate_no_hint` and `regret` (memory examples are chosen \
                     by them)",
                    v.env.id
                ),
            });
            continue;
        };
        records.push(spade::memory::MemoryRecord {
            env_id: v.env.id,
            step: 0,
            skill: v.env.skill,
            kind: v.kind,
            code: v.env.code,
            win_rate,
            regret,
        });
    }
    if records.is_empty() {
        let mut text = format!("memory.seed_pool: no valid, scored environments in {path}");
        for p in &problems {
            text.push_str(&format!("\n  {p}"));
        }
        return Err(WorkerError::Config(text));
    }
    Ok((records, problems))
}

/// Writes a pool directory entry by entry: what [`pool::PoolBuilder`] gives for each, its code
/// to its own `.py` and its line to `pool.jsonl`, and the card at [`PoolWriter::finish`].
/// Nothing is held but names and counts, so an export of any size streams through.
#[derive(Debug)]
pub struct PoolWriter {
    dir: PathBuf,
    index: BufWriter<std::fs::File>,
    pool: pool::PoolBuilder,
}

impl PoolWriter {
    /// Creates the pool directory `dir`, which must not exist or be empty (an export never
    /// mixes with what is there).
    pub fn create(dir: &Path, card: Card) -> Result<Self, WorkerError> {
        if dir.exists() {
            let mut entries = std::fs::read_dir(dir).map_err(|e| WorkerError::io(dir, e))?;
            if entries.next().is_some() {
                return Err(WorkerError::Config(format!(
                    "{} is not empty: export into a new directory",
                    dir.display()
                )));
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| WorkerError::io(dir, e))?;
        let path = dir.join(POOL_JSONL);
        let f = std::fs::File::create(&path).map_err(|e| WorkerError::io(&path, e))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            index: BufWriter::new(f),
            pool: pool::PoolBuilder::new(card),
        })
    }

    /// Adds one entry with its code inline (`code`). An entry the format refuses (unknown
    /// skill, a second one with the same id) is not written: the error says why.
    pub fn add(&mut self, e: PoolEntry) -> Result<(), WorkerError> {
        let id = e.id.clone();
        let f = self.pool.add(e).map_err(|r| WorkerError::Corrupt {
            path: id,
            message: r.to_string(),
        })?;
        let path = self.dir.join(&f.name);
        std::fs::write(&path, f.code).map_err(|er| WorkerError::io(&path, er))?;
        let index = self.dir.join(POOL_JSONL);
        writeln!(self.index, "{}", f.line).map_err(|er| WorkerError::io(&index, er))?;
        Ok(())
    }

    /// Flushes `pool.jsonl` and writes the card; returns it (its counts say what was written).
    pub fn finish(mut self) -> Result<Card, WorkerError> {
        let index = self.dir.join(POOL_JSONL);
        self.index.flush().map_err(|e| WorkerError::io(&index, e))?;
        let card_path = self.dir.join(POOL_CARD);
        let card = self.pool.finish();
        std::fs::write(&card_path, card.render()).map_err(|e| WorkerError::io(&card_path, e))?;
        Ok(card)
    }
}

/// What a run directory ([`crate::sink::FileSink`]) holds about its environments.
#[derive(Debug, Default)]
pub struct RunEnvironments {
    /// In the order they were reported, with their scores and play status applied.
    pub entries: Vec<PoolEntry>,
    /// The run's configuration (`RunStarted`), if reported.
    pub config: Option<serde_json::Value>,
}

/// Reads the environments of run directory `dir` (`environments.jsonl`, and `events.jsonl` for
/// the configuration and environments broken in play), line by line. `run` labels the entries.
pub fn run_dir_environments(dir: &Path, run: &str) -> Result<RunEnvironments, WorkerError> {
    let mut out = RunEnvironments::default();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let envs_path = dir.join("environments.jsonl");
    if !envs_path.is_file() {
        return Err(WorkerError::Config(format!(
            "{} has no environments.jsonl: not a run directory of `spade train`",
            dir.display()
        )));
    }
    for_each_envelope(&envs_path, |env| match env.message {
        Message::Environment { record } => {
            let e = PoolEntry::from_record(&record, Some(run));
            match by_id.get(&record.env_id) {
                Some(&i) => out.entries[i] = e,
                None => {
                    by_id.insert(record.env_id, out.entries.len());
                    out.entries.push(e);
                }
            }
        }
        Message::EnvironmentScored {
            env_id,
            regret,
            win_rate_hint,
            win_rate_no_hint,
            designer_reward,
            reward_levels,
            ..
        } => {
            if let Some(&i) = by_id.get(&env_id) {
                out.entries[i].apply_scores(pool::Scores {
                    regret,
                    win_rate_hint,
                    win_rate_no_hint,
                    designer_reward,
                    reward_levels,
                });
            }
        }
        _ => {}
    })?;
    let events = dir.join("events.jsonl");
    if events.is_file() {
        for_each_envelope(&events, |env| match env.message {
            Message::RunStarted { config, .. } => out.config = Some(config),
            Message::EnvironmentBroken { env_id, .. } => {
                if let Some(&i) = by_id.get(&env_id) {
                    out.entries[i].status = EnvStatus::BrokenInPlay;
                }
            }
            _ => {}
        })?;
    }
    Ok(out)
}

/// Calls `f` with every complete line of a sink file, in order (a torn last line, left by a
/// kill mid-write, is not an envelope yet and is skipped).
fn for_each_envelope(path: &Path, mut f: impl FnMut(Envelope)) -> Result<(), WorkerError> {
    let file = std::fs::File::open(path).map_err(|e| WorkerError::io(path, e))?;
    let mut reader = std::io::BufReader::new(file);
    let mut line = String::new();
    let mut n = 0usize;
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|e| WorkerError::io(path, e))?;
        if read == 0 || !line.ends_with('\n') {
            return Ok(());
        }
        n += 1;
        if line.trim().is_empty() {
            continue;
        }
        let env: Envelope = serde_json::from_str(&line).map_err(|e| WorkerError::Corrupt {
            path: format!("{}:{n}", path.display()),
            message: format!("not an envelope: {e}"),
        })?;
        f(env);
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
