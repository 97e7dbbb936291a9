//! Win rate on a held-out pool of environments: every entry of a pool's `pool.jsonl`
//! (`spade::pool`), or every `*.py` file under a directory (default `envs/seed`), is one task; the agent plays it for a few episodes (seeds `seed + e`), each
//! episode in its own sandbox runner, turn by turn up to the environment's `max_turns` (at
//! most `max_turns` of the options; the spec's 25 by default). An episode is won when the
//! environment terminates with reward 1.0 (spade-spec.md, "Environment contract"); the task's
//! score is the win rate.

use crate::error::EvalError;
use crate::generate::{Generator, reply_seed};
use crate::result::{ItemResult, TaskResult};
use spade_policy::chat::{Role, agent_transcript};
use spade_sandbox::{EnvKind, EnvSession, Pool};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The system prompt of tool-use episodes (games use the agent role's own).
pub const TOOL_USE_PROMPT: &str = "You complete the user's instructions by calling the tools \
described below, one call per turn, as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>. \
When every instruction is done, reply <answer>done</answer>.";

/// One environment file of the pool.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvFile {
    /// The path below the pool directory without `.py` (e.g. `games/optimization/coin_change`).
    pub name: String,
    pub path: PathBuf,
    pub source: String,
}

/// The environments of a pool: with a `pool.jsonl` (`dir` holding one, or `dir` being one) its
/// entries in line order, named by id; otherwise every `*.py` file below `dir`, in path order.
/// A pool with any malformed line or missing file is refused with every problem named: an
/// evaluation on part of a pool would not be the pool's score.
pub fn discover(dir: &Path) -> Result<Vec<EnvFile>, EvalError> {
    let index = if dir.is_dir() {
        dir.join(spade::pool::POOL_JSONL)
    } else {
        dir.to_path_buf()
    };
    if index.is_file() {
        return discover_jsonl(&index);
    }
    let mut files = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| EvalError::io(&d, e))?;
        for entry in entries {
            let p = entry.map_err(|e| EvalError::io(&d, e))?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "py") {
                files.push(p);
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(EvalError::NoEnvironments {
            dir: dir.to_path_buf(),
        });
    }
    files
        .into_iter()
        .map(|path| {
            let source = std::fs::read_to_string(&path).map_err(|e| EvalError::io(&path, e))?;
            let rel = path.strip_prefix(dir).unwrap_or(&path).with_extension("");
            Ok(EnvFile {
                name: rel.to_string_lossy().into_owned(),
                path,
                source,
            })
        })
        .collect()
}

fn discover_jsonl(index: &Path) -> Result<Vec<EnvFile>, EvalError> {
    let text = std::fs::read_to_string(index).map_err(|e| EvalError::io(index, e))?;
    let base = index.parent().unwrap_or(Path::new("."));
    let (entries, mut problems) = spade::pool::parse_jsonl(&index.display().to_string(), &text);
    let mut out = Vec::with_capacity(entries.len());
    for (line, e) in entries {
        let (path, source) = match (e.code, e.code_file) {
            (Some(code), _) => (index.to_path_buf(), code),
            (None, Some(f)) => {
                let p = base.join(&f);
                // A symlink in the pool must not make an evaluation read a file elsewhere.
                let read = std::fs::canonicalize(&p)
                    .and_then(|c| Ok((c, std::fs::canonicalize(base)?)))
                    .map_err(|e| e.to_string())
                    .and_then(|(c, b)| {
                        if c.starts_with(&b) {
                            std::fs::read_to_string(&p).map_err(|e| e.to_string())
                        } else {
                            Err("resolves outside the pool directory".into())
                        }
                    });
                match read {
                    Ok(code) => (p, code),
                    Err(err) => {
                        problems.push(spade::pool::PoolProblem {
                            file: index.display().to_string(),
                            line: Some(line),
                            message: format!("{}: `code_file` {f:?}: {err}", e.id),
                        });
                        continue;
                    }
                }
            }
            (None, None) => continue,
        };
        out.push(EnvFile {
            name: e.id,
            path,
            source,
        });
    }
    if !problems.is_empty() {
        problems.sort_by_key(|p| p.line);
        return Err(EvalError::MalformedPool {
            problems: problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        });
    }
    if out.is_empty() {
        return Err(EvalError::NoEnvironments {
            dir: index.to_path_buf(),
        });
    }
    Ok(out)
}

