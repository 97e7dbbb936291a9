//! The local executor: a job is a child process of the server's machine, in its own process
//! group, with stdout and stderr appended to `<jobs dir>/spade-run-<run>-a<attempt>/output.log`.
//! Every attempt of a run gets the same state directory, `<jobs dir>/spade-run-<run>-state`
//! (absolute, in `SPADE_WORKER_DATA_DIR`), where the worker keeps its checkpoints and report
//! spool: attempt 2 after a killed attempt 1 resumes from the last checkpoint instead of
//! starting over in an empty directory.
//!
//! A server restart must neither lose nor duplicate a job, so everything needed to find the
//! process again lives on disk, not in memory: `job.json` records the pid, the process's start
//! time (field 22 of `/proc/<pid>/stat`, in clock ticks since boot) and its GPUs, and a small
//! `sh` wrapper writes the exit status to `exit_status` when the command ends. The handle
//! `pid:<pid>:<start ticks>` only matches while that very process lives: a recycled pid has
//! another start time. Stop sends SIGTERM to the group, then SIGKILL after a grace period.

use crate::{ExecError, Executor, ExecutorKind, JobHandle, JobRef, JobSpec, JobStatus, Started};
use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Records the command's exit status where a restarted server can read it. The `:` trap keeps
/// the shell alive through a SIGTERM sent to the group (a handler, unlike an ignored signal, is
/// not inherited by the command), so a stopped job still leaves `exit_status` (143).
const WRAPPER: &str = r#"trap : TERM INT HUP
exit_file=$1; shift
"$@"
code=$?
printf '%s\n' "$code" > "$exit_file.tmp" && mv "$exit_file.tmp" "$exit_file"
exit "$code""#;

/// Run `run_id`'s state directory in `jobs_dir`: the one name the executor gives it and the
/// server's path rule (`spade_server::paths`) holds the run's checkpoints to.
pub fn run_state_dir(jobs_dir: &Path, run_id: i64) -> PathBuf {
    jobs_dir.join(format!("spade-run-{run_id}-state"))
}

/// Configuration of [`LocalExecutor`].
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// The job's command template (see [`JobSpec::expand`]), e.g.
    /// `spade worker --run {run} --server {server}`.
    pub command: Vec<String>,
    /// One directory per job goes here (e.g. `<server data dir>/jobs`).
    pub jobs_dir: PathBuf,
    /// How many CPU-only jobs may run at once.
    pub cpu_slots: u32,
    /// The GPUs this machine lends to jobs, by CUDA device index: each job gets a disjoint set
    /// of them as its `CUDA_VISIBLE_DEVICES`.
    pub gpus: Vec<u32>,
    /// How long a stopped job may take to exit after SIGTERM before it gets SIGKILL.
    pub stop_grace: Duration,
}

/// What `job.json` holds.
#[derive(Debug, Serialize, Deserialize)]
struct JobRecord {
    /// The SPADE job this directory belongs to.
    job_id: i64,
    pid: i32,
    start_ticks: u64,
    gpus: Vec<u32>,
    command: Vec<String>,
}

#[derive(Debug)]
struct Entry {
    gpus: Vec<u32>,
    /// Present when this instance spawned the process: polled to reap it.
    child: Option<Child>,
}

/// Runs jobs as local processes; see the module docs.
#[derive(Debug)]
pub struct LocalExecutor {
    cfg: LocalConfig,
    jobs: Mutex<HashMap<i64, Entry>>,
}

impl LocalExecutor {
    pub fn new(cfg: LocalConfig) -> Self {
        Self {
            cfg,
            jobs: Mutex::new(HashMap::new()),
        }
    }

    /// `<jobs_dir>/spade-run-<run>-state`, absolute (the job runs in its own directory): what
    /// every attempt of the run shares (see the module doc).
    pub fn state_dir(&self, run_id: i64) -> PathBuf {
        let dir = run_state_dir(&self.cfg.jobs_dir, run_id);
        if dir.is_absolute() {
            dir
        } else {
            std::env::current_dir()
                .map(|cwd| cwd.join(&dir))
                .unwrap_or(dir)
        }
    }

