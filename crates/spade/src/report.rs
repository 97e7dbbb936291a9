//! The reporting contract between the training worker and the service, in one place.
//!
//! The worker wraps every fact it reports (an environment, a batch of plays, metrics, a
//! checkpoint, ...) in an [`Envelope`] and posts batches of them to
//! `POST /api/v1/ingest/{run_id}` as `{"envelopes": [...]}`; the backend answers with the keys
//! it stored. Both sides compile against these types, so a field cannot drift between them.
//!
//! Delivery is at-least-once: the worker retries until a key is acknowledged, and the backend
//! stores each [`Envelope::key`] once (a replay of an acknowledged key is acknowledged again).
//! `seq` is per run and strictly increasing, so the key `"<run_id>/<seq>"` is stable across
//! retries and restarts as long as the worker persists its next `seq` with its checkpoint.
//!
//! JSON shape: [`Message`] is internally tagged by `"kind"` in snake_case, e.g.
//! `{"kind": "progress", "step": 3, "total_steps": 6, "phase": "play"}`. Two variants wrap
//! their payload in a named field instead of being newtypes: `environment` carries `record`
//! (an [`EnvironmentRecord`] has its own `kind`, game or tool use, which would collide with
//! the tag) and `plays` carries `records` (serde cannot tag a bare list).

use crate::EnvKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most envelopes one ingest request may carry (the backend rejects larger batches).
pub const MAX_ENVELOPES_PER_BATCH: usize = 500;

/// One reported message with its delivery metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The run this message belongs to.
    pub run_id: String,
    /// Per run, strictly increasing (gaps allowed).
    pub seq: u64,
    /// Idempotency key, stable across retries: `"<run_id>/<seq>"` (see [`Envelope::key_for`]).
    pub key: String,
    /// When the worker created the message, milliseconds since the Unix epoch.
    pub sent_at_ms: i64,
    pub message: Message,
}

impl Envelope {
    /// Wraps `message`, derives its key from `run_id` and `seq`, and stamps the current time.
    ///
    /// Reading the clock is the one impurity of this crate; use [`Envelope::at`] where the
    /// timestamp must be reproducible.
    pub fn new(run_id: impl Into<String>, seq: u64, message: Message) -> Self {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Self::at(run_id, seq, now_ms, message)
    }

    /// Like [`Envelope::new`] with an explicit timestamp. The message is made storable on the
    /// way in (see [`storable`]).
    pub fn at(run_id: impl Into<String>, seq: u64, sent_at_ms: i64, message: Message) -> Self {
        let run_id = run_id.into();
        let key = Self::key_for(&run_id, seq);
        Self {
            run_id,
            seq,
            key,
            sent_at_ms,
            message: storable(message),
        }
    }

    /// The idempotency key of message `seq` of run `run_id`.
    pub fn key_for(run_id: &str, seq: u64) -> String {
        format!("{run_id}/{seq}")
    }

    /// True when `key` is the one derived from `run_id` and `seq` (the backend checks this
    /// before storing, so a worker cannot overwrite another run's messages).
    pub fn key_is_consistent(&self) -> bool {
        self.key == Self::key_for(&self.run_id, self.seq)
    }
}

/// Stands in for U+0000 in reported text.
pub const NUL_REPLACEMENT: char = '\u{FFFD}';

/// `message` with every U+0000 in its strings replaced by [`NUL_REPLACEMENT`].
///
/// The one rule for NUL in this project: PostgreSQL `text` cannot hold U+0000, so the service
/// refuses it in any request (422 naming the field), ingestion included. Generated programs and
/// model output do contain it, and nobody typed it, so reports replace it where they are made:
/// a report is always storable and a NUL never poisons a batch. (CPython refuses source with a
/// NUL byte, so environment code that had one was not runnable anyway.)
pub fn storable(message: Message) -> Message {
    fn has_nul(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::String(s) => s.contains('\0'),
            serde_json::Value::Array(a) => a.iter().any(has_nul),
            serde_json::Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
            _ => false,
        }
    }
    fn scrub(v: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        let fix = |s: String| s.replace('\0', &NUL_REPLACEMENT.to_string());
        match v {
            Value::String(s) => Value::String(fix(s)),
            Value::Array(a) => Value::Array(a.into_iter().map(scrub).collect()),
            Value::Object(o) => {
                Value::Object(o.into_iter().map(|(k, v)| (fix(k), scrub(v))).collect())
            }
            other => other,
        }
    }
    let Ok(value) = serde_json::to_value(&message) else {
        return message;
    };
    if !has_nul(&value) {
        return message;
    }
    serde_json::from_value(scrub(value)).unwrap_or(message)
}

