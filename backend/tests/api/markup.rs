//! Attacks through what the server writes into HTML and headers (issue 36, items 1, 6 and 7):
//! script in every name a user or a worker chooses, the security headers of every kind of
//! answer, and malformed `/ui/*` arguments that answered 500.

use crate::support::*;
use axum::http::StatusCode;
use serde_json::json;
use spade::EnvKind;
use spade::report::{EnvStatus, Envelope, EnvironmentRecord, Message};
use sqlx::PgPool;

/// Markup that runs script wherever it lands unescaped: in `<title>`, in an element, in an
/// attribute.
const PAYLOAD: &str = "x</title><script>window.__pwned=1</script><img src=x onerror=alert(1)>\"'";

/// The pieces of [`PAYLOAD`] that must never appear as markup.
const MARKERS: [&str; 3] = [
    "<script>window.__pwned",
    "<img src=x onerror",
    "</title><script",
];

/// The nonce of the page's `Content-Security-Policy` header; fails when the page has no such
/// policy or when any `<script` of the page lacks that nonce (a script without it would be
/// blocked, so a page that needs one is broken, and one that has it unexpectedly is injected).
fn check_scripts_carry_the_nonce(path: &str, page: &Resp) {
    let csp = page.header("content-security-policy");
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split_once('\''))
        .map(|(n, _)| n.to_owned())
        .unwrap_or_default();
    assert!(
        !nonce.is_empty() && csp.contains("frame-ancestors 'none'"),
        "{path}: the page's policy is {csp:?}"
    );
    let html = page.text();
    for (i, tag) in html.split("<script").skip(1).enumerate() {
        let head = tag.split('>').next().unwrap_or_default();
        assert!(
            head.contains(&format!("nonce=\"{nonce}\"")),
            "{path}: script {i} has no nonce: <script{head}>"
        );
    }
}

fn assert_no_markup(path: &str, html: &str) {
    for m in MARKERS {
        assert!(!html.contains(m), "{path}: {m:?} is in the page as markup");
    }
}

/// The attack: a run, a team, an environment id, a skill, a hint and the code itself carry
/// markup, and every page that shows them is read as a browser would get it, signed in and
/// through a share link. None of it is markup there, and every script of every page carries the
/// policy's nonce. (Before the fix a run named so ran script in the `<title>` of four pages,
/// on the share page without a login.)
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn script_in_every_name_stays_text_on_every_page(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let team = app
        .post("/api/v1/teams", &ada, json!({ "name": PAYLOAD }))
        .await;
    assert_eq!(team.status, StatusCode::CREATED, "{}", team.text());
    let team = team.json()["id"].as_i64().unwrap_or(-1);
    let project = app
        .post(
            &format!("/api/v1/teams/{team}/projects"),
            &ada,
            json!({ "name": PAYLOAD }),
        )
        .await
        .json()["id"]
        .as_i64()
        .unwrap_or(-1);
    let run = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &ada,
            json!({ "name": PAYLOAD, "config_toml": tiny_toml() }),
        )
        .await;
    assert_eq!(run.status, StatusCode::CREATED, "{}", run.text());
    let run = run.json()["id"].as_i64().unwrap_or(-1);
    let token = app
        .post(&format!("/api/v1/runs/{run}/token"), &ada, json!({}))
        .await
        .json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let env_id = "e<script>window.__pwned=1</script><img src=x onerror=alert(1)>";
    let record = EnvironmentRecord {
        hint: Some(PAYLOAD.into()),
        regret: Some(0.5),
        win_rate_hint: Some(0.75),
        win_rate_no_hint: Some(0.25),
        reward_levels: Some(2),
        ..EnvironmentRecord::new(
            env_id,
            1,
            PAYLOAD,
            EnvKind::Game,
            EnvStatus::Accepted,
            format!("# {PAYLOAD}\nclass Env:\n    s = \"{PAYLOAD}\"\n"),
        )
    };
    let envelopes = vec![Envelope::at(
        run.to_string(),
        0,
        1_700_000_000_000,
        Message::Environment { record },
    )];
    let ingested = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &Cred::Bearer(token),
            json!({ "envelopes": envelopes }),
        )
        .await;
    assert!(ingested.status.is_success(), "{}", ingested.text());
    let share = app
        .post(
            &format!("/api/v1/runs/{run}/shares"),
            &ada,
            json!({ "label": PAYLOAD }),
        )
        .await;
    assert_eq!(share.status, StatusCode::CREATED, "{}", share.text());
    let share = share.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!share.is_empty(), "the share link's token");

    let env_path = format!(
        "/runs/{run}/environments/{}",
        // A path segment: a space is %20 there, not the query string's `+`.
        form_urlencoded::byte_serialize(env_id.as_bytes())
            .collect::<String>()
            .replace('+', "%20")
    );
    for (path, cred) in [
        (format!("/runs?team={team}"), &ada),
        (format!("/runs/{run}"), &ada),
        (format!("/runs/{run}/environments"), &ada),
        (env_path, &ada),
        (format!("/compare?run={run}"), &ada),
        ("/teams".to_owned(), &ada),
        (format!("/benchmarks?team={team}"), &ada),
        (format!("/share/{share}"), &Cred::None),
    ] {
        let page = app.get(&path, cred).await;
        let html = page.text();
        assert_eq!(page.status, StatusCode::OK, "{path}: {html}");
        assert_no_markup(&path, &html);
        check_scripts_carry_the_nonce(&path, &page);
    }
    // The run's name is in the title, as text.
    let page = app.get(&format!("/runs/{run}"), &ada).await.text();
    assert!(
        page.contains("<title>x&lt;/title&gt;&lt;script&gt;window.__pwned=1"),
        "{}",
        page.split("</title>").next().unwrap_or_default()
    );
    Ok(())
}

