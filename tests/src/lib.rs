//! Helpers for end-to-end tests: start the real server on a loopback port against the real
//! database, and drive headless Chromium through chromedriver (WebDriver).

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
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// Starts the app against `DATABASE_URL` (or the default local database), migrating it, and
    /// serving the site built by `scripts/build-site`.
    pub async fn start() -> anyhow::Result<Self> {
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
        let url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| spade_server::config::DEFAULT_DATABASE_URL.to_owned());
        let db = spade_db::connect(&url).await?;
        spade_db::migrate(&db).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let leptos = LeptosOptions::builder()
            .output_name(spade_server::OUTPUT_NAME)
            .site_root(site_root.to_string_lossy().into_owned())
            .site_pkg_dir("pkg")
            .site_addr(addr)
            .build();
        let auth = spade_server::auth::AuthState::new(
            spade_server::auth::secret::JwtSecret::random(),
            spade_db::users::Registration::Open,
            false,
        );
        let app = spade_server::app(spade_server::AppState::new(leptos, db, auth));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("test server stopped: {e}");
            }
        });
        Ok(Self {
            url: format!("http://{addr}"),
            task,
        })
    }
}

/// A chromedriver child process plus a WebDriver session in headless Chromium.
#[derive(Debug)]
pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Browser {
    pub async fn start() -> anyhow::Result<Self> {
        let port = free_port()?;
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start chromedriver (scripts/setup installs chromium-driver)")?;
        let browser = Self {
            client: connect(port).await?,
            driver,
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

    pub async fn close(mut self) -> anyhow::Result<()> {
        self.client.clone().close().await?;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

async fn connect(port: u16) -> anyhow::Result<Client> {
    let caps = serde_json::json!({
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            // Without the background-networking flags Chromium keeps dialling Google's hosts,
            // which this machine's closed network refuses.
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage",
                format!("--user-data-dir={}", std::env::temp_dir().join(format!("spade-chrome-{port}")).display()),
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
