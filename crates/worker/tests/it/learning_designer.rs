//! Designer-side learning regression (issue 15): the designer's GRPO update must raise the
//! designer reward the loop computes above that of a run with `ablation.frozen_designer`, which
//! samples the same windows from the same start, and the frozen run's must not rise. A sign
//! error in the designer advantage, a loss mask that misses the designer's completion or a
//! truncated importance weight that cancels its gradient pass every formula test; they fail here.
//!
//! The set-up is the real loop (`run::run`: designer sampling, sandbox validation, hints, hint
//! and no-hint plays, the window's rewards, one GRPO update per step) with the tiny model taught
//! by SFT to answer the designer prompt of each skill with one of three programs of a "guess the
//! hidden number" game that differ in one line, `N = 1`, `N = 2` or `N = 900` (how many numbers
//! the hidden one is drawn from, per seed, never shown). Whatever the agent learns, it wins N = 1
//! always (too easy: reward 0), N = 900 never (too hard: reward 0) and N = 2 about half the time
//! (the plateau: reward around 0.6 before the regret's noise). So the only way a window's mean
//! designer reward can rise is the designer choosing N = 2 more often: what its GRPO update
//! should do, and what a frozen designer cannot do.
//!
//! The agent still trains on the same weights in both arms (its N = 2 groups carry random
//! advantages), which moves the designer's choice a little too: the control measures that.

use crate::learning::{Res, cached_model_dir, mean, write};
use spade::config::RunConfig;
use spade::report::{EnvStatus, Message};
use spade_policy::sft::{SftConfig, SftTrainer};
use spade_policy::train::OptimConfig;
use spade_sandbox::{EnvKind, Pool, PoolConfig, RunnerConfig};
use spade_worker::run::{self, RunOptions};
use spade_worker::sink::FileSink;
use spade_worker::state::StateStore;
use spade_worker::warmstart::{self, WarmStartOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

/// The two skills of `ablation.two_skill_curriculum`: every window asks for the same two, so
/// each skill's prompt is one the designer was taught.
const SKILLS: [&str; 2] = ["Mathematical Reasoning", "Pattern Recognition"];

/// The turn limit the designer prompt states (`agent.max_turns` of the run).
const MAX_TURNS: u32 = 6;

/// The designer's choices: how many numbers the hidden one is drawn from. One number is
/// always guessed (win rate 1: too easy, reward 0), two are guessed half the time (the plateau:
/// reward >= 0.6 in expectation over the window's plays), 900 never (too hard, reward 0). No
/// agent can do better or worse than these rates for long (the number is drawn per seed and
/// never shown), so the designer reward depends only on the designer's choice.
const CHOICES: [u32; 3] = [1, 2, 900];
/// The choice on the plateau.
const GOOD: u32 = 2;

/// The games differ in one token, the `N = ...` line: everything before it is the same for
/// every choice (so the designer's choice is that one token) and everything after it too (so
/// the rest of the program cannot mix two choices).
fn game(skill: &str, n: u32) -> String {
    format!(
        r#""""Skill: {skill}. Guess the hidden number (1 try)."""
import random

N = {n}


class GuessEnv:
    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = 1

    def reset(self, seed=None):
        self.answer = str(random.Random(seed).randint(101, 100 + N))
        return "Guess the number from 101 to " + str(100 + N) + ": \\boxed{{n}}.", {{}}

    def step(self, action):
        won = action.rsplit("{{", 1)[-1].split("}}")[0].strip() == self.answer
        return "It was " + self.answer + ".", float(won), True, False, {{}}

    def solution(self):
        return self.answer

    def close(self):
        pass
"#
    )
}

/// The `N` a generated program chose (None when it is not one of the fixture's programs).
fn choice(code: &str) -> Option<u32> {
    let line = code.lines().find(|l| l.starts_with("N = "))?;
    line["N = ".len()..].trim().parse().ok()
}

/// Bumped whenever the fixture's training changes (its texts are hashed anyway).
const FIXTURE_VERSION: u32 = 1;
/// Copies of each (skill prompt, game) designer pair: the prompts carry no corpus document and
/// no memory, so the copies are the same pair; they set how often the designer sees it per epoch.
const DESIGNER_COPIES: usize = 2;
/// 16 left the memorised program fragile: at run seed 2 the agent's updates broke it in both
/// arms (measured).
const SFT_EPOCHS: usize = 32;
/// Solution episodes per game for the agent's pairs (its answer format).
const AGENT_EPISODES: usize = 6;

struct Fixture {
    model_dir: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| match make_fixture() {
        Ok(f) => f,
        Err(e) => panic!("designer learning fixture: {e}"),
    })
}

