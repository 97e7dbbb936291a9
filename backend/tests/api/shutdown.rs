//! Issue 24: the server binary as a container runs it. A real SIGTERM against `spade-server`
//! with a request and a job in flight: the listener closes at once, the request in flight gets
//! its answer, the process exits 0, the job keeps running and the next start re-attaches it.
//! And `/healthz` / `/readyz`, which a compose file's health checks wait on.

use crate::support::*;
use axum::http::StatusCode;
use serde_json::json;
use sqlx::PgPool;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The URL of the test's own database (sqlx::test made it on DATABASE_URL's server).
async fn url_of(pool: &PgPool) -> Result<String, sqlx::Error> {
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await?;
    let base = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://spade:spade@127.0.0.1:5432/spade".into());
    let server = base.rsplit_once('/').map_or(base.as_str(), |(s, _)| s);
    Ok(format!("{server}/{name}"))
}

/// The text without terminal colour codes (the server's tracing log colours field names).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // ESC [ params letter
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

struct Server {
    child: Child,
    addr: String,
    /// Its stdout and stderr (the tracing log).
    log: std::path::PathBuf,
}

impl Server {
    fn start(db: &str, dir: &Path, port: u16) -> Result<Self, Box<dyn std::error::Error>> {
        Self::start_with(db, dir, port, &[])
    }

