//! The Ray executor: a job is a Ray job, submitted through the Ray Jobs REST API of the cluster's
//! dashboard (`POST /api/jobs/`, `GET /api/jobs/{id}`, `.../logs`, `.../stop`).
//!
//! The submission id is derived from the run id and attempt ([`crate::submission_id`]), so a
//! submit retried after a lost reply cannot start the run twice: Ray refuses the duplicate (HTTP
//! 500 with a traceback), and this client then reads the existing job back and accepts it only
//! when its metadata names the same SPADE job. The run token travels in
//! `runtime_env.env_vars.SPADE_WORKER_TOKEN`. Ray's dashboard has no authentication by default
//! (CVE-2023-48022): keep it on loopback or a private network.

use crate::{ExecError, Executor, ExecutorKind, JobHandle, JobRef, JobSpec, JobStatus, Started};
use serde::Deserialize;
use serde_json::json;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Configuration of [`RayExecutor`].
#[derive(Debug, Clone)]
pub struct RayConfig {
    /// The dashboard's base URL, e.g. `http://127.0.0.1:8265`.
    pub address: String,
    /// The job's command template (see [`JobSpec::expand`]); it becomes Ray's shell entrypoint.
    pub command: Vec<String>,
    /// CPUs Ray reserves for the entrypoint.
    pub num_cpus: f64,
    /// How many jobs this server keeps submitted at once (Ray queues what does not fit as
    /// PENDING; this bounds how much of the cluster one server takes).
    pub max_jobs: u32,
    /// Timeout of each HTTP request.
    pub request_timeout: Duration,
    /// Submission ids are `<prefix>-run-<run>-a<attempt>`; distinct per database sharing the
    /// cluster (run ids of two databases overlap), `spade` by default.
    pub submission_prefix: String,
    /// The server's jobs directory: a job's worker keeps its checkpoints and report spool in
    /// [`crate::run_state_dir`] of it (`SPADE_WORKER_DATA_DIR`), as a local job does, where the
    /// server's path rule accepts its checkpoints and the server finds its spool. It must be
    /// the same path on every Ray node (the head on this machine, or a shared file system);
    /// `None` leaves the worker's default (`./spade-worker/<run>` in Ray's working directory,
    /// whose checkpoints the server refuses).
    pub jobs_dir: Option<std::path::PathBuf>,
    /// The Python with Ray on the cluster's nodes, for the ranks of a run that trains on
    /// several (`run.ranks`): a job's worker places them one per node through a placement
    /// group (`spade worker --launcher ray`, set for every job as `SPADE_LAUNCHER=ray`) with
    /// this Python (`SPADE_RAY_PYTHON`); `None` leaves the worker's default, `python3` on the
    /// job's PATH.
    pub ray_python: Option<String>,
}

/// Runs jobs on a Ray cluster; see the module docs.
#[derive(Debug)]
pub struct RayExecutor {
    cfg: RayConfig,
    http: reqwest::Client,
    jobs: Mutex<HashSet<i64>>,
}

/// The part of Ray's job details this client reads.
#[derive(Debug, Deserialize)]
struct JobDetails {
    status: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    driver_exit_code: Option<i32>,
    #[serde(default)]
    metadata: Option<std::collections::HashMap<String, String>>,
}

