//! Suites by name, the options of an evaluation, progress reporting, and [`evaluate`], which
//! runs one suite for one loaded policy.

use crate::error::EvalError;
use crate::generate::{Generator, Sampling, reply_seed};
use crate::result::{Aggregate, ItemResult, SuiteResult, TaskResult};
use crate::rg::{self, Category, RgSession, RgTask};
use crate::{envs, qa, sandbox};
use spade_policy::Policy;
use spade_sandbox::RunnerConfig;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The default environment pool of `envs` without a directory.
pub const DEFAULT_ENV_DIR: &str = "envs/seed";

/// A held-out suite.
#[derive(Debug, Clone, PartialEq)]
pub enum Suite {
    /// reasoning-gym at hard settings: one category (`rg-algorithmic`, ...) or all four
    /// (`rg-hard`).
    ReasoningGym {
        name: String,
        categories: Vec<Category>,
    },
    /// `qa:PATH.jsonl`: boxed-answer questions.
    Qa { path: PathBuf },
    /// `envs` or `envs:DIR`: win rate on the environments of a pool (`pool.jsonl`) or on the
    /// environment files under DIR. `name` is the name given, which results carry (so a job
    /// asked for `envs` reports `envs`).
    Envs { name: String, dir: PathBuf },
}

impl Suite {
    /// Parses a suite name (see [`EvalError::UnknownSuite`] for the list).
    pub fn parse(name: &str) -> Result<Self, EvalError> {
        let rg = |categories: Vec<Category>| Suite::ReasoningGym {
            name: name.to_string(),
            categories,
        };
        Ok(match name {
            "rg-algorithmic" => rg(vec![Category::Algorithmic]),
            "rg-arithmetic" => rg(vec![Category::Arithmetic]),
            "rg-cognition" => rg(vec![Category::Cognition]),
            "rg-logic" => rg(vec![Category::Logic]),
            "rg-hard" => rg(Category::ALL.to_vec()),
            "envs" => Suite::Envs {
                name: name.to_string(),
                dir: PathBuf::from(DEFAULT_ENV_DIR),
            },
            _ => {
                if let Some(path) = name.strip_prefix("qa:").filter(|p| !p.is_empty()) {
                    Suite::Qa {
                        path: PathBuf::from(path),
                    }
                } else if let Some(dir) = name.strip_prefix("envs:").filter(|p| !p.is_empty()) {
                    Suite::Envs {
                        name: name.to_string(),
                        dir: PathBuf::from(dir),
                    }
                } else {
                    return Err(EvalError::UnknownSuite {
                        name: name.to_string(),
                    });
                }
            }
        })
    }

    /// The name results carry.
    pub fn name(&self) -> String {
        match self {
            Suite::ReasoningGym { name, .. } => name.clone(),
            Suite::Qa { path } => format!("qa:{}", path.display()),
            Suite::Envs { name, .. } => name.clone(),
        }
    }
}

/// Options of one evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Items per task at most (reasoning-gym questions per dataset, QA questions per task);
    /// None: 50 per reasoning-gym dataset, every QA question.
    pub limit: Option<usize>,
    pub seed: u64,
    pub sampling: Sampling,
    /// Episodes per environment (envs suites).
    pub episodes: u32,
    /// Turn cap per episode (spade-spec.md, "Play": max 25 turns).
    pub max_turns: u32,
    /// Where the sandbox runner is and its limits.
    pub runner: RunnerConfig,
    /// The checkpoint directory, for the record.
    pub checkpoint: PathBuf,
    /// The checkpoint's training step, if known.
    pub checkpoint_step: Option<u64>,
}

impl EvalOptions {
    /// Defaults for `checkpoint`, with the runner next to the running executable.
    pub fn new(checkpoint: &Path) -> Self {
        Self {
            limit: None,
            seed: 0,
            sampling: Sampling::default(),
            episodes: 4,
            max_turns: 25,
            runner: sandbox::runner_config(spade_sandbox::default_runner_path()),
            checkpoint: checkpoint.to_path_buf(),
            checkpoint_step: crate::result::checkpoint_step(checkpoint),
        }
    }
}

