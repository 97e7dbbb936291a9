//! Helpers for end-to-end tests: start the real server on a loopback port against the test's
//! own database, seed it (`seed`), and drive headless Chromium through chromedriver (WebDriver).

pub mod seed;

use anyhow::{Context, bail};
use fantoccini::{Client, ClientBuilder};
use leptos::prelude::LeptosOptions;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The workspace root (this package lives in `tests/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Where tests leave screenshots for people to look at.
pub fn screenshot_dir() -> PathBuf {
    workspace_root().join("artifacts").join("screenshots")
}

/// A `spade-server` running inside the test process on 127.0.0.1 with an ephemeral port.
#[derive(Debug)]
pub struct TestServer {
    pub url: String,
    /// The database it serves.
    pub db: spade_db::Pool,
    task: tokio::task::JoinHandle<()>,
    /// Ends [`Self::task`] the way a stopped server ends: no new connections, requests in
    /// flight drained, every connection closed.
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// The scheduler task and its stop signal, with [`ServerOptions::workers`].
    scheduler: Option<(
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    )>,
    /// Its scheduler's settings, with [`ServerOptions::workers`].
    settings: Option<spade_server::config::SchedulerSettings>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
        if let Some((stop, task)) = &self.scheduler {
            let _ = stop.send(true);
            task.abort();
        }
    }
}

/// How [`TestServer::start_with`] sets the server up beyond its database.
#[derive(Debug, Default)]
pub struct ServerOptions {
    /// Start the job scheduler with the local executor, running queued runs as real
    /// `target/debug/spade worker` processes (build `spade-cli` and `spade-sandbox-runner`
    /// first). Default: no scheduler; runs stay queued.
    pub workers: bool,
    /// Serve on this port (a restarted server: the same port is the same scheduler node and
    /// jobs directory, so it re-attaches to the first one's jobs). Default: an ephemeral port.
    pub port: Option<u16>,
    /// Extra environment of every worker (`NAME=value`), e.g. `SPADE_FINAL_FLUSH_SECS=5`.
    pub worker_env: Vec<String>,
    /// A program the scheduler runs in place of `spade worker` (`{run}` and `{server}` are
    /// replaced as in `--worker-command`), for what a page shows of a job's own output.
    pub worker_command: Option<String>,
    /// The GPU indices the local executor lends (`--gpus`); none by default, whatever the
    /// machine has, so the tests behave alike everywhere.
    pub gpus: Vec<u32>,
    /// Run the jobs on this Ray cluster (the Ray executor) instead of local processes.
    pub ray: Option<RayCluster>,
}

/// A Ray cluster for [`ServerOptions::ray`].
#[derive(Debug, Clone)]
pub struct RayCluster {
    /// Its dashboard (Jobs REST API), `--ray-address`.
    pub address: String,
    /// The Python with Ray on its nodes, `--ray-python`.
    pub python: String,
}

/// The scheduler settings of a test server: one CPU slot, a quick poll, a short stop grace,
/// jobs in a temporary directory and the worker built next to this test.
fn worker_settings(
    port: u16,
    worker_env: &[String],
    command: Option<&str>,
    gpus: &[u32],
    ray: Option<&RayCluster>,
) -> anyhow::Result<spade_server::config::SchedulerSettings> {
    let root = workspace_root();
    let bin = root.join("target").join("debug");
    for exe in ["spade", "spade-sandbox-runner"] {
        if command.is_none() && !bin.join(exe).exists() {
            bail!(
                "{} is missing: cargo build -p spade-cli -p spade-sandbox-runner",
                bin.join(exe).display()
            );
        }
    }
    // The job runs in its own directory, so paths are absolute; `env` sets what
    // scripts/serve exports (one BLAS thread per worker, the seed library).
    let default_command = format!(
        "/usr/bin/env OMP_NUM_THREADS=1 SPADE_SEEDS={} {} {} worker --run {{run}} --server {{server}}",
        root.join("envs").join("seed").display(),
        worker_env.join(" "),
        bin.join("spade").display()
    );
    let worker_command = command.map_or(default_command, str::to_owned);
    Ok(spade_server::config::SchedulerSettings {
        executor: match ray {
            Some(_) => spade_server::config::ExecutorSetting::Ray,
            None => spade_server::config::ExecutorSetting::Local,
        },
        node: Some(format!("e2e-{port}")),
        worker_command,
        public_url: None,
        cpu_slots: 1,
        gpu_slots: 0,
        gpus: Some(gpus.to_vec()),
        gpus_per_job: 0,
        jobs_dir: std::env::temp_dir().join(format!("spade-e2e-jobs-{port}")),
        stop_grace_secs: 5,
        ray_address: ray.map_or_else(|| "http://127.0.0.1:8265".into(), |r| r.address.clone()),
        ray_max_jobs: 1,
        // The entrypoint only launches (or is) the worker; its ranks take bundles of their own.
        ray_num_cpus: 0.25,
        ray_submission_prefix: format!("e2e-{port}-{}", std::process::id()),
        ray_python: ray.map(|r| r.python.clone()),
        poll_ms: 250,
        resume_lost_jobs: true,
    })
}

impl TestServer {
    /// Its scheduler's settings (with [`ServerOptions::workers`]): what reads a run's job logs.
    pub fn scheduler_settings(&self) -> Option<spade_server::config::SchedulerSettings> {
        self.settings.clone()
    }

    /// The port it serves on (give it to [`ServerOptions::port`] to start it again).
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// Stops serving and scheduling as a killed server would: its workers, children in process
    /// groups of their own, keep running (and find nobody at the address until a server with
    /// the same [`ServerOptions::port`] starts).
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let _ = (&mut self.task).await;
        if let Some((stop, task)) = self.scheduler.take() {
            let _ = stop.send(true);
            task.abort();
            let _ = task.await;
        }
    }

    /// Starts the app on `db`, serving the site built by `scripts/build-site`.
    ///
    /// `db` is the test's own database, already migrated: the fresh one `#[sqlx::test]` hands
    /// a test. There is deliberately no default: a browser test that served `DATABASE_URL`'s
    /// database seeded its teams and runs into whatever server ran there (issue 35), and a
    /// scheduler would see other tests' queued runs.
    pub async fn start(db: spade_db::Pool) -> anyhow::Result<Self> {
        Self::start_with(db, ServerOptions::default()).await
    }

    /// Starts the app on `db` as [`ServerOptions`] say.
    pub async fn start_with(db: spade_db::Pool, opts: ServerOptions) -> anyhow::Result<Self> {
        let site_root = workspace_root().join("site");
        let wasm = site_root
            .join("pkg")
            .join(format!("{}_bg.wasm", spade_server::OUTPUT_NAME));
        if !wasm.exists() {
            bail!(
                "{} is missing: build the site first (scripts/build-site; scripts/test does)",
                wasm.display()
            );
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", opts.port.unwrap_or(0))).await?;
        let addr = listener.local_addr()?;
        let leptos = LeptosOptions::builder()
            .output_name(spade_server::OUTPUT_NAME)
            .site_root(site_root.to_string_lossy().into_owned())
            .site_pkg_dir(spade_server::site::pkg_dir(&site_root))
            .site_addr(addr)
            .build();
        let auth = spade_server::auth::AuthState::new(
            spade_server::auth::secret::JwtSecret::random(),
            spade_db::users::Registration::Open,
            false,
        );
        // As `spade-server` does: links people copy name the address it serves on.
        let mut state = spade_server::AppState::new(leptos, db.clone(), auth)
            .with_public_url(format!("http://{addr}"));
        let mut scheduler = None;
        let mut scheduler_settings = None;
        if opts.workers {
            let settings = worker_settings(
                addr.port(),
                &opts.worker_env,
                opts.worker_command.as_deref(),
                &opts.gpus,
                opts.ray.as_ref(),
            )?;
            // The workers' checkpoints lie in their runs' state directories, where the path
            // rule accepts them (as `spade-server` sets it from --jobs-dir).
            state = state
                .with_paths(
                    spade_server::service::paths::PathRoots::default()
                        .with_run_states(&settings.jobs_dir),
                )
                .with_scheduler(settings.clone());
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let task = spade_server::spool::spawn_scheduler(&state, &settings, addr, stopped)?
                .context("the local and Ray executors always start a scheduler")?;
            scheduler = Some((stop, task));
            scheduler_settings = Some(settings);
        }
        let app = spade_server::app(state);
        // The server's own loop (idle deadline, drain on shutdown), so that [`Self::stop`]
        // closes every connection as a stopped server does.
        let (shutdown, stopping) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let stopping = async {
                let _ = stopping.await;
            };
            if let Err(e) = spade_server::serve::serve(
                listener,
                app,
                spade_server::serve::IDLE_TIMEOUT,
                stopping,
            )
            .await
            {
                eprintln!("test server stopped: {e}");
            }
        });
        Ok(Self {
            url: format!("http://{addr}"),
            db,
            task,
            shutdown: Some(shutdown),
            scheduler,
            settings: scheduler_settings,
        })
    }
}

