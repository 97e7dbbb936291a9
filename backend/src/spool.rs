//! Taking an ended job's report spool (issue 36, item 5). A worker writes every report to
//! `spool.jsonl` in its run's state directory before posting it, and at the run's end waits for
//! the service to take what is left (`spade worker --final-flush-secs`, 15 minutes by default).
//! When the service stays away longer, the worker ends as failed with its reports still in the
//! spool: before this module the run then showed a third of its environments and metrics and
//! nothing said why. Now, when the scheduler sees a training job end (while watching it, or
//! after a restart, on re-attaching), the server stores what the spool still holds through the
//! ingest route's own checks ([`crate::api::ingest::store`]), removes what it stored from the
//! file, and says so in the job's message. A spool that ends with the worker's own `finished`
//! report of success makes the job a success: the run did finish, only its report was late.

use crate::AppState;
use spade::report::{Envelope, FinishStatus, MAX_ENVELOPES_PER_BATCH, Message};
use spade_db::RunScope;
use spade_db::jobs::JobState;
use spade_scheduler::{JobEnd, TokenSource};
use std::path::{Path, PathBuf};

/// The file a worker spools its reports in, inside its data directory (`crate::sink` of the
/// worker writes it).
pub const SPOOL_FILE: &str = "spool.jsonl";

/// What [`take`] stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// Envelopes stored (or acknowledged again: a replay of a stored key).
    pub stored: usize,
    /// Envelopes left in the spool (a batch the service refused, and everything after it).
    pub left: usize,
    /// How the worker's own last report ended the run, when the spool held it.
    pub finished: Option<FinishStatus>,
    /// Why the rest was left, when something was.
    pub refused: Option<String>,
}

/// Errors reading or rewriting a spool.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("cannot read or rewrite {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the run of this spool is gone: {0}")]
    Run(#[from] spade_db::DbError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Stores what `dir`'s spool holds for run `run_id` and leaves in the file only what could not
/// be stored. `None` when there is no spool or it is empty. Lines that do not parse are skipped
/// (a torn last line: a killed worker's half-written report is still in its outbox) and
/// envelopes of other runs are left out, so a spool can never write into another run.
pub async fn take(state: &AppState, run_id: i64, dir: &Path) -> Result<Option<Taken>, SpoolError> {
    let path = dir.join(SPOOL_FILE);
    let text = match tokio::fs::read_to_string(&path).await {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    let run = run_id.to_string();
    let mut seen = std::collections::HashSet::new();
    let envelopes: Vec<Envelope> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Envelope>(line).ok())
        .filter(|e| e.run_id == run && seen.insert(e.key.clone()))
        .collect();
    if envelopes.is_empty() {
        return Ok(None);
    }
    let scope = RunScope::for_ended_job(&state.ctx.db, run_id).await?;
    let mut taken = Taken::default();
    let mut stored = 0;
    for batch in envelopes.chunks(MAX_ENVELOPES_PER_BATCH) {
        match crate::api::ingest::store(state, &scope, batch).await {
            Ok(_) => stored += batch.len(),
            Err(e) => {
                taken.refused = Some(e.to_string());
                break;
            }
        }
    }
    taken.stored = stored;
    taken.left = envelopes.len() - stored;
    // The first end counts, as in the database (a finished run stays finished).
    taken.finished = envelopes[..stored].iter().find_map(|e| match &e.message {
        Message::Finished { status, .. } => Some(*status),
        _ => None,
    });
    // What was stored leaves the file; the rest stays for a resumed attempt or an operator.
    if taken.left == 0 {
        tokio::fs::remove_file(&path).await.map_err(io(&path))?;
    } else {
        let mut rest = String::new();
        for e in &envelopes[stored..] {
            rest.push_str(&serde_json::to_string(e).unwrap_or_default());
            rest.push('\n');
        }
        let tmp = path.with_extension("jsonl.taking");
        tokio::fs::write(&tmp, rest).await.map_err(io(&tmp))?;
        tokio::fs::rename(&tmp, &path).await.map_err(io(&path))?;
    }
    Ok(Some(taken))
}

/// The end to record for run `run_id`'s training job, whose spool lies in `dir`: `end` as the
/// executor saw it, after taking the spool (see the module doc).
pub async fn settle(state: &AppState, run_id: i64, dir: &Path, end: JobEnd) -> JobEnd {
    let taken = match take(state, run_id, dir).await {
        Ok(Some(t)) => t,
        Ok(None) => return end,
        Err(e) => {
            tracing::warn!(run_id, error = %e, "the ended job's spool could not be taken");
            return JobEnd {
                message: format!("{}; its report spool could not be taken: {e}", end.message),
                ..end
            };
        }
    };
    tracing::info!(
        run_id,
        stored = taken.stored,
        left = taken.left,
        "took an ended job's spool"
    );
    let mut message = format!(
        "{}; the server took {} report(s) its worker could not send",
        end.message, taken.stored
    );
    if let Some(why) = &taken.refused {
        message.push_str(&format!(
            ", and left {} in {} ({why})",
            taken.left,
            dir.join(SPOOL_FILE).display()
        ));
    }
    let finished_ok = taken.finished == Some(FinishStatus::Succeeded) && taken.left == 0;
    let state = if end.state == JobState::Failed && finished_ok {
        message.push_str(", the last being its report that the run succeeded");
        JobState::Succeeded
    } else {
        end.state
    };
    JobEnd {
        state,
        message,
        ..end
    }
}

/// [`crate::scheduling::LaunchTokens`] that also take an ended training job's spool from its
/// run's state directory under `jobs_dir` ([`settle`]).
#[derive(Debug, Clone)]
pub struct SpoolTaking {
    pub tokens: crate::scheduling::LaunchTokens,
    pub state: AppState,
    /// `--jobs-dir`: a run's state directory is `spade_scheduler::run_state_dir(jobs_dir, run)`.
    pub jobs_dir: PathBuf,
}

impl TokenSource for SpoolTaking {
    async fn token(&self, job: &spade_db::jobs::Job) -> Result<String, String> {
        self.tokens.token(job).await
    }

    async fn train_job_ended(&self, job: &spade_db::jobs::Job, end: JobEnd) -> JobEnd {
        let dir = spade_scheduler::run_state_dir(&self.jobs_dir, job.run_id);
        settle(&self.state, job.run_id, &dir, end).await
    }
}

/// The scheduler as the server runs it ([`crate::scheduling::spawn`]): tokens that take an
/// ended job's spool into `state`'s database (its path rules and live pages apply).
pub fn spawn_scheduler(
    state: &AppState,
    s: &crate::config::SchedulerSettings,
    listen: std::net::SocketAddr,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<()>>, crate::scheduling::SchedulingError> {
    let tokens = SpoolTaking {
        tokens: crate::scheduling::LaunchTokens {
            db: state.ctx.db.clone(),
        },
        state: state.clone(),
        jobs_dir: s.jobs_dir.clone(),
    };
    crate::scheduling::spawn(state.ctx.db.clone(), s, listen, tokens, shutdown)
}