/// Body of `POST /api/v1/ingest/{run_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestRequest {
    pub envelopes: Vec<Envelope>,
}

/// Reply of `POST /api/v1/ingest/{run_id}`. Unknown fields are ignored (not refused) so a
/// worker keeps reading the replies of a newer server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestReply {
    /// Keys now stored (including replays of keys stored before).
    pub acknowledged: Vec<String>,
    /// The run is being cancelled: the worker stops at the next step boundary.
    pub cancel_requested: bool,
    /// Accepted environments of the run that members marked broken or reward-hackable: the
    /// worker stops playing them and reports them broken (the designer's reward for them
    /// becomes the invalid one). Repeated until the worker's report lands.
    #[serde(default)]
    pub retire: Vec<Retire>,
}

/// One environment a review retires from play.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retire {
    pub env_id: String,
    /// The verdict (`broken` or `reward_hackable`).
    pub verdict: String,
    /// Who marked it and why, for the run's log and the environment's page.
    pub message: String,
}

/// What the worker reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Message {
    /// First message of a run (and of every resume).
    RunStarted {
        /// `serde_json` of the run's `spade::config::RunConfig`.
        config: serde_json::Value,
        /// The worker's code version (e.g. a git description).
        code_version: String,
        total_steps: u64,
    },
    /// An environment the designer wrote, accepted or rejected. (A struct variant: the
    /// record has its own `kind` field, which would clash with the tag next to it.)
    Environment { record: EnvironmentRecord },
    /// Delayed designer reward of an environment, computed k steps after it was generated.
    EnvironmentScored {
        env_id: String,
        step: u64,
        regret: f64,
        win_rate_hint: f64,
        win_rate_no_hint: f64,
        designer_reward: f64,
        reward_levels: u32,
    },
    /// An accepted environment broke the contract while played (its first violation): its
    /// status becomes `broken_in_play`, it is not played again, and its plays stay stored but
    /// do not train the agent. `reason` is a validation reason (e.g. `reward_out_of_range`).
    EnvironmentBroken {
        env_id: String,
        step: u64,
        /// The seed of the episode that broke.
        seed: i64,
        reason: String,
        message: String,
    },
    /// A batch of sampled plays. (A struct variant: serde cannot put a tag next to a list.)
    Plays { records: Vec<PlayRecord> },
    /// Scalar metrics of one step (names as in `spade::metrics`).
    Metrics {
        step: u64,
        elapsed_s: f64,
        values: BTreeMap<String, f64>,
    },
    /// A checkpoint was written.
    Checkpoint { step: u64, path: String, bytes: u64 },
    /// Where the run is.
    Progress {
        step: u64,
        total_steps: u64,
        phase: String,
    },
    /// A log line worth showing on the run page.
    Log { level: LogLevel, line: String },
    /// A held-out benchmark score.
    BenchmarkResult {
        checkpoint_step: Option<u64>,
        suite: String,
        task: String,
        score: f64,
        n: u32,
        /// Standard error of `score` (over questions, or over tasks for the aggregate);
        /// absent below two questions and from workers older than the field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stderr: Option<f64>,
        /// Samples per question: `score` is Avg@k for k > 1.
        #[serde(default = "one_sample", skip_serializing_if = "is_one_sample")]
        samples: u32,
    },
    /// Last message of a run.
    Finished {
        status: FinishStatus,
        message: String,
    },
}

fn one_sample() -> u32 {
    1
}

fn is_one_sample(n: &u32) -> bool {
    *n == 1
}

pub use spade_types::EnvStatus;