impl RayExecutor {
    pub fn new(cfg: RayConfig) -> Result<Self, ExecError> {
        let http = reqwest::Client::builder()
            .timeout(cfg.request_timeout)
            // Traffic to the dashboard never goes through a proxy.
            .no_proxy()
            .build()
            .map_err(|source| ExecError::RayUnreachable {
                url: cfg.address.clone(),
                source,
            })?;
        Ok(Self {
            cfg,
            http,
            jobs: Mutex::new(HashSet::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<i64>> {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.cfg.address.trim_end_matches('/'))
    }

    /// Ray's version string (`GET /api/version`): a cheap reachability check.
    pub async fn version(&self) -> Result<String, ExecError> {
        let url = self.url("/api/version");
        let v: serde_json::Value = self.get_json(&url, "the version query").await?;
        Ok(v.get("ray_version")
            .and_then(|v| v.as_str())
            .unwrap_or("unknown")
            .to_owned())
    }

    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<reqwest::Response, ExecError> {
        req.send()
            .await
            .map_err(|source| ExecError::RayUnreachable {
                url: url.to_owned(),
                source,
            })
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        what: &str,
    ) -> Result<T, ExecError> {
        let resp = self.send(self.http.get(url), url).await?;
        decode(resp, url, what).await
    }

    /// The job's details, or `None` when Ray does not know the submission id.
    async fn details(&self, submission_id: &str) -> Result<Option<JobDetails>, ExecError> {
        let url = self.url(&format!("/api/jobs/{submission_id}"));
        let resp = self.send(self.http.get(&url), &url).await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        decode(resp, &url, "the job status query").await.map(Some)
    }
}

/// Reads a JSON body, or turns an error status into [`ExecError::RayRefused`] with the first
/// line of Ray's message (its 500s carry a Python traceback).
async fn decode<T: serde::de::DeserializeOwned>(
    resp: reqwest::Response,
    url: &str,
    what: &str,
) -> Result<T, ExecError> {
    let status = resp.status();
    let body = resp
        .text()
        .await
        .map_err(|source| ExecError::RayUnreachable {
            url: url.to_owned(),
            source,
        })?;
    if !status.is_success() {
        return Err(ExecError::RayRefused {
            what: what.to_owned(),
            status: status.as_u16(),
            message: summarize(&body),
        });
    }
    serde_json::from_str(&body).map_err(|e| ExecError::RayReply {
        url: url.to_owned(),
        detail: format!("{e} in {:?}", crate::tail(&body, 300)),
    })
}

/// The most telling line of an error body: a traceback's last exception line, else its first
/// non-empty line, at most 300 bytes.
fn summarize(body: &str) -> String {
    let line = if body.contains("Traceback") {
        // The exception line; Ray wraps agent tracebacks, so take the innermost (last) one.
        body.lines()
            .rev()
            .find(|l| {
                let l = l.trim_start();
                l.split_once(": ").is_some_and(|(name, _)| {
                    !name.contains(' ') && (name.ends_with("Error") || name.ends_with("Exception"))
                })
            })
            .or_else(|| body.lines().rev().find(|l| l.trim().len() > 1))
    } else {
        body.lines().find(|l| !l.trim().is_empty())
    }
    .unwrap_or("(empty body)")
    .trim();
    let mut end = line.len().min(300);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_owned()
}

/// One shell word: bare when safe, single-quoted otherwise.
fn shell_quote(arg: &str) -> String {
    let safe = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    if safe {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

fn status_of(d: JobDetails) -> JobStatus {
    // Ray appends the last 20,000 characters of the logs to a failure's message; the logs are
    // served on their own, so only the first line is kept.
    let message = d
        .message
        .as_deref()
        .and_then(|m| m.lines().next())
        .unwrap_or_default()
        .trim_end_matches(", last available logs (truncated to 20,000 chars):")
        .to_owned();
    match d.status.as_str() {
        "PENDING" => JobStatus::Pending,
        "RUNNING" => JobStatus::Running,
        "SUCCEEDED" => JobStatus::Succeeded,
        "STOPPED" => JobStatus::Stopped { message },
        "FAILED" => JobStatus::Failed {
            exit_code: d.driver_exit_code,
            message,
        },
        other => JobStatus::Lost {
            message: format!("Ray reports an unknown job status {other:?}: {message}"),
        },
    }
}

impl Executor for RayExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Ray
    }

    fn has_capacity(&self, _gpus: u32) -> bool {
        // GPUs are Ray's to place; this only bounds how many jobs one server submits.
        self.lock().len() < self.cfg.max_jobs as usize
    }

    async fn start(&self, spec: &JobSpec) -> Result<Started, ExecError> {
        let argv = spec.argv(&self.cfg.command);
        if argv.is_empty() {
            return Err(ExecError::EmptyCommand);
        }
        let entrypoint: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
        let submission_id =
            crate::submission_id(&self.cfg.submission_prefix, spec.run_id, spec.attempt);
        let job_id = spec.job_id.to_string();
        let mut env_vars = json!({
            "SPADE_WORKER_TOKEN": spec.token,
            "SPADE_RUN_ID": spec.run_id.to_string(),
            "SPADE_JOB_ID": job_id,
            // A run on several ranks places them on the cluster, one per node, instead of
            // starting them all beside the entrypoint on the one CPU Ray reserved for it.
            "SPADE_LAUNCHER": "ray",
        });
        if let Some(python) = &self.cfg.ray_python {
            env_vars["SPADE_RAY_PYTHON"] = json!(python);
        }
        if let Some(dir) = &self.cfg.jobs_dir {
            env_vars["SPADE_WORKER_DATA_DIR"] =
                json!(crate::run_state_dir(dir, spec.run_id).display().to_string());
        }
        let body = json!({
            "entrypoint": entrypoint.join(" "),
            "submission_id": submission_id,
            "runtime_env": {"env_vars": env_vars},
            "metadata": {
                "spade_job_id": job_id,
                "spade_run_id": spec.run_id.to_string(),
                "spade_attempt": spec.attempt.to_string(),
            },
            "entrypoint_num_cpus": self.cfg.num_cpus,
            "entrypoint_num_gpus": spec.gpus,
        });
        let url = self.url("/api/jobs/");
        let resp = self.send(self.http.post(&url).json(&body), &url).await?;
        let submitted: Result<serde_json::Value, _> = decode(resp, &url, "the submission").await;
        match submitted {
            Ok(_) => {}
            // A duplicate submission id (HTTP 500): a retry of a submit whose reply was lost.
            // Accept it only if the existing job is this very SPADE job.
            Err(refused @ ExecError::RayRefused { .. }) => {
                match self.details(&submission_id).await? {
                    Some(d)
                        if d.metadata
                            .as_ref()
                            .and_then(|m| m.get("spade_job_id"))
                            .is_some_and(|j| *j == job_id) =>
                    {
                        tracing::info!(%submission_id, "submission already exists; re-using it");
                    }
                    _ => return Err(refused),
                }
            }
            Err(e) => return Err(e),
        }
        self.lock().insert(spec.job_id);
        Ok(Started {
            external_id: submission_id,
            log_path: None,
        })
    }

    async fn find(&self, job: &JobRef) -> Result<Option<Started>, ExecError> {
        let submission_id =
            crate::submission_id(&self.cfg.submission_prefix, job.run_id, job.attempt);
        let Some(d) = self.details(&submission_id).await? else {
            return Ok(None);
        };
        let owner = d.metadata.as_ref().and_then(|m| m.get("spade_job_id"));
        if owner.is_none_or(|o| *o != job.job_id.to_string()) {
            return Err(ExecError::SubmissionTaken {
                submission_id,
                owner: owner.cloned(),
                job_id: job.job_id,
            });
        }
        self.lock().insert(job.job_id);
        Ok(Some(Started {
            external_id: submission_id,
            log_path: None,
        }))
    }

    async fn adopt(&self, handle: &JobHandle) -> Result<(), ExecError> {
        self.lock().insert(handle.job_id);
        Ok(())
    }

    async fn poll(&self, handle: &JobHandle) -> Result<JobStatus, ExecError> {
        Ok(match self.details(&handle.external_id).await? {
            Some(d) => status_of(d),
            None => JobStatus::Lost {
                message: format!(
                    "Ray at {} no longer knows job {} (the head restarted?)",
                    self.cfg.address, handle.external_id
                ),
            },
        })
    }

    async fn logs(&self, handle: &JobHandle, max_bytes: usize) -> Result<String, ExecError> {
        #[derive(Deserialize)]
        struct Logs {
            logs: String,
        }
        let url = self.url(&format!("/api/jobs/{}/logs", handle.external_id));
        let logs: Logs = self.get_json(&url, "the log query").await?;
        Ok(crate::tail(&logs.logs, max_bytes).to_owned())
    }

    async fn stop(&self, handle: &JobHandle) -> Result<(), ExecError> {
        let url = self.url(&format!("/api/jobs/{}/stop", handle.external_id));
        let resp = self.send(self.http.post(&url), &url).await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(()); // nothing left to stop
        }
        // `{"stopped": false}` means it had already ended: also fine.
        let _: serde_json::Value = decode(resp, &url, "the stop request").await?;
        Ok(())
    }

    fn release(&self, handle: &JobHandle) {
        self.lock().remove(&handle.job_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entrypoints_quote_what_the_shell_would_split() {
        assert_eq!(shell_quote("--run"), "--run");
        assert_eq!(
            shell_quote("http://127.0.0.1:3000"),
            "http://127.0.0.1:3000"
        );
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }

    #[test]
    fn ray_tracebacks_are_summarized_by_their_exception() {
        let body = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: Job with submission_id spade-run-1-a1 already exists.\n.\n";
        assert_eq!(
            summarize(body),
            "ValueError: Job with submission_id spade-run-1-a1 already exists."
        );
        assert_eq!(summarize("bad request\nmore"), "bad request");
        assert_eq!(summarize(""), "(empty body)");
    }
}
