//! The engine (and vLLM) path of [`play_envs`]: episodes are state machines advanced whenever
//! their turn comes back from the rollout, and everything an environment does (an episode's
//! start: runner, load, reset; every step) runs on environment threads while the rollout
//! decodes the other sequences. The decode loop never waits for Python: a slow environment
//! holds only its own episode, and one that hangs is cut by the pool's call limit on its own
//! thread.
//!
//! The results are the same as when the environments ran on the decode loop: an episode's
//! turns are sampled with seeds derived from (its index, its turn), whatever else is in flight.
//! That earlier way stays as `PlayOptions::envs_inline`, for the benchmark's side-by-side
//! (`spade model bench-rollout --path seed-envs`).

use super::*;
use spade_policy::engine::Finished;
use std::sync::{Mutex, mpsc};

/// Environment work for one episode. The episode travels with it, so no state is shared.
enum Task {
    Start {
        job: usize,
        idx: usize,
        ep: Episode,
    },
    Turn {
        job: usize,
        seq: SeqId,
        live: Box<Live>,
        ep: Episode,
        out: Completion,
    },
}

/// The outcome of a [`Task`], with the episode given back.
enum Done {
    Started {
        job: usize,
        idx: usize,
        ep: Episode,
        live: Result<Option<Box<Live>>, WorkerError>,
    },
    Turned {
        job: usize,
        seq: SeqId,
        live: Box<Live>,
        ep: Episode,
        /// Whether the episode goes on to another turn.
        go_on: Result<bool, WorkerError>,
    },
    /// The task panicked (a bug here, not the environment's doing: that runs in its runner
    /// process); the play call fails instead of waiting for an answer that never comes.
    Panicked,
}

impl Task {
    fn run(self, pool: &Pool, turns: &Turns<'_>, jobs: &[PlayJob<'_>]) -> Done {
        match self {
            Task::Start { job, idx, mut ep } => {
                let live = turns
                    .start(pool, &jobs[job], &mut ep, idx)
                    .map(|l| l.map(Box::new));
                Done::Started { job, idx, ep, live }
            }
            Task::Turn {
                job,
                seq,
                mut live,
                mut ep,
                out,
            } => {
                let go_on = turns
                    .after(jobs[job].kind, &mut live, &mut ep, out)
                    .map(|go| go && live.fits(turns.opts, &mut ep));
                Done::Turned {
                    job,
                    seq,
                    live,
                    ep,
                    go_on,
                }
            }
        }
    }
}

/// Threads that step environments: one per episode that may be in flight, so no environment
/// waits for another's thread.
fn env_threads(concurrency: usize) -> usize {
    concurrency.clamp(1, 256)
}

/// Plays every job's episodes, up to `concurrency` at once, over `engine`.
#[cfg(test)]
pub(in crate::play) fn play_concurrently(
    engine: &mut dyn Rollout,
    pool: &Pool,
    turns: &Turns<'_>,
    jobs: &[PlayJob<'_>],
    concurrency: usize,
) -> Result<Vec<Vec<Episode>>, WorkerError> {
    play_concurrently_timed(engine, pool, turns, jobs, concurrency).map(|(eps, _)| eps)
}

/// [`play_concurrently`], with the time the decode loop waited for environments: blocked with
/// nothing to decode, or (inline) stepping them itself.
pub(in crate::play) fn play_concurrently_timed(
    engine: &mut dyn Rollout,
    pool: &Pool,
    turns: &Turns<'_>,
    jobs: &[PlayJob<'_>],
    concurrency: usize,
) -> Result<(Vec<Vec<Episode>>, std::time::Duration), WorkerError> {
    let threads = if turns.opts.envs_inline {
        0
    } else {
        env_threads(concurrency)
    };
    let (task_tx, task_rx) = mpsc::channel::<Task>();
    let task_rx = Mutex::new(task_rx);
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (task_rx, done_tx) = (&task_rx, done_tx.clone());
            scope.spawn(move || {
                loop {
                    // The lock is held only while waiting for the next task.
                    let next = match task_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    let Ok(task) = next else { return };
                    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        task.run(pool, turns, jobs)
                    }))
                    .unwrap_or(Done::Panicked);
                    if done_tx.send(done).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done_tx);
        let mut driver = Driver::new(jobs, turns, concurrency, task_tx);
        driver.inline = (threads == 0).then(|| (pool, VecDeque::new()));
        let result = driver.drive(engine, &done_rx);
        let (episodes, waited) = (driver.finish(), driver.waited);
        // Dropping its sender ends the threads once their current task is done.
        drop(driver);
        result.map(|()| (episodes, waited))
    })
}

