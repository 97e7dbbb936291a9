//! The holes an attack on the running server found (issue 14), each written as the attack that
//! got through, so it stays closed: races as real concurrent requests against PostgreSQL,
//! redirects and cross-site posts through the real router, the event stream with a real SSE
//! client on a port, NUL through every text field and ingestion, configuration paths, and the
//! smaller limits.

use crate::ingest::{batch, fixture, metrics};
use crate::support::*;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use spade::report::{LogLevel, Message};
use sqlx::PgPool;
use std::net::SocketAddr;
use std::time::Duration;

async fn owners(pool: &PgPool, team: i64) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM memberships WHERE team_id = $1 AND role = 'owner'",
    )
    .bind(team)
    .fetch_one(pool)
    .await
    .unwrap_or(-1)
}

async fn team_of(pool: &PgPool, run: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar::<_, i64>(
        "SELECT p.team_id FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1",
    )
    .bind(run)
    .fetch_one(pool)
    .await
}

async fn id_of(pool: &PgPool, email: &str) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT id FROM users WHERE email = $1")
        .bind(email)
        .fetch_one(pool)
        .await
        .unwrap_or(-1)
}

/// Item 1: two owners removing each other, or both stepping down, at the same moment. Before
/// the fix both requests passed the owner count and the team was left with none.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn concurrent_owner_changes_never_leave_a_team_without_an_owner(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool.clone());
    let a = app.user("a@x.org").await;
    let b = app.user("b@x.org").await;
    let (ida, idb) = (id_of(&pool, "a@x.org").await, id_of(&pool, "b@x.org").await);
    for round in 0..8 {
        let team = app
            .post("/api/v1/teams", &a, json!({ "name": format!("t{round}") }))
            .await
            .json()["id"]
            .as_i64()
            .unwrap_or(-1);
        let members = format!("/api/v1/teams/{team}/members");
        let r = app.join(&a, team, "b@x.org", "owner").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let (del_b, del_a) = (format!("{members}/{idb}"), format!("{members}/{ida}"));
        let (ra, rb) = if round % 2 == 0 {
            // Remove each other.
            tokio::join!(
                app.call(Method::DELETE, &del_b, &a, None),
                app.call(Method::DELETE, &del_a, &b, None),
            )
        } else {
            // Both step down to editor.
            tokio::join!(
                app.call(
                    Method::PUT,
                    &members,
                    &a,
                    Some(json!({ "email": "a@x.org", "role": "editor" }))
                ),
                app.call(
                    Method::PUT,
                    &members,
                    &b,
                    Some(json!({ "email": "b@x.org", "role": "editor" }))
                ),
            )
        };
        assert!(
            owners(&pool, team).await >= 1,
            "round {round}: no owner left ({} / {})",
            ra.status,
            rb.status
        );
        let ok = [&ra, &rb].iter().filter(|r| r.status.is_success()).count();
        assert_eq!(ok, 1, "round {round}: exactly one change wins");
        // The loser is refused as no longer an owner (403), as leaving no owner (409), or, when
        // it was removed before its own request was authorised, as no longer a member (404).
        for r in [&ra, &rb] {
            assert!(
                r.status.is_success()
                    || [
                        StatusCode::CONFLICT,
                        StatusCode::FORBIDDEN,
                        StatusCode::NOT_FOUND
                    ]
                    .contains(&r.status),
                "round {round}: {} {}",
                r.status,
                r.text()
            );
        }
    }
    Ok(())
}

fn form(path: &str, body: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body.to_owned())).unwrap_or_default()
}

fn login_body(email: &str, next: &str) -> String {
    let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    format!(
        "email={}&password={}&next={}",
        enc(email),
        enc(PASSWORD),
        enc(next)
    )
}

