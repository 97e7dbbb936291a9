//! Live run updates: one tokio broadcast channel per run with open pages, fed by ingestion and
//! by the API's status changes, read by `GET /api/v1/runs/{id}/events` as server-sent events.
//! A page that falls behind gets a `lagged` event and should reload; nothing blocks a writer.

use crate::AppState;
use crate::api::member_scope;
use crate::auth::AuthUser;
use crate::error::{ApiPath, ApiResult};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Serialize;
use spade_db::{RunStatus, runs};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

/// Events buffered per run for slow readers.
const CAPACITY: usize = 256;

/// One update of a run page; the SSE event name is the `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    Status {
        status: RunStatus,
    },
    Progress {
        step: u64,
        total_steps: u64,
        phase: String,
    },
    Metrics {
        step: u64,
        values: BTreeMap<String, f64>,
    },
    Environment {
        env_id: String,
        step: u64,
        skill: String,
        status: String,
    },
    Checkpoint {
        step: u64,
    },
    Log {
        level: String,
        line: String,
    },
}

impl RunEvent {
    fn name(&self) -> &'static str {
        match self {
            RunEvent::Status { .. } => "status",
            RunEvent::Progress { .. } => "progress",
            RunEvent::Metrics { .. } => "metrics",
            RunEvent::Environment { .. } => "environment",
            RunEvent::Checkpoint { .. } => "checkpoint",
            RunEvent::Log { .. } => "log",
        }
    }
}

/// The channels of runs that have listeners.
#[derive(Debug, Clone, Default)]
pub struct EventHub {
    channels: Arc<Mutex<HashMap<i64, broadcast::Sender<RunEvent>>>>,
}

impl EventHub {
    /// Listens to one run.
    pub fn subscribe(&self, run_id: i64) -> broadcast::Receiver<RunEvent> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(run_id)
            .or_insert_with(|| broadcast::channel(CAPACITY).0)
            .subscribe()
    }

    /// Sends to the run's listeners, if any; channels without listeners are dropped.
    pub fn publish(&self, run_id: i64, event: RunEvent) {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(&run_id)
            && tx.send(event).is_err()
        {
            map.remove(&run_id);
        }
    }
}

fn to_sse(e: &RunEvent) -> Event {
    Event::default()
        .event(e.name())
        .json_data(e)
        .unwrap_or_else(|_| Event::default().event("error").data("unserializable event"))
}

/// `GET /api/v1/runs/{run_id}/events`: a `status` event with the current state first, then
/// every update as it happens.
pub async fn run_events(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let scope = member_scope(&state, &auth, run_id).await?;
    // Subscribe before reading the snapshot, so nothing between the two is lost.
    let rx = state.events.subscribe(run_id);
    let run = runs::get(&state.db, &scope).await?;
    let first = [
        RunEvent::Status { status: run.status },
        RunEvent::Progress {
            step: u64::try_from(run.progress_step).unwrap_or(0),
            total_steps: u64::try_from(run.progress_total).unwrap_or(0),
            phase: run.phase.unwrap_or_default(),
        },
    ];
    let snapshot = stream::iter(first.iter().map(to_sse).map(Ok).collect::<Vec<_>>());
    let live = BroadcastStream::new(rx).map(|item| {
        Ok(match item {
            Ok(e) => to_sse(&e),
            Err(BroadcastStreamRecvError::Lagged(n)) => {
                Event::default().event("lagged").data(n.to_string())
            }
        })
    });
    Ok(Sse::new(snapshot.chain(live))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