/// One running episode.
struct Episode {
    session: EnvSession,
    first: String,
    turns: Vec<(String, String)>,
    done: Option<ItemResult>,
}

/// Plays `episodes` episodes of `env` at once (one runner each) and returns its win rate.
/// An environment that fails to load or reset makes a failed task; one that fails mid-episode
/// or breaks the contract (a reward outside [-10, 10]; types and observation length are the
/// runner's checks) loses that episode, with the error recorded.
pub fn play(
    pool: &Pool,
    generator: &Generator<'_>,
    env: &EnvFile,
    episodes: u32,
    max_turns: u32,
    seed: u64,
) -> TaskResult {
    let started = Instant::now();
    match play_episodes(pool, generator, env, episodes, max_turns, seed, None) {
        Ok(items) => TaskResult::from_items(&env.name, items, started.elapsed().as_secs_f64()),
        Err(e) => TaskResult::failed(&env.name, e, started.elapsed().as_secs_f64()),
    }
}

/// The episodes of [`play`], one item each (index = episode), or why the environment could not
/// be played at all. `system` replaces the system prompt of the environment's kind. An episode
/// that ends with an info `verdict` (BFCL's environments give one) keeps it as the item's
/// detail.
pub fn play_episodes(
    pool: &Pool,
    generator: &Generator<'_>,
    env: &EnvFile,
    episodes: u32,
    max_turns: u32,
    seed: u64,
    system: Option<&str>,
) -> Result<Vec<ItemResult>, String> {
    let fail = Err::<Vec<ItemResult>, String>;
    let mut eps = Vec::new();
    for e in 0..episodes {
        let mut session = match pool.load(&env.source, None, None) {
            Ok(s) => s,
            Err(err) => return fail(format!("loading {}: {err}", env.path.display())),
        };
        let ep_seed = i64::try_from(seed.wrapping_add(u64::from(e)) & 0x7FFF_FFFF).unwrap_or(0);
        let first = match session.reset(Some(ep_seed)) {
            Ok(o) => o.obs,
            Err(err) => return fail(format!("reset(seed={ep_seed}): {err}")),
        };
        eps.push(Episode {
            session,
            first,
            turns: vec![],
            done: None,
        });
    }
    let system = system.unwrap_or(match eps.first().map(|e| e.session.kind) {
        Some(EnvKind::ToolUse) => TOOL_USE_PROMPT,
        _ => Role::Agent.system_prompt(),
    });
    let turn_limit = eps
        .iter()
        .map(|e| e.session.max_turns)
        .min()
        .unwrap_or(0)
        .min(max_turns);
    for turn in 0..turn_limit {
        let active: Vec<usize> = (0..eps.len()).filter(|&i| eps[i].done.is_none()).collect();
        if active.is_empty() {
            break;
        }
        let prompts: Vec<String> = active
            .iter()
            .map(|&i| agent_transcript(Some(system), &eps[i].first, &eps[i].turns))
            .collect();
        let seeds: Vec<u64> = active
            .iter()
            .map(|&i| reply_seed(seed, &env.name, i as u64, u64::from(turn)))
            .collect();
        let replies = match generator.complete(&prompts, &seeds) {
            Ok(r) => r,
            Err(e) => return fail(format!("generating turn {turn}: {e}")),
        };
        for (&i, reply) in active.iter().zip(replies) {
            let ep = &mut eps[i];
            let action = match reply {
                Ok(text) => text,
                Err(reason) => {
                    ep.done = Some(lost(i, None, Some(reason)));
                    continue;
                }
            };
            // Games get `\boxed{X}` of the last box after any thinking, as in training; a reply
            // without a box (and every tool-use reply) goes as written, thinking removed, and
            // the environment answers the format error itself.
            let action = match ep.session.kind {
                EnvKind::Game => spade::parse::game_action(&action)
                    .unwrap_or_else(|_| spade::parse::strip_think(&action)),
                EnvKind::ToolUse => spade::parse::strip_think(&action),
            };
            match ep.session.step(&action) {
                // The contract holds in evaluation as in training: a reward that is not finite
                // or outside [-10, 10] loses the episode (and never counts as a win).
                Ok(r) if spade_sandbox::validate::step_violation(&r).is_some() => {
                    let why = spade_sandbox::validate::step_violation(&r).unwrap_or_default();
                    ep.done = Some(lost(
                        i,
                        Some(&action),
                        Some(format!("step broke the contract: {why}")),
                    ));
                }
                Ok(r) if r.terminated => {
                    // A win gives reward 1.0 and terminates (spec, "Environment contract").
                    let won = r.reward >= 1.0;
                    ep.done = Some(ItemResult {
                        index: i as u32,
                        sample: 0,
                        score: if won { 1.0 } else { 0.0 },
                        answer: Some(truncate(&action)),
                        detail: r.info.get("verdict").map(|v| truncate(&v.to_string())),
                        error: None,
                    });
                }
                Ok(r) if r.truncated => {
                    let mut item = lost(i, Some(&action), None);
                    item.detail = r.info.get("verdict").map(|v| truncate(&v.to_string()));
                    ep.done = Some(item);
                }
                Ok(r) => ep.turns.push((action, r.obs)),
                Err(err) => {
                    ep.done = Some(lost(i, Some(&action), Some(format!("step: {err}"))));
                }
            }
        }
    }
    Ok(eps
        .into_iter()
        .enumerate()
        .map(|(i, ep)| {
            ep.done.unwrap_or_else(|| {
                let last = ep.turns.last().map(|(a, _)| a.as_str());
                lost(i, last, None)
            })
        })
        .collect())
}