/// A chromedriver child process plus a WebDriver session in headless Chromium. Chromedriver
/// runs in a process group of its own, and ending the browser (closing it, or dropping it when
/// a test fails) kills that whole group and any Chromium left with the session's profile: a
/// killed chromedriver alone leaves its Chromium running, orphaned (issue 39).
#[derive(Debug)]
pub struct Browser {
    pub client: Client,
    driver: Child,
    /// The session's Chromium profile directory (`spade-chrome-PORT`), which names its processes.
    profile: PathBuf,
}

impl Browser {
    pub async fn start() -> anyhow::Result<Self> {
        use std::os::unix::process::CommandExt;
        let port = free_port()?;
        let profile = chrome_profile(port);
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("cannot start chromedriver (scripts/setup installs chromium-driver)")?;
        let browser = Self {
            client: match connect(port, &profile).await {
                Ok(c) => c,
                Err(e) => {
                    end_processes(&mut { driver }, &profile);
                    return Err(e);
                }
            },
            driver,
            profile,
        };
        browser.client.set_window_size(1280, 800).await?;
        Ok(browser)
    }

    /// Saves a PNG of the current page under `artifacts/screenshots/NAME.png`.
    pub async fn screenshot(&mut self, name: &str) -> anyhow::Result<PathBuf> {
        let png = self.client.screenshot().await?;
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png)?;
        Ok(path)
    }

    /// Ends the WebDriver session, then the processes (as dropping does).
    pub async fn close(self) -> anyhow::Result<()> {
        self.client.clone().close().await?;
        Ok(())
    }

    /// The session's Chromium profile directory: its processes carry it on their command line.
    pub fn profile(&self) -> &Path {
        &self.profile
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        end_processes(&mut self.driver, &self.profile);
    }
}

