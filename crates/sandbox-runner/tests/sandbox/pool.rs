//! The pool: bounded, pre-started, replacing dead runners, never panicking its caller.

use super::{RUNNER, pool_with};
use spade_sandbox::{Pool, PoolConfig, RunnerConfig, SandboxError};
use std::time::{Duration, Instant};

const GAME: &str = include_str!("../fixtures/good/guess_number.py");

#[test]
fn a_session_plays_many_episodes_and_each_environment_gets_a_fresh_interpreter()
-> Result<(), SandboxError> {
    let pool = pool_with(2, 1, Duration::from_secs(20));
    let mut env = pool.load(GAME, None, None)?;
    for seed in 0..20 {
        let t = env.play_solution(seed, Duration::from_secs(10))?;
        assert!(
            t.turns.last().is_some_and(|x| x.result.reward == 1.0),
            "seed {seed}: {t:?}"
        );
    }
    // Tampering inside one environment does not reach the next one.
    let tamper =
        format!("{GAME}\nimport builtins\nbuiltins.len = lambda x: -1\nrandom.seed = None\n");
    let first = pool.load(&tamper, None, None)?;
    drop(first);
    let mut leased = pool.checkout()?;
    assert_eq!(
        leased
            .runner
            .exec("", "len('abc')", Duration::from_secs(5))?,
        "3"
    );
    Ok(())
}

#[test]
fn concurrency_is_bounded_and_waiters_get_a_slot_when_one_frees() -> Result<(), SandboxError> {
    let pool = pool_with(2, 0, Duration::from_secs(20));
    let a = pool.load(GAME, None, None)?;
    let b = pool.load(GAME, None, None)?;
    assert_eq!(pool.live(), 2);
    let p2 = pool.clone();
    let waiter = std::thread::spawn(move || p2.load(GAME, None, None).map(drop));
    // The waiter is blocked on the bound, not still on its way there.
    let deadline = Instant::now() + Duration::from_secs(20);
    while pool.waiting() < 1 {
        assert!(
            Instant::now() < deadline && !waiter.is_finished(),
            "the third load did not wait for a slot (live {})",
            pool.live()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(pool.live(), 2, "a third runner started beyond the bound");
    assert!(
        !waiter.is_finished(),
        "the waiter got a runner with none free"
    );
    drop(a);
    match waiter.join() {
        Ok(r) => r?,
        Err(_) => panic!("waiter panicked"),
    }
    assert_eq!(pool.waiting(), 0);
    drop(b);
    Ok(())
}

#[test]
fn a_missing_runner_binary_is_a_typed_error() {
    let pool = Pool::new(PoolConfig::new(RunnerConfig::new(
        "/nonexistent/spade-sandbox-runner",
    )));
    match pool.load(GAME, None, None) {
        Err(SandboxError::Spawn { path, .. }) => assert!(path.contains("nonexistent")),
        other => panic!("expected a spawn error, got {other:?}"),
    }
}

#[test]
fn warm_runners_are_ready_ahead_of_demand() -> Result<(), SandboxError> {
    let pool = pool_with(3, 2, Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(30);
    while pool.idle() < 2 {
        assert!(Instant::now() < deadline, "the pool never warmed up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    let _env = pool.load(GAME, None, None)?;
    let warm_load = t0.elapsed();
    let t1 = Instant::now();
    let _cold = spade_sandbox::Runner::start(&RunnerConfig::new(RUNNER))?;
    let cold_start = t1.elapsed();
    eprintln!("load from a warm pool: {warm_load:?}; cold runner start: {cold_start:?}");
    Ok(())
}
