//! `GET /api/v1/runs/{id}/events`: a run's live updates ([`crate::events::EventHub`]) as
//! server-sent events.
//!
//! A stream is only as good as the access it was opened with: it checks the caller's session and
//! team membership again whenever an access change is announced
//! ([`EventHub::access_changed`](crate::events::EventHub::access_changed)) and every
//! [`ACCESS_RECHECK`] in any case (sessions also end by expiry), and ends with an `access_ended`
//! event when either is gone. The same tick reads the run's status, so changes nobody published
//! (the scheduler finishing a job) still reach an open page within [`ACCESS_RECHECK`]. Every
//! [`OUTPUT_POLL`] while the run is active it reads the job's output, which is what the page's
//! log shows: new lines go out as `log` events (the whole tail as `log_tail` on the first read),
//! and until the worker reports a phase, the warm start's epoch goes out as `progress`.

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiResult};
use crate::events::{CAPACITY, OutputFollower, OutputUpdate, RunEvent, status_event, total_steps};
use crate::service::{self, member_scope};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{Stream, StreamExt};
use spade_app::dto::LogLine;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

/// Longest time an open stream goes without checking that its caller may still read the run,
/// and without reading the run's status (see [`run_events`]).
pub const ACCESS_RECHECK: Duration = Duration::from_secs(5);

/// How often an open stream reads the job's output for new log lines and the warm start's
/// phase (the worker reports neither while it prints them).
pub const OUTPUT_POLL: Duration = Duration::from_secs(2);

/// The level the page shows job output lines with (as [`service::pages::run`] renders them).
const OUTPUT_LEVEL: &str = "out";

fn to_sse(e: &RunEvent) -> Event {
    Event::default()
        .event(e.name())
        .json_data(e)
        .unwrap_or_else(|_| Event::default().event("error").data("unserializable event"))
}

/// `GET /api/v1/runs/{run_id}/events`: a `status` event with the current state first, then
/// every update as it happens, until the caller's access ends (`access_ended`, see the module
/// doc) or the client goes away.
pub async fn run_events(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let scope = member_scope(&state.ctx, &auth.caller(), run_id).await?;
    // Subscribe before reading the snapshot, so nothing between the two is lost.
    let mut live = state.ctx.events.subscribe(run_id);
    let mut access = state.ctx.events.access_announcements();
    let run = service::runs::get(&state.ctx.db, &scope).await?;
    // Before the worker's first report its total is the configured one, as the page shows
    // it (`events::total_steps`); an empty phase leaves the page's own (`crate::live`).
    let first = [
        status_event(run.status),
        RunEvent::Progress {
            step: u64::try_from(run.progress_step).unwrap_or(0),
            total_steps: total_steps(&run),
            phase: run.phase.clone().unwrap_or_default(),
        },
    ];
    let (tx, rx) = mpsc::channel::<Event>(CAPACITY);
    for e in &first {
        let _ = tx.try_send(to_sse(e));
    }
    let mut last_status: spade_app::dto::RunStatus = run.status;
    let mut progress = (
        u64::try_from(run.progress_step).unwrap_or(0),
        total_steps(&run),
    );
    // Whether the worker has reported a phase: until then the page's phase is read from the
    // job's output (the warm start prints its epochs long before the first step).
    let mut worker_phase = run.phase.is_some();
    let mut output_phase: Option<String> = None;
    let mut output = OutputFollower::default();
    // Once the page's log is the job's output, the worker's reported lines are in it already
    // (it prints what it reports): forwarding them too would show each twice.
    let mut log_is_output = false;
    let mut read_after_end = false;
    tokio::spawn(async move {
        let mut recheck = tokio::time::interval(ACCESS_RECHECK);
        recheck.tick().await;
        let mut output_poll = tokio::time::interval(OUTPUT_POLL);
        loop {
            // (events to send, whether the stream ends after them)
            let (events, last) = tokio::select! {
                item = live.recv() => match item {
                    Ok(RunEvent::Log { .. }) if log_is_output => continue,
                    Ok(e) => {
                        match &e {
                            RunEvent::Status { status } => last_status = *status,
                            RunEvent::Progress { step, total_steps, phase } => {
                                progress = (*step, *total_steps);
                                worker_phase |= !phase.is_empty();
                            }
                            _ => {}
                        }
                        (vec![to_sse(&e)], false)
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        (vec![Event::default().event("lagged").data(n.to_string())], false)
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = access.recv() => match still_allowed(&state, &auth, run_id).await {
                    true => continue,
                    false => (vec![access_ended()], true),
                },
                _ = recheck.tick() => {
                    if !still_allowed(&state, &auth, run_id).await {
                        (vec![access_ended()], true)
                    } else {
                        // Some status changes are made where no event is published (the
                        // scheduler finishing a job, another server): read it, and tell the
                        // page when it moved, so an open page never stays "cancelling".
                        match service::runs::get(&state.ctx.db, &scope).await {
                            Ok(r) if r.status != last_status => {
                                last_status = r.status;
                                (vec![to_sse(&status_event(r.status))], false)
                            }
                            _ => continue,
                        }
                    }
                }
                // The job's output while the run is active, and once more after it ended (its
                // last lines).
                _ = output_poll.tick(), if last_status.is_active() || !read_after_end => {
                    read_after_end = !last_status.is_active();
                    let Some(lines) = service::pages::output_tail(&state.ctx, &scope).await else {
                        continue;
                    };
                    log_is_output = true;
                    let mut events = output_events(&mut output, &lines);
                    if !worker_phase {
                        let phase = service::pages::warm_start_phase(&lines);
                        if phase.is_some() && phase != output_phase {
                            output_phase = phase.clone();
                            events.push(to_sse(&RunEvent::Progress {
                                step: progress.0,
                                total_steps: progress.1,
                                phase: phase.unwrap_or_default(),
                            }));
                        }
                    }
                    (events, false)
                }
                () = tx.closed() => break,
            };
            for event in events {
                if tx.send(event).await.is_err() {
                    return;
                }
            }
            if last {
                break;
            }
        }
    });
    Ok(Sse::new(ReceiverStream::new(rx).map(Ok))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The log events of a fresh read of the job's output: the lines it added, or the whole tail
/// when the page's lines must be replaced.
fn output_events(follower: &mut OutputFollower, lines: &[LogLine]) -> Vec<Event> {
    let texts = lines.iter().map(|l| l.line.clone()).collect();
    match follower.update(texts) {
        OutputUpdate::Same => Vec::new(),
        OutputUpdate::Append(new) => new
            .into_iter()
            .map(|line| {
                to_sse(&RunEvent::Log {
                    level: OUTPUT_LEVEL.into(),
                    line,
                })
            })
            .collect(),
        OutputUpdate::Reset(_) => vec![to_sse(&RunEvent::LogTail {
            lines: lines.to_vec(),
        })],
    }
}

/// The last event of a stream whose caller lost access.
fn access_ended() -> Event {
    Event::default()
        .event("access_ended")
        .data("your session ended or you are no longer a member of this run's team")
}

/// Whether the caller of a stream may still read the run: the session is live and the user is
/// still a member of the run's team. A database error counts as "no" (the page reconnects and
/// is checked from scratch).
async fn still_allowed(state: &AppState, auth: &AuthUser, run_id: i64) -> bool {
    auth.session_is_live(state).await
        && member_scope(&state.ctx, &auth.caller(), run_id)
            .await
            .is_ok()
}