/// Items 2 and 8 (CR/LF): `next` values a browser reads as another site, or that cannot be a
/// header, end at the runs list; a local path is followed.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn login_never_redirects_off_site(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("a@x.org").await;
    for next in [
        "/\t/evil.example",
        "/\n/evil.example",
        "/\r\n/evil.example",
        "\t//evil.example",
        "/\\evil.example",
        "//evil.example",
        "/ /evil.example",
        "https://evil.example",
    ] {
        let r = app
            .send(form("/login", &login_body("a@x.org", next), &[]))
            .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{next:?}: {}", r.text());
        assert_eq!(
            r.headers
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok()),
            Some("/runs"),
            "{next:?}"
        );
    }
    let r = app
        .send(form("/login", &login_body("a@x.org", "/runs/7?x=1"), &[]))
        .await;
    assert_eq!(
        r.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok()),
        Some("/runs/7?x=1")
    );
    // A failed login keeps `next` in the URL of the form; a CR/LF there must not break it.
    let bad = "email=a%40x.org&password=wrong&next=%2F%0D%0ASet-Cookie%3A%20x%3D1";
    let r = app.send(form("/login", bad, &[])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text());
    assert!(r.headers.get("set-cookie").is_none());
    Ok(())
}

/// Item 3: another site's page posting the attacker's credentials to `/login` or `/register`
/// must not log the victim's browser in. Same-origin posts still work.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn login_and_register_forms_refuse_cross_site_posts(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("attacker@x.org").await;
    let host = ("host", "127.0.0.1:3000");
    for h in [
        vec![host, ("origin", "http://evil.example")],
        vec![host, ("origin", "null")],
        vec![host, ("sec-fetch-site", "cross-site")],
        vec![host, ("referer", "http://evil.example/trap.html")],
    ] {
        let r = app
            .send(form("/login", &login_body("attacker@x.org", "/runs"), &h))
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{h:?}: {}", r.text());
        assert_eq!(r.code(), "cross_site_form");
        assert!(r.cookie("spade_access").is_none(), "{h:?}: logged in");
        let body = "email=new%40x.org&display_name=n&password=correct+horse+battery";
        let r = app.send(form("/register", body, &h)).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{h:?}");
        assert!(r.cookie("spade_access").is_none());
    }
    let own = [
        host,
        ("origin", "http://127.0.0.1:3000"),
        ("sec-fetch-site", "same-origin"),
    ];
    let r = app
        .send(form("/login", &login_body("attacker@x.org", "/runs"), &own))
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text());
    assert!(r.cookie("spade_access").is_some());
    Ok(())
}

/// Reads an SSE response until it ends or `patience` passes; returns the text and whether the
/// server ended the stream.
async fn read_stream(
    resp: &mut reqwest::Response,
    patience: Duration,
    until: &str,
) -> (String, bool) {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => {
                text.push_str(&String::from_utf8_lossy(&c));
                if !until.is_empty() && text.contains(until) {
                    return (text, false);
                }
            }
            Ok(Ok(None)) => return (text, true),
            Ok(Err(_)) => return (text, true),
            Err(_) => return (text, false),
        }
    }
}

