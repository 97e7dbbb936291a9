//! The Ray executor against a real Ray head (scripts/test starts one on loopback with
//! scripts/ray-head and exports SPADE_RAY_ADDRESS). Without SPADE_RAY_ADDRESS these tests say
//! why and return; with it set, an unreachable Ray is a failure, not a skip.

use spade_scheduler::{ExecError, Executor, JobHandle, JobSpec, JobStatus, RayConfig, RayExecutor};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The executor for `SPADE_RAY_ADDRESS`, or `None` (with the reason printed) when it is unset.
async fn ray(command: &[&str]) -> Option<RayExecutor> {
    let Ok(address) = std::env::var("SPADE_RAY_ADDRESS") else {
        eprintln!(
            "skipped: SPADE_RAY_ADDRESS is not set (scripts/test starts a Ray head and sets it)"
        );
        return None;
    };
    let ex = RayExecutor::new(RayConfig {
        address: address.clone(),
        command: command.iter().map(|s| s.to_string()).collect(),
        num_cpus: 0.25,
        max_jobs: 4,
        request_timeout: Duration::from_secs(20),
        submission_prefix: "spade".into(),
        jobs_dir: Some(jobs_dir()),
        ray_python: Some("/opt/ray/bin/python".into()),
    })
    .expect("http client");
    match ex.version().await {
        Ok(v) => eprintln!("Ray {v} at {address}"),
        Err(e) => panic!("SPADE_RAY_ADDRESS={address} is set but Ray is unreachable: {e}"),
    }
    Some(ex)
}

/// The jobs directory the executor names the workers' state directories in.
fn jobs_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("spade-ray-test-jobs")
}

/// Run ids unique across test runs against one long-lived head (Ray keeps every submission id
/// for the head's lifetime).
fn spec(n: i64) -> JobSpec {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    JobSpec {
        job_id: ms * 10 + n,
        run_id: ms * 10 + n,
        attempt: 1,
        server_url: "http://127.0.0.1:9".into(),
        token: format!("ray-token-{n}"),
        gpus: 0,
        program_args: None,
    }
}

