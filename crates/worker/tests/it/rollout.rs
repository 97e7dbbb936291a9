//! The engine path of play against the batch-sampler path: every episode of several
//! environments at once, each keeping its KV cache between turns, gives the same traces
//! (tokens, loss masks, log-probs) as one environment at a time re-prefilling every turn; and a
//! runner that dies mid-episode ends its environment's plays with a failure while the other
//! environments' episodes go on unchanged.

use spade_sandbox::EnvKind;
use spade_sandbox::validate::Reason;
use spade_worker::play::{self, Backend, EngineLimits, Episode, PlayJob, PlayOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A multi-turn game the trained agent (always `\boxed{7}`, see [`agent`]) never wins: every
/// episode runs out of turns, so every episode has several turns whose KV the engine reuses.
const OBS: &str = "I picked an integer from 1 to 50. Answer as \\boxed{n}.";

fn agent() -> Result<spade_policy::Policy, Box<dyn std::error::Error>> {
    crate::always_answers("\\boxed{7}", &[OBS], "7 is too low.")
}

const GUESS: &str = r#"
"""Guess a number from 1 to 50 in up to six tries."""

class GuessEnv:
    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.target = random.Random(seed).randint(8, 50)
        self.turn = 0
        return "I picked an integer from 1 to 50. Answer as \\boxed{n}.", {}

    def step(self, action):
        self.turn += 1
        found = re.findall(r"\\boxed\{([^{}]*)\}", action)
        try:
            guess = int(found[-1].strip()) if found else None
        except ValueError:
            guess = None
        if guess == self.target:
            return "Right!", 1.0, True, False, {}
        if self.turn >= self.max_turns:
            return "Out of tries.", 0.0, False, True, {}
        return "7 is too low.", 0.0, False, False, {}

    def solution(self):
        return str(self.target)
"#;

/// The same game, except that its runner kills itself (SIGKILL) at the second step of every
/// episode with an odd seed, and even seeds take a second over their third step (so that one
/// whose runner started well before every odd one's still has a turn left when a death is seen).
const DIES: &str = r#"
"""Guess a number; the process kills itself mid-episode for odd seeds."""
import os
import time

class DyingEnv:
    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.seed = seed or 0
        self.turn = 0
        return "I picked an integer from 1 to 50. Answer as \\boxed{n}.", {}

    def step(self, action):
        self.turn += 1
        if self.turn == 2 and self.seed % 2 == 1:
            os.kill(os.getpid(), 9)
        if self.turn == 3 and self.seed % 2 == 0:
            time.sleep(1)
        if self.turn >= self.max_turns:
            return "Over.", 0.0, False, True, {}
        return "7 is too low.", 0.0, False, False, {}

    def solution(self):
        return "1"
"#;

fn opts(backend: Backend) -> PlayOptions {
    PlayOptions {
        max_turns: 4,
        max_new_tokens: 12,
        temperature: 0.6,
        max_context: 1024,
        max_episode_tokens: 1024,
        backend,
        ..PlayOptions::default()
    }
}

fn engine() -> Backend {
    Backend::Engine(EngineLimits {
        kv_tokens: 1 << 15,
        max_batch: 64,
        ..EngineLimits::default()
    })
}

fn same_trace(a: &Episode, b: &Episode, what: &str) {
    assert_eq!(a.seed, b.seed, "{what}");
    assert_eq!(a.ids, b.ids, "{what}: token ids");
    assert_eq!(a.loss_mask, b.loss_mask, "{what}: loss mask");
    assert_eq!(a.turns, b.turns, "{what}: turns");
    assert_eq!(a.episode_return, b.episode_return, "{what}: return");
    assert_eq!(
        a.failure.as_ref().map(|f| f.reason),
        b.failure.as_ref().map(|f| f.reason),
        "{what}: failure"
    );
    for (i, (x, y)) in a.logprobs.iter().zip(&b.logprobs).enumerate() {
        assert!((x - y).abs() < 1e-4, "{what}: log-prob {i}: {x} vs {y}");
    }
}

#[test]
fn concurrent_episodes_over_the_engine_equal_the_sequential_sampler_path() -> TestResult {
    let policy = agent()?;
    let pool = crate::pool(8);
    let hint = "Start in the middle.";
    let jobs: Vec<PlayJob<'_>> = (0..3)
        .map(|j| PlayJob {
            first_index: 0,
            code: GUESS,
            kind: EnvKind::Game,
            hint: (j == 2).then_some(hint),
            seeds: (0..5).map(|i| 100 * j + i).collect(),
            sample_seed: 77 + j as u64,
        })
        .collect();
    let t = std::time::Instant::now();
    let seq = play::play_envs(&policy, &pool, &jobs, &opts(Backend::Sampler), 4)?;
    let t_seq = t.elapsed();
    let t = std::time::Instant::now();
    let con = play::play_envs(&policy, &pool, &jobs, &opts(engine()), 8)?;
    let t_con = t.elapsed();
    eprintln!("sampler {t_seq:?}, engine {t_con:?}");
    assert_eq!(seq.len(), 3);
    let mut multi_turn = 0;
    for (j, (a, b)) in seq.iter().zip(&con).enumerate() {
        assert_eq!(a.len(), 5, "job {j}");
        assert_eq!(a.len(), b.len(), "job {j}");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            same_trace(x, y, &format!("job {j} episode {i}"));
            multi_turn += usize::from(x.turns > 1);
            assert!(x.with_hint == (j == 2));
        }
    }
    // The comparison covers the KV reuse across turns, not only first turns.
    assert!(
        multi_turn >= 5,
        "only {multi_turn} episodes had a second turn"
    );
    Ok(())
}

