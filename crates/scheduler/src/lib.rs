//! Where training jobs run. The queue itself is SQL and lives in `spade-db`
//! (`FOR UPDATE SKIP LOCKED`); this crate turns a claimed run into a running job through an
//! executor (a local process, or a Ray job through the Ray Jobs REST API) and watches it.

use serde::{Deserialize, Serialize};

/// The executors a run can be scheduled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    /// A child process of the server on this machine (the default).
    Local,
    /// A job on a Ray cluster, submitted through its Jobs REST API.
    Ray,
}

/// Errors naming an executor that does not exist.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown executor {given:?}: expected \"local\" or \"ray\"")]
pub struct UnknownExecutor {
    pub given: String,
}

impl std::str::FromStr for ExecutorKind {
    type Err = UnknownExecutor;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "local" => Ok(Self::Local),
            "ray" => Ok(Self::Ray),
            _ => Err(UnknownExecutor {
                given: s.to_owned(),
            }),
        }
    }
}

/// Ray submission ids are derived from the run id so that a retried submit after a lost reply
/// cannot start the same run twice (Ray rejects a duplicate submission id).
pub fn ray_submission_id(run_id: i64, attempt: u32) -> String {
    format!("spade-run-{run_id}-a{attempt}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executor_names_parse_and_unknown_names_are_explained() {
        assert_eq!("ray".parse::<ExecutorKind>(), Ok(ExecutorKind::Ray));
        let err = "slurm"
            .parse::<ExecutorKind>()
            .expect_err("not an executor yet");
        assert!(err.to_string().contains("\"slurm\""));
        assert_eq!(ray_submission_id(12, 0), "spade-run-12-a0");
    }
}