/// The attack: a page of the studio inside another site's frame (clickjacking the one-click
/// Cancel, Revoke and Remove buttons), a CSV or JSON answer sniffed as HTML, the share token
/// leaving in a `Referer`, and personal answers kept by caches. Every kind of answer carries the
/// headers that forbid each.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn every_kind_of_answer_carries_the_security_headers(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (_, _, run) = app.team_project_run(&ada, "lab").await;
    let share = app
        .post(&format!("/api/v1/runs/{run}/shares"), &ada, json!({}))
        .await
        .json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for (path, cred, page) in [
        (format!("/runs/{run}"), &ada, true),
        ("/login".to_owned(), &Cred::None, true),
        (format!("/share/{share}"), &Cred::None, true),
        ("/no/such/page".to_owned(), &ada, true),
        (format!("/api/v1/runs/{run}"), &ada, false),
        (format!("/api/v1/shared/{share}"), &Cred::None, false),
        (format!("/api/v1/runs/{run}/metrics.csv"), &ada, false),
        (format!("/api/v1/runs/{run}/pool.zip"), &ada, false),
        ("/api/v1/runs/999999".to_owned(), &ada, false),
        ("/api/v1/openapi.json".to_owned(), &Cred::None, false),
        ("/ui/viewer".to_owned(), &ada, false),
    ] {
        let r = app.get(&path, cred).await;
        assert_eq!(r.header("x-frame-options"), "DENY", "{path}");
        assert_eq!(r.header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(r.header("referrer-policy"), "same-origin", "{path}");
        let csp = r.header("content-security-policy");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        if page {
            assert!(csp.contains("'nonce-"), "{path}: a page's policy: {csp}");
        } else {
            assert!(csp.starts_with("default-src 'none'"), "{path}: {csp}");
        }
        assert_eq!(
            r.header("cache-control"),
            "no-store",
            "{path} ({})",
            r.status
        );
    }
    Ok(())
}

/// The attack: malformed arguments to the pages' server functions, which answered 500 (a
/// server fault, logged and alerted on) for what is the client's mistake.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn malformed_server_function_arguments_are_the_clients_fault(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    for path in [
        "/ui/runs?team=abc",
        "/ui/run",
        "/ui/run?run_id=abc",
        "/ui/environment?run_id=1",
        "/ui/environments?run_id=x",
    ] {
        let r = app.get(path, &ada).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}: {}", r.text());
    }
    let theme = app
        .send(
            axum::http::Request::post("/ui/theme")
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", "http://localhost")
                .body(axum::body::Body::from("theme=blue"))
                .unwrap_or_default(),
        )
        .await;
    assert!(
        theme.status.is_client_error(),
        "theme=blue: {} {}",
        theme.status,
        theme.text()
    );
    // The control: good arguments still answer.
    let (_, _, run) = app.team_project_run(&ada, "lab").await;
    let r = app.get(&format!("/ui/run?run_id={run}"), &ada).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    Ok(())
}

/// A browser's cookie refresh of `refresh`, with the session's CSRF token.
fn cookie_refresh(refresh: &str, csrf: &str) -> axum::http::Request<axum::body::Body> {
    axum::http::Request::post("/api/v1/auth/refresh")
        .header("cookie", format!("spade_refresh={refresh}"))
        .header("x-csrf-token", csrf)
        .body(axum::body::Body::empty())
        .unwrap_or_default()
}