#[test]
fn a_runner_dying_mid_episode_fails_its_environment_and_the_others_go_on() -> TestResult {
    let policy = agent()?;
    let pool = crate::pool(6);
    let good = PlayJob {
        first_index: 0,
        code: GUESS,
        kind: EnvKind::Game,
        hint: None,
        seeds: (0..4).collect(),
        sample_seed: 1,
    };
    let bad = PlayJob {
        first_index: 0,
        code: DIES,
        kind: EnvKind::Game,
        hint: None,
        seeds: (0..6).collect(),
        sample_seed: 2,
    };
    // The agent's second \boxed{7} reaches the second step, where odd seeds' runners exit.
    let o = opts(engine());
    let alone = play::play_envs(&policy, &pool, std::slice::from_ref(&good), &o, 6)?;
    let t = std::time::Instant::now();
    let both = play::play_envs(&policy, &pool, &[bad.clone(), good.clone()], &o, 6)?;
    assert!(t.elapsed().as_secs() < 120, "no hang");
    for (i, (x, y)) in alone[0].iter().zip(&both[1]).enumerate() {
        same_trace(x, y, &format!("good episode {i}"));
    }
    assert!(alone[0].iter().all(|e| e.turns == 4 && e.failure.is_none()));
    let failed: Vec<&Episode> = both[0].iter().filter(|e| e.failure.is_some()).collect();
    let f = failed
        .first()
        .and_then(|e| e.failure.clone())
        .ok_or_else(|| format!("no play failed: {:?}", both[0]))?;
    assert_ne!(f.reason, Reason::RewardOutOfRange, "{f:?}");
    assert!(f.message.contains("with seed"), "{}", f.message);
    assert!(
        failed.iter().all(|e| e.seed % 2 == 1 && e.turns == 2),
        "{failed:?}"
    );
    // With six runners all six episodes started at once; the even seeds stopped, without an
    // error, where they were when the first odd one's death was seen. Where that is depends on
    // the load: their starts and steps run on the pool's threads, in runners niced below the
    // tests beside them, and a run beside three busy processes saw seed 4 play all four turns
    // before the deaths of seeds 1 and 5 were seen. Without the stop every even seed plays four
    // turns (tried: `stop_at_violation: false` fails the last check).
    assert_eq!(both[0].len(), 6);
    let evens = || both[0].iter().filter(|e| e.seed % 2 == 0);
    let shown = || {
        both[0]
            .iter()
            .map(|e| (e.seed, e.turns, e.error.clone()))
            .collect::<Vec<_>>()
    };
    assert!(
        evens().all(|e| e.turns <= 4 && e.error.is_none() && e.failure.is_none()),
        "{:?}",
        shown()
    );
    assert!(evens().any(|e| e.turns < 4), "none stopped: {:?}", shown());
    Ok(())
}
