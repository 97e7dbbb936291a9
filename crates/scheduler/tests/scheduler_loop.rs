//! The scheduler loop against a real PostgreSQL (`#[sqlx::test]`) and real processes: queued
//! jobs run to their end, cancel requests stop them, a restarted scheduler re-attaches instead
//! of losing or duplicating jobs, and (with SPADE_RAY_ADDRESS) the same loop drives Ray.

use spade_db::jobs::{self, Job, JobExecutor, JobKind, JobState, testing};
use spade_scheduler::{
    Executor, LocalConfig, LocalExecutor, RayConfig, RayExecutor, Scheduler, SchedulerConfig,
    TokenSource,
};
use sqlx::PgPool;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Tokens for tests: a fixed function of the run; counts how many it issued.
#[derive(Default)]
struct RunTokens(Arc<AtomicUsize>);

impl TokenSource for RunTokens {
    async fn token(&self, job: &Job) -> Result<String, String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(format!("tok-{}", job.run_id))
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("scheduler-loop-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn local(dir: &Path, command: &[&str]) -> Arc<LocalExecutor> {
    Arc::new(LocalExecutor::new(LocalConfig {
        command: command.iter().map(|s| s.to_string()).collect(),
        jobs_dir: dir.to_path_buf(),
        cpu_slots: 1,
        gpus: vec![],
        stop_grace: Duration::from_secs(2),
    }))
}

fn scheduler<E: Executor>(pool: &PgPool, ex: Arc<E>) -> Scheduler<E, RunTokens> {
    scheduler_counting(pool, ex, Arc::default())
}

fn scheduler_counting<E: Executor>(
    pool: &PgPool,
    ex: Arc<E>,
    issued: Arc<AtomicUsize>,
) -> Scheduler<E, RunTokens> {
    Scheduler::new(
        pool.clone(),
        ex,
        RunTokens(issued),
        SchedulerConfig {
            node: "node-1".into(),
            server_url: "http://127.0.0.1:9".into(),
            poll_interval: Duration::from_millis(100),
            gpus_per_job: 0,
            resume_lost: false,
        },
    )
}

/// Ticks until job `id` is final; returns it.
async fn run_until_final<E: Executor>(
    s: &Scheduler<E, RunTokens>,
    pool: &PgPool,
    id: i64,
) -> Result<Job, Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    loop {
        s.tick().await?;
        let job = jobs::get(pool, id).await?.ok_or("job vanished")?;
        if job.state.is_final() {
            return Ok(job);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "job still {:?}",
            job.state
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn log_of(path: Option<&str>) -> String {
    std::fs::read_to_string(path.expect("a local job has a log")).expect("log file")
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_queued_job_runs_to_success(pool: PgPool) -> TestResult {
    let dir = scratch("success");
    let s = scheduler(
        &pool,
        local(
            &dir,
            &["sh", "-c", "echo run={run} token=$SPADE_WORKER_TOKEN"],
        ),
    );
    let run = testing::seed_runs(&pool, 1).await?[0];
    let job = jobs::enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    let tick = s.tick().await?;
    assert_eq!(tick.started, [job.id]);
    let done = run_until_final(&s, &pool, job.id).await?;
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.exit_code, Some(0));
    assert!(
        done.external_id
            .as_deref()
            .is_some_and(|e| e.starts_with("pid:"))
    );
    let log = log_of(done.log_path.as_deref()).await;
    assert!(log.contains(&format!("run={run} token=tok-{run}")), "{log}");
    assert_eq!(testing::run_status(&pool, run).await?, "succeeded");
    Ok(())
}

/// A scheduler over a local executor lending GPUs 0-3, running `sh -c SCRIPT` for each job.
fn four_gpus(
    pool: &PgPool,
    dir: &Path,
    script: String,
    gpus_per_job: u32,
) -> Scheduler<LocalExecutor, RunTokens> {
    let ex = Arc::new(LocalExecutor::new(LocalConfig {
        command: vec!["sh".into(), "-c".into(), script],
        jobs_dir: dir.to_path_buf(),
        cpu_slots: 1,
        gpus: vec![0, 1, 2, 3],
        stop_grace: Duration::from_secs(2),
    }));
    Scheduler::new(
        pool.clone(),
        ex,
        RunTokens::default(),
        SchedulerConfig {
            node: "node-1".into(),
            server_url: "http://127.0.0.1:9".into(),
            poll_interval: Duration::from_millis(100),
            gpus_per_job,
            resume_lost: false,
        },
    )
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_run_whose_vllm_servers_split_gpus_is_given_that_many(pool: PgPool) -> TestResult {
    let dir = scratch("gpus");
    let s = four_gpus(&pool, &dir, "echo devices=$CUDA_VISIBLE_DEVICES".into(), 1);
    let [plain, split] = testing::seed_runs(&pool, 2).await?[..] else {
        return Err("two runs".into());
    };
    // Two started servers of one GPU each on the job's devices 1 and 3 (0 for the trainer):
    // the job needs four devices, one more than the highest index.
    let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
    cfg.model.rollout = spade::config::RolloutBackend::Vllm;
    cfg.vllm.start = 2;
    cfg.vllm.gpus = vec![1, 3];
    testing::set_config(&pool, split, &serde_json::to_value(&cfg)?).await?;
    // Both queued before the first tick (a tick adopts queued runs that have no job).
    let jobs_of = [
        jobs::enqueue(&pool, split, JobKind::Train, JobExecutor::Local).await?,
        jobs::enqueue(&pool, plain, JobKind::Train, JobExecutor::Local).await?,
    ];
    let mut seen = Vec::new();
    for job in jobs_of {
        let done = run_until_final(&s, &pool, job.id).await?;
        assert_eq!(done.state, JobState::Succeeded);
        seen.push(log_of(done.log_path.as_deref()).await);
    }
    assert!(seen[0].contains("devices=0,1,2,3"), "{}", seen[0]);
    assert!(seen[1].contains("devices=0\n"), "{}", seen[1]);
    Ok(())
}

async fn status_message(pool: &PgPool, run: i64) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT status_message FROM runs WHERE id = $1")
        .bind(run)
        .fetch_one(pool)
        .await
}

/// Four GPUs lent, three runs whose trainer asks for `cuda:1` (two devices each): two start on
/// disjoint sets, the third waits (claimed, its run saying so) and starts on the devices the
/// first one to end gives back. A run that asks for more GPUs than the node lends fails.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn two_gpu_runs_share_four_gpus_disjointly_and_the_third_waits_its_turn(
    pool: PgPool,
) -> TestResult {
    let dir = scratch("gpu-queue");
    std::fs::create_dir_all(&dir)?;
    // Each job prints its devices and runs until its release file appears.
    let script = format!(
        "echo devices=$CUDA_VISIBLE_DEVICES; while [ ! -e {}/release-{{run}} ]; do sleep 0.05; done",
        dir.display()
    );
    let s = four_gpus(&pool, &dir, script, 0);
    let runs = testing::seed_runs(&pool, 4).await?;
    let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
    cfg.model.device = "cuda:1".into();
    for &r in &runs[..3] {
        testing::set_config(&pool, r, &serde_json::to_value(&cfg)?).await?;
    }
    let mut huge = cfg.clone();
    huge.model.device = "cuda:7".into();
    testing::set_config(&pool, runs[3], &serde_json::to_value(&huge)?).await?;
    let mut job = Vec::new();
    for &r in &runs {
        job.push(jobs::enqueue(&pool, r, JobKind::Train, JobExecutor::Local).await?);
    }
    // Ticks until the first two print their devices.
    let devices = |j: &Job| -> Option<String> {
        let log = std::fs::read_to_string(j.log_path.as_deref()?).ok()?;
        let line = log.lines().find(|l| l.starts_with("devices="))?;
        Some(line["devices=".len()..].to_owned())
    };
    let t0 = Instant::now();
    let (a, b) = loop {
        s.tick().await?;
        let a = jobs::get(&pool, job[0].id).await?.ok_or("job 0")?;
        let b = jobs::get(&pool, job[1].id).await?.ok_or("job 1")?;
        if let (Some(da), Some(db)) = (devices(&a), devices(&b)) {
            break (da, db);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "two jobs never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let set = |d: &str| -> Vec<u32> { d.split(',').filter_map(|x| x.parse().ok()).collect() };
    let (sa, sb) = (set(&a), set(&b));
    assert_eq!((sa.len(), sb.len()), (2, 2), "{a} / {b}");
    assert!(sa.iter().all(|g| !sb.contains(g)), "overlap: {a} / {b}");
    // The third waits: claimed, not running, and its run says what for.
    s.tick().await?;
    let third = jobs::get(&pool, job[2].id).await?.ok_or("job 2")?;
    assert_eq!(third.state, JobState::Claimed);
    assert_eq!(
        status_message(&pool, runs[2]).await?.as_deref(),
        Some("waiting for 2 GPUs (0 of this node's 4 free)")
    );
    // The fourth is not even claimed while the third waits.
    let fourth = jobs::get(&pool, job[3].id).await?.ok_or("job 3")?;
    assert_eq!(fourth.state, JobState::Queued);
    // The first ends: the third starts on the devices it gave back.
    std::fs::write(dir.join(format!("release-{}", runs[0])), "")?;
    let done = run_until_final(&s, &pool, job[0].id).await?;
    assert_eq!(done.state, JobState::Succeeded);
    let t0 = Instant::now();
    let c = loop {
        s.tick().await?;
        let c = jobs::get(&pool, job[2].id).await?.ok_or("job 2")?;
        if let Some(dc) = devices(&c) {
            break dc;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the third never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(set(&c), sa, "the third takes the first one's devices");
    assert_eq!(status_message(&pool, runs[2]).await?, None);
    // Asking for 8 of 4 GPUs can never start: it fails, saying why.
    let refused = run_until_final(&s, &pool, job[3].id).await?;
    assert_eq!(refused.state, JobState::Failed);
    let why = refused.message.unwrap_or_default();
    assert!(why.contains("needs 8 GPUs but this node lends 4"), "{why}");
    for r in &runs[1..3] {
        std::fs::write(dir.join(format!("release-{r}")), "")?;
    }
    for j in &job[1..3] {
        assert_eq!(
            run_until_final(&s, &pool, j.id).await?.state,
            JobState::Succeeded
        );
    }
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_cancel_request_stops_the_running_job(pool: PgPool) -> TestResult {
    let dir = scratch("cancel");
    let s = scheduler(&pool, local(&dir, &["sh", "-c", "echo up; sleep 300"]));
    let run = testing::seed_runs(&pool, 1).await?[0];
    let job = jobs::enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    s.tick().await?;
    let running = jobs::get(&pool, job.id).await?.ok_or("job")?;
    assert_eq!(running.state, JobState::Running);
    let t0 = Instant::now();
    while !log_of(running.log_path.as_deref()).await.contains("up") {
        assert!(t0.elapsed() < Duration::from_secs(10), "job never printed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        jobs::request_cancel_for_run(&pool, run).await?,
        Some(JobState::Cancelling)
    );
    let t0 = Instant::now();
    let done = run_until_final(&s, &pool, job.id).await?;
    eprintln!("cancel took {:?}", t0.elapsed());
    assert_eq!(done.state, JobState::Cancelled);
    assert_eq!(done.exit_code, Some(143));
    assert_eq!(
        done.message.as_deref(),
        Some("stopped on request (terminated by signal 15)")
    );
    assert_eq!(testing::run_status(&pool, run).await?, "cancelled");
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn runs_the_api_queues_and_cancels_reach_the_executor(pool: PgPool) -> TestResult {
    let dir = scratch("api");
    let s = scheduler(&pool, local(&dir, &["sh", "-c", "echo up; sleep 300"]));
    // A run created (or resumed) by the API is `queued` with no job: the tick queues and starts it.
    let run = testing::seed_runs(&pool, 1).await?[0];
    let tick = s.tick().await?;
    assert_eq!(tick.enqueued, 1);
    let job = jobs::latest_for_run(&pool, run).await?.ok_or("a job")?;
    assert_eq!(tick.started, [job.id]);
    assert_eq!(job.state, JobState::Running);
    assert_eq!(testing::run_status(&pool, run).await?, "running");
    let t0 = Instant::now();
    while !log_of(job.log_path.as_deref()).await.contains("up") {
        assert!(t0.elapsed() < Duration::from_secs(10), "job never printed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The API cancels the run; the scheduler stops the job.
    testing::set_run_status(&pool, run, "cancelling").await?;
    let done = run_until_final(&s, &pool, job.id).await?;
    assert_eq!(done.state, JobState::Cancelled);
    assert_eq!(testing::run_status(&pool, run).await?, "cancelled");
    // Nothing is queued again for a cancelled run.
    assert_eq!(s.tick().await?.enqueued, 0);
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_restarted_scheduler_reattaches_instead_of_duplicating(pool: PgPool) -> TestResult {
    let dir = scratch("restart");
    let cmd = ["sh", "-c", "echo begin {run}; sleep 1.5; echo end {run}"];
    let runs = testing::seed_runs(&pool, 2).await?;
    let first = jobs::enqueue(&pool, runs[0], JobKind::Train, JobExecutor::Local).await?;
    let second = jobs::enqueue(&pool, runs[1], JobKind::Train, JobExecutor::Local).await?;
    let before = scheduler(&pool, local(&dir, &cmd));
    // One slot: the second job waits.
    assert_eq!(before.tick().await?.started, [first.id]);
    // The server stops; its scheduler and executor are gone, the job is not.
    drop(before);

    let after = scheduler(&pool, local(&dir, &cmd));
    assert_eq!(after.reattach().await?, 1);
    // The adopted job holds the only slot: the second job waits instead of overcommitting.
    let tick = after.tick().await?;
    assert!(tick.started.is_empty(), "{tick:?}");
    assert_eq!(
        jobs::get(&pool, second.id).await?.map(|j| j.state),
        Some(JobState::Queued)
    );
    let done = run_until_final(&after, &pool, first.id).await?;
    assert_eq!(done.state, JobState::Succeeded);
    let log = log_of(done.log_path.as_deref()).await;
    assert_eq!(log.matches("begin").count(), 1, "started twice: {log}");
    assert!(log.contains(&format!("end {}", runs[0])));
    // Now the slot is free.
    let done = run_until_final(&after, &pool, second.id).await?;
    assert_eq!(done.state, JobState::Succeeded);
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_job_claimed_before_a_crash_is_started_once(pool: PgPool) -> TestResult {
    let dir = scratch("claimed");
    let run = testing::seed_runs(&pool, 1).await?[0];
    let job = jobs::enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    // The previous server process claimed it and died before starting it.
    jobs::claim_next(&pool, JobExecutor::Local, "node-1")
        .await?
        .ok_or("claim")?;
    let s = scheduler(&pool, local(&dir, &["sh", "-c", "echo once"]));
    assert_eq!(s.reattach().await?, 0);
    assert_eq!(s.tick().await?.started, [job.id]);
    let done = run_until_final(&s, &pool, job.id).await?;
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(log_of(done.log_path.as_deref()).await, "once\n");
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_job_started_just_before_a_crash_keeps_its_process_and_token(pool: PgPool) -> TestResult {
    let dir = scratch("spawned");
    let cmd = [
        "sh",
        "-c",
        "echo begin token=$SPADE_WORKER_TOKEN; sleep 1; echo end",
    ];
    let run = testing::seed_runs(&pool, 1).await?[0];
    let job = jobs::enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    jobs::claim_next(&pool, JobExecutor::Local, "node-1")
        .await?
        .ok_or("claim")?;
    // The previous server spawned it with its token and died before recording the handle.
    let spec = spade_scheduler::JobSpec {
        job_id: job.id,
        run_id: run,
        attempt: 1,
        server_url: "http://127.0.0.1:9".into(),
        token: "first-token".into(),
        gpus: 0,
        program_args: None,
    };
    let first = local(&dir, &cmd).start(&spec).await?;
    let issued = Arc::new(AtomicUsize::new(0));
    let s = scheduler_counting(&pool, local(&dir, &cmd), Arc::clone(&issued));
    s.tick().await?;
    // A new token would have replaced the one the running worker holds.
    assert_eq!(issued.load(Ordering::SeqCst), 0, "a token was issued again");
    let running = jobs::get(&pool, job.id).await?.ok_or("job")?;
    assert_eq!(running.external_id, Some(first.external_id));
    let done = run_until_final(&s, &pool, job.id).await?;
    assert_eq!(done.state, JobState::Succeeded);
    let log = log_of(done.log_path.as_deref()).await;
    assert_eq!(
        log, "begin token=first-token\nend\n",
        "started again or re-tokened"
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_cancel_during_the_crash_window_still_stops_the_process(pool: PgPool) -> TestResult {
    let dir = scratch("spawned-cancel");
    let cmd = ["sh", "-c", "echo up; sleep 300"];
    let run = testing::seed_runs(&pool, 1).await?[0];
    let job = jobs::enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    jobs::claim_next(&pool, JobExecutor::Local, "node-1")
        .await?
        .ok_or("claim")?;
    let spec = spade_scheduler::JobSpec {
        job_id: job.id,
        run_id: run,
        attempt: 1,
        server_url: "http://127.0.0.1:9".into(),
        token: "t".into(),
        gpus: 0,
        program_args: None,
    };
    let ex = local(&dir, &cmd);
    let started = ex.start(&spec).await?;
    let h = spec.handle(started.external_id);
    // Cancelled while no server owned the handle.
    jobs::request_cancel_for_run(&pool, run).await?;
    let s = scheduler(&pool, local(&dir, &cmd));
    let done = run_until_final(&s, &pool, job.id).await?;
    assert_eq!(done.state, JobState::Cancelled);
    assert_eq!(done.external_id.as_deref(), Some(h.external_id.as_str()));
    assert!(
        ex.poll(&h).await?.is_final(),
        "the process outlived the cancel"
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_job_that_cannot_start_fails_with_the_reason(pool: PgPool) -> TestResult {
    let dir = scratch("nostart");
    let s = scheduler(&pool, local(&dir, &["no-such-spade-binary", "worker"]));
    let run = testing::seed_runs(&pool, 1).await?[0];
    let job = jobs::enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    s.tick().await?;
    let failed = jobs::get(&pool, job.id).await?.ok_or("job")?;
    assert_eq!(failed.state, JobState::Failed);
    let msg = failed.message.unwrap_or_default();
    assert!(msg.contains("\"no-such-spade-binary\" not found"), "{msg}");
    assert_eq!(testing::run_status(&pool, run).await?, "failed");
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn ray_jobs_go_through_the_same_loop(pool: PgPool) -> TestResult {
    let Ok(address) = std::env::var("SPADE_RAY_ADDRESS") else {
        eprintln!(
            "skipped: SPADE_RAY_ADDRESS is not set (scripts/test starts a Ray head and sets it)"
        );
        return Ok(());
    };
    // Every test database numbers runs from 1: a prefix unique to this test run keeps
    // submission ids unique on a long-lived head (as distinct prefixes do for servers).
    let prefix = format!(
        "spade-test-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let ex = Arc::new(RayExecutor::new(RayConfig {
        command: ["sh", "-c", "echo ray run {run} $SPADE_WORKER_TOKEN"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..ex_config(&address, &prefix)
    })?);
    ex.version().await?; // unreachable with SPADE_RAY_ADDRESS set: fail, not skip
    let quick_run = testing::seed_runs(&pool, 1).await?[0];
    let s = scheduler(&pool, Arc::clone(&ex));
    let quick = jobs::enqueue(&pool, quick_run, JobKind::Train, JobExecutor::Ray).await?;
    let done = run_until_final(&s, &pool, quick.id).await?;
    assert_eq!(done.state, JobState::Succeeded, "{:?}", done.message);
    assert_eq!(
        done.external_id.as_deref(),
        Some(format!("{prefix}-run-{quick_run}-a1").as_str())
    );
    let handle = spade_scheduler::JobHandle {
        job_id: done.id,
        run_id: done.run_id,
        attempt: 1,
        external_id: done.external_id.clone().ok_or("handle")?,
    };
    let logs = ex.logs(&handle, 10_000).await?;
    assert!(
        logs.contains(&format!("ray run {quick_run} tok-{quick_run}")),
        "{logs}"
    );

    // Cancel reaches Ray: a long job is stopped and recorded as cancelled.
    let long = Arc::new(RayExecutor::new(RayConfig {
        command: vec!["sleep".into(), "300".into()],
        ..ex_config(&address, &prefix)
    })?);
    let s = scheduler(&pool, long);
    let long_run = testing::seed_runs(&pool, 1).await?[0];
    let job = jobs::enqueue(&pool, long_run, JobKind::Train, JobExecutor::Ray).await?;
    assert_eq!(s.tick().await?.started, [job.id]);
    jobs::request_cancel_for_run(&pool, long_run).await?;
    let done = run_until_final(&s, &pool, job.id).await?;
    assert_eq!(done.state, JobState::Cancelled, "{:?}", done.message);
    assert_eq!(testing::run_status(&pool, long_run).await?, "cancelled");

    // A run whose started vLLM servers take the job's devices 1 and 3 asks Ray for four GPUs
    // for its one job (the servers run inside it, beside the worker). This head has none, so
    // Ray keeps the job pending; what matters is what was asked for. Then it is cancelled.
    let gpu_run = testing::seed_runs(&pool, 1).await?[0];
    let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
    cfg.model.rollout = spade::config::RolloutBackend::Vllm;
    cfg.vllm.start = 2;
    cfg.vllm.gpus = vec![1, 3];
    testing::set_config(&pool, gpu_run, &serde_json::to_value(&cfg)?).await?;
    let job = jobs::enqueue(&pool, gpu_run, JobKind::Train, JobExecutor::Ray).await?;
    assert_eq!(s.tick().await?.started, [job.id]);
    // Ray's job details do not echo the request; its autoscaler lists what waits for resources
    // (refreshed every few seconds).
    let submission = spade_scheduler::submission_id(&prefix, gpu_run, 1);
    let t0 = Instant::now();
    loop {
        let status: serde_json::Value =
            reqwest::get(format!("{address}/api/cluster_status?format=1"))
                .await?
                .json()
                .await?;
        let text = status["data"]["clusterStatus"].as_str().unwrap_or_default();
        if text.contains("'GPU': 4.0") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no demand for 4 GPUs from {submission}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Cancelled: the stop reaches Ray. Ray keeps a job that never got its resources PENDING
    // after a stop (seen here for over a minute), so the job stays `cancelling` on our side
    // until Ray ends it; docs/operations.md says so.
    jobs::request_cancel_for_run(&pool, gpu_run).await?;
    s.tick().await?;
    let cancelling = jobs::get(&pool, job.id).await?.ok_or("job")?;
    assert_eq!(cancelling.state, JobState::Cancelling);
    Ok(())
}

fn ex_config(address: &str, prefix: &str) -> RayConfig {
    RayConfig {
        address: address.to_owned(),
        command: Vec::new(),
        num_cpus: 0.25,
        max_jobs: 2,
        request_timeout: Duration::from_secs(20),
        submission_prefix: prefix.to_owned(),
        jobs_dir: None,
        ray_python: None,
    }
}