/// reasoning-gym questions per dataset when no limit is given (as reasoning-gym's own
/// evaluations use).
pub const DEFAULT_RG_ITEMS: usize = 50;

/// Where an evaluation reports progress (the CLI draws a bar).
pub trait Progress {
    /// The number of items (questions or episodes) the suite will score.
    fn start(&mut self, total: u64);
    /// A task begins.
    fn task(&mut self, name: &str);
    /// `n` more items are done.
    fn advance(&mut self, n: u64);
}

/// Progress that goes nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&mut self, _: u64) {}
    fn task(&mut self, _: &str) {}
    fn advance(&mut self, _: u64) {}
}

/// Runs `suite` for `policy`. Errors are problems of the whole run (a bad suite file, options,
/// a policy without tokenizer); a task that cannot run is recorded in its [`TaskResult`].
pub fn evaluate(
    policy: &Policy,
    suite: &Suite,
    opts: &EvalOptions,
    progress: &mut dyn Progress,
) -> Result<SuiteResult, EvalError> {
    let started = Instant::now();
    if opts.limit == Some(0) {
        return Err(EvalError::InvalidOption {
            option: "limit",
            reason: "must be at least 1".into(),
        });
    }
    let generator = Generator::new(policy, opts.sampling.clone())?;
    let (tasks, limit) = match suite {
        Suite::ReasoningGym { categories, .. } => {
            let limit = opts.limit.unwrap_or(DEFAULT_RG_ITEMS);
            let tasks = rg::hard_tasks(categories);
            let pool = sandbox::pool(&opts.runner);
            progress.start((tasks.len() * limit) as u64);
            // One runner serves several datasets (importing reasoning-gym takes seconds); it is
            // replaced after RG_TASKS_PER_RUNNER tasks, and after any task that failed.
            let mut runner: Option<spade_sandbox::Leased> = None;
            let mut served = 0;
            let mut results = vec![];
            for t in &tasks {
                progress.task(&t.name());
                if served == RG_TASKS_PER_RUNNER {
                    runner = None;
                    served = 0;
                }
                let r = run_rg_task(&pool, &mut runner, &generator, t, limit, opts.seed);
                served += 1;
                if r.error.is_some() {
                    runner = None;
                    served = 0;
                }
                results.push(r);
                progress.advance(limit as u64);
            }
            (results, Some(limit))
        }
        Suite::Qa { path } => {
            let items = qa::load(path)?;
            run_qa(
                &sandbox::pool(&opts.runner),
                &generator,
                items,
                opts,
                progress,
            )?
        }
        Suite::Envs { dir, .. } => {
            if opts.episodes == 0 || opts.max_turns == 0 {
                return Err(EvalError::InvalidOption {
                    option: "episodes/max_turns",
                    reason: "both must be at least 1".into(),
                });
            }
            let mut files = envs::discover(dir)?;
            if let Some(l) = opts.limit {
                files.truncate(l);
            }
            let mut env_pool_cfg = spade_sandbox::PoolConfig::new(opts.runner.clone());
            // One runner per episode; as many again start ahead while the model plays, so the
            // next environment's runners are ready (a runner serves one environment only).
            env_pool_cfg.max_runners = 2 * opts.episodes as usize;
            env_pool_cfg.warm = opts.episodes as usize;
            let env_pool = spade_sandbox::Pool::new(env_pool_cfg);
            progress.start(files.len() as u64 * u64::from(opts.episodes));
            let results = files
                .iter()
                .map(|f| {
                    progress.task(&f.name);
                    let r = envs::play(
                        &env_pool,
                        &generator,
                        f,
                        opts.episodes,
                        opts.max_turns,
                        opts.seed,
                    );
                    progress.advance(u64::from(opts.episodes));
                    r
                })
                .collect();
            (results, opts.limit)
        }
    };
    let settings = match suite {
        Suite::ReasoningGym { .. } => serde_json::json!({
            "sampling": opts.sampling,
            "hard_settings": "crates/eval/src/rg_hard.json",
        }),
        Suite::Qa { .. } => serde_json::json!({ "sampling": opts.sampling }),
        Suite::Envs { .. } => serde_json::json!({
            "sampling": opts.sampling,
            "episodes": opts.episodes,
            "max_turns": opts.max_turns,
        }),
    };
    Ok(SuiteResult {
        suite: suite.name(),
        checkpoint: opts.checkpoint.display().to_string(),
        checkpoint_step: opts.checkpoint_step,
        seed: opts.seed,
        limit,
        settings,
        aggregate: Aggregate::of(&tasks),
        tasks,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// The answer in a reply: the last balanced `\boxed{}` after any `<think>` block (a Qwen3
/// model's reasoning may box intermediate results), as the agent's actions are parsed.
pub fn answer_of(reply: &str) -> Option<String> {
    spade::parse::last_boxed(&spade::parse::strip_think(reply)).map(str::to_string)
}

/// Datasets one runner generates and scores before it is replaced (bounds its CPU time).
const RG_TASKS_PER_RUNNER: usize = 10;

/// One reasoning-gym dataset: generate, answer, score, in `runner` (checked out if None).
fn run_rg_task(
    pool: &spade_sandbox::Pool,
    runner: &mut Option<spade_sandbox::Leased>,
    generator: &Generator<'_>,
    task: &RgTask,
    size: usize,
    seed: u64,
) -> TaskResult {
    let started = Instant::now();
    let name = task.name();
    let result = (|| -> Result<Vec<ItemResult>, EvalError> {
        let leased = match runner.take() {
            Some(l) => l,
            None => sandbox::checkout(pool, &format!("starting a runner for {name}"))?,
        };
        let leased = runner.insert(leased);
        let mut session = RgSession::open(
            &mut leased.runner,
            task,
            rg::dataset_seed(seed, &task.dataset),
            size,
        )?;
        let prompts: Vec<String> = session
            .questions
            .iter()
            .map(|q| Generator::chat(rg::SYSTEM_PROMPT, &q.question))
            .collect();
        let seeds: Vec<u64> = (0..prompts.len() as u64)
            .map(|i| reply_seed(seed, &name, i, 0))
            .collect();
        let replies = generator.complete(&prompts, &seeds)?;
        let answers: Vec<Option<String>> = replies
            .iter()
            .map(|r| r.as_ref().ok().and_then(|t| answer_of(t)))
            .collect();
        let indices: Vec<usize> = (0..answers.len()).collect();
        let scored = session.score(&indices, &answers)?;
        Ok(items_of(replies, answers, scored))
    })();
    let elapsed = started.elapsed().as_secs_f64();
    match result {
        Ok(items) => TaskResult::from_items(name, items, elapsed),
        Err(e) => TaskResult::failed(name, e.to_string(), elapsed),
    }
}

fn items_of(
    replies: Vec<Result<String, String>>,
    answers: Vec<Option<String>>,
    scored: Vec<rg::Scored>,
) -> Vec<ItemResult> {
    replies
        .into_iter()
        .zip(answers)
        .zip(scored)
        .enumerate()
        .map(|(i, ((reply, answer), s))| ItemResult {
            index: i as u32,
            score: s.score,
            answer: answer.map(|a| a.chars().take(500).collect()),
            error: reply.err().or(s.error),
        })
        .collect()
}

/// A QA file: every task (group) answered and verified in one runner.
fn run_qa(
    pool: &spade_sandbox::Pool,
    generator: &Generator<'_>,
    items: Vec<qa::QaItem>,
    opts: &EvalOptions,
    progress: &mut dyn Progress,
) -> Result<(Vec<TaskResult>, Option<usize>), EvalError> {
    let mut groups: Vec<(String, Vec<qa::QaItem>)> = vec![];
    for item in items {
        match groups.iter_mut().find(|(t, _)| *t == item.task) {
            Some((_, g)) => g.push(item),
            None => groups.push((item.task.clone(), vec![item])),
        }
    }
    let limit = opts.limit.unwrap_or(usize::MAX);
    for (_, g) in &mut groups {
        g.truncate(limit);
    }
    progress.start(groups.iter().map(|(_, g)| g.len() as u64).sum());
    let mut leased = sandbox::checkout(pool, "starting a runner for math-verify")?;
    let mut results = vec![];
    for (task, group) in groups {
        progress.task(&task);
        let started = Instant::now();
        let mut items = vec![];
        for chunk in group.chunks(opts.sampling.batch_size.max(1)) {
            let prompts: Vec<String> = chunk
                .iter()
                .map(|q| Generator::chat(rg::SYSTEM_PROMPT, &q.question))
                .collect();
            let seeds: Vec<u64> = chunk
                .iter()
                .map(|q| reply_seed(opts.seed, &task, q.line as u64, 0))
                .collect();
            let replies = generator.complete(&prompts, &seeds)?;
            let answers: Vec<Option<String>> = replies
                .iter()
                .map(|r| r.as_ref().ok().and_then(|t| answer_of(t)))
                .collect();
            let pairs: Vec<(String, Option<String>)> = chunk
                .iter()
                .zip(&answers)
                .map(|(q, a)| (q.answer.clone(), a.clone()))
                .collect();
            let scored = qa::verify(&mut leased.runner, &pairs)?;
            let offset = items.len();
            items.extend(
                items_of(replies, answers, scored)
                    .into_iter()
                    .map(|mut it| {
                        it.index += offset as u32;
                        it
                    }),
            );
            progress.advance(chunk.len() as u64);
        }
        results.push(TaskResult::from_items(
            task,
            items,
            started.elapsed().as_secs_f64(),
        ));
    }
    Ok((results, opts.limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_the_last_box_after_thinking() {
        assert_eq!(
            answer_of("a \\boxed{1} b \\boxed{\\frac{1}{2}}").as_deref(),
            Some("\\frac{1}{2}")
        );
        assert_eq!(
            answer_of("<think>maybe \\boxed{3}</think>so \\boxed{4}").as_deref(),
            Some("4")
        );
        assert_eq!(answer_of("<think>\\boxed{3}</think>no box"), None);
        assert_eq!(answer_of("\\boxed{5} then \\boxed{6").as_deref(), Some("5"));
        assert_eq!(answer_of("the answer is 4"), None);
    }

    #[test]
    fn suite_names_parse_and_unknown_ones_list_the_choices() -> Result<(), EvalError> {
        assert_eq!(
            Suite::parse("rg-hard")?,
            Suite::ReasoningGym {
                name: "rg-hard".into(),
                categories: Category::ALL.to_vec()
            }
        );
        assert_eq!(
            Suite::parse("qa:sets/aime.jsonl")?,
            Suite::Qa {
                path: "sets/aime.jsonl".into()
            }
        );
        assert_eq!(
            Suite::parse("envs")?,
            Suite::Envs {
                name: "envs".into(),
                dir: DEFAULT_ENV_DIR.into()
            }
        );
        // Results carry the suite as it was named, which is what an evaluation job was asked
        // for (the service refuses results of another suite); the names the service accepts
        // without an evaluator (`spade::suites`) all parse here.
        for named in spade::suites::NAMED {
            assert_eq!(Suite::parse(named)?.name(), *named);
        }
        assert_eq!(
            Suite::parse("qa:sets/aime.jsonl")?.name(),
            "qa:sets/aime.jsonl"
        );
        assert_eq!(Suite::parse("envs:pool")?.name(), "envs:pool");
        for bad in ["qa:", "envs:", "rg-easy", ""] {
            let e = Suite::parse(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.contains("unknown suite") && e.contains("qa:PATH.jsonl"),
                "{bad}: {e}"
            );
        }
        Ok(())
    }
}