/// Item 4: a viewer's open event stream stops when the viewer is removed from the team, and
/// when the viewer logs out, instead of delivering updates for as long as it stays open.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_event_stream_ends_when_its_access_ends(pool: PgPool) -> TestResult {
    let f = fixture(pool.clone()).await;
    let team = team_of(&pool, f.run).await?;
    let (addr, _server) = f.app.serve().await?;
    let client = reqwest::Client::new();
    for (round, how) in ["removed", "logged out"].into_iter().enumerate() {
        let email = format!("viewer{round}@x.org");
        f.app.register(&email).await;
        let r = f.app.join(&f.owner, team, &email, "viewer").await;
        assert_eq!(r.status, StatusCode::OK);
        let (access, _) = f.app.login_api(&email).await;
        let mut stream = client
            .get(format!("http://{addr}/api/v1/runs/{}/events", f.run))
            .bearer_auth(&access)
            .send()
            .await?;
        assert_eq!(stream.status(), 200);
        let (first, _) = read_stream(&mut stream, Duration::from_secs(5), "event: progress").await;
        assert!(first.contains("event: status"), "{first}");
        // A live update reaches the viewer while access lasts.
        let log = Message::Log {
            level: LogLevel::Info,
            line: format!("before {round}"),
        };
        let r = f
            .app
            .post(
                &format!("/api/v1/ingest/{}", f.run),
                &f.worker,
                batch(f.run, 10 + round as u64 * 10, vec![log]),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let (seen, _) = read_stream(
            &mut stream,
            Duration::from_secs(5),
            &format!("before {round}"),
        )
        .await;
        assert!(seen.contains(&format!("before {round}")), "{seen}");
        if how == "removed" {
            let id = id_of(&pool, &email).await;
            let r = f
                .app
                .call(
                    Method::DELETE,
                    &format!("/api/v1/teams/{team}/members/{id}"),
                    &f.owner,
                    None,
                )
                .await;
            assert_eq!(r.status, StatusCode::NO_CONTENT);
        } else {
            let r = f
                .app
                .call(
                    Method::POST,
                    "/api/v1/auth/logout",
                    &Cred::Bearer(access.clone()),
                    None,
                )
                .await;
            assert_eq!(r.status, StatusCode::NO_CONTENT);
        }
        let log = Message::Log {
            level: LogLevel::Info,
            line: format!("after {round}"),
        };
        f.app
            .post(
                &format!("/api/v1/ingest/{}", f.run),
                &f.worker,
                batch(f.run, 11 + round as u64 * 10, vec![log]),
            )
            .await;
        let (rest, ended) = read_stream(&mut stream, Duration::from_secs(10), "").await;
        assert!(ended, "{how}: the stream stayed open: {rest}");
        assert!(rest.contains("event: access_ended"), "{how}: {rest}");
        assert!(
            !rest.contains(&format!("after {round}")),
            "{how}: delivered after access ended: {rest}"
        );
    }
    Ok(())
}

