//! What a run tells the service, and when: live messages (progress, logs) go now; a step's
//! reports wait in [`Loop::pending`] until the next commit writes the resume point that covers
//! them, then are delivered (see [`crate::state`]). The start's reports, the end's, the pools'
//! and the retirements reviewers ask for in the service's replies.

use super::fixed::FixedPool;
use super::{Event, Loop, commits_after};
use crate::WorkerError;
use crate::state::{self, RunState};
use crate::warmstart::WarmStartReport;
use spade::memory::MemoryRecord;
use spade::pool::PoolProblem;
use spade::report::{Envelope, FinishStatus, Message};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

impl Loop<'_> {
    pub(super) fn phase(&mut self, phase: &'static str) -> Result<(), WorkerError> {
        let (step, total) = (self.state.step, self.cfg.run.steps);
        self.phase_clock.enter(phase);
        (self.on)(Event::Phase { step, total, phase });
        self.live(Message::Progress {
            step,
            total_steps: total,
            phase: phase.to_string(),
        })
    }

    pub(super) fn next_envelope(&mut self, message: Message) -> Result<Envelope, WorkerError> {
        let seq = self.state.next_seq;
        self.store.reserve(seq)?;
        self.state.next_seq += 1;
        Ok(Envelope::new(self.opts.run_id.clone(), seq, message))
    }

    /// Sends a message now (progress, logs): not part of any step's commit.
    pub(super) fn live(&mut self, message: Message) -> Result<(), WorkerError> {
        let env = self.next_envelope(message)?;
        self.deliver(&[env])
    }

    pub(super) fn deliver(&mut self, envs: &[Envelope]) -> Result<(), WorkerError> {
        if envs.is_empty() {
            return Ok(());
        }
        let d = self.sink.deliver(envs)?;
        self.cancel |= d.cancel_requested;
        for r in d.retire {
            if !self.retire.contains(&r) {
                self.retire.push(r);
            }
        }
        Ok(())
    }

    /// Retires the live environments reviewers marked broken or reward-hackable: never played
    /// again, reported broken (reason `retired_by_review`, the reviewer and comment in the
    /// message) so their status and page say so, and scored with the designer's invalid reward
    /// when their window closes (as an environment broken in play is).
    /// Returns their reports.
    pub(super) fn apply_retirements(&mut self) -> Vec<Message> {
        let retire = std::mem::take(&mut self.retire);
        let reports = retire_live(&mut self.state.windows, retire, self.state.step);
        for m in &reports {
            if let Message::EnvironmentBroken {
                env_id, message, ..
            } = m
            {
                (self.on)(Event::Log(format!("{env_id} retired from play: {message}")));
            }
        }
        reports
    }

    /// Makes the validated pool the run's one window and reports what it refused, one line per
    /// problem, so a rejected environment is never left out silently.
    pub(super) fn install_fixed_pool(&mut self, fixed: FixedPool) -> Result<(), WorkerError> {
        let n = fixed.window.envs.len();
        self.state.windows.insert("fixed".into(), fixed.window);
        self.report_fixed_envs()?;
        if fixed.rlve.is_some() {
            self.state.rlve = fixed.rlve;
            let line = format!("ablation.rlve: {n} RLVE environments, at their initial difficulty");
            (self.on)(Event::Log(line.clone()));
            return self.live(Message::Log {
                level: spade::report::LogLevel::Info,
                line,
            });
        }
        let summary = format!(
            "fixed_env_pool: {n} environments valid, {} left out",
            fixed.problems.len()
        );
        self.report_pool("fixed_env_pool", &fixed.problems, summary)
    }

    /// Reports every environment of a fixed pool (fixed-env GRPO, RLVE) as accepted at step 0,
    /// in one delivery: the service stores plays only for environments the run reported, and a
    /// reviewer sees the pool the agent trains on. Reporting again (a resume) overwrites.
    pub(super) fn report_fixed_envs(&mut self) -> Result<(), WorkerError> {
        let Some(window) = self.state.windows.get("fixed") else {
            return Ok(());
        };
        let records: Vec<Message> = window
            .envs
            .iter()
            .map(|env| Message::Environment {
                record: spade::report::EnvironmentRecord {
                    // No hint: fixed pools play without them (see `generate::load_fixed_pool`).
                    attempts: 0,
                    ..spade::report::EnvironmentRecord::new(
                        env.env_id.clone(),
                        0,
                        env.skill.clone(),
                        env.kind,
                        spade::report::EnvStatus::Accepted,
                        env.code.clone(),
                    )
                },
            })
            .collect();
        let envelopes = records
            .into_iter()
            .map(|m| self.next_envelope(m))
            .collect::<Result<Vec<_>, _>>()?;
        self.deliver(&envelopes)
    }

    /// One warning per problem of a pool, then `summary`: to the caller and to the run's log.
    pub(super) fn report_pool(
        &mut self,
        key: &str,
        problems: &[spade::pool::PoolProblem],
        summary: String,
    ) -> Result<(), WorkerError> {
        use spade::report::LogLevel;
        let lines = problems
            .iter()
            .map(|p| (LogLevel::Warn, format!("{key}: left out {p}")))
            .chain([(LogLevel::Info, summary)]);
        for (level, line) in lines {
            (self.on)(Event::Log(line.clone()));
            self.live(Message::Log { level, line })?;
        }
        Ok(())
    }

    /// Starts the memory with a seed pool's records and reports what it left out, one line each.
    pub(super) fn install_seed_memory(
        &mut self,
        records: Vec<spade::memory::MemoryRecord>,
        problems: &[spade::pool::PoolProblem],
    ) -> Result<(), WorkerError> {
        let n = records.len();
        for r in records {
            self.state.memory.push(r);
        }
        let summary = format!(
            "memory.seed_pool: {n} records seeded ({} kept), {} left out",
            self.state.memory.len(),
            problems.len()
        );
        self.report_pool("memory.seed_pool", problems, summary)
    }

    /// The start's reports: what the last commit left undelivered, the run's start, a new
    /// run's pools, the starting weights as checkpoint 0 and the warm start's verdict.
    pub(super) fn start(
        &mut self,
        fixed_pool: Option<FixedPool>,
        seed_memory: Option<(Vec<MemoryRecord>, Vec<PoolProblem>)>,
        warm_start: Option<&WarmStartReport>,
    ) -> Result<(), WorkerError> {
        self.state.next_seq = self.state.next_seq.max(self.store.seq_floor());
        // Whatever the last commit did not get to deliver goes first.
        let outbox = std::mem::take(&mut self.state.outbox);
        self.deliver(&outbox)?;
        self.live(Message::RunStarted {
            config: self.cfg.to_json(),
            code_version: self.opts.code_version.clone(),
            total_steps: self.cfg.run.steps,
        })?;
        if let Some(fixed) = fixed_pool {
            self.install_fixed_pool(fixed)?;
        } else {
            // A resumed fixed-env run: its pool came back with the state; report it again, since
            // a checkpoint taken before fixed pools were reported holds plays of unreported envs.
            self.report_fixed_envs()?;
        }
        if let Some((records, problems)) = seed_memory {
            self.install_seed_memory(records, &problems)?;
        }
        // The starting weights are checkpoint 0, so that evaluations can put the base model beside
        // the trained ones (the row is replaced on every start: a resume reports the same path).
        let base = PathBuf::from(&self.state.base_model);
        // A configured `model.path` lies in the service's model roots; a warm start lies in the
        // shared cache, outside anything the service accepts as this run's, so it is reported
        // through a link in the run's own directory.
        let (base, bytes) = if self.cfg.model.path.is_some() {
            let bytes = state::dir_bytes(&base);
            (base, bytes)
        } else {
            self.store.base_snapshot(&base)?
        };
        self.live(Message::Checkpoint {
            step: 0,
            path: reported_path(&base),
            bytes,
        })?;
        if let Some(r) = warm_start {
            // A warm start with a criterion says whether it met it, in the run's own log (what its
            // page shows): a designer that writes nothing valid means a run without a curriculum.
            let (level, line) = if r.needed > 0 {
                let level = if r.designer_ready() {
                    spade::report::LogLevel::Info
                } else {
                    spade::report::LogLevel::Warn
                };
                (
                    level,
                    format!(
                        "{}; SFT loss {:.3} -> {:.3}",
                        r.verdict(),
                        r.first_loss,
                        r.last_loss
                    ),
                )
            } else {
                (
                    spade::report::LogLevel::Info,
                    format!(
                        "warm start: designer acceptance {}/{} ({:.2}), SFT loss {:.3} -> {:.3}",
                        r.accepted, r.measured, r.acceptance_rate, r.first_loss, r.last_loss
                    ),
                )
            };
            self.live(Message::Log { level, line })?;
        }
        Ok(())
    }

    /// Reports the step's metrics, advances the step counter and commits when due.
    pub(super) fn end_step(
        &mut self,
        step: u64,
        mut m: BTreeMap<String, f64>,
    ) -> Result<BTreeMap<String, f64>, WorkerError> {
        for (name, secs) in self.phase_clock.take() {
            m.entry(name).or_insert(secs);
        }
        m.entry("time/step_s".into())
            .or_insert(self.step_started.elapsed().as_secs_f64());
        for (name, v) in self.system.take() {
            m.entry(name).or_insert(v);
        }
        // JSON has no NaN or infinity (serde_json writes `null`, which no reader takes as a
        // number), so a diverged value would make the whole report unreadable and fail the run:
        // it is left out of the step's metrics and named in the log instead.
        let (values, skipped) = super::metrics::finite_only(&m);
        for name in skipped {
            self.pending.push(Message::Log {
                level: spade::report::LogLevel::Warn,
                line: format!(
                    "metric {name} at step {step} is {}; not reported",
                    m.get(&name).copied().unwrap_or(f64::NAN)
                ),
            });
        }
        self.pending.push(Message::Metrics {
            step,
            elapsed_s: self.state.elapsed_s + self.step_started.elapsed().as_secs_f64(),
            values,
        });
        self.state.step = step + 1;
        self.state.elapsed_s += self.step_started.elapsed().as_secs_f64();
        self.step_started = Instant::now();
        let (snapshot, commit) = commits_after(&self.cfg.run, step);
        if commit {
            self.commit(snapshot, false)?;
        }
        let total = self.cfg.run.steps;
        (self.on)(Event::Step {
            step,
            total,
            metrics: m.clone(),
            committed: commit,
        });
        Ok(m)
    }

    /// Makes the state of the steps run so far durable (weights, optimiser, `state.json`), then
    /// delivers their messages. Only here does anything a step reported leave the worker, so
    /// whatever the sink holds is covered by a resume point on disk (see [`crate::state`]).
    /// `end`: the run's last commit (also of a cancelled run), which always writes the
    /// optimiser state.
    fn commit(&mut self, snapshot: bool, end: bool) -> Result<(), WorkerError> {
        self.state.elapsed_s += self.step_started.elapsed().as_secs_f64();
        self.step_started = Instant::now();
        let next_step = self.state.step;
        let msgs = std::mem::take(&mut self.pending);
        let mut outbox = Vec::with_capacity(msgs.len());
        for msg in msgs {
            outbox.push(self.next_envelope(msg)?);
        }
        if !self.opts.checkpoints {
            return self.deliver(&outbox);
        }
        self.state.outbox = outbox;
        // The optimiser state every `optimizer_every` steps (with the first commit at or after
        // each multiple: commits come every `weights_every` steps) and at the end; in between
        // the previous one is linked into the new directory.
        let previous = self.store.latest().join(state::OPTIMIZER);
        let opt_every = self.cfg.run.optimizer_every.max(1);
        let last_written = self.state.optimizer_step.unwrap_or(0);
        // A run on several ranks writes its shards at every commit: a shard older than the
        // weights would need its masters re-derived on every rank.
        let write_optimizer = next_step / opt_every > last_written / opt_every
            || end
            || !previous.exists()
            || self.opts.ranks.is_some();
        if write_optimizer {
            self.state.optimizer_step = Some(next_step);
        }
        let (policy, trainer, ranks) = (&self.policy, &self.trainer, &self.opts.ranks);
        self.store.commit(&self.state, |dir| {
            policy.save(dir)?;
            let path = dir.join(state::OPTIMIZER);
            if let Some(r) = ranks {
                // Every rank's shard is in the directory before it becomes the resume point.
                r.save_optimizers(&path, || Ok(trainer.save_optimizer(&path)?))?;
            } else if write_optimizer {
                trainer.save_optimizer(&path)?;
            } else {
                state::link_or_copy(&previous, &path)?;
            }
            Ok(())
        })?;
        let outbox = std::mem::take(&mut self.state.outbox);
        self.deliver(&outbox)?;
        if snapshot {
            let with_optimizer = self.state.optimizer_step == Some(next_step);
            let (path, bytes) = self.store.snapshot(next_step, with_optimizer)?;
            for gone in self.store.prune(self.cfg.run.checkpoint_keep)? {
                (self.on)(Event::Log(format!(
                    "removed checkpoint step-{gone} (run.checkpoint_keep = {})",
                    self.cfg.run.checkpoint_keep
                )));
            }
            self.live(Message::Checkpoint {
                step: next_step,
                path: reported_path(&path),
                bytes,
            })?;
        }
        Ok(())
    }

    /// Reports the end (the last step already scored and trained the open windows).
    pub(super) fn finish(&mut self, status: FinishStatus) -> Result<(), WorkerError> {
        // The end's checkpoint (also of a cancelled run: it resumes from here).
        self.commit(true, true)?;
        // The last progress names the steps completed, so a finished run shows 6/6, not the
        // index of its last step.
        self.phase("done")?;
        let mut message = format!("{} of {} steps", self.state.step, self.cfg.run.steps);
        if let Some(nothing) = nothing_usable(&self.state) {
            (self.on)(Event::Log(nothing.clone()));
            self.live(Message::Log {
                level: spade::report::LogLevel::Warn,
                line: nothing.clone(),
            })?;
            message = format!("{message}; {nothing}");
        }
        // The end is spooled behind every report before it, and the sink sends in seq order,
        // a batch per transaction: the service hears of the end only once everything before it
        // is stored, so a run never counts as succeeded with reports left in its spool. When
        // the service does not take them in time this fails, ending the worker as failed with
        // the end still spooled; a server that takes the spool then (the backend's `spool`
        // module) stores everything and records the success the end reports.
        self.live(Message::Finished { status, message })?;
        self.sink.finish()?;
        Ok(())
    }
}

