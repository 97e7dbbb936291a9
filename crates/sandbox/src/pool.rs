//! A pool of pre-started, already isolated runners.
//!
//! Starting a runner (interpreter, numpy, isolation) costs tens of milliseconds; playing an
//! episode costs microseconds per step. So runners are started ahead of demand by a background
//! thread, each serves exactly one environment for as many episodes as the caller plays, and
//! is killed when its [`EnvSession`] is dropped: every environment gets a fresh interpreter,
//! and nothing one environment did (tampered builtins, module state, files) reaches the next.
//! At most `max_runners` exist at once (idle plus in use); `load` waits for a slot.

use crate::protocol::{EnvKind, Layer, Observation, StepResult, Trajectory};
use crate::runner::{Runner, RunnerConfig, SandboxError};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

/// Pool settings.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub runner: RunnerConfig,
    /// Upper bound on runner processes alive at once.
    pub max_runners: usize,
    /// How many idle runners to keep started ahead of demand.
    pub warm: usize,
    /// Limit for `load` (parse + execute + instantiate).
    pub load_timeout: Duration,
    /// Limit for each `reset`, `step`, `solution` and `criteria` call
    /// (spec "Validation": step 30 s by default).
    pub call_timeout: Duration,
}

impl PoolConfig {
    pub fn new(runner: RunnerConfig) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            runner,
            max_runners: cores * 2,
            warm: cores,
            load_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    idle: Vec<Runner>,
    /// Runners alive or being started: idle + leased + starting.
    live: usize,
    shutting_down: bool,
    /// Start failures since the last success (stops a broken binary from spinning).
    failures: u32,
    /// Callers blocked in `checkout_runner`.
    waiting: usize,
}

#[derive(Debug)]
struct Inner {
    cfg: PoolConfig,
    state: Mutex<State>,
    changed: Condvar,
}

/// A handle to the pool; cheap to clone, shareable across threads.
#[derive(Debug, Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// Creates the pool and starts its warming thread.
    pub fn new(cfg: PoolConfig) -> Self {
        let inner = Arc::new(Inner {
            cfg,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let weak = Arc::downgrade(&inner);
        let _ = std::thread::Builder::new()
            .name("sandbox-pool-warmer".into())
            .spawn(move || warm_loop(weak));
        Pool { inner }
    }

    pub fn config(&self) -> &PoolConfig {
        &self.inner.cfg
    }

    /// Loads `source` into a fresh runner. An environment error (syntax, exception, contract)
    /// comes back as [`SandboxError::Env`]; the runner that saw it is discarded either way.
    pub fn load(
        &self,
        source: &str,
        kind: Option<EnvKind>,
        max_turns: Option<u32>,
    ) -> Result<EnvSession, SandboxError> {
        // On any error below the runner is killed and the lease gives its slot back.
        let Leased { mut runner, lease } = self.checkout()?;
        let (class_name, kind, max_turns) =
            runner.load(source, kind, max_turns, self.inner.cfg.load_timeout)?;
        Ok(EnvSession {
            runner,
            class_name,
            kind,
            max_turns,
            call_timeout: self.inner.cfg.call_timeout,
            _lease: lease,
        })
    }

    /// A started, isolated runner with nothing loaded (for tests and tools). It counts against
    /// `max_runners` until dropped.
    pub fn checkout(&self) -> Result<Leased, SandboxError> {
        let runner = self.checkout_runner()?;
        Ok(Leased {
            runner,
            lease: Lease {
                pool: Arc::clone(&self.inner),
            },
        })
    }

    fn checkout_runner(&self) -> Result<Runner, SandboxError> {
        let mut st = self.lock();
        loop {
            if let Some(r) = st.idle.pop() {
                drop(st);
                self.inner.changed.notify_all();
                return Ok(r);
            }
            if st.live < self.inner.cfg.max_runners {
                st.live += 1;
                drop(st);
                self.inner.changed.notify_all();
                return Runner::start(&self.inner.cfg.runner).inspect_err(|_| {
                    release(&self.inner);
                });
            }
            st.waiting += 1;
            st = self
                .inner
                .changed
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
            st.waiting -= 1;
        }
    }

    /// Runners alive now (idle, leased and starting).
    pub fn live(&self) -> usize {
        self.lock().live
    }

    /// Idle runners ready to take an environment.
    pub fn idle(&self) -> usize {
        self.lock().idle.len()
    }

    /// Callers blocked waiting for a slot (all `max_runners` are taken): what a test of the
    /// bound waits for instead of sleeping.
    pub fn waiting(&self) -> usize {
        self.lock().waiting
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut st) = self.state.lock() {
            st.shutting_down = true;
            st.idle.clear();
        }
    }
}

