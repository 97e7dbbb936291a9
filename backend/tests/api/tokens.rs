//! Issue 43: API tokens for scripts. What a token promises, each written as the attack it
//! refuses: it stays inside its team (another team's runs do not exist for it), never does
//! more than its role or its member's role now, cannot act as a person (teams, invitations,
//! tokens, logout), and stops working at once when revoked, expired, or its member leaves,
//! also for requests racing the revocation. A viewer cannot make one.

use crate::support::{Cred, Resp, TestApp, TestResult};
use axum::http::{Method, StatusCode};
use serde_json::json;

async fn make_token(app: &TestApp, who: &Cred, team: i64, body: serde_json::Value) -> Resp {
    app.post(&format!("/api/v1/teams/{team}/tokens"), who, body)
        .await
}

/// A new token of `who` in `team` with `role`: (its id, a bearer credential).
async fn token(app: &TestApp, who: &Cred, team: i64, role: &str) -> (i64, Cred) {
    let r = make_token(app, who, team, json!({"name": "ci script", "role": role})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let t = r.json()["token"].as_str().unwrap_or_default().to_owned();
    assert!(t.starts_with("spt_"), "{}", r.text());
    (r.json()["id"].as_i64().unwrap_or(-1), Cred::Bearer(t))
}

/// A member `email` of `team` with `role`, logged in as an API client.
async fn member(app: &TestApp, owner: &Cred, team: i64, email: &str, role: &str) -> Cred {
    app.register(email).await;
    let joined = app.join(owner, team, email, role).await;
    assert_eq!(joined.status, StatusCode::OK, "{}", joined.text());
    Cred::Bearer(app.login_api(email).await.0)
}

async fn patch_run(app: &TestApp, run: i64, who: &Cred) -> Resp {
    app.call(
        Method::PATCH,
        &format!("/api/v1/runs/{run}"),
        who,
        Some(json!({"tags": ["from-a-script"]})),
    )
    .await
}

/// What launching a run in `project` and deleting `run` answer to `who`.
async fn launch_and_delete(app: &TestApp, who: &Cred, project: i64, run: i64) -> [StatusCode; 2] {
    let body = json!({"name": "x", "config_toml": crate::support::tiny_toml()});
    let launch = app
        .post(&format!("/api/v1/projects/{project}/runs"), who, body)
        .await;
    let delete = app
        .call(Method::DELETE, &format!("/api/v1/runs/{run}"), who, None)
        .await;
    [launch.status, delete.status]
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_token_reads_only_its_own_team_and_is_refused_at_once_when_revoked(
    pool: sqlx::PgPool,
) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (lab, lab_project, lab_run) = app.team_project_run(&ada, "lab").await;
    let (other, other_project, other_run) = app.team_project_run(&ada, "other").await;
    let (id, tok) = token(&app, &ada, lab, "viewer").await;

    // The list never shows the token again, only what it is.
    let listed = app.get(&format!("/api/v1/teams/{lab}/tokens"), &ada).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
    assert_eq!(listed.json()[0]["id"], id);
    assert_eq!(listed.json()[0]["role"], "viewer");
    assert!(listed.json()[0].get("token").is_none(), "{}", listed.text());
    assert!(!listed.text().contains("spt_"), "{}", listed.text());

    // Inside its team it reads; its teams are that one, at its role.
    let teams = app.get("/api/v1/teams", &tok).await;
    assert_eq!(
        teams.json(),
        json!([{
            "id": lab, "name": "lab", "role": "viewer",
            "created_at": teams.json()[0]["created_at"].clone()
        }])
    );
    assert_eq!(
        app.get(&format!("/api/v1/runs/{lab_run}"), &tok)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        app.get(&format!("/api/v1/teams/{lab}/runs"), &tok)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        app.get(&format!("/api/v1/teams/{lab}/projects"), &tok)
            .await
            .status,
        StatusCode::OK
    );

    // Its member's other team does not exist for it, read or write.
    for path in [
        format!("/api/v1/runs/{other_run}"),
        format!("/api/v1/runs/{other_run}/metrics"),
        format!("/api/v1/runs/{other_run}/log.txt"),
        format!("/api/v1/teams/{other}/runs"),
        format!("/api/v1/teams/{other}/projects"),
        format!("/api/v1/teams/{other}/members"),
    ] {
        let r = app.get(&path, &tok).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}: {}", r.text());
    }
    assert_eq!(
        launch_and_delete(&app, &tok, other_project, other_run).await,
        [StatusCode::NOT_FOUND; 2]
    );

    // A viewer token changes nothing, though its member is the owner.
    assert_eq!(
        patch_run(&app, lab_run, &tok).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        launch_and_delete(&app, &tok, lab_project, lab_run).await,
        [StatusCode::FORBIDDEN; 2]
    );
    let r = app
        .post(
            &format!("/api/v1/teams/{lab}/projects"),
            &tok,
            json!({"name": "q"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());

    // Revoked: refused from the very next request, by every request racing it afterwards.
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/teams/{lab}/tokens/{id}"),
            &ada,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.json()["revoked_at"].is_string(), "{}", r.text());
    let path = format!("/api/v1/runs/{lab_run}");
    let after = futures_util::future::join_all((0..8).map(|_| app.get(&path, &tok))).await;
    for r in after {
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
        assert_eq!(r.code(), "invalid_token");
    }
    // The owner still reads, and the list shows it revoked.
    assert_eq!(app.get(&path, &ada).await.status, StatusCode::OK);
    let listed = app.get(&format!("/api/v1/teams/{lab}/tokens"), &ada).await;
    assert!(
        listed.json()[0]["revoked_at"].is_string(),
        "{}",
        listed.text()
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_editor_token_changes_runs_but_never_more_than_its_member_can_now(
    pool: sqlx::PgPool,
) -> TestResult {
    let app = TestApp::new(pool.clone());
    let ada = app.user("ada@example.org").await;
    let (lab, project, run) = app.team_project_run(&ada, "lab").await;
    let bob = member(&app, &ada, lab, "bob@example.org", "editor").await;
    let (token_id, tok) = token(&app, &bob, lab, "editor").await;

    let r = patch_run(&app, run, &tok).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let made = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &tok,
            json!({"name": "scripted", "config_toml": crate::support::tiny_toml()}),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text());
    // The audit log names the token behind each change it made, and no token behind the
    // member's own changes.
    let tokens_named: Vec<(String, Option<i64>)> = sqlx::query_as(
        "SELECT action, (detail->>'api_token')::bigint FROM audit_log
         WHERE action IN ('run.update', 'run.create', 'team.create') ORDER BY id",
    )
    .fetch_all(&pool)
    .await?;
    assert_eq!(
        tokens_named,
        vec![
            ("team.create".to_owned(), None),
            ("run.create".to_owned(), None),
            ("run.update".to_owned(), Some(token_id)),
            ("run.create".to_owned(), Some(token_id)),
        ]
    );
    // Owners' work stays with owners: an editor token invites nobody and re-roles nobody.
    let r = app
        .post(
            &format!("/api/v1/teams/{lab}/invitations"),
            &tok,
            json!({"email": "eve@example.org", "role": "owner"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
    let r = app
        .call(
            Method::PUT,
            &format!("/api/v1/teams/{lab}/members"),
            &tok,
            Some(json!({"email": "bob@example.org", "role": "owner"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());

    // Bob demoted to viewer: his editor token is a viewer token from the next request.
    let r = app
        .call(
            Method::PUT,
            &format!("/api/v1/teams/{lab}/members"),
            &ada,
            Some(json!({"email": "bob@example.org", "role": "viewer"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        patch_run(&app, run, &tok).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.get("/api/v1/teams", &tok).await.json()[0]["role"],
        "viewer"
    );

    // Bob removed: the token is refused altogether.
    let bob_id = app.get("/api/v1/auth/me", &bob).await.json()["id"]
        .as_i64()
        .unwrap_or(-1);
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/teams/{lab}/members/{bob_id}"),
            &ada,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text());
    let r = app.get(&format!("/api/v1/runs/{run}"), &tok).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn viewers_make_no_token_and_nobody_makes_one_above_their_role(
    pool: sqlx::PgPool,
) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (lab, _, _) = app.team_project_run(&ada, "lab").await;
    let vic = member(&app, &ada, lab, "vic@example.org", "viewer").await;
    let bob = member(&app, &ada, lab, "bob@example.org", "editor").await;

    let r = make_token(&app, &vic, lab, json!({"name": "mine"})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
    assert_eq!(r.code(), "insufficient_role");
    make_token(&app, &bob, lab, json!({"name": "x", "role": "owner"}))
        .await
        .assert_refused("role", "viewer or editor", "an owner token");
    make_token(&app, &ada, lab, json!({"name": "x", "role": "owner"}))
        .await
        .assert_refused("role", "viewer or editor", "an owner token from an owner");
    make_token(&app, &bob, lab, json!({"name": "  "}))
        .await
        .assert_refused("name", "1 to 100", "a blank name");
    make_token(&app, &bob, lab, json!({"name": "x", "expires_in_days": 0}))
        .await
        .assert_refused("expires_in_days", "1 to 365", "no lifetime");
    let r = make_token(&app, &bob, lab, json!({"name": "x", "scopes": ["all"]})).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    assert!(r.message().contains("scopes"), "{}", r.text());
    // Another team's id is 404 (not told apart from a missing team).
    let r = make_token(&app, &bob, lab + 1000, json!({"name": "x"})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    // Nothing was made by any of the refusals.
    let listed = app.get(&format!("/api/v1/teams/{lab}/tokens"), &ada).await;
    assert_eq!(listed.json(), json!([]), "{}", listed.text());
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_token_cannot_act_as_a_person(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (lab, _, _) = app.team_project_run(&ada, "lab").await;
    let (id, tok) = token(&app, &ada, lab, "editor").await;
    let invited = app
        .post(
            &format!("/api/v1/teams/{lab}/invitations"),
            &ada,
            json!({"email": "ada@example.org", "role": "viewer"}),
        )
        .await;
    let inv = invited.json()["id"].as_i64().unwrap_or(-1);

    let attempts = [
        (
            Method::POST,
            "/api/v1/teams".to_owned(),
            Some(json!({"name": "mine"})),
        ),
        (
            Method::POST,
            format!("/api/v1/teams/{lab}/tokens"),
            Some(json!({"name": "child"})),
        ),
        (Method::GET, format!("/api/v1/teams/{lab}/tokens"), None),
        (
            Method::DELETE,
            format!("/api/v1/teams/{lab}/tokens/{id}"),
            None,
        ),
        (Method::GET, "/api/v1/invitations".to_owned(), None),
        (
            Method::POST,
            format!("/api/v1/invitations/{inv}/accept"),
            Some(json!({"code": "x"})),
        ),
        (Method::POST, "/api/v1/auth/logout".to_owned(), None),
    ];
    for (method, path, body) in attempts {
        let r = app.call(method.clone(), &path, &tok, body).await;
        assert_eq!(
            r.status,
            StatusCode::FORBIDDEN,
            "{method} {path}: {}",
            r.text()
        );
        assert_eq!(r.code(), "api_token", "{method} {path}: {}", r.text());
    }
    // Still one token, still live, and no team was made.
    assert_eq!(
        app.get("/api/v1/teams", &ada)
            .await
            .json()
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let listed = app.get(&format!("/api/v1/teams/{lab}/tokens"), &ada).await;
    assert_eq!(listed.json().as_array().map(Vec::len), Some(1));
    assert!(listed.json()[0]["revoked_at"].is_null());
    assert_eq!(app.get("/api/v1/teams", &tok).await.status, StatusCode::OK);
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn owners_revoke_any_token_of_their_team_and_members_only_their_own(
    pool: sqlx::PgPool,
) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (lab, _, run) = app.team_project_run(&ada, "lab").await;
    let bob = member(&app, &ada, lab, "bob@example.org", "editor").await;
    let cyd = member(&app, &ada, lab, "cyd@example.org", "editor").await;
    let (ada_id, _) = token(&app, &ada, lab, "viewer").await;
    let (bob_id, bob_tok) = token(&app, &bob, lab, "viewer").await;
    let (cyd_id, cyd_tok) = token(&app, &cyd, lab, "viewer").await;

    let ids = |r: Resp| -> Vec<i64> {
        r.json()
            .as_array()
            .map(|a| a.iter().filter_map(|t| t["id"].as_i64()).collect())
            .unwrap_or_default()
    };
    let path = format!("/api/v1/teams/{lab}/tokens");
    assert_eq!(
        ids(app.get(&path, &ada).await),
        vec![cyd_id, bob_id, ada_id]
    );
    assert_eq!(ids(app.get(&path, &bob).await), vec![bob_id]);

    // Bob cannot revoke another member's token (it is not there for him), nor the owner's.
    for id in [cyd_id, ada_id] {
        let r = app
            .call(Method::DELETE, &format!("{path}/{id}"), &bob, None)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    }
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &cyd_tok)
            .await
            .status,
        StatusCode::OK
    );
    // His own he can; the owner can revoke anyone's.
    let r = app
        .call(Method::DELETE, &format!("{path}/{bob_id}"), &bob, None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = app
        .call(Method::DELETE, &format!("{path}/{cyd_id}"), &ada, None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    for t in [&bob_tok, &cyd_tok] {
        let r = app.get(&format!("/api/v1/runs/{run}"), t).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
    }
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn expired_and_forged_tokens_are_refused(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool.clone());
    let ada = app.user("ada@example.org").await;
    let (lab, _, run) = app.team_project_run(&ada, "lab").await;
    let r = make_token(
        &app,
        &ada,
        lab,
        json!({"name": "a day", "expires_in_days": 1}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    assert!(r.json()["expires_at"].is_string(), "{}", r.text());
    let tok = Cred::Bearer(r.json()["token"].as_str().unwrap_or_default().to_owned());
    let path = format!("/api/v1/runs/{run}");
    assert_eq!(app.get(&path, &tok).await.status, StatusCode::OK);
    let used = app.get(&format!("/api/v1/teams/{lab}/tokens"), &ada).await;
    assert!(
        used.json()[0]["last_used_at"].is_string(),
        "{}",
        used.text()
    );

    sqlx::query("UPDATE api_tokens SET expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await?;
    assert_eq!(app.get(&path, &tok).await.status, StatusCode::UNAUTHORIZED);
    let listed = app.get(&format!("/api/v1/teams/{lab}/tokens"), &ada).await;
    assert_eq!(listed.json()[0]["expired"], true, "{}", listed.text());

    let Cred::Bearer(real) = &tok else {
        return Err("a bearer credential".into());
    };
    let mut flipped = real.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let forged = [
        "spt_".to_owned(),
        "spt_short".to_owned(),
        format!("{real}x"),
        String::from_utf8(flipped)?,
        format!("spt_{}", "A".repeat(43)),
    ];
    for f in forged {
        let r = app.get(&path, &Cred::Bearer(f.clone())).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{f}: {}", r.text());
        assert_eq!(r.code(), "invalid_token", "{f}");
    }
    Ok(())
}
