//! The local executor against real processes: start, poll, logs, stop (SIGTERM and, for a job
//! that ignores it, SIGKILL), slots, and re-attaching from a fresh executor instance.

use spade_scheduler::{
    ExecError, Executor, JobHandle, JobSpec, JobStatus, LocalConfig, LocalExecutor,
};
use std::path::Path;
use std::time::{Duration, Instant};

fn executor(data_dir: &Path, command: &[&str], cpu_slots: u32, gpu_slots: u32) -> LocalExecutor {
    LocalExecutor::new(LocalConfig {
        command: command.iter().map(|s| s.to_string()).collect(),
        jobs_dir: data_dir.to_path_buf(),
        cpu_slots,
        gpus: (0..gpu_slots).collect(),
        stop_grace: Duration::from_secs(2),
    })
}

fn spec(job_id: i64, gpus: u32) -> JobSpec {
    JobSpec {
        job_id,
        run_id: 100 + job_id,
        attempt: 1,
        server_url: "http://127.0.0.1:9".into(),
        token: format!("token-{job_id}"),
        gpus,
        program_args: None,
    }
}

/// A fresh directory under target/ (the tests' own scratch space).
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("local-executor-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

async fn wait_final(ex: &LocalExecutor, h: &JobHandle, limit: Duration) -> JobStatus {
    let t0 = Instant::now();
    loop {
        let st = ex.poll(h).await.expect("poll");
        if st.is_final() {
            return st;
        }
        assert!(
            t0.elapsed() < limit,
            "job {h:?} still {st:?} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_short_command_succeeds_with_its_output_captured() {
    let dir = scratch("short");
    let ex = executor(
        &dir,
        &[
            "sh",
            "-c",
            "echo run={run} job={job} server={server} token=$SPADE_WORKER_TOKEN gpus=[$CUDA_VISIBLE_DEVICES]; echo oops >&2",
        ],
        1,
        0,
    );
    let s = spec(1, 0);
    let started = ex.start(&s).await.expect("start");
    assert!(started.external_id.starts_with("pid:"), "{started:?}");
    let h = s.handle(started.external_id);
    assert_eq!(
        wait_final(&ex, &h, Duration::from_secs(10)).await,
        JobStatus::Succeeded
    );
    let logs = ex.logs(&h, 10_000).await.expect("logs");
    assert!(
        logs.contains("run=101 job=1 server=http://127.0.0.1:9 token=token-1 gpus=[]"),
        "{logs}"
    );
    assert!(logs.contains("oops"), "stderr is captured too: {logs}");
    assert_eq!(
        started.log_path,
        Some(ex.job_dir(101, 1).join("output.log"))
    );
    // The tail is the end of the log.
    assert_eq!(ex.logs(&h, 5).await.expect("tail"), "oops\n");
    ex.release(&h);
    assert!(ex.has_capacity(0));
}

#[tokio::test]
async fn failures_report_the_exit_status_and_bad_commands_are_refused() {
    let dir = scratch("fail");
    let ex = executor(&dir, &["sh", "-c", "exit 3"], 2, 0);
    let s = spec(2, 0);
    let h = s.handle(ex.start(&s).await.expect("start").external_id);
    match wait_final(&ex, &h, Duration::from_secs(10)).await {
        JobStatus::Failed { exit_code, message } => {
            assert_eq!(exit_code, Some(3));
            assert_eq!(message, "exited with status 3");
        }
        other => panic!("expected a failure, got {other:?}"),
    }

    let missing = executor(&dir, &["no-such-spade-binary", "worker"], 1, 0);
    let err = missing.start(&spec(3, 0)).await.expect_err("not on PATH");
    assert!(
        matches!(err, ExecError::CommandNotFound { ref program } if program == "no-such-spade-binary"),
        "{err}"
    );
    let empty = executor(&dir, &[], 1, 0);
    assert!(matches!(
        empty.start(&spec(4, 0)).await,
        Err(ExecError::EmptyCommand)
    ));
}

#[tokio::test]
async fn stop_terminates_the_whole_process_group() {
    let dir = scratch("stop");
    // The job's own child (sleep) must die with it: the group is signalled, not one pid.
    let ex = executor(&dir, &["sh", "-c", "sleep 300 & echo started; wait"], 1, 0);
    let s = spec(5, 0);
    let h = s.handle(ex.start(&s).await.expect("start").external_id);
    assert_eq!(ex.poll(&h).await.expect("poll"), JobStatus::Running);
    // Wait until the job runs (and the wrapper's trap is set: a SIGTERM in the first
    // milliseconds kills the wrapper too, which then reports "killed by signal 15").
    let t0 = Instant::now();
    while !ex.logs(&h, 100).await.expect("logs").contains("started") {
        assert!(t0.elapsed() < Duration::from_secs(10), "job never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t0 = Instant::now();
    ex.stop(&h).await.expect("stop");
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "SIGTERM should suffice, took {took:?}"
    );
    match wait_final(&ex, &h, Duration::from_secs(5)).await {
        JobStatus::Failed { exit_code, message } => {
            assert_eq!(exit_code, Some(143), "{message}");
            assert_eq!(message, "terminated by signal 15");
        }
        other => panic!("expected a terminated job, got {other:?}"),
    }
    let pgid: i32 = h
        .external_id
        .split(':')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("pid");
    assert!(
        !group_has_members(pgid),
        "the job's sleep survived the stop"
    );
    // Stopping an ended job is fine.
    ex.stop(&h).await.expect("second stop");
}

#[tokio::test]
async fn a_job_that_ignores_sigterm_gets_sigkill_after_the_grace_period() {
    let dir = scratch("kill");
    let ex = executor(
        &dir,
        &["sh", "-c", "trap '' TERM; echo stubborn; sleep 300"],
        1,
        0,
    );
    let s = spec(6, 0);
    let h = s.handle(ex.start(&s).await.expect("start").external_id);
    // Let the inner shell install its trap before signalling.
    let t0 = Instant::now();
    while !ex.logs(&h, 100).await.expect("logs").contains("stubborn") {
        assert!(t0.elapsed() < Duration::from_secs(10), "job never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t0 = Instant::now();
    ex.stop(&h).await.expect("stop");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "expected the 2 s grace then SIGKILL, took {took:?}"
    );
    match wait_final(&ex, &h, Duration::from_secs(5)).await {
        JobStatus::Failed { message, .. } => assert_eq!(message, "killed by signal 9"),
        other => panic!("expected a killed job, got {other:?}"),
    }
}

#[tokio::test]
async fn slots_bound_concurrent_jobs_and_gpus_are_assigned_distinct_devices() {
    let dir = scratch("slots");
    let ex = executor(
        &dir,
        &["sh", "-c", "echo dev=[$CUDA_VISIBLE_DEVICES]; sleep 30"],
        1,
        2,
    );
    let cpu = spec(7, 0);
    let h_cpu = cpu.handle(ex.start(&cpu).await.expect("cpu job").external_id);
    assert!(!ex.has_capacity(0));
    let err = ex.start(&spec(8, 0)).await.expect_err("no CPU slot left");
    assert!(
        matches!(
            err,
            ExecError::NoCapacity {
                what: "CPU",
                total: 1
            }
        ),
        "{err}"
    );

    let (g1, g2) = (spec(9, 1), spec(10, 1));
    let h1 = g1.handle(ex.start(&g1).await.expect("gpu job 1").external_id);
    let h2 = g2.handle(ex.start(&g2).await.expect("gpu job 2").external_id);
    assert!(!ex.has_capacity(1));
    let mut devices = Vec::new();
    for h in [&h1, &h2] {
        let t0 = Instant::now();
        loop {
            let logs = ex.logs(h, 100).await.expect("logs");
            if let Some(d) = logs.lines().find_map(|l| l.strip_prefix("dev=")) {
                devices.push(d.to_owned());
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no output from {h:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    devices.sort();
    assert_eq!(devices, ["[0]", "[1]"]);
    for h in [&h_cpu, &h1, &h2] {
        ex.stop(h).await.expect("stop");
        wait_final(&ex, h, Duration::from_secs(5)).await;
        ex.release(h);
    }
    assert!(ex.has_capacity(0) && ex.has_capacity(2));
}

#[tokio::test]
async fn a_fresh_executor_reattaches_and_a_recycled_pid_is_not_mistaken() {
    let dir = scratch("reattach");
    let cmd = ["sh", "-c", "echo begin; sleep 1.5; echo end"];
    let first = executor(&dir, &cmd, 1, 0);
    let s = spec(11, 0);
    let id = first.start(&s).await.expect("start").external_id;
    let h = s.handle(id.clone());
    // The server "restarts": the instance that spawned the job is gone.
    drop(first);

    let second = executor(&dir, &cmd, 1, 0);
    second.adopt(&h).await.expect("adopt");
    assert!(!second.has_capacity(0), "an adopted job holds its slot");
    assert_eq!(second.poll(&h).await.expect("poll"), JobStatus::Running);
    // Starting the same job again hands back the same process instead of a second one.
    assert_eq!(
        second
            .start(&s)
            .await
            .expect("idempotent start")
            .external_id,
        id
    );
    assert_eq!(
        wait_final(&second, &h, Duration::from_secs(10)).await,
        JobStatus::Succeeded
    );
    let logs = second.logs(&h, 1000).await.expect("logs");
    assert_eq!(logs.matches("begin").count(), 1, "started twice: {logs}");
    assert!(logs.contains("end"));

    // Another job (e.g. from a reset database) with the same run and attempt is refused.
    let mut other = s.clone();
    other.job_id += 100;
    let err = second.start(&other).await.expect_err("stale directory");
    assert!(
        matches!(err, ExecError::StaleJobDir { found: 11, .. }),
        "{err}"
    );

    // A handle whose pid is alive but belongs to another process (here: this test binary,
    // with a different start time) is not mistaken for the job.
    let me = std::process::id();
    let recycled = JobHandle {
        job_id: 12,
        run_id: 112,
        attempt: 1,
        external_id: format!("pid:{me}:1"),
    };
    match second.poll(&recycled).await.expect("poll") {
        JobStatus::Lost { message } => assert!(message.contains("no exit status"), "{message}"),
        other => panic!("a recycled pid was taken for the job: {other:?}"),
    }
    // Nor is it signalled.
    second
        .stop(&recycled)
        .await
        .expect("stop of a vanished job is a no-op");
    let bad = JobHandle {
        external_id: "spade-run-1-a1".into(),
        ..recycled
    };
    assert!(matches!(
        second.poll(&bad).await,
        Err(ExecError::BadExternalId { .. })
    ));
}

/// Whether any live (non-zombie) process is in group `pgid`.
fn group_has_members(pgid: i32) -> bool {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .any(|stat| {
            let rest = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z"
        })
}