/// Item 5: U+0000 in any text the API takes is a 422 naming the field, never a 500; in
/// ingestion it is refused the same way, and a report made by the worker's own constructor
/// (which replaces NUL) is stored, so a NUL in a transcript can no longer poison a run's spool.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn nul_characters_are_refused_by_name_everywhere(pool: PgPool) -> TestResult {
    let f = fixture(pool.clone()).await;
    let app = &f.app;
    let run = f.run;
    let team = team_of(&pool, run).await?;
    let nul = "a\u{0}b";
    let json_cases: Vec<(Method, String, Value, &str)> = vec![
        (
            Method::POST,
            "/api/v1/auth/register".into(),
            json!({ "email": nul, "display_name": "x", "password": PASSWORD }),
            "email",
        ),
        (
            Method::POST,
            "/api/v1/auth/register".into(),
            json!({ "email": "n@x.org", "display_name": nul, "password": PASSWORD }),
            "display_name",
        ),
        (
            Method::POST,
            "/api/v1/auth/login".into(),
            json!({ "email": nul, "password": PASSWORD }),
            "email",
        ),
        (
            Method::POST,
            "/api/v1/teams".into(),
            json!({ "name": nul }),
            "name",
        ),
        (
            Method::POST,
            format!("/api/v1/teams/{team}/projects"),
            json!({ "name": nul }),
            "name",
        ),
        (
            Method::PUT,
            format!("/api/v1/teams/{team}/members"),
            json!({ "email": nul, "role": "viewer" }),
            "email",
        ),
        (
            Method::POST,
            "/api/v1/projects/1/runs".into(),
            json!({ "name": nul, "config_toml": tiny_toml() }),
            "name",
        ),
        (
            Method::POST,
            "/api/v1/projects/1/runs".into(),
            json!({ "name": "r", "config_toml": format!("# {nul}\n") }),
            "config_toml",
        ),
        (
            Method::POST,
            format!("/api/v1/runs/{run}/evaluations"),
            json!({ "checkpoint_step": 0, "suite": nul }),
            "suite",
        ),
        (
            Method::POST,
            format!("/api/v1/ingest/{run}"),
            json!({ "envelopes": [{ "run_id": run.to_string(), "seq": 1, "key": format!("{run}/1"), "sent_at_ms": 0,
                    "message": { "kind": "log", "level": "info", "line": nul } }] }),
            "envelopes[0].message.line",
        ),
    ];
    for (method, path, body, field) in json_cases {
        let cred = if path.contains("/ingest/") {
            &f.worker
        } else {
            &f.owner
        };
        let r = app.call(method.clone(), &path, cred, Some(body)).await;
        r.assert_refused(field, "U+0000", &format!("{method} {path}"));
    }
    for (path, field) in [
        (
            format!("/api/v1/runs/{run}/environments?skill=a%00b"),
            "`skill`",
        ),
        (
            format!("/api/v1/runs/{run}/environments?cursor=%00"),
            "`cursor`",
        ),
        (
            format!("/api/v1/runs/{run}/metrics.csv?names=a%00"),
            "`names`",
        ),
        (format!("/api/v1/runs/{run}/metrics?names=a%00"), "`names`"),
        (format!("/api/v1/runs/{run}/metrics/a%00b"), "path"),
        (format!("/api/v1/runs/{run}/environments/a%00b"), "path"),
        ("/api/v1/shared/sps_%00x".to_owned(), "path"),
        ("/api/v1/shared/sps_x/metrics/a%00".to_owned(), "path"),
        ("/share/sps_%00".to_owned(), "path"),
        (format!("/ui/environments?run_id={run}&q=a%00"), "`q`"),
    ] {
        let r = app.get(&path, &f.owner).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path}: {}",
            r.text()
        );
        assert!(r.text().contains(field), "{path}: {}", r.text());
    }
    // HTML forms.
    let r = app
        .send(form("/login", "email=a%00b&password=x&next=%2F", &[]))
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    assert!(r.text().contains("`email`"), "{}", r.text());
    // The worker's own reports: NUL replaced where the report is made, so the batch is stored
    // and the next one is too.
    let transcript = Message::Log {
        level: LogLevel::Info,
        line: "model wrote \u{0} here".into(),
    };
    let r = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &f.worker,
            batch(run, 1, vec![transcript]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &f.worker,
            batch(run, 2, vec![metrics(0, &[("reward", 1.0)])]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let stored: Vec<String> = sqlx::query_scalar("SELECT line FROM run_logs WHERE run_id = $1")
        .bind(run)
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
    assert!(
        stored.iter().any(|l| l == "model wrote \u{FFFD} here"),
        "{stored:?}"
    );
    Ok(())
}

/// Item 7: a run configuration or evaluation naming a path outside the administrator's roots
/// is refused at validation, with the roots named; nothing is read.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn configurations_cannot_name_server_paths(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let a = app.user("a@x.org").await;
    let (_, project, run) = app.team_project_run(&a, "t").await;
    let base = spade::config::RunConfig::tiny_cpu_demo();
    let mut cases = Vec::new();
    let mut c = base.clone();
    c.model.path = Some("/etc".into());
    cases.push((c, "config.model.path"));
    let mut c = base.clone();
    c.corpus.path = Some("../../../../etc/passwd".into());
    cases.push((c, "config.corpus.path"));
    let mut c = base.clone();
    c.ablation.fixed_env_pool = Some("/root".into());
    cases.push((c, "config.ablation.fixed_env_pool"));
    let mut c = base.clone();
    c.memory.seed_pool = Some("/etc/pools/../../root/pool.jsonl".into());
    cases.push((c, "config.memory.seed_pool"));
    let mut c = base.clone();
    c.eval.suites = vec!["qa:/etc/passwd".into()];
    cases.push((c, "config.eval.suites[0]"));
    // Every prefix that names a file: a new one the resolver missed would run unchecked.
    let mut c = base.clone();
    c.eval.suites = vec!["rg-logic".into(), "code:/etc/shadow".into()];
    cases.push((c, "config.eval.suites[1]"));
    for (cfg, field) in cases {
        let r = app
            .post(
                &format!("/api/v1/projects/{project}/runs"),
                &a,
                json!({ "name": "r", "config_toml": cfg.to_toml() }),
            )
            .await;
        r.assert_refused(field, "allowed roots", field);
    }
    for suite in [
        "qa:/etc/passwd",
        "mc:/etc/passwd",
        "code:../../../etc/passwd",
        "envs:/root",
        "envs:../../",
    ] {
        let r = app
            .post(
                &format!("/api/v1/runs/{run}/evaluations"),
                &a,
                json!({ "checkpoint_step": 0, "suite": suite }),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{suite}: {}",
            r.text()
        );
        assert!(r.text().contains("allowed roots"), "{}", r.text());
    }
    Ok(())
}

