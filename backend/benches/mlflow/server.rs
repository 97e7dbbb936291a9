//! The MLflow tracking server the side-by-side bench starts and stops (see `main.rs`): a free
//! loopback port, a sqlite store in a temporary directory, its own process group so that
//! stopping it also stops the uvicorn worker, and the log's tail in every error.

use anyhow::{Context, bail};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A started `mlflow server`; dropping it stops its process group and deletes its directory.
pub struct MlflowServer {
    child: Child,
    dir: PathBuf,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl MlflowServer {
    pub fn start(exe: &PathBuf) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free loopback port for MLflow")?
            .port();
        let dir = std::env::temp_dir().join(format!("spade-bench-mlflow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = std::fs::File::create(dir.join("server.log")).context("MLflow log file")?;
        let child = Command::new(exe)
            .args(["server", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--backend-store-uri")
            .arg(format!("sqlite:///{}", dir.join("mlflow.db").display()))
            .arg("--default-artifact-root")
            .arg(format!("file://{}", dir.join("artifacts").display()))
            .args(["--workers", "1"])
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            // Its own process group, so that stopping it also stops the uvicorn worker.
            .process_group(0)
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} (run scripts/bench-mlflow to install MLflow)",
                    exe.display()
                )
            })?;
        Ok(Self {
            child,
            dir,
            base: format!("http://127.0.0.1:{port}"),
        })
    }

    pub async fn wait_ready(&mut self, http: &reqwest::Client) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(180);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                bail!("mlflow server exited with {status}; {}", self.log_tail());
            }
            if let Ok(r) = http.get(format!("{}/health", self.base)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        bail!("mlflow server not ready after 180 s; {}", self.log_tail())
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let start = log.len().saturating_sub(2_000);
        let tail = log.get(start..).unwrap_or(&log);
        format!("log tail:\n{tail}")
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for MlflowServer {
    fn drop(&mut self) {
        self.signal("-TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            self.signal("-KILL");
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