fn make_fixture() -> Res<Fixture> {
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let seed_dir = dir.path().join("seeds");
    let mut codes = vec![];
    for (i, skill) in SKILLS.iter().enumerate() {
        for n in CHOICES {
            let code = game(skill, n);
            write(&seed_dir, &format!("guess{i}-{n}.py"), &code)?;
            codes.push(code);
        }
    }
    // The tokenizer learns the prompts' texts too (as the warm start's does), so a designer
    // prompt is a few hundred tokens, not a few thousand.
    let mut texts = codes.clone();
    texts.push(spade::prompt::DESIGNER_SYSTEM.into());
    texts.push(spade::prompt::HINT_SYSTEM.into());
    texts.push(spade::prompt::contract(spade::EnvKind::Game, MAX_TURNS));
    texts.push(spade::prompt::agent_system(spade::EnvKind::Game).into());
    for s in SKILLS {
        if let Some(skill) = spade::skills::find(s) {
            texts.push(format!("{}\n{}", skill.name, skill.description));
        }
    }
    let key_texts: Vec<String> = texts
        .iter()
        .cloned()
        .chain([format!("{DESIGNER_COPIES} {SFT_EPOCHS} {AGENT_EPISODES}")])
        .collect();
    let model_dir = cached_model_dir("learning-designer", FIXTURE_VERSION, &key_texts);
    if model_dir.join("config.json").exists() {
        return Ok(Fixture { model_dir });
    }
    let policy = spade_policy::preset::tiny(&texts, 11, |_| {})?;
    let tok = policy.require_tokenizer()?.clone();
    let seeds = warmstart::read_seeds(&seed_dir)?;
    let opts = WarmStartOptions {
        kinds: vec![EnvKind::Game],
        seed: 11,
        epochs: 0,
        max_epochs: 0,
        min_acceptance: 0.0,
        batch_size: 8,
        lr: 0.0,
        designer_variants: DESIGNER_COPIES,
        designer_files: seeds.len(),
        agent_episodes: AGENT_EPISODES,
        hint_code_chars: config(&model_dir, 0, false)?.hint_code_limit(),
        memory_positives: 0,
        memory_negatives: 0,
        memory_code_chars: 0,
        corpus_docs: vec![],
        measure_samples: 0,
        designer_max_new_tokens: 0,
        max_turns: MAX_TURNS,
        family: None,
        base: None,
        agent_hint_only: false,
    };
    let pool = Pool::new(PoolConfig::new(RunnerConfig::new(
        spade_sandbox::default_runner_path(),
    )));
    let (mut data, counts) = warmstart::build_data(&tok, &pool, &seeds, &opts)?;
    assert_eq!(
        counts,
        [6 * DESIGNER_COPIES, 6, 6 * AGENT_EPISODES],
        "{counts:?}"
    );
    // build_data lists each program's pairs together; batches that mix the choices teach the
    // designer an even choice instead of whichever came last (a fixed shuffle).
    let mut order: Vec<(u64, usize)> = (0..data.len())
        .map(|i| {
            (
                (i as u64)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .rotate_left(17),
                i,
            )
        })
        .collect();
    order.sort_unstable();
    let mut slots: Vec<Option<_>> = data.drain(..).map(Some).collect();
    data = order
        .iter()
        .filter_map(|&(_, i)| slots.get_mut(i).and_then(Option::take))
        .collect();
    let cfg = SftConfig {
        optim: OptimConfig {
            lr: 3e-3,
            weight_decay: 0.0,
            ..OptimConfig::default()
        },
        // One sequence per forward pass: a batch mixes designer pairs of ~700 tokens with agent
        // pairs of ~60, and padding those to the longest would triple the SFT's cost.
        micro_batch: 1,
        max_len: 2048,
    };
    let mut sft = SftTrainer::new(&policy, cfg)?;
    let losses = sft.fit(&policy, &data, SFT_EPOCHS, 8, |_, _, _| {})?;
    let tmp = dir.path().join("model");
    policy.save(&tmp)?;
    std::fs::create_dir_all(crate::loop_tiny::cache_root())?;
    match std::fs::rename(&tmp, &model_dir) {
        Ok(()) => {}
        // Another process cached the same fixture first: keep theirs.
        Err(_) if model_dir.join("config.json").exists() => {}
        Err(e) => return Err(e.into()),
    }
    eprintln!(
        "designer learning fixture: {} SFT sequences, {} tokens, loss {:.3} -> {:.3}, {:.1} s",
        data.len(),
        data.iter().map(|s| s.ids.len()).sum::<usize>(),
        losses.first().copied().unwrap_or(f64::NAN),
        losses.last().copied().unwrap_or(f64::NAN),
        started.elapsed().as_secs_f64()
    );
    Ok(Fixture { model_dir })
}