    fn start_with(
        db: &str,
        dir: &Path,
        port: u16,
        extra: &[&str],
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let command = format!("/bin/sh {} {{run}}", dir.join("job.sh").display());
        let log = dir.join(format!("server-{port}.log"));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_spade-server"))
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args(["--database-url", db])
            .args(["--data-dir", &dir.join("data").display().to_string()])
            .args(["--jobs-dir", &dir.join("jobs").display().to_string()])
            .args(["--worker-command", &command])
            .args(["--scheduler-poll-ms", "100"])
            .args(["--site-root", &dir.join("site").display().to_string()])
            .args(extra)
            // The tracing log goes to stdout.
            .stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file))
            .spawn()?;
        Ok(Self {
            child,
            addr: format!("127.0.0.1:{port}"),
            log,
        })
    }

    async fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        let mut s = tokio::net::TcpStream::connect(&self.addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        let code = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        Ok((code, out))
    }

    async fn wait_ready(&self) -> Result<(), Box<dyn std::error::Error>> {
        let t0 = Instant::now();
        loop {
            if let Ok((200, _)) = self.get("/readyz").await {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(60) {
                return Err(format!("{} not ready after 60 s", self.addr).into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the server's log has a line with every one of `words` (at most `limit`).
    async fn wait_log(
        &self,
        words: &[&str],
        limit: Duration,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let t0 = Instant::now();
        loop {
            let log = strip_ansi(&std::fs::read_to_string(&self.log).unwrap_or_default());
            if log.lines().any(|l| words.iter().all(|w| l.contains(w))) {
                return Ok(());
            }
            if t0.elapsed() > limit {
                return Err(format!("no log line with {words:?} after {limit:?}:\n{log}").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn signal(&self, sig: &str) -> std::io::Result<()> {
        Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()?;
        Ok(())
    }

    /// Waits for the process to exit (at most `limit`), returning its exit code.
    async fn exit_code(&mut self, limit: Duration) -> Result<i32, Box<dyn std::error::Error>> {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait()? {
                return s
                    .code()
                    .ok_or_else(|| format!("killed by a signal: {s}").into());
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                return Err(format!("still running {limit:?} after the signal").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn alive(pid: i64) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

async fn run_status(pool: &PgPool, run: i64) -> Result<(String, Option<String>), sqlx::Error> {
    sqlx::query_as("SELECT status::text, status_message FROM runs WHERE id = $1")
        .bind(run)
        .fetch_one(pool)
        .await
}

/// The run's status and message once it is no longer `running` (at most 30 s; `what` names
/// the event waited for in the failure).
async fn status_once_not_running(
    pool: &PgPool,
    run: i64,
    what: &str,
) -> Result<(String, Option<String>), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    loop {
        let s = run_status(pool, run).await?;
        if s.0 != "running" {
            return Ok(s);
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(format!("{what} was never seen").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the scheduler has marked the run `running` (at most 30 s): the job's process
/// can be up a moment before the status says so, a window a loaded machine widens.
async fn until_running(pool: &PgPool, run: i64) -> TestResult {
    let t0 = Instant::now();
    while run_status(pool, run).await?.0 != "running" {
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(format!("run {run} never became running").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A directory for a server (site root, job script), the test database's URL and a queued
/// run. The job: a long-lived process that never reports (as a worker in its warm start).
async fn studio_with_a_queued_run(
    pool: &PgPool,
) -> Result<(tempfile::TempDir, String, i64), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("site"))?;
    std::fs::write(
        dir.path().join("job.sh"),
        "echo \"job for run $1\"; exec sleep 300\n",
    )?;
    let db = url_of(pool).await?;
    let app = TestApp::new(pool.clone());
    let owner = app.user("owner@x.org").await;
    let (_, _, run) = app.team_project_run(&owner, "t").await;
    Ok((dir, db, run))
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn sigterm_answers_requests_in_flight_exits_0_and_leaves_jobs_to_the_next_start(
    pool: PgPool,
) -> TestResult {
    let (dir, db, run) = studio_with_a_queued_run(&pool).await?;

    let mut server = Server::start(&db, dir.path(), free_port()?)?;
    server.wait_ready().await?;
    assert_eq!(server.get("/healthz").await?.0, 200);
    // The scheduler starts the queued job.
    let job_json = dir
        .path()
        .join("jobs")
        .join(format!("spade-run-{run}-a1"))
        .join("job.json");
    let t0 = Instant::now();
    while !job_json.exists() || run_status(&pool, run).await?.0 != "running" {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the job never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&job_json)?)?;
    let pid = record["pid"].as_i64().ok_or("pid in job.json")?;

    // A request in flight: headers sent, half the body still to come when the signal lands.
    let body = json!({ "email": "owner@x.org", "password": "not the password" }).to_string();
    let (head, tail) = body.split_at(body.len() / 2);
    let mut inflight = tokio::net::TcpStream::connect(&server.addr).await?;
    inflight
        .write_all(
            format!(
                "POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{head}",
                body.len()
            )
            .as_bytes(),
        )
        .await?;
    // Time for the server to take the connection off the listen queue and read the headers;
    // nothing outside the process shows that moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.signal("-TERM")?;
    let t0 = Instant::now();
    while tokio::net::TcpStream::connect(&server.addr).await.is_ok() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "new connections were still accepted 5 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    inflight.write_all(tail.as_bytes()).await?;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), inflight.read_to_string(&mut answer)).await??;
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "the request in flight got no full answer: {answer:?}"
    );
    let code = server.exit_code(Duration::from_secs(15)).await?;
    assert_eq!(code, 0, "exit status after SIGTERM");
    assert!(alive(pid), "the job died with the server");
    assert_eq!(run_status(&pool, run).await?.0, "running");

    // The next start re-attaches the job: it watches it and records its end.
    let mut again = Server::start(&db, dir.path(), free_port()?)?;
    again.wait_ready().await?;
    again
        .wait_log(
            &["scheduler re-attached", "adopted=1"],
            Duration::from_secs(15),
        )
        .await?;
    assert_eq!(run_status(&pool, run).await?.0, "running", "still running");
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status()?;
    let (status, message) =
        status_once_not_running(&pool, run, "the re-attached job's end").await?;
    assert_eq!(status, "failed");
    assert!(
        message
            .as_deref()
            .unwrap_or("")
            .contains("without reporting"),
        "{message:?}"
    );
    // SIGINT (Ctrl-C) stops it the same way.
    again.signal("-INT")?;
    assert_eq!(again.exit_code(Duration::from_secs(15)).await?, 0);
    Ok(())
}

/// The job directory's record of attempt `attempt`, once the scheduler has started it; waits
/// at most 30 s.
async fn started_pid(
    dir: &Path,
    run: i64,
    attempt: u32,
) -> Result<i64, Box<dyn std::error::Error>> {
    let job_json = dir
        .join("jobs")
        .join(format!("spade-run-{run}-a{attempt}"))
        .join("job.json");
    let t0 = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&job_json)
            && let Ok(record) = serde_json::from_str::<serde_json::Value>(&text)
            && let Some(pid) = record["pid"].as_i64()
        {
            return Ok(pid);
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(format!("attempt {attempt} never started ({})", job_json.display()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a container's end does: the server and its job die together, the job leaving no exit
/// status (docker kills what is left in the container with SIGKILL).
async fn kill_like_a_container(server: &mut Server, job_pid: i64) -> TestResult {
    server.signal("-KILL")?;
    server.exit_code(Duration::from_secs(15)).await.ok();
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{job_pid}")])
        .status()?;
    let t0 = Instant::now();
    while alive(job_pid) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "job {job_pid} survived SIGKILL"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// In a container a job cannot outlive the server: `docker restart` ends both. The next start
/// finds the job gone without an exit status and queues its run again, so the run goes on as
/// attempt 2 (which resumes from the run's last checkpoint, as `holes::a_resumed_run_...`
/// shows) instead of failing. Control: `--resume-lost-jobs false` fails it, naming the process.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_job_that_died_with_its_container_is_resumed_by_the_next_start(
    pool: PgPool,
) -> TestResult {
    let (dir, db, run) = studio_with_a_queued_run(&pool).await?;

    let mut first = Server::start(&db, dir.path(), free_port()?)?;
    first.wait_ready().await?;
    let pid1 = started_pid(dir.path(), run, 1).await?;
    until_running(&pool, run).await?;
    kill_like_a_container(&mut first, pid1).await?;
    assert_eq!(run_status(&pool, run).await?.0, "running");

    let mut second = Server::start(&db, dir.path(), free_port()?)?;
    second.wait_ready().await?;
    let pid2 = started_pid(dir.path(), run, 2).await?;
    assert!(alive(pid2), "attempt 2 is not running");
    let (state, message): (String, Option<String>) =
        sqlx::query_as("SELECT state::text, message FROM jobs WHERE run_id = $1 AND attempt = 1")
            .bind(run)
            .fetch_one(&pool)
            .await?;
    assert_eq!(state, "failed");
    let message = message.unwrap_or_default();
    assert!(
        message.starts_with(spade_db::jobs::LOST_REQUEUED) && message.contains(&pid1.to_string()),
        "{message}"
    );
    let logged: Vec<String> = sqlx::query_scalar("SELECT line FROM run_logs WHERE run_id = $1")
        .bind(run)
        .fetch_all(&pool)
        .await?;
    assert!(
        logged.iter().any(|l| l.starts_with("queued again")),
        "the run's log does not say why it was queued again: {logged:?}"
    );
    let t0 = Instant::now();
    while run_status(&pool, run).await?.0 != "running" {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "attempt 2's run is not running"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Control: the same end, and a start that does not resume lost jobs.
    kill_like_a_container(&mut second, pid2).await?;
    let third = Server::start_with(
        &db,
        dir.path(),
        free_port()?,
        &["--resume-lost-jobs", "false"],
    )?;
    third.wait_ready().await?;
    let (status, message) = status_once_not_running(&pool, run, "the lost job").await?;
    assert_eq!(status, "failed");
    let message = message.unwrap_or_default();
    assert!(message.contains("no exit status"), "{message}");
    assert!(
        !dir.path()
            .join("jobs")
            .join(format!("spade-run-{run}-a3"))
            .exists(),
        "a third attempt started"
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn readyz_waits_for_the_database_schema_and_healthz_does_not(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool.clone());
    let r = app.send(get_req("/readyz")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["ready"], true);
    let newest: i64 = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
        .fetch_one(&pool)
        .await?;
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1")
        .bind(newest)
        .execute(&pool)
        .await?;
    let r = app.send(get_req("/readyz")).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    let reason = r.json()["reason"].as_str().unwrap_or("").to_owned();
    assert!(reason.contains(&newest.to_string()), "{reason}");
    let r = app.send(get_req("/healthz")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text(), "ok\n");
    Ok(())
}

fn get_req(path: &str) -> axum::http::Request<axum::body::Body> {
    axum::http::Request::builder()
        .uri(path)
        .body(axum::body::Body::empty())
        .unwrap_or_default()
}