fn release(inner: &Inner) {
    if let Ok(mut st) = inner.state.lock() {
        st.live = st.live.saturating_sub(1);
    }
    inner.changed.notify_all();
}

/// Returns a slot to the pool when dropped.
#[derive(Debug)]
struct Lease {
    pool: Arc<Inner>,
}

/// A runner checked out of the pool with nothing loaded; its slot returns when dropped.
#[derive(Debug)]
pub struct Leased {
    pub runner: Runner,
    lease: Lease,
}

impl Drop for Lease {
    fn drop(&mut self) {
        release(&self.pool);
    }
}

/// Keeps `warm` idle runners started; exits when the pool is dropped.
fn warm_loop(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let need = {
            let mut st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.shutting_down {
                return;
            }
            let want = st.idle.len() < inner.cfg.warm && st.live < inner.cfg.max_runners;
            if want && st.failures < 3 {
                st.live += 1;
                true
            } else {
                // Wake up on changes, and now and then to retry after failures.
                let (g, _) = inner
                    .changed
                    .wait_timeout(st, Duration::from_millis(500))
                    .unwrap_or_else(|p| p.into_inner());
                let mut g = g;
                if g.failures >= 3 {
                    g.failures = 2;
                }
                false
            }
        };
        if need {
            let started = Runner::start(&inner.cfg.runner);
            let mut st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
            match started {
                Ok(r) if !st.shutting_down => {
                    st.failures = 0;
                    st.idle.push(r);
                }
                Ok(_) => {
                    st.live = st.live.saturating_sub(1);
                }
                Err(e) => {
                    st.failures += 1;
                    st.live = st.live.saturating_sub(1);
                    drop(st);
                    eprintln!("sandbox pool: starting a runner failed: {e}");
                }
            }
            inner.changed.notify_all();
        }
        drop(inner);
    }
}

/// One loaded environment in its own runner. Dropping it kills the runner and frees its slot.
#[derive(Debug)]
pub struct EnvSession {
    runner: Runner,
    pub class_name: String,
    pub kind: EnvKind,
    /// The environment's own turn limit (its `max_turns`, or the one passed to `load`).
    pub max_turns: u32,
    call_timeout: Duration,
    _lease: Lease,
}

impl EnvSession {
    pub fn reset(&mut self, seed: Option<i64>) -> Result<Observation, SandboxError> {
        self.runner.reset(seed, self.call_timeout)
    }

    pub fn step(&mut self, action: &str) -> Result<StepResult, SandboxError> {
        self.runner.step(action, self.call_timeout)
    }

    pub fn solution(&mut self) -> Result<String, SandboxError> {
        self.runner.solution(self.call_timeout)
    }

    pub fn criteria(&mut self) -> Result<Vec<bool>, SandboxError> {
        self.runner.criteria(self.call_timeout)
    }

    /// A whole episode of the environment's own `solution()`, in one round trip. The limit
    /// covers the episode.
    pub fn play_solution(
        &mut self,
        seed: i64,
        limit: Duration,
    ) -> Result<Trajectory, SandboxError> {
        self.runner.play_solution(seed, self.max_turns, limit)
    }

    /// Per-call limit override (validation shrinks it to its remaining budget).
    pub fn set_call_timeout(&mut self, limit: Duration) {
        self.call_timeout = limit;
    }

    pub fn layers(&self) -> &[Layer] {
        self.runner.layers()
    }

    pub fn runner_mut(&mut self) -> &mut Runner {
        &mut self.runner
    }
}