/// Six windows: two before any designer update lands, two after three and four. The learning
/// rate is the agent test's (one update trains both roles). Measured: with half the SFT epochs
/// the agent's updates broke the designer's code within eight windows (also in the frozen arm);
/// at 1e-4 the designer did not move in six.
const STEPS: u64 = 6;
const LR: f64 = 3e-4;

fn config(model_dir: &Path, seed: u64, frozen: bool) -> Res<RunConfig> {
    let mut cfg = RunConfig::tiny_cpu_demo();
    cfg.run.steps = STEPS;
    cfg.run.seed = seed;
    cfg.run.checkpoint_every = STEPS;
    cfg.model.path = Some(model_dir.display().to_string());
    cfg.model.designer_max_new_tokens = 512;
    cfg.model.agent_max_new_tokens = 12;
    cfg.agent.max_turns = MAX_TURNS;
    // One window per step: a designer update every step, seen in the samples two windows later
    // (a window's samples are trained in the step that closes it, after that step generated).
    cfg.curriculum.game_regenerate_every = 1;
    cfg.curriculum.active_game_skills = 1;
    // The two-skill curriculum splits active x envs_per_skill slots between its two skills:
    // 4 designer samples per skill and window, centred on their skill's mean.
    cfg.curriculum.envs_per_skill = 8;
    cfg.ablation.two_skill_curriculum = true;
    cfg.ablation.no_corpus = true;
    cfg.ablation.no_memory = true;
    cfg.ablation.frozen_designer = frozen;
    cfg.designer.attempts = 1;
    cfg.hint.plays = 2;
    // 8 environments x 4 no-hint plays.
    cfg.agent.global_batch = 32;
    cfg.grpo.lr = LR;
    cfg.eval.every_steps = 0;
    cfg.eval.base_model = false;
    let issues = cfg.validate();
    assert!(issues.is_empty(), "{issues:?}");
    Ok(cfg)
}

/// One window's attempts as the designer's update sees them.
#[derive(Debug, Default, Clone, Copy)]
struct WindowStats {
    attempts: u32,
    accepted: u32,
    /// Accepted programs that chose [`GOOD`].
    good: u32,
    /// Designer rewards of the window's scored (accepted) environments.
    reward_sum: f64,
    scored: u32,
}

impl WindowStats {
    /// The loop's `designer_reward_mean` of the window: over its scored environments (a rejected
    /// attempt yields no designer sample, so it is not part of what the update raises; the
    /// acceptance is asserted on its own).
    fn mean_reward(&self) -> f64 {
        self.reward_sum / f64::from(self.scored.max(1))
    }
}

