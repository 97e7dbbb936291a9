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

/// What a job's output added since it was last read, as [`OutputFollower::update`] tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputUpdate {
    /// Nothing new.
    Same,
    /// These lines follow the ones read before.
    Append(Vec<String>),
    /// The first read, or output that no longer overlaps the last read (it grew by more than a
    /// whole tail between two reads): these lines replace the page's.
    Reset(Vec<String>),
}

/// Follows a job's output through repeated reads of its tail (the executors read the last bytes
/// of a log file or ask Ray; neither says how long the whole output is). Each read is taken to be
/// the previous one with lines dropped from the front and appended at the back: the new lines
/// are what follows the longest overlap, so repeated identical lines are neither lost nor sent
/// twice.
#[derive(Debug, Default, Clone)]
pub struct OutputFollower {
    seen: Vec<String>,
    started: bool,
}

impl OutputFollower {
    /// Compares a fresh read of the tail with the last one.
    pub fn update(&mut self, now: Vec<String>) -> OutputUpdate {
        if !self.started {
            self.started = true;
            self.seen = now.clone();
            return OutputUpdate::Reset(now);
        }
        if self.seen.is_empty() {
            if now.is_empty() {
                return OutputUpdate::Same;
            }
            self.seen = now.clone();
            return OutputUpdate::Append(now);
        }
        // The smallest shift of the last read that the new one starts with.
        let shift = (0..self.seen.len()).find(|&s| now.starts_with(&self.seen[s..]));
        let update = match shift {
            Some(s) if now.len() == self.seen.len() - s => OutputUpdate::Same,
            Some(s) => OutputUpdate::Append(now[self.seen.len() - s..].to_vec()),
            None => OutputUpdate::Reset(now.clone()),
        };
        if update != OutputUpdate::Same {
            self.seen = now;
        }
        update
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

    fn lines(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_growing_output_is_followed_line_by_line() {
        let mut f = OutputFollower::default();
        assert_eq!(
            f.update(lines(&["a", "b"])),
            OutputUpdate::Reset(lines(&["a", "b"]))
        );
        assert_eq!(f.update(lines(&["a", "b"])), OutputUpdate::Same);
        assert_eq!(
            f.update(lines(&["a", "b", "c"])),
            OutputUpdate::Append(lines(&["c"]))
        );
        // The tail window slid: "a" dropped off the front while two lines came.
        assert_eq!(
            f.update(lines(&["b", "c", "d", "e"])),
            OutputUpdate::Append(lines(&["d", "e"]))
        );
        // Repeated identical lines: the one new "x" is sent once, none is lost.
        let mut g = OutputFollower::default();
        g.update(lines(&["x", "x"]));
        assert_eq!(
            g.update(lines(&["x", "x", "x"])),
            OutputUpdate::Append(lines(&["x"]))
        );
        // No overlap (the output grew by more than a tail): the page's lines are replaced.
        assert_eq!(
            f.update(lines(&["p", "q"])),
            OutputUpdate::Reset(lines(&["p", "q"]))
        );
        // Output that starts after the stream did.
        let mut h = OutputFollower::default();
        assert_eq!(h.update(Vec::new()), OutputUpdate::Reset(Vec::new()));
        assert_eq!(
            h.update(lines(&["first"])),
            OutputUpdate::Append(lines(&["first"]))
        );
    }

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