fn chrome_profile(port: u16) -> PathBuf {
    std::env::temp_dir().join(format!("spade-chrome-{port}"))
}

/// Kills chromedriver's process group, then any process still running with `profile` on its
/// command line (a Chromium that left the group), and removes the profile.
fn end_processes(driver: &mut Child, profile: &Path) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", driver.id())])
        .stderr(Stdio::null())
        .status();
    let _ = driver.kill();
    let _ = driver.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_with_arg(profile);
        if left.is_empty() || Instant::now() > deadline {
            break;
        }
        for pid in left {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(profile);
}

/// The ids of running processes with `profile` in an argument (`--user-data-dir=...`).
pub fn processes_with_arg(profile: &Path) -> Vec<u32> {
    let needle = profile.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let zombie = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('Z')))
                .unwrap_or(false);
            (!zombie
                && cmdline
                    .split(|&b| b == 0)
                    .any(|a| String::from_utf8_lossy(a).contains(&needle)))
            .then_some(pid)
        })
        .collect()
}

async fn connect(port: u16, profile: &Path) -> anyhow::Result<Client> {
    let caps = serde_json::json!({
        // Console messages, read back by `console_messages`.
        "goog:loggingPrefs": { "browser": "ALL" },
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            // Without the background-networking flags Chromium keeps dialling Google's hosts,
            // which this machine's closed network refuses.
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage",
                format!("--user-data-dir={}", profile.display()),
            ]
        }
    });
    let serde_json::Value::Object(caps) = caps else {
        bail!("capabilities must be a JSON object");
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut builder =
            ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
        builder.capabilities(caps.clone());
        match builder.connect(&format!("http://127.0.0.1:{port}")).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e).context("chromedriver did not accept a session in 20 s"),
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = StdListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    Ok(l.local_addr()?.port())
}