/// The decode loop's side: which episode is where.
struct Driver<'a, 't> {
    jobs: &'a [PlayJob<'a>],
    turns: &'a Turns<'t>,
    concurrency: usize,
    tasks: mpsc::Sender<Task>,
    episodes: Vec<Vec<Episode>>,
    started: Vec<usize>,
    queue: VecDeque<(usize, usize)>,
    /// Episodes whose next turn is with the rollout.
    decoding: BTreeMap<SeqId, (usize, Live)>,
    /// Episodes whose environment is working (their `Episode` is on a thread meanwhile).
    with_env: usize,
    /// Stepping environments on this thread (`PlayOptions::envs_inline`): the pool, and what
    /// they returned.
    inline: Option<(&'a Pool, VecDeque<Done>)>,
    /// Time the decode loop waited for environments.
    waited: std::time::Duration,
}

impl<'a, 't> Driver<'a, 't> {
    fn new(
        jobs: &'a [PlayJob<'a>],
        turns: &'a Turns<'t>,
        concurrency: usize,
        tasks: mpsc::Sender<Task>,
    ) -> Self {
        Driver {
            jobs,
            turns,
            concurrency,
            tasks,
            episodes: jobs
                .iter()
                .map(|j| {
                    j.seeds
                        .iter()
                        .map(|&s| Episode::new(s, j.hint.is_some()))
                        .collect()
                })
                .collect(),
            started: vec![0; jobs.len()],
            queue: jobs
                .iter()
                .enumerate()
                .flat_map(|(j, job)| (0..job.seeds.len()).map(move |i| (j, i)))
                .collect(),
            decoding: BTreeMap::new(),
            with_env: 0,
            inline: None,
            waited: std::time::Duration::ZERO,
        }
    }

    /// With `stop_at_violation` off (the reference) a violation fails its own play only.
    fn broken(&self, job: usize) -> bool {
        self.turns.opts.stop_at_violation && self.episodes[job].iter().any(|e| e.failure.is_some())
    }

    fn send(&mut self, task: Task) -> Result<(), WorkerError> {
        self.with_env += 1;
        if let Some((pool, ready)) = &mut self.inline {
            let t = std::time::Instant::now();
            ready.push_back(task.run(pool, self.turns, self.jobs));
            // (A panic here unwinds the play call itself, as it did on the decode loop.)
            self.waited += t.elapsed();
            return Ok(());
        }
        self.tasks
            .send(task)
            .map_err(|_| WorkerError::Model("the environment threads ended early".into()))
    }

    /// The episode's slot while its `Episode` is on an environment thread.
    fn take(&mut self, job: usize, idx: usize) -> Episode {
        std::mem::replace(&mut self.episodes[job][idx], Episode::new(0, false))
    }

    fn drive(
        &mut self,
        engine: &mut dyn Rollout,
        done: &mpsc::Receiver<Done>,
    ) -> Result<(), WorkerError> {
        loop {
            // Start episodes while runners are free; a broken environment starts none.
            while self.decoding.len() + self.with_env < self.concurrency
                && let Some((job, idx)) = self.queue.pop_front()
            {
                if self.broken(job) {
                    continue;
                }
                self.started[job] = self.started[job].max(idx + 1);
                let ep = self.take(job, idx);
                self.send(Task::Start { job, idx, ep })?;
            }
            if self.decoding.is_empty() && self.with_env == 0 {
                if self.queue.is_empty() {
                    return Ok(());
                }
                continue;
            }
            // What the environments finished joins this decoding pass; with nothing to decode,
            // wait for them.
            let mut finished: Vec<Done> = match &mut self.inline {
                Some((_, ready)) => ready.drain(..).collect(),
                None => done.try_iter().collect(),
            };
            if finished.is_empty() && self.decoding.is_empty() {
                let t = std::time::Instant::now();
                finished.push(done.recv().map_err(|_| {
                    WorkerError::Model("the environment threads ended early".into())
                })?);
                self.waited += t.elapsed();
            }
            for d in finished {
                self.with_env -= 1;
                self.settle(engine, d)?;
            }
            if !self.decoding.is_empty() {
                for f in engine.step()? {
                    self.decoded(engine, f)?;
                }
            }
            self.stop_broken(engine);
        }
    }

    /// An environment's work is done: the episode decodes its next turn or ends.
    fn settle(&mut self, engine: &mut dyn Rollout, d: Done) -> Result<(), WorkerError> {
        let (job, seq, live, go_on) = match d {
            Done::Panicked => {
                return Err(WorkerError::Model(
                    "an environment thread panicked during play".into(),
                ));
            }
            Done::Started { job, idx, ep, live } => {
                self.episodes[job][idx] = ep;
                let Some(live) = live? else {
                    return Ok(());
                };
                let live = *live;
                let go_on = live.fits(self.turns.opts, &mut self.episodes[job][idx]);
                let seq = go_on.then(|| engine.open());
                (job, seq, live, go_on)
            }
            Done::Turned {
                job,
                seq,
                live,
                ep,
                go_on,
            } => {
                self.episodes[job][live.idx] = ep;
                (job, Some(seq), *live, go_on?)
            }
        };
        let idx = live.idx;
        match seq {
            Some(seq) if go_on && !self.broken(job) => {
                let ep = &self.episodes[job][idx];
                engine.submit(
                    seq,
                    Request {
                        tokens: live.trace.ids.clone(),
                        params: self.turns.params_for(&live),
                        seed: self.turns.seed(&self.jobs[job], &live, ep),
                    },
                )?;
                self.decoding.insert(seq, (job, live));
            }
            seq => {
                if let Some(seq) = seq {
                    engine.close(seq);
                }
                live.finalize(&mut self.episodes[job][idx]);
            }
        }
        Ok(())
    }

    /// A turn came back from the rollout: its environment steps it on a thread.
    fn decoded(&mut self, engine: &mut dyn Rollout, f: Finished) -> Result<(), WorkerError> {
        let Some((job, live)) = self.decoding.remove(&f.seq) else {
            return Ok(());
        };
        let idx = live.idx;
        match f.result {
            Ok(out) if !self.broken(job) => {
                let ep = self.take(job, idx);
                self.send(Task::Turn {
                    job,
                    seq: f.seq,
                    live: Box::new(live),
                    ep,
                    out,
                })?;
            }
            other => {
                if let Err(e) = other {
                    self.episodes[job][idx].error = Some(e.to_string());
                }
                engine.close(f.seq);
                live.finalize(&mut self.episodes[job][idx]);
            }
        }
        Ok(())
    }

    /// A violation stops the environment's other episodes where they are.
    fn stop_broken(&mut self, engine: &mut dyn Rollout) {
        let stop: Vec<SeqId> = self
            .decoding
            .iter()
            .filter(|(_, (job, _))| self.broken(*job))
            .map(|(s, _)| *s)
            .collect();
        for seq in stop {
            if let Some((job, live)) = self.decoding.remove(&seq) {
                engine.close(seq);
                let idx = live.idx;
                live.finalize(&mut self.episodes[job][idx]);
            }
        }
    }

    /// The episodes; those that never started (their environment broke first) are not plays.
    fn finish(&mut self) -> Vec<Vec<Episode>> {
        let mut episodes = std::mem::take(&mut self.episodes);
        for (eps, n) in episodes.iter_mut().zip(&self.started) {
            eps.truncate(*n);
        }
        episodes
    }
}

#[cfg(test)]
#[path = "concurrent_tests.rs"]
mod tests;
