//! `GET /api/v1/runs/{id}/events`: a run's live updates ([`crate::events::EventHub`]) as
//! server-sent events.
//!
//! A stream is only as good as the access it was opened with: it checks the caller's session and
//! team membership again whenever an access change is announced
//! ([`EventHub::access_changed`](crate::events::EventHub::access_changed)) and every
//! [`ACCESS_RECHECK`] in any case (sessions also end by expiry), and ends with an `access_ended`
//! event when either is gone. The same tick reads the run's status, so changes nobody published
//! (the scheduler finishing a job) still reach an open page within [`ACCESS_RECHECK`].

use crate::AppState;
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiResult};
use crate::events::{CAPACITY, RunEvent, status_event, total_steps};
use crate::service::{self, member_scope};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{Stream, StreamExt};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

/// Longest time an open stream goes without checking that its caller may still read the run,
/// and without reading the run's status (see [`run_events`]).
pub const ACCESS_RECHECK: Duration = Duration::from_secs(5);

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
    tokio::spawn(async move {
        let mut recheck = tokio::time::interval(ACCESS_RECHECK);
        recheck.tick().await;
        loop {
            // (event to send, whether it is the last one)
            let (event, last) = tokio::select! {
                item = live.recv() => match item {
                    Ok(e) => {
                        if let RunEvent::Status { status } = &e {
                            last_status = *status;
                        }
                        (to_sse(&e), false)
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        (Event::default().event("lagged").data(n.to_string()), false)
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = access.recv() => match still_allowed(&state, &auth, run_id).await {
                    true => continue,
                    false => (access_ended(), true),
                },
                _ = recheck.tick() => {
                    if !still_allowed(&state, &auth, run_id).await {
                        (access_ended(), true)
                    } else {
                        // Some status changes are made where no event is published (the
                        // scheduler finishing a job, another server): read it, and tell the
                        // page when it moved, so an open page never stays "cancelling".
                        match service::runs::get(&state.ctx.db, &scope).await {
                            Ok(r) if r.status != last_status => {
                                last_status = r.status;
                                (to_sse(&status_event(r.status)), false)
                            }
                            _ => continue,
                        }
                    }
                }
                () = tx.closed() => break,
            };
            if tx.send(event).await.is_err() || last {
                break;
            }
        }
    });
    Ok(Sse::new(ReceiverStream::new(rx).map(Ok))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
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