/// The race: two tabs of one browser refresh at the same moment with the same cookie. One
/// rotates the token; the other presents the token just rotated away, which read as a replay and
/// revoked the session, logging the user out of both tabs. Now both get an access token and the
/// session lives; the loser sets no refresh cookie, so the browser keeps the winner's. The
/// controls: a token older than the latest rotation is refused, and an API client's rotated
/// token is still a replay that ends the session.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn two_tabs_refreshing_together_both_stay_logged_in(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("ada@example.org").await;
    let login = app
        .post(
            "/api/v1/auth/login",
            &Cred::None,
            json!({ "email": "ada@example.org", "password": PASSWORD }),
        )
        .await;
    let refresh = login.cookie("spade_refresh").unwrap_or_default();
    let csrf = login.cookie("spade_csrf").unwrap_or_default();
    let (a, b) = tokio::join!(
        app.send(cookie_refresh(&refresh, &csrf)),
        app.send(cookie_refresh(&refresh, &csrf))
    );
    assert_eq!(
        (a.status, b.status),
        (StatusCode::OK, StatusCode::OK),
        "{} / {}",
        a.text(),
        b.text()
    );
    let new_refresh: Vec<String> = [&a, &b]
        .iter()
        .filter_map(|r| r.cookie("spade_refresh"))
        .collect();
    assert_eq!(
        new_refresh.len(),
        1,
        "exactly one tab rotated: {new_refresh:?}"
    );
    for r in [&a, &b] {
        let access = r.cookie("spade_access").unwrap_or_default();
        let me = app
            .get("/api/v1/auth/me", &Cred::Cookie { access, csrf: None })
            .await;
        assert_eq!(
            me.status,
            StatusCode::OK,
            "both tabs are signed in: {}",
            me.text()
        );
    }
    // The browser goes on with the winner's cookie.
    let next = app.send(cookie_refresh(&new_refresh[0], &csrf)).await;
    assert_eq!(next.status, StatusCode::OK, "{}", next.text());
    // Control: the first token is now two rotations old: no race, refused.
    let replay = app.send(cookie_refresh(&refresh, &csrf)).await;
    assert_eq!(replay.status, StatusCode::UNAUTHORIZED, "{}", replay.text());

    // The race where the losing tab's request is read only after the winner committed.
    let login = app
        .post(
            "/api/v1/auth/login",
            &Cred::None,
            json!({ "email": "ada@example.org", "password": PASSWORD }),
        )
        .await;
    let refresh = login.cookie("spade_refresh").unwrap_or_default();
    let csrf = login.cookie("spade_csrf").unwrap_or_default();
    let won = app.send(cookie_refresh(&refresh, &csrf)).await;
    assert_eq!(won.status, StatusCode::OK, "{}", won.text());
    let lost = app.send(cookie_refresh(&refresh, &csrf)).await;
    assert_eq!(
        lost.status,
        StatusCode::OK,
        "the late loser: {}",
        lost.text()
    );
    assert_eq!(
        lost.cookie("spade_refresh"),
        None,
        "the loser keeps the winner's cookie"
    );

    // Control: an API client holds its token alone, so presenting a rotated one at once is a replay.
    let (_, first) = app.login_api("ada@example.org").await;
    assert_eq!(app.refresh_api(&first).await.status, StatusCode::OK);
    assert_eq!(
        app.refresh_api(&first).await.status,
        StatusCode::UNAUTHORIZED
    );
    Ok(())
}

/// The outage: PostgreSQL is down. Every API route answered 500 (a server fault, and the worker
/// retries a 500 as if it might pass), and failed logins during the outage counted toward the
/// lock-out, so people were locked out once it was over. Now every route answers 503 with
/// `Retry-After`, and no attempt is spent: more logins than the lock-out allows all get 503,
/// none 429.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_database_outage_answers_503_and_locks_nobody_out(pool: PgPool) -> TestResult {
    // A token signed with the tests' secret for a session of the live database.
    let live = TestApp::new(pool);
    let ada = live.user("ada@example.org").await;
    let (_, _, run) = live.team_project_run(&ada, "lab").await;
    // The same app over a database that does not answer (nothing listens on port 9).
    let dead = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(std::time::Duration::from_millis(500))
        .connect_lazy("postgres://spade:spade@127.0.0.1:9/spade")?;
    let app = TestApp::new(dead);
    for path in [
        "/api/v1/teams".to_owned(),
        format!("/api/v1/runs/{run}"),
        format!("/api/v1/runs/{run}/environments"),
        "/api/v1/auth/me".to_owned(),
    ] {
        let r = app.get(&path, &ada).await;
        assert_eq!(
            r.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{path}: {}",
            r.text()
        );
        assert!(!r.header("retry-after").is_empty(), "{path}: Retry-After");
    }
    for i in 0..12 {
        let r = app
            .post(
                "/api/v1/auth/login",
                &Cred::None,
                json!({ "email": "ada@example.org", "password": "wrong password!" }),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "login {i} during the outage: {}",
            r.text()
        );
    }
    Ok(())
}