/// Per window (by generation step): attempts, accepted, N = 2 choices, designer rewards.
fn designer_windows(cfg: &RunConfig, label: &str) -> Res<Vec<WindowStats>> {
    let started = Instant::now();
    let out = tempfile::tempdir()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut opts = RunOptions::new(label, repo.join("envs/seed"), out.path().join("cache"));
    opts.concurrency = Some(2);
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let debug = std::env::var_os("LEARNING_DEBUG").is_some();
    let mut phases: BTreeMap<&'static str, f64> = BTreeMap::new();
    let mut last = (Instant::now(), "start");
    run::run(cfg, &opts, &store, &mut sink, &mut |e| {
        if let run::Event::Phase { phase, .. } = e {
            *phases.entry(last.1).or_default() += last.0.elapsed().as_secs_f64();
            last = (Instant::now(), phase);
        }
    })?;
    *phases.entry(last.1).or_default() += last.0.elapsed().as_secs_f64();
    if debug {
        eprintln!("{label}: seconds per phase {phases:?}");
    }
    let mut generated: BTreeMap<String, u64> = BTreeMap::new();
    let mut windows: BTreeMap<u64, WindowStats> = BTreeMap::new();
    for e in FileSink::read_all(out.path())? {
        match e.message {
            Message::Environment { record } => {
                let w = windows.entry(record.step).or_default();
                w.attempts += 1;
                if record.status == EnvStatus::Accepted {
                    w.accepted += 1;
                    w.good += u32::from(choice(&record.code) == Some(GOOD));
                    generated.insert(record.env_id, record.step);
                } else if debug {
                    let head: String = record.code.chars().take(300).collect();
                    eprintln!(
                        "{label} step {} rejected {:?} {:?}:\n{head}",
                        record.step, record.rejection_reason, record.rejection_message
                    );
                }
            }
            Message::EnvironmentScored {
                env_id,
                designer_reward,
                ..
            } => {
                let step = generated
                    .get(&env_id)
                    .copied()
                    .ok_or_else(|| format!("{env_id} scored before it was generated"))?;
                if let Some(w) = windows.get_mut(&step) {
                    w.reward_sum += designer_reward;
                    w.scored += 1;
                }
            }
            _ => {}
        }
    }
    assert_eq!(windows.len() as u64, cfg.run.steps, "a window every step");
    let stats: Vec<WindowStats> = windows.into_values().collect();
    eprintln!(
        "{label}: per window accepted/attempts, N = {GOOD} count, mean designer reward: {} ({:.1} s)",
        stats
            .iter()
            .map(|w| format!(
                "{}/{} {} {:.2}",
                w.accepted,
                w.attempts,
                w.good,
                w.mean_reward()
            ))
            .collect::<Vec<_>>()
            .join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(stats)
}

#[test]
fn designer_grpo_raises_the_designer_reward_and_a_frozen_designer_does_not() -> Res<()> {
    spade_policy::embed::set_threads(1);
    let f = fixture();
    let runs: Vec<(String, RunConfig)> = vec![
        (
            "designer grpo seed 1".into(),
            config(&f.model_dir, 1, false)?,
        ),
        (
            "frozen designer seed 1".into(),
            config(&f.model_dir, 1, true)?,
        ),
    ];
    let results = crate::learning::side_by_side(&runs, designer_windows);
    // Windows 0 and 1 are sampled before any designer update lands (window 0's samples train
    // in step 1's update, after window 1 was sampled): the starting level, the same in both arms.
    // Windows 4 and 5 are sampled after three and four designer updates.
    let mut summary = BTreeMap::new();
    for ((label, _), r) in runs.iter().zip(results) {
        let w = r?;
        let rewards: Vec<f64> = w.iter().map(WindowStats::mean_reward).collect();
        let (start, end) = (mean(&rewards[..2]), mean(&rewards[rewards.len() - 2..]));
        for (i, x) in w.iter().enumerate() {
            assert!(
                2 * x.accepted >= x.attempts && x.scored == x.accepted,
                "{label}: window {i} accepted {} of {} attempts, {} scored: the designer broke \
                 ({w:?})",
                x.accepted,
                x.attempts,
                x.scored
            );
        }
        summary.insert(label.starts_with("frozen"), (start, end, rewards));
    }
    let (Some((g_start, _, g_rewards)), Some((f_start, f_end, f_rewards))) =
        (summary.get(&false), summary.get(&true))
    else {
        return Err("both arms ran".into());
    };
    assert!(
        (0.05..=0.5).contains(g_start),
        "starting designer reward {g_start:.2} outside 0.05..0.5 ({g_rewards:?})"
    );
    // Measured with seed 1 (each machine is deterministic, machines differ in rounding, and
    // eight samples a window make the curve steep or shallow): on the machine this test was
    // written on, trained 0.13 -> 0.49 and frozen 0.13 -> 0.08; on the next, trained 0.08 ->
    // 0.17 and frozen 0.08 -> 0.04. On a fresh AMD EPYC without AVX-512 (2026-12-03) the first
    // two windows drew easy environments (0.49, 0.27): trained 0.38 -> 0.26 and frozen 0.38 ->
    // 0.20, both falling back from a lucky start, the trained one above the frozen one in three
    // of the four windows after the first update. So the claim is measured against the
    // negative control window by window (both arms sample the same windows from the same
    // start: a designer that does not learn tracks the frozen one and the gap is 0), not as a
    // rise over a start that depends on the draw.
    let gaps: Vec<f64> = g_rewards[2..]
        .iter()
        .zip(&f_rewards[2..])
        .map(|(g, f)| g - f)
        .collect();
    let gap = mean(&gaps);
    assert!(
        gap >= 0.05,
        "the trained designer's reward is {gap:.2} above the frozen one's in windows 2 and after, \
         expected at least 0.05 ({g_rewards:?} vs {f_rewards:?})"
    );
    assert!(
        *f_end < f_start + 0.1,
        "frozen designer: reward {f_start:.2} -> {f_end:.2} without designer updates \
         ({f_rewards:?})"
    );
    Ok(())
}

/// The designer and the hint writer generate on the vLLM servers when the run has them (the
/// loop test of `vllm.rs` uses a fixed pool, so only the agent's plays go there). Against real
/// `vllm serve` with `SPADE_TEST_VLLM=1` only. The fixture's designer writes valid programs
/// through the engine; through vLLM it must too, and the server must have answered more
/// completions than the agent's turns: the rest are the designer's and the hint writer's.
#[test]
fn the_designer_and_the_hint_writer_sample_on_the_vllm_servers() -> Res<()> {
    if crate::vllm::skipped() {
        return Ok(());
    }
    spade_policy::embed::set_threads(1);
    let f = fixture();
    let mut cfg = config(&f.model_dir, 1, false)?;
    cfg.run.steps = 2;
    cfg.run.checkpoint_every = 2;
    crate::vllm::one_started_server(&mut cfg, 8401);
    let issues = cfg.validate();
    assert!(issues.is_empty(), "{issues:?}");
    let out = tempfile::tempdir()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut opts = RunOptions::new(
        "it-vllm-designer",
        repo.join("envs/seed"),
        out.path().join("cache"),
    );
    opts.concurrency = Some(2);
    let mut sink = FileSink::open(out.path())?;
    let store = StateStore::new(out.path());
    let t = Instant::now();
    run::run(&cfg, &opts, &store, &mut sink, &mut |e| {
        if let run::Event::Log(l) = e
            && l.starts_with("vllm:")
        {
            eprintln!("{l}");
        }
    })?;
    let (mut attempts, mut accepted, mut play_turns) = (0u32, 0u32, 0u64);
    for e in FileSink::read_all(out.path())? {
        match e.message {
            Message::Environment { record } => {
                attempts += 1;
                accepted += u32::from(record.status == EnvStatus::Accepted);
            }
            Message::Plays { records } => {
                play_turns += records.iter().map(|p| u64::from(p.turns)).sum::<u64>();
            }
            _ => {}
        }
    }
    let log = std::fs::read_to_string(out.path().join("vllm-logs/server-0.log"))?;
    let completions = log.matches("POST /v1/completions").count() as u64;
    eprintln!(
        "through vLLM: {accepted}/{attempts} environments accepted; the server answered \
         {completions} completions for {play_turns} agent turns ({:.1} s)",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(attempts, 16, "8 designer attempts a step");
    assert!(accepted * 2 >= attempts, "{accepted}/{attempts} accepted");
    assert!(
        completions >= play_turns + u64::from(attempts),
        "{completions} completions, {play_turns} agent turns, {attempts} designer attempts"
    );
    Ok(())
}
