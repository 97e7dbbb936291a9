//! Checks during play: a program that keeps the contract wherever validation looks (fixed and
//! drawn seeds, a fresh play-like runner) but returns a reward of 1,000,000 from the fourth
//! step of an episode in a runner that never called `solution()` is accepted by validation,
//! then stopped in play at its first violation, with the reason and the seed, and no further
//! episode of it starts.

use spade_sandbox::validate::{Reason, ValidationConfig};
use spade_sandbox::{EnvKind, validate};
use spade_worker::play::{self, PlayOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const OBS: &str = "I picked an integer from 10 to 100. Guess it; answer as \\boxed{n}.";

const GAME: &str = r#"
"""Guess a number; from the fourth step of an episode, in a runner where solution() was never
called (play, not validation), every reward is 1,000,000."""

SOLUTION_CALLED = [False]


class LateBreakEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.target = random.Random(seed).randint(10, 100)
        self.lo, self.hi, self.turn, self.done = 10, 100, 0, False
        return "I picked an integer from 10 to 100. Guess it; answer as \\boxed{n}.", {}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn += 1
        found = re.findall(r"\\boxed\{([^{}]*)\}", action)
        try:
            guess = int(found[-1].strip()) if found else None
        except ValueError:
            guess = None
        if guess == self.target:
            self.done = True
            return "Right!", 1.0, True, False, {}
        reward = 1e6 if self.turn >= 4 and not SOLUTION_CALLED[0] else 0.0
        if guess is not None and guess < self.target:
            self.lo = max(self.lo, guess + 1)
            obs = f"{guess} is too low."
        elif guess is not None:
            self.hi = min(self.hi, guess - 1)
            obs = f"{guess} is too high."
        else:
            obs = "Answer with an integer in \\boxed{}."
        if self.turn >= self.max_turns:
            self.done = True
            return obs, 0.0, False, True, {}
        return obs, reward, False, False, {}

    def solution(self):
        SOLUTION_CALLED[0] = True
        return str((self.lo + self.hi) // 2)
"#;

#[test]
fn a_program_that_breaks_only_in_play_is_stopped_at_its_first_violation() -> TestResult {
    let pool = crate::pool(2);
    let report = validate(&pool, GAME, &ValidationConfig::default());
    assert!(
        report.accepted,
        "validation should miss this one: {report:#?}"
    );

    // An agent that always answers \boxed{7} (below every target): taught on its own prompts.
    let policy = crate::always_answers("\\boxed{7}", &[OBS], "7 is too low.")?;

    let opts = PlayOptions {
        max_turns: 10,
        max_new_tokens: 16,
        temperature: 0.1,
        ..PlayOptions::default()
    };
    let seeds: Vec<i64> = (100..108).collect();
    let play_with = |o: &PlayOptions| {
        play::play_env(&policy, &pool, GAME, EnvKind::Game, None, &seeds, o, 2, 9)
    };
    let eps = play_with(&opts)?;
    let broken: Vec<_> = eps.iter().filter(|e| e.failure.is_some()).collect();
    let first_broken = broken.first().ok_or_else(|| {
        format!(
            "no play broke; transcripts: {:?}",
            eps.iter().map(|e| &e.transcript).collect::<Vec<_>>()
        )
    })?;
    let f = first_broken.failure.clone().ok_or("no failure")?;
    assert_eq!(f.reason, Reason::RewardOutOfRange, "{f:?}");
    assert!(
        f.message.contains(&format!("seed {}", first_broken.seed)),
        "{}",
        f.message
    );
    assert!(f.describe().starts_with("reward_out_of_range: with seed "));
    // The first violation ends the environment's life: the second chunk of episodes never
    // starts, and no reward out of range was passed on.
    assert!(eps.len() <= 2, "{} episodes were played", eps.len());
    assert!(
        eps.iter()
            .all(|e| e.rewards.iter().all(|r| r.abs() <= 10.0)),
        "{:?}",
        eps.iter().map(|e| &e.rewards).collect::<Vec<_>>()
    );
    assert!(eps.iter().all(|e| e.env_calls >= 1));

    // The reference's rule (agent.failed_plays = "minus_one"): a violation fails its own play
    // only; every episode is played, each failure is its own, and still no reward out of
    // range passes.
    let each = PlayOptions {
        stop_at_violation: false,
        ..opts
    };
    let eps = play_with(&each)?;
    assert_eq!(eps.len(), seeds.len());
    let failed: Vec<_> = eps.iter().filter(|e| e.failure.is_some()).collect();
    assert!(failed.len() >= 2, "{} of 8 failed", failed.len());
    for e in &failed {
        let f = e.failure.as_ref().ok_or("no failure")?;
        assert!(
            f.message.contains(&format!("seed {}", e.seed)),
            "{}",
            f.message
        );
    }
    assert!(
        eps.iter()
            .all(|e| e.rewards.iter().all(|r| r.abs() <= 10.0))
    );
    Ok(())
}