/// What a run that designed environments but had none accepted says at its end (issue 35: a
/// run whose designer wrote nothing valid finished "succeeded" with flat curves and no word
/// why); `None` when something was accepted or nothing was designed (fixed-environment runs).
pub(crate) fn nothing_usable(st: &RunState) -> Option<String> {
    (st.attempts_total > 0 && st.accepted_total == 0).then(|| {
        format!(
            "nothing usable: the sandbox accepted none of the {} environments the designer \
             wrote, so there was no curriculum to play or train on",
            st.attempts_total
        )
    })
}

/// `broken_seed` of an environment a review retired (no episode broke it).
pub const RETIRED_SEED: i64 = -1;

/// Marks the live environments named in `retire` retired (see [`Loop::apply_retirements`])
/// and returns their reports; names that are not live, or already broken, are passed over.
pub(crate) fn retire_live(
    windows: &mut BTreeMap<String, state::Window>,
    retire: Vec<spade::report::Retire>,
    step: u64,
) -> Vec<Message> {
    let mut out = vec![];
    for r in retire {
        let Some(env) = windows
            .values_mut()
            .flat_map(|w| w.envs.iter_mut())
            .find(|e| e.env_id == r.env_id)
        else {
            continue; // not live (an older window's, or not this worker's)
        };
        if env.broken_seed.is_some() {
            continue;
        }
        env.failed = Some(format!("retired_by_review: {}", r.message));
        // No episode broke it: the sentinel seed says so (the service stores no seed).
        env.broken_seed = Some(RETIRED_SEED);
        out.push(Message::EnvironmentBroken {
            env_id: r.env_id,
            step,
            seed: RETIRED_SEED,
            reason: "retired_by_review".into(),
            message: r.message,
        });
    }
    out
}

/// A checkpoint's path as reported: absolute, because whoever reads it (an evaluation job)
/// runs in another working directory than this worker.
fn reported_path(path: &std::path::Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