fn lost(index: usize, action: Option<&str>, error: Option<String>) -> ItemResult {
    ItemResult {
        index: index as u32,
        sample: 0,
        score: 0.0,
        answer: action.map(truncate),
        detail: None,
        error,
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(500).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, code_file: Option<&str>, code: Option<&str>) -> String {
        serde_json::json!({
            "id": id, "kind": "game", "skill": "Optimization", "status": "accepted",
            "code_file": code_file, "code": code,
        })
        .to_string()
    }

    #[test]
    fn a_pool_is_discovered_by_its_jsonl_and_a_malformed_one_names_every_problem()
    -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path();
        std::fs::write(dir.join("a.py"), "class A: pass\n")?;
        std::fs::write(dir.join("zzz.py"), "not in the pool\n")?;
        let good = [
            line("env-a", Some("a.py"), None),
            line("env-b", None, Some("class B: pass\n")),
        ];
        std::fs::write(dir.join("pool.jsonl"), good.join("\n"))?;
        let got = discover(dir)?;
        let names: Vec<&str> = got.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            ["env-a", "env-b"],
            "the pool's entries, not every .py"
        );
        assert_eq!(got[1].source, "class B: pass\n");
        assert_eq!(discover(&dir.join("pool.jsonl"))?.len(), 2);

        let bad = [
            good[0].clone(),
            line("env-c", Some("gone.py"), None),
            "{".into(),
        ];
        std::fs::write(dir.join("pool.jsonl"), bad.join("\n"))?;
        let err = match discover(dir) {
            Ok(_) => return Err("a malformed pool was accepted".into()),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("pool.jsonl:2: env-c: `code_file` \"gone.py\""),
            "{err}"
        );
        assert!(
            err.contains("pool.jsonl:3: expected one JSON object"),
            "{err}"
        );
        let outside = tempfile::tempdir()?;
        std::fs::write(outside.path().join("s.py"), "x = 1\n")?;
        std::os::unix::fs::symlink(outside.path().join("s.py"), dir.join("l.py"))?;
        std::fs::write(dir.join("pool.jsonl"), line("env-l", Some("l.py"), None))?;
        match discover(dir) {
            Ok(_) => return Err("a symlink out of the pool was followed".into()),
            Err(e) => assert!(
                e.to_string()
                    .contains("resolves outside the pool directory"),
                "{e}"
            ),
        }
        Ok(())
    }
}
