//! Test client: builds the app on a test database and sends requests through `oneshot`.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use spade_db::users::Registration;
use spade_server::auth::AuthState;
use spade_server::auth::secret::JwtSecret;
use spade_server::{AppState, app};
use sqlx::PgPool;
use tower::ServiceExt;

/// The secret the test app signs with (tests forge tokens with it to test expiry).
pub const SECRET: &[u8] = b"test-secret-test-secret-test-secret-0123";
pub const PASSWORD: &str = "correct horse battery";

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

pub struct TestApp {
    pub router: Router,
}

#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or("").to_owned()
    }
    pub fn message(&self) -> String {
        self.json()["message"].as_str().unwrap_or("").to_owned()
    }
    /// Asserts a 422 whose message names `field` and says `says`; `what` labels the failure.
    pub fn assert_refused(&self, field: &str, says: &str, what: &str) {
        assert_eq!(
            self.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{what}: {}",
            self.text()
        );
        let msg = self.message();
        assert!(msg.contains(field) && msg.contains(says), "{what}: {msg}");
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// A response header's value (empty when absent).
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// Values of the Set-Cookie headers by cookie name.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.split(';').next())
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_owned())
    }
}

/// Credentials a test uses for requests.
#[derive(Debug, Clone, Default)]
pub enum Cred {
    #[default]
    None,
    Bearer(String),
    /// Access cookie, plus the CSRF header when `Some`.
    Cookie {
        access: String,
        csrf: Option<String>,
    },
}

/// The state the tests' apps start from.
pub fn state(pool: PgPool, reg: Registration) -> AppState {
    let leptos = leptos::prelude::LeptosOptions::builder()
        .output_name(spade_server::OUTPUT_NAME)
        .site_root("site")
        .build();
    let secret = JwtSecret::new(SECRET.to_vec()).unwrap_or_else(|_| JwtSecret::random());
    AppState::new(leptos, pool, AuthState::new(secret, reg, false))
}

impl TestApp {
    pub fn new(pool: PgPool) -> Self {
        Self::with_registration(pool, Registration::Open)
    }

    pub fn with_registration(pool: PgPool, reg: Registration) -> Self {
        Self::built(pool, reg, |s| s)
    }

    /// An app whose state `f` adjusts (public URL, path roots, ...).
    pub fn with_state(pool: PgPool, f: impl FnOnce(AppState) -> AppState) -> Self {
        Self::built(pool, Registration::Open, f)
    }

    /// An app that also serves job output through a scheduler configured by `args`
    /// (server flags, e.g. `--jobs-dir DIR`).
    pub fn with_scheduler_flags(pool: PgPool, args: &[&str]) -> Self {
        use clap::Parser;
        let mut argv = vec!["spade-server"];
        argv.extend_from_slice(args);
        let cfg = spade_server::config::Config::parse_from(argv);
        // The path rule as `main` builds it: checkpoints in the jobs' state directories.
        let paths = spade_server::service::paths::PathRoots::new(
            &cfg.model_roots,
            &cfg.corpus_roots,
            &cfg.pool_roots,
        )
        .with_run_states(&cfg.scheduler.jobs_dir);
        Self::with_state(pool, |s| s.with_scheduler(cfg.scheduler).with_paths(paths))
    }

    /// An app whose runs keep their state under `<dir>/jobs` and whose model root is
    /// `<dir>/models` (see [`checkpoint_in`]).
    pub fn with_checkpoint_roots(pool: PgPool, dir: &std::path::Path) -> Self {
        let paths = spade_server::service::paths::PathRoots::new(&[dir.join("models")], &[], &[])
            .with_run_states(&dir.join("jobs"));
        Self::with_state(pool, |s| s.with_paths(paths))
    }

    /// The app as the tests' common settings make it, then adjusted by `f`.
    fn built(pool: PgPool, reg: Registration, f: impl FnOnce(AppState) -> AppState) -> Self {
        Self {
            router: app(f(state(pool, reg))),
        }
    }