/// Waits until the browser's path (and query) starts with `prefix`; returns it.
pub async fn wait_for_path(c: &Client, prefix: &str) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let url = c.current_url().await?;
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        if path.starts_with(prefix) {
            return Ok(path);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "never reached {prefix}; at {url}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `css` matches (pages may load their data after a client-side navigation).
pub async fn wait_for(c: &Client, css: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.find(fantoccini::Locator::Css(css)).await.is_err() {
        anyhow::ensure!(Instant::now() < deadline, "{css} never appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Polls `check` until it holds, failing with `what` after `limit`: a condition with a
/// deadline instead of a sleep before an assertion (a slow machine waits longer, a fast one
/// not at all).
pub async fn until<F, Fut>(limit: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await? {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "after {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Replaces the text of the input with id `id`, waiting for it first: a page may render its
/// form after its data arrives (the account page's name field was missing under load).
pub async fn fill(c: &Client, id: &str, text: &str) -> anyhow::Result<()> {
    wait_for(c, &format!("[id='{id}']")).await?;
    let el = c.find(fantoccini::Locator::Id(id)).await?;
    el.clear().await?;
    el.send_keys(text).await?;
    Ok(())
}

/// The text of the first element matching `css`.
pub async fn text_of(c: &Client, css: &str) -> anyhow::Result<String> {
    Ok(c.find(fantoccini::Locator::Css(css)).await?.text().await?)
}

/// Clicks the first element matching `css`.
pub async fn click(c: &Client, css: &str) -> anyhow::Result<()> {
    c.find(fantoccini::Locator::Css(css)).await?.click().await?;
    Ok(())
}

/// Registers an account through the HTML form (which logs it in) and waits for the runs list.
pub async fn register(
    c: &Client,
    server: &TestServer,
    name: &str,
    email: &str,
    password: &str,
) -> anyhow::Result<()> {
    c.goto(&format!("{}/register", server.url)).await?;
    fill(c, "reg-name", name).await?;
    fill(c, "reg-email", email).await?;
    fill(c, "reg-password", password).await?;
    click(c, "form.stack button[type=submit]").await?;
    wait_for_path(c, "/runs").await?;
    wait_for(c, "#runs-empty, #runs-table").await?;
    Ok(())
}

/// Scrolls the element with id `id` to the middle of the window (before a screenshot).
pub async fn scroll_to(c: &Client, id: &str) -> anyhow::Result<()> {
    c.execute(
        "const e = document.getElementById(arguments[0]); if (e) { e.scrollIntoView({block: 'center'}); } return null;",
        vec![serde_json::json!(id)],
    )
    .await?;
    Ok(())
}

/// Sets the theme cookie the server reads (`Some("dark")`, `Some("light")`, or `None` to follow
/// the system) and reloads the page, for screenshots of both themes.
pub async fn set_theme(c: &Client, theme: Option<&str>) -> anyhow::Result<()> {
    let cookie = match theme {
        Some(t) => format!("spade_theme={t}; path=/"),
        None => "spade_theme=; path=/; max-age=0".to_owned(),
    };
    c.execute(
        "document.cookie = arguments[0]; return null;",
        vec![serde_json::json!(cookie)],
    )
    .await?;
    c.refresh().await?;
    Ok(())
}

/// Waits until the page is hydrated (the app sets `<html data-hydrated="true">` from an effect,
/// which runs only once the wasm bundle has attached its handlers); returns how long that took
/// from `since`.
pub async fn wait_hydrated(c: &Client, since: Instant) -> anyhow::Result<Duration> {
    let deadline = since + Duration::from_secs(60);
    loop {
        let v = c
            .execute(
                "return document.documentElement.dataset.hydrated || null;",
                vec![],
            )
            .await?;
        if v == serde_json::json!("true") {
            return Ok(since.elapsed());
        }
        anyhow::ensure!(Instant::now() < deadline, "never hydrated in 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The id of the registered user `email` (after [`register`] in a browser).
pub async fn user_id(db: &spade_db::Pool, email: &str) -> anyhow::Result<i64> {
    Ok(spade_db::users::credentials(db, email)
        .await?
        .ok_or_else(|| anyhow::anyhow!("{email} is not registered"))?
        .user
        .id)
}

/// chromedriver's browser log (`POST /session/{id}/se/log`), which fantoccini has no call for.
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.to_owned()))
    }
}

/// The page's console messages since the last call, as (level, message): `WARNING` for
/// `console.warn`, `SEVERE` for errors, `INFO`/`DEBUG` for the rest.
pub async fn console_messages(c: &Client) -> anyhow::Result<Vec<(String, String)>> {
    let log = c.issue_cmd(BrowserLog).await?;
    Ok(log
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["level"].as_str().unwrap_or_default().to_owned(),
                e["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect())
}

/// A plain HTTP/1.1 GET over a TCP socket with `headers` added: (status code, body). Enough for
/// the JSON API, without a client crate.
pub async fn http_get_with(url: &str, headers: &[(&str, &str)]) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = tokio::net::TcpStream::connect(host).await?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    s.write_all(
        format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("not an HTTP answer: {head}"))?;
    Ok((status, body.to_owned()))
}