/// Item 7, the allowed side: with roots configured, a path inside one is accepted and stored
/// resolved; a symlink out of the root is not.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn configured_roots_allow_paths_inside_them(pool: PgPool) -> TestResult {
    let dir = tempfile::tempdir()?;
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("m1"))?;
    std::os::unix::fs::symlink("/etc", models.join("out"))?;
    let app = TestApp::with_state(pool, |s| {
        s.with_paths(spade_server::service::paths::PathRoots::new(
            std::slice::from_ref(&models),
            &[],
            &[],
        ))
    });
    let a = app.user("a@x.org").await;
    let (_, project, _) = app.team_project_run(&a, "t").await;
    let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
    cfg.model.path = Some("m1".into());
    let r = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &a,
            json!({ "name": "ok", "config_toml": cfg.to_toml() }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let stored = r.json()["config"]["model"]["path"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        std::path::Path::new(&stored),
        models.canonicalize()?.join("m1")
    );
    cfg.model.path = Some("out".into());
    let r = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &a,
            json!({ "name": "no", "config_toml": cfg.to_toml() }),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    Ok(())
}

/// Item 8: a rotated refresh token replayed ends the whole session (its current refresh token
/// and its access tokens too), not only that one request.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_replayed_refresh_token_revokes_its_session(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("a@x.org").await;
    let (_, first) = app.login_api("a@x.org").await;
    let r = app.refresh_api(&first).await;
    assert_eq!(r.status, StatusCode::OK);
    let current = r.json()["refresh_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let access = r.json()["access_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The thief (or the owner, after the thief) presents the rotated token.
    let r = app.refresh_api(&first).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = app.refresh_api(&current).await;
    assert_eq!(
        r.status,
        StatusCode::UNAUTHORIZED,
        "the family's current token died too"
    );
    let r = app.get("/api/v1/auth/me", &Cred::Bearer(access)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.code(), "session_revoked");
    Ok(())
}

fn from_ip(mut req: Request<Body>, ip: [u8; 4]) -> Request<Body> {
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 40_000))));
    req
}

fn json_post(path: &str, body: Value) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

