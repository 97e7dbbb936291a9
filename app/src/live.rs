//! Live run pages: once hydrated, the run page listens to the server-sent events of
//! `/api/v1/runs/{id}/events` and updates status, progress, phase, log tail and curves in
//! place. On the server (and without JavaScript) nothing here runs: the page shows the state
//! at render time.

use crate::charts::Point;
use crate::dto::{LogLine, MetricSeries, RunDetail, RunEvent, RunStatus};
use leptos::prelude::*;
use std::collections::BTreeMap;

/// Lines of log the page keeps.
pub const LOG_LINES: usize = 200;

/// The parts of a run page that change while it is open.
#[derive(Debug, Clone, Copy)]
pub struct LiveRun {
    pub status: RwSignal<RunStatus>,
    pub step: RwSignal<u64>,
    pub total: RwSignal<u64>,
    pub phase: RwSignal<Option<String>>,
    pub log: RwSignal<Vec<LogLine>>,
    pub metrics: RwSignal<Vec<MetricSeries>>,
}

impl LiveRun {
    pub fn new(run: &RunDetail, metrics: Vec<MetricSeries>) -> Self {
        Self {
            status: RwSignal::new(run.summary.status),
            step: RwSignal::new(run.summary.step),
            total: RwSignal::new(run.summary.total_steps),
            phase: RwSignal::new(run.phase.clone()),
            log: RwSignal::new(run.log_tail.clone()),
            metrics: RwSignal::new(metrics),
        }
    }

    /// Applies one event's data (`name` is the SSE event name, which the data's `type` repeats;
    /// data that does not parse as a [`RunEvent`] is ignored).
    pub fn apply(&self, _name: &str, data: &str) {
        let Ok(event) = serde_json::from_str::<RunEvent>(data) else {
            return;
        };
        match event {
            RunEvent::Status { status } => self.status.set(status),
            RunEvent::Progress {
                step,
                total_steps,
                phase,
            } => {
                self.step.set(step);
                self.total.set(total_steps);
                // No phase yet (the snapshot of a run the worker has not reported on): keep
                // the page's, which the server read from the job's output.
                if !phase.is_empty() {
                    self.phase.set(Some(phase));
                }
            }
            RunEvent::Log { level, line } => {
                self.log.update(|log| {
                    log.push(LogLine { level, line });
                    let extra = log.len().saturating_sub(LOG_LINES);
                    log.drain(..extra);
                });
            }
            RunEvent::LogTail { mut lines } => {
                let extra = lines.len().saturating_sub(LOG_LINES);
                lines.drain(..extra);
                self.log.set(lines);
            }
            RunEvent::Metrics { step, values } => {
                self.metrics
                    .update(|all| append_metrics(all, step, &values));
            }
            RunEvent::Environment { .. } | RunEvent::Checkpoint { .. } => {}
        }
    }
}

/// Adds one step of values to the series (new names become new series). The event carries no
/// wall-clock time, so these points have none until the page is reloaded (the time axis skips
/// them).
pub fn append_metrics(all: &mut Vec<MetricSeries>, step: u64, values: &BTreeMap<String, f64>) {
    for (name, &value) in values {
        let point = Point {
            step: step as f64,
            time_s: f64::NAN,
            value,
        };
        match all.iter_mut().find(|m| &m.name == name) {
            Some(m) => {
                if m.points.last().is_none_or(|p| p.step < point.step) {
                    m.points.push(point);
                }
            }
            None => all.push(MetricSeries {
                name: name.clone(),
                points: vec![point],
            }),
        }
    }
}

/// Opens the event stream of `run_id` and feeds it into `live` (browser only; closed when the
/// page's reactive owner is disposed, i.e. on navigation away).
#[cfg(feature = "hydrate")]
pub fn subscribe(run_id: i64, live: LiveRun) {
    use leptos::wasm_bindgen::{JsCast, closure::Closure};
    let Ok(source) = web_sys::EventSource::new(&format!("/api/v1/runs/{run_id}/events")) else {
        return;
    };
    for name in ["status", "progress", "log", "log_tail", "metrics"] {
        let handler =
            Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
                if let Some(data) = ev.data().as_string() {
                    live.apply(name, &data);
                }
            });
        let _ = source.add_event_listener_with_callback(name, handler.as_ref().unchecked_ref());
        // The listener lives as long as the page; the source is closed on cleanup.
        handler.forget();
    }
    let source = send_wrapper::SendWrapper::new(source);
    on_cleanup(move || source.close());
}

/// Server and tests: no live updates.
#[cfg(not(feature = "hydrate"))]
pub fn subscribe(_run_id: i64, _live: LiveRun) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_events_extend_series_and_add_new_ones() {
        let mut all = vec![MetricSeries {
            name: "regret_mean".into(),
            points: vec![Point {
                step: 1.0,
                time_s: 3.0,
                value: 0.1,
            }],
        }];
        let values = BTreeMap::from([("regret_mean".to_owned(), 0.2), ("vendi".to_owned(), 4.0)]);
        append_metrics(&mut all, 2, &values);
        // A replayed step (reconnect) is not added twice.
        append_metrics(&mut all, 2, &values);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].points.len(), 2);
        assert_eq!(all[0].points[1].value, 0.2);
        assert_eq!(all[1].name, "vendi");
    }

    #[test]
    fn events_update_status_progress_and_log() {
        Owner::new().with(|| {
            let run = crate::dto::RunDetail {
                summary: crate::dto::RunSummary {
                    id: 1,
                    name: "r".into(),
                    project: "p".into(),
                    status: RunStatus::Queued,
                    step: 0,
                    total_steps: 10,
                    created_at: String::new(),
                    key_metrics: BTreeMap::new(),
                    warning: None,
                    tags: Vec::new(),
                    waiting: None,
                },
                config: serde_json::json!({}),
                executor: "local".into(),
                seed: 1,
                code_version: "x".into(),
                phase: None,
                message: None,
                queue: None,
                log_tail: Vec::new(),
                can_control: true,
                notes: String::new(),
                team_id: 1,
            };
            let live = LiveRun::new(&run, Vec::new());
            live.apply("status", r#"{"type":"status","status":"running"}"#);
            live.apply(
                "progress",
                r#"{"type":"progress","step":3,"total_steps":10,"phase":"playing"}"#,
            );
            live.apply("log", r#"{"type":"log","level":"info","line":"hello"}"#);
            live.apply("status", "not json");
            assert_eq!(live.status.get_untracked(), RunStatus::Running);
            assert_eq!(
                (live.step.get_untracked(), live.phase.get_untracked()),
                (3, Some("playing".into()))
            );
            assert_eq!(live.log.get_untracked().len(), 1);
            // The job's output replaces the page's lines, keeping the newest LOG_LINES.
            let lines: Vec<serde_json::Value> = (0..LOG_LINES + 5)
                .map(|i| serde_json::json!({"level": "out", "line": format!("line {i}")}))
                .collect();
            let tail = serde_json::json!({"type": "log_tail", "lines": lines}).to_string();
            live.apply("log_tail", &tail);
            let log = live.log.get_untracked();
            assert_eq!(log.len(), LOG_LINES);
            assert_eq!(log[0].line, "line 5");
            assert_eq!(log[LOG_LINES - 1].line, format!("line {}", LOG_LINES + 4));
        });
    }
}