    /// Serves the app on an ephemeral loopback port (for jobs that call back over HTTP); the
    /// server lives as long as the test's runtime.
    pub async fn serve(
        &self,
    ) -> Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>), std::io::Error> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let router = self.router.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("test server stopped: {e}");
            }
        });
        Ok((addr, task))
    }

    /// An app served on an ephemeral loopback port whose public URL is that address (as the
    /// server binary sets it from its listen address when no `--public-url` is given).
    pub async fn served_at_public_url(
        pool: PgPool,
    ) -> Result<(Self, std::net::SocketAddr, tokio::task::JoinHandle<()>), std::io::Error> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Self::with_state(pool, |s| s.with_public_url(format!("http://{addr}")));
        let router = app.router.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("test server stopped: {e}");
            }
        });
        Ok((app, addr, task))
    }

    /// Sends a request and reads the whole answer. A request that does not finish within twice
    /// the server's own limits fails the test with its path (a hang once held CI for an hour),
    /// and a body that ends in an error is a failure, not an empty body.
    pub async fn send(&self, req: Request<Body>) -> Resp {
        let what = format!("{} {}", req.method(), req.uri());
        let exchange = async {
            let resp = match self.router.clone().oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = match resp.into_body().collect().await {
                Ok(b) => b.to_bytes().to_vec(),
                Err(e) => panic!("{what}: the body ended in an error: {e}"),
            };
            Resp {
                status,
                headers,
                body,
            }
        };
        let limit = spade_server::REQUEST_TIMEOUT * 2;
        match tokio::time::timeout(limit, exchange).await {
            Ok(resp) => resp,
            Err(_) => panic!("{what}: no complete answer within {limit:?}"),
        }
    }

    pub async fn call(&self, method: Method, path: &str, cred: &Cred, body: Option<Value>) -> Resp {
        let mut b = Request::builder().method(method).uri(path);
        match cred {
            Cred::None => {}
            Cred::Bearer(t) => b = b.header(header::AUTHORIZATION, format!("Bearer {t}")),
            Cred::Cookie { access, csrf } => {
                b = b.header(header::COOKIE, format!("spade_access={access}"));
                if let Some(c) = csrf {
                    b = b.header("x-csrf-token", c);
                }
            }
        }
        let req = match body {
            Some(v) => b
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(v.to_string())),
            None => b.body(Body::empty()),
        };
        self.send(req.unwrap_or_default()).await
    }

    pub async fn get(&self, path: &str, cred: &Cred) -> Resp {
        self.call(Method::GET, path, cred, None).await
    }

    pub async fn post(&self, path: &str, cred: &Cred, body: Value) -> Resp {
        self.call(Method::POST, path, cred, Some(body)).await
    }

    pub async fn register(&self, email: &str) -> Resp {
        self.post(
            "/api/v1/auth/register",
            &Cred::None,
            json!({ "email": email, "display_name": email, "password": PASSWORD }),
        )
        .await
    }

    /// Logs in as an API client; returns (access, refresh).
    pub async fn login_api(&self, email: &str) -> (String, String) {
        let r = self
            .post(
                "/api/v1/auth/login",
                &Cred::None,
                json!({ "email": email, "password": PASSWORD, "api_client": true }),
            )
            .await;
        let j = r.json();
        (
            j["access_token"].as_str().unwrap_or_default().to_owned(),
            j["refresh_token"].as_str().unwrap_or_default().to_owned(),
        )
    }

    /// Presents a refresh token as an API client.
    pub async fn refresh_api(&self, refresh: &str) -> Resp {
        self.post(
            "/api/v1/auth/refresh",
            &Cred::None,
            json!({ "refresh_token": refresh }),
        )
        .await
    }

    /// Registers and logs in as an API client; returns a bearer credential.
    pub async fn user(&self, email: &str) -> Cred {
        self.register(email).await;
        Cred::Bearer(self.login_api(email).await.0)
    }

    /// Brings the registered account `email` into `team` with `role` the only way there is:
    /// `owner` invites the email and the account (logged in here) accepts. Returns the answer
    /// to the accept (200 with the team's id).
    pub async fn join(
        &self,
        owner: &Cred,
        team: impl std::fmt::Display,
        email: &str,
        role: &str,
    ) -> Resp {
        let inv = self
            .post(
                &format!("/api/v1/teams/{team}/invitations"),
                owner,
                json!({ "email": email, "role": role }),
            )
            .await;
        if inv.status != StatusCode::CREATED {
            return inv;
        }
        let id = inv.json()["id"].as_i64().unwrap_or(-1);
        let code = inv.json()["code"].as_str().unwrap_or_default().to_owned();
        let member = Cred::Bearer(self.login_api(email).await.0);
        self.post(
            &format!("/api/v1/invitations/{id}/accept"),
            &member,
            json!({ "code": code }),
        )
        .await
    }

    /// Creates team + project + run as `cred`; returns (team_id, project_id, run_id).
    pub async fn team_project_run(&self, cred: &Cred, team: &str) -> (i64, i64, i64) {
        let t = self
            .post("/api/v1/teams", cred, json!({ "name": team }))
            .await
            .json()["id"]
            .as_i64()
            .unwrap_or(-1);
        let p = self
            .post(
                &format!("/api/v1/teams/{t}/projects"),
                cred,
                json!({ "name": "p" }),
            )
            .await
            .json()["id"]
            .as_i64()
            .unwrap_or(-1);
        let r = self
            .post(
                &format!("/api/v1/projects/{p}/runs"),
                cred,
                json!({ "name": "r", "config_toml": tiny_toml() }),
            )
            .await
            .json()["id"]
            .as_i64()
            .unwrap_or(-1);
        (t, p, r)
    }

    /// Creates another run `name` (the CPU demo configuration) in project `project`; its id.
    pub async fn run_in(&self, cred: &Cred, project: i64, name: &str) -> i64 {
        let r = self
            .post(
                &format!("/api/v1/projects/{project}/runs"),
                cred,
                json!({ "name": name, "config_toml": tiny_toml() }),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
        r.json()["id"].as_i64().unwrap_or(-1)
    }

    /// Posts `messages` for `run` as its worker would (a fresh run token, one batch from
    /// sequence 0); fails unless the server answers 200.
    pub async fn ingest_as_worker(
        &self,
        cred: &Cred,
        run: i64,
        messages: Vec<spade::report::Message>,
    ) {
        let token = self
            .post(&format!("/api/v1/runs/{run}/token"), cred, json!({}))
            .await
            .json()["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let r = self
            .post(
                &format!("/api/v1/ingest/{run}"),
                &Cred::Bearer(token),
                crate::ingest::batch(run, 0, messages),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
}

/// A valid configuration (the CPU demo preset).
pub fn tiny_toml() -> String {
    spade::config::RunConfig::tiny_cpu_demo().to_toml()
}

/// The claims part of a JWT, decoded.
pub fn claims_of(token: &str) -> Value {
    token
        .split('.')
        .nth(1)
        .and_then(|p| URL_SAFE_NO_PAD.decode(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

pub fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(v.to_string())
}

/// Creates `rel` under run `run`'s state directory in `<dir>/jobs` (as the local executor names
/// it) and returns its absolute path: a checkpoint the run may report.
pub fn checkpoint_in(dir: &std::path::Path, run: i64, rel: &str) -> String {
    let p = spade_scheduler::run_state_dir(&dir.join("jobs"), run).join(rel);
    let _ = std::fs::create_dir_all(&p);
    p.to_string_lossy().into_owned()
}

/// Creates `<dir>/models/<name>` and returns its absolute path.
pub fn model_in(dir: &std::path::Path, name: &str) -> String {
    let p = dir.join("models").join(name);
    let _ = std::fs::create_dir_all(&p);
    p.to_string_lossy().into_owned()
}