async fn wait_for(ex: &RayExecutor, h: &JobHandle, done: impl Fn(&JobStatus) -> bool) -> JobStatus {
    let t0 = Instant::now();
    loop {
        let st = ex.poll(h).await.expect("poll");
        if done(&st) {
            eprintln!("{} reached {st:?} after {:?}", h.external_id, t0.elapsed());
            return st;
        }
        assert!(t0.elapsed() < Duration::from_secs(90), "{h:?} still {st:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_job_runs_to_success_with_its_token_and_logs() {
    let Some(ex) = ray(&[
        "sh",
        "-c",
        "echo run={run} job={job} token=$SPADE_WORKER_TOKEN data=$SPADE_WORKER_DATA_DIR \
         launcher=$SPADE_LAUNCHER python=$SPADE_RAY_PYTHON 'quoted arg'",
    ])
    .await
    else {
        return;
    };
    let s = spec(1);
    let t0 = Instant::now();
    let started = ex.start(&s).await.expect("submit");
    eprintln!("submit took {:?}", t0.elapsed());
    assert_eq!(started.external_id, format!("spade-run-{}-a1", s.run_id));
    let h = s.handle(started.external_id);
    assert_eq!(
        wait_for(&ex, &h, JobStatus::is_final).await,
        JobStatus::Succeeded
    );
    let logs = ex.logs(&h, 100_000).await.expect("logs");
    // The worker keeps its state where the server's path rule and spool taking look, as a
    // local job does (before, a Ray job's checkpoints landed in Ray's working directory and
    // the server refused them).
    // And a run on several ranks is told to place them on the cluster (`--launcher ray`),
    // with the configured Python.
    let want = format!(
        "run={} job={} token=ray-token-1 data={} launcher=ray python=/opt/ray/bin/python \
         quoted arg",
        s.run_id,
        s.job_id,
        spade_scheduler::run_state_dir(&jobs_dir(), s.run_id).display()
    );
    assert!(logs.contains(&want), "{logs}");
    let tail = ex.logs(&h, 20).await.expect("tail");
    assert!(tail.len() <= 20 && logs.ends_with(&tail), "{tail:?}");
}

#[tokio::test]
async fn a_failing_job_reports_its_exit_code() {
    let Some(ex) = ray(&["sh", "-c", "echo failing; exit 3"]).await else {
        return;
    };
    let s = spec(2);
    let h = s.handle(ex.start(&s).await.expect("submit").external_id);
    match wait_for(&ex, &h, JobStatus::is_final).await {
        JobStatus::Failed { exit_code, message } => {
            assert_eq!(exit_code, Some(3), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_long_job_is_stopped() {
    let Some(ex) = ray(&["sleep", "300"]).await else {
        return;
    };
    let s = spec(3);
    let h = s.handle(ex.start(&s).await.expect("submit").external_id);
    wait_for(&ex, &h, |st| *st == JobStatus::Running).await;
    let t0 = Instant::now();
    ex.stop(&h).await.expect("stop");
    match wait_for(&ex, &h, JobStatus::is_final).await {
        JobStatus::Stopped { .. } => {}
        other => panic!("expected a stopped job, got {other:?}"),
    }
    eprintln!("stop to STOPPED took {:?}", t0.elapsed());
    ex.stop(&h).await.expect("stopping a stopped job is fine");
}

#[tokio::test]
async fn a_retried_submit_is_safe_and_a_foreign_duplicate_is_refused() {
    let Some(ex) = ray(&["sh", "-c", "echo once; sleep 1"]).await else {
        return;
    };
    let s = spec(4);
    let first = ex.start(&s).await.expect("submit");
    // The same job submitted again (a retry after a lost reply): Ray answers 500, the client
    // reads the job back, sees its own metadata and accepts it.
    let again = ex.start(&s).await.expect("retried submit");
    assert_eq!(first.external_id, again.external_id);
    let h = s.handle(first.external_id);
    assert_eq!(
        wait_for(&ex, &h, JobStatus::is_final).await,
        JobStatus::Succeeded
    );
    let logs = ex.logs(&h, 100_000).await.expect("logs");
    assert_eq!(
        logs.lines().filter(|l| *l == "once").count(),
        1,
        "ran twice: {logs}"
    );

    // `find` names the existing job and refuses to hand it to another job id.
    let found = ex.find(&s.job_ref()).await.expect("find");
    assert_eq!(found.map(|f| f.external_id), Some(h.external_id.clone()));
    let mut foreign = s.job_ref();
    foreign.job_id += 1;
    let err = ex.find(&foreign).await.expect_err("not its job");
    assert!(matches!(err, ExecError::SubmissionTaken { .. }), "{err}");
    let mut unsubmitted = s.job_ref();
    unsubmitted.attempt = 2;
    assert!(ex.find(&unsubmitted).await.expect("find").is_none());

    // Another SPADE job that claims the same submission id is refused.
    let mut other = s.clone();
    other.job_id += 1;
    match ex.start(&other).await {
        Err(ExecError::RayRefused {
            status, message, ..
        }) => {
            assert_eq!(status, 500);
            assert!(message.contains("already exists"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unknown_submission_is_lost_and_an_unreachable_head_is_an_error() {
    let Some(ex) = ray(&["true"]).await else {
        return;
    };
    let h = JobHandle {
        job_id: 1,
        run_id: 1,
        attempt: 1,
        external_id: "spade-run-never-submitted".into(),
    };
    assert!(matches!(ex.poll(&h).await, Ok(JobStatus::Lost { .. })));
    // Nothing listens on port 9 (discard) here.
    let dead = RayExecutor::new(RayConfig {
        address: "http://127.0.0.1:9".into(),
        command: vec!["true".into()],
        num_cpus: 1.0,
        max_jobs: 1,
        request_timeout: Duration::from_secs(2),
        submission_prefix: "spade".into(),
        jobs_dir: None,
        ray_python: None,
    })
    .expect("client");
    let err = dead.start(&spec(5)).await.expect_err("no Ray there");
    assert!(matches!(err, ExecError::RayUnreachable { .. }), "{err}");
    assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
}