    /// `<jobs_dir>/spade-run-<run>-a<attempt>`.
    pub fn job_dir(&self, run_id: i64, attempt: u32) -> PathBuf {
        self.cfg
            .jobs_dir
            .join(crate::ray_submission_id(run_id, attempt))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<i64, Entry>> {
        // A panic while holding this lock leaves a consistent map (every update is one insert
        // or remove), so a poisoned lock is still usable.
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Free GPU indices and the number of CPU jobs, under the lock.
    fn pick_gpus(jobs: &HashMap<i64, Entry>, cfg: &LocalConfig, gpus: u32) -> Option<Vec<u32>> {
        if gpus == 0 {
            let cpu_jobs = jobs.values().filter(|e| e.gpus.is_empty()).count();
            return (cpu_jobs < cfg.cpu_slots as usize).then(Vec::new);
        }
        let used: Vec<u32> = jobs.values().flat_map(|e| e.gpus.iter().copied()).collect();
        let free: Vec<u32> = cfg
            .gpus
            .iter()
            .copied()
            .filter(|g| !used.contains(g))
            .collect();
        (free.len() >= gpus as usize).then(|| free[..gpus as usize].to_vec())
    }

    /// Why a job needing `needed` GPUs cannot start now, under the lock.
    fn waiting(jobs: &HashMap<i64, Entry>, cfg: &LocalConfig, needed: u32) -> ExecError {
        let total = cfg.gpus.len() as u32;
        let used = jobs.values().map(|e| e.gpus.len() as u32).sum::<u32>();
        ExecError::WaitingForGpus {
            needed,
            free: total.saturating_sub(used),
            total,
        }
    }

    fn read_record(dir: &Path) -> Result<Option<JobRecord>, ExecError> {
        let path = dir.join("job.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ExecError::Io { path, source }),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ExecError::Io {
                path,
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
    }

    fn spawn(&self, spec: &JobSpec, dir: &Path, gpus: &[u32]) -> Result<Started, ExecError> {
        let argv = spec.argv(&self.cfg.command);
        let program = argv.first().ok_or(ExecError::EmptyCommand)?;
        if resolve_program(program).is_none() {
            return Err(ExecError::CommandNotFound {
                program: program.clone(),
            });
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ExecError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let log_path = dir.join("output.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io(&log_path))?;
        let log2 = log.try_clone().map_err(io(&log_path))?;
        let exit_file = dir.join("exit_status");
        let devices: Vec<String> = gpus.iter().map(u32::to_string).collect();
        let child = Command::new("/bin/sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("spade-job")
            .arg(&exit_file)
            .args(&argv)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .env("SPADE_WORKER_TOKEN", &spec.token)
            .env("SPADE_RUN_ID", spec.run_id.to_string())
            .env("SPADE_JOB_ID", spec.job_id.to_string())
            .env("SPADE_WORKER_DATA_DIR", self.state_dir(spec.run_id))
            .env("CUDA_VISIBLE_DEVICES", devices.join(","))
            .process_group(0)
            .spawn()
            .map_err(|source| ExecError::Spawn {
                program: program.clone(),
                source,
            })?;
        let pid = child.id() as i32;
        let start_ticks = match proc_start(pid) {
            Some((ticks, _)) => ticks,
            // Exited already and reaped by nobody yet is still in /proc; gone means /proc is
            // not mounted, which this executor needs.
            None => {
                return Err(ExecError::Io {
                    path: PathBuf::from(format!("/proc/{pid}/stat")),
                    source: std::io::Error::other("cannot read the new process's start time"),
                });
            }
        };
        let record = JobRecord {
            job_id: spec.job_id,
            pid,
            start_ticks,
            gpus: gpus.to_vec(),
            command: argv,
        };
        let rec_path = dir.join("job.json");
        let tmp = dir.join("job.json.tmp");
        let json = serde_json::to_vec_pretty(&record).map_err(|e| ExecError::Io {
            path: rec_path.clone(),
            source: std::io::Error::other(e),
        })?;
        std::fs::write(&tmp, json).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &rec_path).map_err(io(&rec_path))?;
        self.lock().insert(
            spec.job_id,
            Entry {
                gpus: gpus.to_vec(),
                child: Some(child),
            },
        );
        Ok(Started {
            external_id: format!("pid:{pid}:{start_ticks}"),
            log_path: Some(log_path),
        })
    }

    /// Whether the handle's process still runs (and is the same process), reaping it when this
    /// instance is its parent.
    fn alive(&self, job_id: i64, pid: i32, start_ticks: u64) -> bool {
        if let Some(Entry {
            child: Some(child), ..
        }) = self.lock().get_mut(&job_id)
            && matches!(child.try_wait(), Ok(Some(_)))
        {
            return false;
        }
        matches!(proc_start(pid), Some((t, state)) if t == start_ticks && state != 'Z')
    }
}

/// `pid:<pid>:<start ticks>` -> (pid, start ticks).
fn parse_external_id(id: &str) -> Result<(i32, u64), ExecError> {
    let bad = || ExecError::BadExternalId {
        external_id: id.to_owned(),
        executor: "local",
        expected: "pid:<pid>:<start ticks>",
    };
    let rest = id.strip_prefix("pid:").ok_or_else(bad)?;
    let (pid, ticks) = rest.split_once(':').ok_or_else(bad)?;
    let pid: i32 = pid.parse().map_err(|_| bad())?;
    let ticks: u64 = ticks.parse().map_err(|_| bad())?;
    if pid <= 1 {
        return Err(bad());
    }
    Ok((pid, ticks))
}

/// Start time (clock ticks since boot) and state letter of a process, from `/proc/<pid>/stat`.
/// The command name (field 2) may hold spaces and parentheses, so fields are counted after the
/// last `)`.
fn proc_start(pid: i32) -> Option<(u64, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3) come fields 4..; starttime is field 22.
    let start = fields.nth(22 - 4)?.parse().ok()?;
    Some((start, state))
}

/// A program path as `Command` would find it: as given when it contains a slash, else on PATH.
fn resolve_program(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| executable(p))
}

fn read_exit_status(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("exit_status"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn status_from_code(code: i32) -> JobStatus {
    match code {
        0 => JobStatus::Succeeded,
        // The shell reports death by signal N as 128 + N.
        c if c > 128 && c < 128 + 65 => JobStatus::Failed {
            exit_code: Some(c),
            message: format!("terminated by signal {}", c - 128),
        },
        c => JobStatus::Failed {
            exit_code: Some(c),
            message: format!("exited with status {c}"),
        },
    }
}

fn signal_group(pgid: i32, sig: Signal) -> Result<(), ExecError> {
    let Some(pid) = Pid::from_raw(pgid) else {
        return Ok(());
    };
    match rustix::process::kill_process_group(pid, sig) {
        Ok(()) => Ok(()),
        // The group is already gone.
        Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(ExecError::Signal {
            pgid,
            source: e.into(),
        }),
    }
}

/// Whether process group `pgid` has a member that is not a zombie (a zombie leader keeps the
/// group "existing" for `kill` until its parent reaps it, but has nothing left to stop).
fn group_alive(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(close) = stat.rfind(')') else {
            return false;
        };
        // After the command name: state (field 3), ppid (4), pgrp (5).
        let mut f = stat[close + 1..].split_whitespace();
        let state = f.next().unwrap_or("Z");
        let pgrp = f.nth(1).and_then(|p| p.parse::<i32>().ok());
        pgrp == Some(pgid) && state != "Z"
    })
}

impl Executor for LocalExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Local
    }

    fn has_capacity(&self, gpus: u32) -> bool {
        Self::pick_gpus(&self.lock(), &self.cfg, gpus).is_some()
    }

    fn gpu_wait(&self, gpus: u32) -> Option<ExecError> {
        let total = self.cfg.gpus.len() as u32;
        if gpus == 0 || gpus > total {
            return None; // a CPU job, or one `start` refuses outright
        }
        let jobs = self.lock();
        Self::pick_gpus(&jobs, &self.cfg, gpus)
            .is_none()
            .then(|| Self::waiting(&jobs, &self.cfg, gpus))
    }

    async fn start(&self, spec: &JobSpec) -> Result<Started, ExecError> {
        // Started before (a crash between spawn and recording it): hand back the same process.
        if let Some(started) = self.find(&spec.job_ref()).await? {
            return Ok(started);
        }
        let dir = self.job_dir(spec.run_id, spec.attempt);
        let total = self.cfg.gpus.len() as u32;
        if spec.gpus > total {
            return Err(ExecError::TooManyGpus {
                needed: spec.gpus,
                total,
            });
        }
        let gpus = {
            let jobs = self.lock();
            Self::pick_gpus(&jobs, &self.cfg, spec.gpus).ok_or_else(|| {
                if spec.gpus == 0 {
                    ExecError::NoCapacity {
                        what: "CPU",
                        total: self.cfg.cpu_slots,
                    }
                } else {
                    Self::waiting(&jobs, &self.cfg, spec.gpus)
                }
            })?
        };
        self.spawn(spec, &dir, &gpus)
    }

    async fn find(&self, job: &JobRef) -> Result<Option<Started>, ExecError> {
        let dir = self.job_dir(job.run_id, job.attempt);
        let Some(rec) = Self::read_record(&dir)? else {
            return Ok(None);
        };
        if rec.job_id != job.job_id {
            return Err(ExecError::StaleJobDir {
                dir,
                found: rec.job_id,
                job_id: job.job_id,
            });
        }
        let handle = JobHandle {
            job_id: job.job_id,
            run_id: job.run_id,
            attempt: job.attempt,
            external_id: format!("pid:{}:{}", rec.pid, rec.start_ticks),
        };
        self.adopt(&handle).await?;
        Ok(Some(Started {
            external_id: handle.external_id,
            log_path: Some(dir.join("output.log")),
        }))
    }

    async fn adopt(&self, handle: &JobHandle) -> Result<(), ExecError> {
        parse_external_id(&handle.external_id)?;
        let dir = self.job_dir(handle.run_id, handle.attempt);
        let gpus = Self::read_record(&dir)?.map(|r| r.gpus).unwrap_or_default();
        self.lock()
            .entry(handle.job_id)
            .or_insert(Entry { gpus, child: None });
        Ok(())
    }

    async fn poll(&self, handle: &JobHandle) -> Result<JobStatus, ExecError> {
        let (pid, ticks) = parse_external_id(&handle.external_id)?;
        if self.alive(handle.job_id, pid, ticks) {
            return Ok(JobStatus::Running);
        }
        let dir = self.job_dir(handle.run_id, handle.attempt);
        if let Some(code) = read_exit_status(&dir) {
            return Ok(status_from_code(code));
        }
        // No exit record: the wrapper itself was killed (SIGKILL), or the machine restarted.
        let from_child = self
            .lock()
            .get_mut(&handle.job_id)
            .and_then(|e| e.child.as_mut())
            .and_then(|c| c.try_wait().ok().flatten());
        Ok(match from_child {
            Some(st) => {
                use std::os::unix::process::ExitStatusExt;
                JobStatus::Failed {
                    exit_code: st.code(),
                    message: match st.signal() {
                        Some(sig) => format!("killed by signal {sig}"),
                        None => format!("exited with {st}"),
                    },
                }
            }
            None => JobStatus::Lost {
                message: format!(
                    "process {pid} is gone and left no exit status in {} (killed with SIGKILL, \
                     or the machine restarted)",
                    dir.display()
                ),
            },
        })
    }

    async fn logs(&self, handle: &JobHandle, max_bytes: usize) -> Result<String, ExecError> {
        let path = self
            .job_dir(handle.run_id, handle.attempt)
            .join("output.log");
        let io = |source| ExecError::Io {
            path: path.clone(),
            source,
        };
        let mut f = std::fs::File::open(&path).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        let from = len.saturating_sub(max_bytes as u64);
        f.seek(SeekFrom::Start(from)).map_err(io)?;
        let mut bytes = Vec::with_capacity((len - from) as usize);
        f.read_to_end(&mut bytes).map_err(io)?;
        let text = String::from_utf8_lossy(&bytes);
        // Start at a line boundary when the read began mid-file.
        if from > 0
            && let Some(i) = text.find('\n')
            && i + 1 < text.len()
        {
            return Ok(text[i + 1..].to_owned());
        }
        Ok(text.into_owned())
    }

    async fn stop(&self, handle: &JobHandle) -> Result<(), ExecError> {
        let (pid, ticks) = parse_external_id(&handle.external_id)?;
        if !self.alive(handle.job_id, pid, ticks) {
            // The leader is gone; stray members of its group (if any) still get a SIGKILL.
            if proc_start(pid).is_none_or(|(t, _)| t == ticks) && group_alive(pid) {
                signal_group(pid, Signal::KILL)?;
            }
            return Ok(());
        }
        signal_group(pid, Signal::TERM)?;
        let deadline = Instant::now() + self.cfg.stop_grace;
        while Instant::now() < deadline && group_alive(pid) {
            self.alive(handle.job_id, pid, ticks);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if group_alive(pid) {
            tracing::warn!(pid, grace = ?self.cfg.stop_grace, "job ignored SIGTERM; sending SIGKILL");
            signal_group(pid, Signal::KILL)?;
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && group_alive(pid) {
                self.alive(handle.job_id, pid, ticks);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    fn release(&self, handle: &JobHandle) {
        if let Some(Entry {
            child: Some(mut child),
            ..
        }) = self.lock().remove(&handle.job_id)
        {
            // Reap it if it has ended; a live child is left running (release is for jobs whose
            // final state is recorded, so it has ended).
            let _ = child.try_wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_ids_round_trip_and_garbage_is_refused() {
        assert_eq!(parse_external_id("pid:123:456").ok(), Some((123, 456)));
        for bad in ["123:456", "pid:abc:1", "pid:1:2", "pid:5", "spade-run-1-a1"] {
            let err = parse_external_id(bad).expect_err(bad);
            assert!(err.to_string().contains("pid:<pid>:<start ticks>"), "{err}");
        }
    }

    #[test]
    fn this_process_has_a_start_time_and_exit_codes_read_as_people_say_them() {
        let me = std::process::id() as i32;
        let (ticks, state) = proc_start(me).expect("/proc is mounted");
        assert!(ticks > 0);
        assert_ne!(state, 'Z');
        assert_eq!(status_from_code(0), JobStatus::Succeeded);
        assert!(
            matches!(status_from_code(143), JobStatus::Failed { message, .. } if message == "terminated by signal 15")
        );
        assert!(matches!(
            status_from_code(3),
            JobStatus::Failed {
                exit_code: Some(3),
                ..
            }
        ));
        assert!(resolve_program("sh").is_some());
        assert!(resolve_program("surely-not-a-program-xyz").is_none());
    }
}