/// One generated environment as reported (and stored by the backend).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentRecord {
    pub env_id: String,
    /// Step at which it was generated.
    pub step: u64,
    /// Skill name, as in `spade::skills`.
    pub skill: String,
    pub kind: EnvKind,
    pub status: EnvStatus,
    /// Machine-readable reason for a rejection (e.g. `not_solvable`), `None` when accepted.
    pub rejection_reason: Option<String>,
    /// Human-readable detail of the rejection.
    pub rejection_message: Option<String>,
    pub code: String,
    pub hint: Option<String>,
    /// The memory environment shown to the designer as an example, if any.
    pub parent_env_id: Option<String>,
    pub regret: Option<f64>,
    pub win_rate_hint: Option<f64>,
    pub win_rate_no_hint: Option<f64>,
    pub designer_reward: Option<f64>,
    pub reward_levels: Option<u32>,
    /// Designer attempts used for this slot, this one included (1..=8 by default).
    pub attempts: u32,
}

impl EnvironmentRecord {
    /// A record of what the designer wrote and nothing measured yet: no rejection, hint,
    /// parent or score, one attempt. Callers set what they know on top with `..new(..)`, so a
    /// field added here has one default instead of one per literal.
    pub fn new(
        env_id: impl Into<String>,
        step: u64,
        skill: impl Into<String>,
        kind: EnvKind,
        status: EnvStatus,
        code: impl Into<String>,
    ) -> Self {
        EnvironmentRecord {
            env_id: env_id.into(),
            step,
            skill: skill.into(),
            kind,
            status,
            rejection_reason: None,
            rejection_message: None,
            code: code.into(),
            hint: None,
            parent_env_id: None,
            regret: None,
            win_rate_hint: None,
            win_rate_no_hint: None,
            designer_reward: None,
            reward_levels: None,
            attempts: 1,
        }
    }
}

/// Speaker of one turn of a transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnRole {
    System,
    /// The environment: observations and instructions.
    User,
    /// The agent.
    Assistant,
}

/// One message of a play transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    pub role: TurnRole,
    pub content: String,
}

/// One play of an environment by the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlayRecord {
    pub env_id: String,
    pub step: u64,
    pub with_hint: bool,
    /// Last reward clamped to [-1, 1] if the episode terminated, else 0 (spec 6).
    pub episode_return: f64,
    pub won: bool,
    pub turns: u32,
    pub transcript: Vec<Turn>,
}

/// Severity of a [`Message::Log`] line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishStatus {
    Succeeded,
    Failed,
    Cancelled,
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;

/// Body of `POST /api/v1/evaluations/{job_id}/results` ([`routes::evaluation_results`]):
/// `benchmark_result` messages of the evaluation's suite and checkpoint. `spade eval` sends it
/// and the server reads it, both through this type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationResults {
    pub messages: Vec<Message>,
}

/// The service's routes that workers and evaluation jobs call, in one place: the templates the
/// server's route table registers (below `/api/v1`, axum's `{param}` syntax) and the functions
/// clients build URLs with, so the two cannot drift.
pub mod routes {
    /// Prefix of every API route.
    pub const API: &str = "/api/v1";
    /// `POST`: a batch of envelopes of one run.
    pub const INGEST: &str = "/ingest/{run_id}";
    /// `GET`: the run's configuration as TOML.
    pub const INGEST_CONFIG: &str = "/ingest/{run_id}/config";
    /// `POST`: an evaluation job's results.
    pub const EVALUATION_RESULTS: &str = "/evaluations/{job_id}/results";

    fn url(server: &str, template: &str, param: &str, value: &str) -> String {
        format!(
            "{}{API}{}",
            server.trim_end_matches('/'),
            template.replace(param, value)
        )
    }

    /// The ingest URL of `run_id` on `server` (e.g. `http://127.0.0.1:3000`).
    pub fn ingest(server: &str, run_id: &str) -> String {
        url(server, INGEST, "{run_id}", run_id)
    }

    pub fn ingest_config(server: &str, run_id: &str) -> String {
        url(server, INGEST_CONFIG, "{run_id}", run_id)
    }

    pub fn evaluation_results(server: &str, job_id: i64) -> String {
        url(server, EVALUATION_RESULTS, "{job_id}", &job_id.to_string())
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn urls_fill_the_templates_the_server_registers() {
            assert_eq!(
                super::ingest("http://h:3000/", "r1"),
                "http://h:3000/api/v1/ingest/r1"
            );
            assert_eq!(
                super::ingest_config("http://h:3000", "r1"),
                "http://h:3000/api/v1/ingest/r1/config"
            );
            assert_eq!(
                super::evaluation_results("http://h", 7),
                "http://h/api/v1/evaluations/7/results"
            );
        }
    }
}
