//! Functional tests: accounts, teams, projects and runs as a user goes through them.

use crate::support::*;
use axum::http::{Method, StatusCode};
use serde_json::json;
use spade_db::users::Registration;
use sqlx::PgPool;

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn register_login_refresh_logout(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let first = app.register("Ada@Example.org").await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text());
    assert_eq!(first.json()["is_admin"], true, "the first user is admin");
    assert_eq!(first.json()["email"], "ada@example.org");
    assert!(first.json().get("password_hash").is_none());
    let second = app.register("bob@example.org").await;
    assert_eq!(second.json()["is_admin"], false);
    let dup = app.register("ADA@example.org").await;
    assert_eq!(
        (dup.status, dup.code().as_str()),
        (StatusCode::CONFLICT, "already_exists")
    );
    let weak = app
        .post(
            "/api/v1/auth/register",
            &Cred::None,
            json!({ "email": "c@x.org", "display_name": "c", "password": "short" }),
        )
        .await;
    assert_eq!(weak.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        weak.json()["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("`password`")
    );
    let unknown_field = app
        .post(
            "/api/v1/auth/register",
            &Cred::None,
            json!({ "email": "c@x.org", "display_name": "c", "password": PASSWORD, "admin": true }),
        )
        .await;
    assert_eq!(unknown_field.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        unknown_field.text().contains("admin"),
        "{}",
        unknown_field.text()
    );

    let wrong = app
        .post(
            "/api/v1/auth/login",
            &Cred::None,
            json!({ "email": "ada@example.org", "password": "not the password" }),
        )
        .await;
    assert_eq!(wrong.code(), "invalid_credentials");
    let unknown = app
        .post(
            "/api/v1/auth/login",
            &Cred::None,
            json!({ "email": "nobody@example.org", "password": PASSWORD }),
        )
        .await;
    assert_eq!(
        unknown.code(),
        "invalid_credentials",
        "unknown emails look like wrong passwords"
    );

    // Browser flow: cookies, refresh with the cookie + CSRF header, logout.
    let login = app
        .post(
            "/api/v1/auth/login",
            &Cred::None,
            json!({ "email": "ada@example.org", "password": PASSWORD }),
        )
        .await;
    let (refresh, csrf) = (
        login.cookie("spade_refresh").unwrap_or_default(),
        login.cookie("spade_csrf").unwrap_or_default(),
    );
    let req = |with_csrf: bool| {
        let mut b = axum::http::Request::builder()
            .method(Method::POST)
            .uri("/api/v1/auth/refresh")
            .header("cookie", format!("spade_refresh={refresh}"));
        if with_csrf {
            b = b.header("x-csrf-token", csrf.clone());
        }
        b.body(axum::body::Body::empty()).unwrap_or_default()
    };
    assert_eq!(
        app.send(req(false)).await.status,
        StatusCode::FORBIDDEN,
        "cookie refresh needs CSRF"
    );
    let refreshed = app.send(req(true)).await;
    assert_eq!(refreshed.status, StatusCode::OK, "{}", refreshed.text());
    let access = refreshed.cookie("spade_access").unwrap_or_default();
    assert_ne!(
        refreshed.cookie("spade_refresh"),
        Some(refresh.clone()),
        "rotated"
    );
    let me = app
        .get(
            "/api/v1/auth/me",
            &Cred::Cookie {
                access: access.clone(),
                csrf: None,
            },
        )
        .await;
    assert_eq!(me.json()["email"], "ada@example.org");
    let out = app
        .call(
            Method::POST,
            "/api/v1/auth/logout",
            &Cred::Cookie {
                access: access.clone(),
                csrf: Some(csrf.clone()),
            },
            None,
        )
        .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert_eq!(
        out.cookie("spade_access").as_deref(),
        Some(""),
        "cookies are cleared"
    );
    assert_eq!(
        app.get("/api/v1/auth/me", &Cred::Cookie { access, csrf: None })
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn closed_registration_admits_only_the_first_user(pool: PgPool) -> TestResult {
    let app = TestApp::with_registration(pool, Registration::FirstUserOnly);
    assert_eq!(
        app.register("admin@x.org").await.status,
        StatusCode::CREATED
    );
    let r = app.register("late@x.org").await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (StatusCode::FORBIDDEN, "registration_closed")
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn teams_projects_and_runs(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let owner = app.user("owner@x.org").await;
    let editor = app.user("editor@x.org").await;
    let t = app
        .post("/api/v1/teams", &owner, json!({ "name": "lab" }))
        .await;
    assert_eq!(t.status, StatusCode::CREATED);
    assert_eq!(t.json()["role"], "owner");
    let team = t.json()["id"].as_i64().unwrap_or(-1);
    assert_eq!(
        app.post("/api/v1/teams", &owner, json!({ "name": "lab" }))
            .await
            .status,
        StatusCode::CONFLICT
    );
    let add = app.join(&owner, team, "editor@x.org", "editor").await;
    assert_eq!(add.json()["team_id"], team, "{}", add.text());
    // A role change finds members only: an email outside the team is 404, account or not.
    let ghost = app
        .call(
            Method::PUT,
            &format!("/api/v1/teams/{team}/members"),
            &owner,
            Some(json!({ "email": "ghost@x.org", "role": "viewer" })),
        )
        .await;
    assert_eq!(ghost.status, StatusCode::NOT_FOUND);
    let bad_role = app
        .call(
            Method::PUT,
            &format!("/api/v1/teams/{team}/members"),
            &owner,
            Some(json!({ "email": "editor@x.org", "role": "god" })),
        )
        .await;
    assert_eq!(bad_role.status, StatusCode::UNPROCESSABLE_ENTITY);
    let demote_self = app
        .call(
            Method::PUT,
            &format!("/api/v1/teams/{team}/members"),
            &owner,
            Some(json!({ "email": "owner@x.org", "role": "viewer" })),
        )
        .await;
    assert_eq!(demote_self.code(), "last_owner");
    assert_eq!(
        app.get(&format!("/api/v1/teams/{team}/members"), &editor)
            .await
            .json()
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    let p = app
        .post(
            &format!("/api/v1/teams/{team}/projects"),
            &editor,
            json!({ "name": "ablations" }),
        )
        .await;
    assert_eq!(p.status, StatusCode::CREATED);
    let project = p.json()["id"].as_i64().unwrap_or(-1);

    // Configurations are validated; errors name the key.
    let bad = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &editor,
            json!({ "name": "r", "config_toml": "[model]\npreset = \"gpt\"\n" }),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.text().contains("model.preset"), "{}", bad.text());
    // The cross-field rule the worker also holds (spade::config): a trained designer samples at
    // the agent's temperature.
    let hot = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &editor,
            json!({ "name": "r", "config": {
                "model": { "preset": "tiny" },
                "designer": { "temperature": 0.9 },
            } }),
        )
        .await;
    assert_eq!(hot.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        hot.text().contains("designer.temperature"),
        "{}",
        hot.text()
    );
    let bad_json = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &editor,
            json!({ "name": "r", "config": { "run": { "steps": "many" } } }),
        )
        .await;
    assert_eq!(bad_json.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad_json.text().contains("config.run.steps"),
        "{}",
        bad_json.text()
    );
    let both = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &editor,
            json!({ "name": "r" }),
        )
        .await;
    assert_eq!(both.status, StatusCode::UNPROCESSABLE_ENTITY);

    let mut ids = Vec::new();
    for i in 0..3 {
        let r = app
            .post(
                &format!("/api/v1/projects/{project}/runs"),
                &editor,
                json!({ "name": format!("run {i}"), "config_toml": tiny_toml() }),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
        assert_eq!(r.json()["status"], "queued");
        assert_eq!(
            r.json()["config"]["model"]["preset"],
            "tiny",
            "stored with defaults filled in"
        );
        ids.push(r.json()["id"].as_i64().unwrap_or(-1));
    }
    let json_run = app.post(&format!("/api/v1/projects/{project}/runs"), &editor, json!({ "name": "from json", "config": spade::config::RunConfig::tiny_cpu_demo().to_json(), "executor": "ray" })).await;
    assert_eq!(json_run.json()["executor"], "ray");
    ids.push(json_run.json()["id"].as_i64().unwrap_or(-1));

    // Pagination: newest first, two per page.
    let page1 = app
        .get(&format!("/api/v1/teams/{team}/runs?limit=2"), &owner)
        .await
        .json();
    let got: Vec<i64> = page1["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["id"].as_i64())
        .collect();
    assert_eq!(got, vec![ids[3], ids[2]]);
    let cursor = page1["next_cursor"].as_str().unwrap_or_default().to_owned();
    let page2 = app
        .get(
            &format!("/api/v1/teams/{team}/runs?limit=2&cursor={cursor}"),
            &owner,
        )
        .await
        .json();
    let got: Vec<i64> = page2["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["id"].as_i64())
        .collect();
    assert_eq!(got, vec![ids[1], ids[0]]);
    assert_eq!(
        app.get(&format!("/api/v1/teams/{team}/runs?limit=0"), &owner)
            .await
            .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // Cancel a queued run: cancelled at once; resume queues it; filter by status.
    let c = app
        .post(
            &format!("/api/v1/runs/{}/cancel", ids[0]),
            &editor,
            json!({}),
        )
        .await;
    assert_eq!(c.json()["status"], "cancelled");
    let again = app
        .post(
            &format!("/api/v1/runs/{}/cancel", ids[0]),
            &editor,
            json!({}),
        )
        .await;
    assert_eq!(
        (again.status, again.code().as_str()),
        (StatusCode::CONFLICT, "invalid_state")
    );
    let cancelled = app
        .get(
            &format!("/api/v1/teams/{team}/runs?status=cancelled"),
            &owner,
        )
        .await
        .json();
    assert_eq!(cancelled["items"].as_array().map(Vec::len), Some(1));
    let bad_status = app
        .get(
            &format!("/api/v1/teams/{team}/runs?status=exploded"),
            &owner,
        )
        .await;
    assert_eq!(bad_status.status, StatusCode::BAD_REQUEST);
    let resumed = app
        .post(
            &format!("/api/v1/runs/{}/resume", ids[0]),
            &editor,
            json!({}),
        )
        .await;
    assert_eq!(resumed.json()["status"], "queued");
    let not_resumable = app
        .post(
            &format!("/api/v1/runs/{}/resume", ids[1]),
            &editor,
            json!({}),
        )
        .await;
    assert_eq!(not_resumable.status, StatusCode::CONFLICT);

    assert_eq!(
        app.call(
            Method::DELETE,
            &format!("/api/v1/runs/{}", ids[1]),
            &editor,
            None
        )
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&format!("/api/v1/runs/{}", ids[1]), &owner)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.get(&format!("/api/v1/runs/{}", ids[2]), &owner)
            .await
            .json()["name"],
        "run 2"
    );

    // Removing the last owner is refused; removing the editor works.
    let members = app
        .get(&format!("/api/v1/teams/{team}/members"), &owner)
        .await
        .json();
    let editor_id = members
        .as_array()
        .and_then(|m| m.iter().find(|m| m["email"] == "editor@x.org"))
        .and_then(|m| m["user_id"].as_i64())
        .unwrap_or(-1);
    assert_eq!(
        app.call(
            Method::DELETE,
            &format!("/api/v1/teams/{team}/members/{editor_id}"),
            &owner,
            None
        )
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&format!("/api/v1/runs/{}", ids[2]), &editor)
            .await
            .status,
        StatusCode::NOT_FOUND,
        "a removed member sees nothing"
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn health_openapi_and_typed_errors(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let h = app.get("/api/v1/health", &Cred::None).await;
    assert_eq!(h.status, StatusCode::OK);
    assert_eq!(h.json()["database"]["ok"], true);
    assert!(
        h.headers.contains_key("x-request-id"),
        "request ids are set and propagated"
    );
    let doc = app.get("/api/v1/openapi.json", &Cred::None).await.json();
    assert_eq!(doc["openapi"], "3.1.0");
    for e in spade_server::api::endpoints() {
        let op = &doc["paths"][format!("/api/v1{}", e.path)][e.method];
        assert!(op.is_object(), "{} {} is undocumented", e.method, e.path);
    }
    assert!(
        doc["paths"]["/api/v1/runs/{run_id}/cancel"]["post"]["parameters"][0]["name"] == "run_id"
    );
    let missing = app.get("/api/v1/nope", &Cred::None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["code"], "not_found");
    let bad_path = app.get("/api/v1/runs/abc", &Cred::Bearer("x".into())).await;
    assert!(bad_path.status.is_client_error());
    let page = app.get("/", &Cred::None).await;
    assert_eq!(page.status, StatusCode::OK, "Leptos SSR still renders");
    assert!(page.text().contains("<html"), "{}", page.text());
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn job_output_is_served_to_members_through_the_executor(pool: PgPool) -> TestResult {
    use spade_server::scheduling::{IssueFn, spawn};
    use std::time::{Duration, Instant};
    let jobs_dir = std::env::temp_dir().join(format!("api-job-logs-{}", std::process::id()));
    let flags = [
        "--worker-command",
        "echo worker output for run {run}",
        "--jobs-dir",
        jobs_dir.to_str().ok_or("path")?,
        "--scheduler-poll-ms",
        "100",
    ];
    let app = TestApp::with_scheduler_flags(pool.clone(), &flags);
    let ada = app.user("ada@example.org").await;
    let (_, _, run) = app.team_project_run(&ada, "logs").await;
    let before = app.get(&format!("/api/v1/runs/{run}/logs"), &ada).await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.text());
    assert_eq!(before.json()["logs"], serde_json::Value::Null, "no job yet");

    // The real local scheduler picks the queued run up and runs the configured command.
    let mut argv = vec!["spade-server"];
    argv.extend_from_slice(&flags);
    let settings = <spade_server::config::Config as clap::Parser>::parse_from(argv).scheduler;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let tokens = IssueFn(|run: i64| async move { Ok::<_, String>(format!("tok-{run}")) });
    let task = spawn(
        pool.clone(),
        &settings,
        "127.0.0.1:3999".parse()?,
        tokens,
        stopped,
    )?
    .ok_or("a local scheduler")?;
    let t0 = Instant::now();
    let logs = loop {
        let r = app.get(&format!("/api/v1/runs/{run}/logs"), &ada).await;
        if let Some(text) = r.json()["logs"].as_str().filter(|t| !t.is_empty()) {
            break text.to_string();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no output: {}",
            r.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(logs, format!("worker output for run {run}\n"));
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(5), task).await??;

    // Another team's member sees nothing, not even that the run exists.
    let eve = app.user("eve@example.org").await;
    let other = app.get(&format!("/api/v1/runs/{run}/logs"), &eve).await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    let bad = app
        .get(&format!("/api/v1/runs/{run}/logs?bytes=0"), &ada)
        .await;
    assert_eq!(
        bad.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        bad.text()
    );
    let _ = std::fs::remove_dir_all(&jobs_dir);
    Ok(())
}