/// Item 8: guesses spread over ten addresses stop at the per-account limit; registrations and
/// refreshes from one address are limited.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn login_registration_and_refresh_are_limited(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("victim@x.org").await;
    let mut tried = 0;
    for i in 0..50u8 {
        let req = json_post(
            "/api/v1/auth/login",
            json!({ "email": "victim@x.org", "password": format!("guess {i}") }),
        );
        let r = app.send(from_ip(req, [127, 0, 0, i % 10 + 1])).await;
        match r.status {
            StatusCode::UNAUTHORIZED => tried += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            s => panic!("unexpected {s}: {}", r.text()),
        }
    }
    assert!(tried <= 10, "{tried} guesses were checked");
    let mut created = 0;
    for i in 0..40 {
        let req = json_post(
            "/api/v1/auth/register",
            json!({ "email": format!("bot{i}@x.org"), "display_name": "b", "password": PASSWORD }),
        );
        let r = app.send(from_ip(req, [10, 0, 0, 9])).await;
        if r.status == StatusCode::CREATED {
            created += 1;
        } else {
            assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text());
            assert!(r.headers.contains_key(header::RETRY_AFTER));
        }
    }
    assert!(created <= 20, "{created} accounts from one address");
    let mut limited = false;
    for _ in 0..40 {
        let req = json_post(
            "/api/v1/auth/refresh",
            json!({ "refresh_token": "sprt_nope" }),
        );
        if app.send(from_ip(req, [10, 0, 0, 7])).await.status == StatusCode::TOO_MANY_REQUESTS {
            limited = true;
        }
    }
    assert!(limited, "40 refreshes in a row were never limited");
    Ok(())
}

/// Item 8: a metric named like a spreadsheet formula is exported as text.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn csv_export_does_not_write_formulas(pool: PgPool) -> TestResult {
    let f = fixture(pool).await;
    let name = "=HYPERLINK(\"http://evil.example\",\"x\")";
    let r = f
        .app
        .post(
            &format!("/api/v1/ingest/{}", f.run),
            &f.worker,
            batch(
                f.run,
                1,
                vec![metrics(0, &[(name, 1.0), ("@SUM(A1)", 2.0)])],
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let csv = f
        .app
        .get(&format!("/api/v1/runs/{}/metrics.csv", f.run), &f.owner)
        .await
        .text();
    for line in csv.lines().skip(1) {
        let name = line
            .split(',')
            .nth(1)
            .unwrap_or_default()
            .trim_start_matches('"');
        assert!(name.starts_with('\''), "{line}");
    }
    Ok(())
}

/// Item 8: the smaller answers: a run the viewer cannot see is 404 through `/ui/*` too; a huge
/// theme post is 413; a negative `bytes` gets the JSON error shape.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn small_holes_answer_with_the_right_status(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let a = app.user("a@x.org").await;
    let b = app.user("b@x.org").await;
    let (_, _, run) = app.team_project_run(&a, "t").await;
    let r = app.get(&format!("/ui/run?run_id={run}"), &b).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    let r = app.get("/ui/run?run_id=999999", &a).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    let big = vec![b'a'; 100 << 20];
    let req = Request::builder()
        .method(Method::POST)
        .uri("/ui/theme")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(big))
        .unwrap_or_default();
    let r = app.send(req).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.text());
    assert_eq!(r.code(), "body_too_large");
    let r = app
        .get(&format!("/api/v1/runs/{run}/logs?bytes=-1"), &a)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["status"], 400, "{}", r.text());
    Ok(())
}

/// Item 8: the share link on the run page names the configured public URL, whatever `Host` the
/// request carried.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn share_links_use_the_public_url_not_the_host_header(pool: PgPool) -> TestResult {
    let app = TestApp::with_state(pool, |s| s.with_public_url("https://studio.example"));
    let a = app.user("a@x.org").await;
    let (_, _, run) = app.team_project_run(&a, "t").await;
    let r = app
        .post(&format!("/api/v1/runs/{run}/shares"), &a, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let Cred::Bearer(token) = &a else {
        panic!("bearer")
    };
    let req = Request::builder()
        .uri(format!("/ui/run?run_id={run}"))
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::HOST, "evil.example")
        .body(Body::empty())
        .unwrap_or_default();
    let r = app.send(req).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(!r.text().contains("evil.example"), "{}", r.text());
    Ok(())
}

