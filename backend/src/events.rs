//! Live run updates: one tokio broadcast channel per run with open pages, fed by ingestion and
//! by the API's status changes, read by the SSE endpoint ([`crate::api::events`]). A page that
//! falls behind gets a `lagged` event and should reload; nothing blocks a writer. Access changes
//! (logout, member removed or re-roled, refresh-token reuse) are announced here too
//! ([`EventHub::access_changed`]), so open streams re-check their caller.
//!
//! This module is below the API and the dashboard (it uses neither): the run's status and step
//! count as a page shows them live here, shared by the SSE snapshot and the dashboard's DTOs.

use spade_db::runs;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Events buffered per run for slow readers.
pub const CAPACITY: usize = 256;

/// One update of a run page (the type the hydrated page reads too).
pub use spade_app::dto::RunEvent;

/// The page's status of a database status.
pub fn status_event(status: spade_db::RunStatus) -> RunEvent {
    RunEvent::Status { status }
}

/// The run's number of steps: as the worker reported it, or before its first report (queued,
/// starting, the warm start) the configured `run.steps` (the spec's default when the stored
/// configuration leaves it out), so a page says 0 / 6 rather than 0 / 0.
pub fn total_steps(r: &runs::Run) -> u64 {
    steps_of(r.progress_total, &r.config)
}

fn steps_of(progress_total: i64, config: &serde_json::Value) -> u64 {
    match u64::try_from(progress_total) {
        Ok(n) if n > 0 => n,
        _ => config
            .pointer("/run/steps")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_else(|| spade::config::RunConfig::default().run.steps),
    }
}

/// The channels of runs that have listeners, and the announcements of access changes.
#[derive(Debug, Clone)]
pub struct EventHub {
    channels: Arc<Mutex<HashMap<i64, broadcast::Sender<RunEvent>>>>,
    access: broadcast::Sender<()>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self {
            channels: Arc::default(),
            // Announcements carry nothing: every open stream re-checks its own caller, so a
            // lagging receiver loses nothing by skipping some.
            access: broadcast::channel(16).0,
        }
    }
}

impl EventHub {
    /// Announces that some session ended or some membership changed: open streams re-check
    /// their caller's access now.
    pub fn access_changed(&self) {
        let _ = self.access.send(());
    }

    /// Listens to the access-change announcements.
    pub fn access_announcements(&self) -> broadcast::Receiver<()> {
        self.access.subscribe()
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_the_configured_ones_until_the_worker_reports() {
        let cfg = serde_json::json!({"run": {"steps": 6}});
        assert_eq!(steps_of(0, &cfg), 6);
        assert_eq!(steps_of(40, &cfg), 40, "the worker's count wins");
        assert_eq!(
            steps_of(0, &serde_json::json!({})),
            spade::config::RunConfig::default().run.steps
        );
    }
}