/// Item 8: a client trickling header bytes loses its connection after the header-read timeout
/// instead of holding it open (the real server loop, on a port).
#[tokio::test]
async fn slow_headers_are_cut_off() -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
    let timeout = Duration::from_secs(1);
    tokio::spawn(spade_server::serve::serve(
        listener,
        router,
        timeout,
        std::future::pending(),
    ));
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await?;
    let t0 = std::time::Instant::now();
    let mut closed = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 512];
        match tokio::time::timeout(Duration::from_millis(10), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(_)) => {
                // A 408 answer, then the close.
                closed = true;
                break;
            }
            Err(_) => {}
        }
    }
    assert!(closed, "connection still open after {:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // A normal request on a new connection still works.
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    Ok(())
}

/// Item 6: a run whose worker is killed (SIGKILL to its process group, as the OOM killer or a
/// crash would) is marked failed with a message saying so, and resuming it continues from its
/// last checkpoint: attempt 2 finds the checkpoints of attempt 1 and logs where it resumes.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_resumed_run_continues_from_its_checkpoint_after_a_sigkill(pool: PgPool) -> TestResult {
    let spade = crate::evaluations::bin_dir()?.join("spade");
    if !spade.exists() {
        return Err(format!("{} is missing: cargo build first", spade.display()).into());
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("workspace")?
        .to_path_buf();
    let tmp = tempfile::tempdir()?;
    let jobs_dir = tmp.path().join("jobs");
    let command = format!(
        "/usr/bin/env OMP_NUM_THREADS=1 SPADE_SEEDS={} {} worker --run {{run}} --server {{server}}",
        root.join("envs").join("seed").display(),
        spade.display()
    );
    let flags = [
        "--worker-command",
        command.as_str(),
        "--jobs-dir",
        jobs_dir.to_str().ok_or("path")?,
        "--scheduler-poll-ms",
        "100",
        "--stop-grace-secs",
        "2",
    ];
    let app = TestApp::with_scheduler_flags(pool.clone(), &flags);
    let (addr, server) = app.serve().await?;
    let owner = app.user("owner@x.org").await;
    let team = app
        .post("/api/v1/teams", &owner, json!({ "name": "t" }))
        .await
        .json()["id"]
        .as_i64()
        .unwrap_or(-1);
    let project = app
        .post(
            &format!("/api/v1/teams/{team}/projects"),
            &owner,
            json!({ "name": "p" }),
        )
        .await
        .json()["id"]
        .as_i64()
        .unwrap_or(-1);
    // The demo's configuration: its warm start (game families) is the one the other tests and
    // `scripts/serve` cache, and from an empty cache it trains in minutes, where the
    // seed-library preset's took 3,017 s on a fresh AMD EPYC.
    let mut cfg = spade::config::RunConfig::from_toml_str(spade::config::DEMO_TOML)?;
    cfg.run.steps = 4;
    cfg.run.checkpoint_every = 1;
    cfg.eval.every_steps = 0;
    cfg.eval.base_model = false;
    let r = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &owner,
            json!({ "name": "killed", "config_toml": cfg.to_toml() }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let run = r.json()["id"].as_i64().unwrap_or(-1);
    let mut argv = vec!["spade-server"];
    argv.extend_from_slice(&flags);
    let settings = <spade_server::config::Config as clap::Parser>::parse_from(argv).scheduler;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task =
        spade_server::scheduling::spawn_with_run_tokens(pool.clone(), &settings, addr, stopped)?
            .ok_or("a local scheduler")?;
    let logs = |attempt: u32| {
        std::fs::read_to_string(
            jobs_dir
                .join(format!("spade-run-{run}-a{attempt}"))
                .join("output.log"),
        )
        .unwrap_or_default()
    };
    let checkpoints = || async {
        app.get(&format!("/api/v1/runs/{run}/checkpoints"), &owner)
            .await
            .json()
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c["step"].as_i64())
            .max()
            .unwrap_or(0)
    };
    // Attempt 1 until it has reported a trained checkpoint. The warm start is cached by earlier
    // tests or runs; from an empty cache it trains here first, until its criterion is met
    // (7-12 minutes of one core on a loaded 2-core machine).
    let t0 = std::time::Instant::now();
    while checkpoints().await < 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(2700),
            "no checkpoint yet; job output:\n{}",
            logs(1)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let record: Value = serde_json::from_str(&std::fs::read_to_string(
        jobs_dir
            .join(format!("spade-run-{run}-a1"))
            .join("job.json"),
    )?)?;
    let pid = record["pid"].as_i64().ok_or("pid in job.json")?;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status()?;
    assert!(killed.success());
    let failed = loop {
        let r = app.get(&format!("/api/v1/runs/{run}"), &owner).await.json();
        if r["status"] == "failed" {
            break r;
        }
        assert!(t0.elapsed() < Duration::from_secs(960), "not failed: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let message = failed["status_message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("without reporting"), "{failed}");
    let at = checkpoints().await;
    let r = app
        .post(&format!("/api/v1/runs/{run}/resume"), &owner, json!({}))
        .await;
    assert!(r.status.is_success(), "{}", r.text());
    let t1 = std::time::Instant::now();
    while !logs(2).contains("resuming at step") {
        assert!(
            t1.elapsed() < Duration::from_secs(300),
            "attempt 2 did not resume:\n{}",
            logs(2)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let second = logs(2);
    // At the last reported checkpoint or a later one the worker wrote before it died.
    let resumed_at: i64 = second
        .split("resuming at step ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or("no step in the resume line")?;
    assert!(
        resumed_at >= at && at >= 1,
        "resumed at {resumed_at}, reported {at}:\n{second}"
    );
    assert!(
        !second.contains("warm start:"),
        "attempt 2 warmed up again:\n{second}"
    );
    let r = app
        .post(&format!("/api/v1/runs/{run}/cancel"), &owner, json!({}))
        .await;
    assert!(r.status.is_success(), "{}", r.text());
    let t2 = std::time::Instant::now();
    loop {
        let r = app.get(&format!("/api/v1/runs/{run}"), &owner).await.json();
        if r["status"] == "cancelled" {
            break;
        }
        assert!(
            t2.elapsed() < Duration::from_secs(120),
            "not cancelled: {r}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), task).await??;
    server.abort();
    eprintln!(
        "killed at checkpoint {at} after {:.1} s; attempt 2 resumed in {:.1} s",
        t0.elapsed().as_secs_f64() - t1.elapsed().as_secs_f64(),
        t1.elapsed().as_secs_f64() - t2.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Issue 20, item 4: a page left open while its run is cancelled used to stay "cancelling": the
/// scheduler finishes the job in the database and publishes no event. The stream reads the
/// status on its recheck tick and sends the change.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_open_stream_learns_a_status_nobody_published(pool: PgPool) -> TestResult {
    let f = fixture(pool.clone()).await;
    let (addr, _server) = f.app.serve().await?;
    let Cred::Bearer(token) = &f.owner else {
        return Err("bearer".into());
    };
    let mut stream = reqwest::Client::new()
        .get(format!("http://{addr}/api/v1/runs/{}/events", f.run))
        .bearer_auth(token)
        .send()
        .await?;
    let (first, _) = read_stream(&mut stream, Duration::from_secs(5), "event: progress").await;
    assert!(first.contains("\"status\":\"queued\""), "{first}");
    sqlx::query("UPDATE runs SET status = 'cancelled' WHERE id = $1")
        .bind(f.run)
        .execute(&pool)
        .await?;
    let patience = spade_server::api::events::ACCESS_RECHECK + Duration::from_secs(5);
    let (rest, _) = read_stream(&mut stream, patience, "\"status\":\"cancelled\"").await;
    assert!(rest.contains("\"status\":\"cancelled\""), "{rest}");
    Ok(())
}
