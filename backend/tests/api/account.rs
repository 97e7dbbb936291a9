//! Issue 43: account settings (name, password, sessions). Each promise written as the attack it
//! refuses: a wrong current password changes nothing, a changed password signs out every other
//! session at once, two changes racing cannot both win, a session ends only its own user's
//! sessions, and an API token manages no account.

use crate::support::{Cred, PASSWORD, Resp, TestApp, TestResult};
use axum::http::{Method, StatusCode};
use serde_json::json;

async fn login(app: &TestApp, email: &str, password: &str) -> Resp {
    app.post(
        "/api/v1/auth/login",
        &Cred::None,
        json!({ "email": email, "password": password, "api_client": true }),
    )
    .await
}

fn bearer(r: &Resp) -> Cred {
    Cred::Bearer(
        r.json()["access_token"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

async fn change(app: &TestApp, who: &Cred, current: &str, new: &str) -> Resp {
    app.post(
        "/api/v1/auth/password",
        who,
        json!({ "current_password": current, "new_password": new }),
    )
    .await
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_person_renames_themself_and_bad_names_change_nothing(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let patch = |body| app.call(Method::PATCH, "/api/v1/auth/me", &ada, Some(body));
    let r = patch(json!({"display_name": "  Ada Lovelace "})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["display_name"], "Ada Lovelace");
    patch(json!({"display_name": " "})).await.assert_refused(
        "display_name",
        "1 to 100",
        "a blank name",
    );
    patch(json!({"display_name": "a\nb"})).await.assert_refused(
        "display_name",
        "no line breaks",
        "a name with a line break",
    );
    let r = patch(json!({"display_name": "x", "is_admin": true})).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    assert!(r.message().contains("is_admin"), "{}", r.text());
    let me = app.get("/api/v1/auth/me", &ada).await.json();
    assert_eq!(me["display_name"], "Ada Lovelace");
    assert_eq!(me["is_admin"], true, "the first account, unchanged");
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_new_password_needs_the_old_one_and_signs_out_every_other_session(
    pool: sqlx::PgPool,
) -> TestResult {
    let app = TestApp::new(pool);
    app.register("ada@example.org").await;
    let here = bearer(&login(&app, "ada@example.org", PASSWORD).await);
    let laptop = login(&app, "ada@example.org", PASSWORD).await;
    let laptop_refresh = laptop.json()["refresh_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let laptop = bearer(&laptop);

    let r = change(&app, &here, "not my password", "a new long password").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
    assert_eq!(r.code(), "wrong_password");
    change(&app, &here, PASSWORD, "short").await.assert_refused(
        "new_password",
        "8 to 256",
        "too short",
    );
    change(&app, &here, PASSWORD, PASSWORD)
        .await
        .assert_refused("new_password", "differ", "the same password");
    // None of the refusals changed anything: the laptop still works.
    assert_eq!(
        app.get("/api/v1/auth/me", &laptop).await.status,
        StatusCode::OK
    );

    let r = change(&app, &here, PASSWORD, "a new long password").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["sessions_ended"], 1);
    // The other session is over, its access and its refresh token alike; this one goes on.
    let r = app.get("/api/v1/auth/me", &laptop).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
    assert_eq!(
        app.refresh_api(&laptop_refresh).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        app.get("/api/v1/auth/me", &here).await.status,
        StatusCode::OK
    );
    assert_eq!(
        login(&app, "ada@example.org", PASSWORD).await.status,
        StatusCode::UNAUTHORIZED,
        "the old password no longer logs in"
    );
    assert_eq!(
        login(&app, "ada@example.org", "a new long password")
            .await
            .status,
        StatusCode::OK
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn two_password_changes_racing_cannot_both_win(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("ada@example.org").await;
    let a = bearer(&login(&app, "ada@example.org", PASSWORD).await);
    let b = bearer(&login(&app, "ada@example.org", PASSWORD).await);
    let (ra, rb) = tokio::join!(
        change(&app, &a, PASSWORD, "password of a"),
        change(&app, &b, PASSWORD, "password of b"),
    );
    let won: Vec<&str> = [(&ra, "password of a"), (&rb, "password of b")]
        .iter()
        .filter(|(r, _)| r.status == StatusCode::OK)
        .map(|(_, p)| *p)
        .collect();
    assert_eq!(won.len(), 1, "a: {} / b: {}", ra.text(), rb.text());
    let lost = if ra.status == StatusCode::OK {
        &rb
    } else {
        &ra
    };
    // Racing, it finds the password changed under it (409); run after the winner, its current
    // password is no longer right (403). Either way it changed nothing.
    assert!(
        [StatusCode::CONFLICT, StatusCode::FORBIDDEN].contains(&lost.status),
        "{}",
        lost.text()
    );
    let loser = if won[0] == "password of a" {
        "password of b"
    } else {
        "password of a"
    };
    assert_eq!(
        login(&app, "ada@example.org", won[0]).await.status,
        StatusCode::OK
    );
    assert_eq!(
        login(&app, "ada@example.org", loser).await.status,
        StatusCode::UNAUTHORIZED
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_person_lists_and_ends_only_their_own_sessions(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("ada@example.org").await;
    app.register("bob@example.org").await;
    let here = bearer(&login(&app, "ada@example.org", PASSWORD).await);
    let phone = bearer(&login(&app, "ada@example.org", PASSWORD).await);
    let bob = bearer(&login(&app, "bob@example.org", PASSWORD).await);

    let listed = app.get("/api/v1/auth/sessions", &here).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
    let sessions = listed.json().as_array().cloned().unwrap_or_default();
    assert_eq!(sessions.len(), 2, "{}", listed.text());
    assert_eq!(
        sessions.iter().filter(|s| s["current"] == true).count(),
        1,
        "{}",
        listed.text()
    );
    let other = sessions
        .iter()
        .find(|s| s["current"] == false)
        .and_then(|s| s["id"].as_i64())
        .unwrap_or(-1);
    let bobs = app.get("/api/v1/auth/sessions", &bob).await.json()[0]["id"]
        .as_i64()
        .unwrap_or(-1);

    // Bob's session is not Ada's to end: 404, and Bob goes on.
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/auth/sessions/{bobs}"),
            &here,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    assert_eq!(
        app.get("/api/v1/auth/me", &bob).await.status,
        StatusCode::OK
    );
    // Her phone's she can end: refused from the next request.
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/auth/sessions/{other}"),
            &here,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text());
    assert_eq!(
        app.get("/api/v1/auth/me", &phone).await.status,
        StatusCode::UNAUTHORIZED
    );
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/auth/sessions/{other}"),
            &here,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "ended once: {}", r.text());
    assert_eq!(
        app.get("/api/v1/auth/sessions", &here)
            .await
            .json()
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_api_token_manages_no_account(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (team, _, _) = app.team_project_run(&ada, "lab").await;
    let made = app
        .post(
            &format!("/api/v1/teams/{team}/tokens"),
            &ada,
            json!({"name": "ci", "role": "editor"}),
        )
        .await;
    let tok = Cred::Bearer(made.json()["token"].as_str().unwrap_or_default().to_owned());
    let sid = app.get("/api/v1/auth/sessions", &ada).await.json()[0]["id"]
        .as_i64()
        .unwrap_or(-1);
    let attempts = [
        (
            Method::PATCH,
            "/api/v1/auth/me".to_owned(),
            Some(json!({"display_name": "pwned"})),
        ),
        (
            Method::POST,
            "/api/v1/auth/password".to_owned(),
            Some(json!({"current_password": PASSWORD, "new_password": "taken over!"})),
        ),
        (Method::GET, "/api/v1/auth/sessions".to_owned(), None),
        (Method::DELETE, format!("/api/v1/auth/sessions/{sid}"), None),
        (Method::GET, "/api/v1/chart-views".to_owned(), None),
        (
            Method::POST,
            "/api/v1/chart-views".to_owned(),
            Some(json!({"name": "from a script"})),
        ),
    ];
    for (method, path, body) in attempts {
        let r = app.call(method.clone(), &path, &tok, body).await;
        assert_eq!(
            r.status,
            StatusCode::FORBIDDEN,
            "{method} {path}: {}",
            r.text()
        );
        assert_eq!(r.code(), "api_token", "{method} {path}");
    }
    assert_eq!(
        app.get("/api/v1/auth/me", &ada).await.json()["display_name"],
        "ada@example.org"
    );
    assert_eq!(
        login(&app, "ada@example.org", PASSWORD).await.status,
        StatusCode::OK
    );
    Ok(())
}

/// The account page and the teams page's token forms, as a browser without JavaScript uses
/// them: each form changes through the API's functions, a refused one says which field, and a
/// new token is shown once on the page its form redirects to.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_account_and_token_forms_work_without_javascript(pool: sqlx::PgPool) -> TestResult {
    use crate::pages::{FORM, browser_session, post_form};
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (team, _, run) = app.team_project_run(&ada, "lab").await;
    let (access, csrf) = browser_session(&app, "ada@example.org").await;
    let page = |path: &'static str| {
        let access = access.clone();
        let app = &app;
        async move {
            let r = app.get(path, &Cred::Cookie { access, csrf: None }).await;
            assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text());
            r.text()
        }
    };
    let html = page("/account").await;
    assert!(html.contains("Signed in as ada@example.org"), "{html}");
    assert!(html.contains("this session"), "{html}");
    assert_eq!(
        html.matches("/account/sessions/").count(),
        2,
        "two sessions: {html}"
    );

    let location = |r: &Resp| r.header("location");
    let r = post_form(
        &app,
        "/account/name",
        &access,
        FORM,
        &format!("csrf={csrf}&display_name=Ada+L"),
    )
    .await;
    assert!(
        location(&r).starts_with("/account?notice="),
        "{}",
        location(&r)
    );
    assert_eq!(
        app.get("/api/v1/auth/me", &ada).await.json()["display_name"],
        "Ada L"
    );

    let body = format!(
        "csrf={csrf}&current_password={}&new_password=brand+new+pass&confirm_password=brand+new+typo",
        PASSWORD.replace(' ', "+")
    );
    let r = post_form(&app, "/account/password", &access, FORM, &body).await;
    assert!(
        location(&r).contains("error=") && location(&r).contains("confirm_password"),
        "{}",
        location(&r)
    );
    let body = format!(
        "csrf={csrf}&current_password={}&new_password=brand+new+pass&confirm_password=brand+new+pass",
        PASSWORD.replace(' ', "+")
    );
    let r = post_form(&app, "/account/password", &access, FORM, &body).await;
    assert!(
        location(&r).contains("notice=") && location(&r).contains("1%20other"),
        "{}",
        location(&r)
    );
    assert_eq!(
        app.get("/api/v1/auth/me", &ada).await.status,
        StatusCode::UNAUTHORIZED,
        "the API client's session was the other one"
    );

    // A token from the teams page: the redirect carries it in an HttpOnly cookie, not the URL.
    let body = format!("csrf={csrf}&name=nightly&role=viewer&expires_in_days=");
    let r = post_form(&app, &format!("/teams/{team}/tokens"), &access, FORM, &body).await;
    assert!(
        location(&r).starts_with("/teams?notice="),
        "{}",
        location(&r)
    );
    assert!(!location(&r).contains("spt_"), "{}", location(&r));
    let cookie = r
        .cookie(&format!("spade_new_token_{team}"))
        .unwrap_or_default();
    let (id, token) = cookie.split_once(':').ok_or("an ID:TOKEN cookie")?;
    assert!(token.starts_with("spt_"), "{cookie}");
    let req = axum::http::Request::builder()
        .uri("/teams")
        .header(
            axum::http::header::COOKIE,
            format!("spade_access={access}; spade_new_token_{team}={cookie}"),
        )
        .body(axum::body::Body::empty())?;
    let shown = app.send(req).await;
    assert!(
        shown.text().contains(&format!("value=\"{token}\"")),
        "{}",
        shown.text()
    );
    assert!(
        shown
            .header("set-cookie")
            .contains(&format!("spade_new_token_{team}=;")),
        "the page clears it: {:?}",
        shown.headers
    );
    let tok = Cred::Bearer(token.to_owned());
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &tok).await.status,
        StatusCode::OK
    );
    let r = post_form(
        &app,
        &format!("/teams/{team}/tokens/{id}/revoke"),
        &access,
        FORM,
        &format!("csrf={csrf}"),
    )
    .await;
    assert!(location(&r).contains("notice="), "{}", location(&r));
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &tok).await.status,
        StatusCode::UNAUTHORIZED
    );
    let html = page("/teams").await;
    assert!(html.contains("revoked "), "{html}");
    assert!(!html.contains(token), "never shown again");
    Ok(())
}

/// Saved chart views are one person's: saving a name again replaces it, bad settings are refused
/// naming the field, another person neither sees nor deletes them, and the run page offers
/// them as links that open it with their settings.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn chart_views_are_saved_replaced_offered_and_private(pool: sqlx::PgPool) -> TestResult {
    use crate::pages::{FORM, browser_session, post_form};
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let bob = app.user("bob@example.org").await;
    let (_, _, run) = app.team_project_run(&ada, "lab").await;
    let save = |who, body| app.post("/api/v1/chart-views", who, body);

    let r = save(
        &ada,
        json!({"name": "smooth regret", "smoothing": 0.6, "find": "regret"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let first = r.json()["id"].as_i64().unwrap_or(-1);
    assert_eq!(r.json()["x_axis"], "step");
    let r = save(
        &ada,
        json!({"name": "smooth regret", "smoothing": 0.8, "x_axis": "time", "log_y": true}),
    )
    .await;
    assert_eq!(
        r.json()["id"],
        first,
        "the same name is replaced: {}",
        r.text()
    );
    assert_eq!(r.json()["smoothing"], 0.8);
    for (body, field) in [
        (json!({"name": ""}), "name"),
        (json!({"name": "x", "smoothing": 1.5}), "smoothing"),
        (json!({"name": "x", "x_axis": "wallclock"}), "x_axis"),
        (json!({"name": "x", "find": "y".repeat(101)}), "find"),
    ] {
        let r = save(&ada, body).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}: {}",
            r.text()
        );
        assert!(r.message().contains(field), "{field}: {}", r.text());
    }
    let mine = app.get("/api/v1/chart-views", &ada).await.json();
    assert_eq!(mine.as_array().map(Vec::len), Some(1), "{mine}");

    // Bob sees none of Ada's and cannot delete hers.
    assert_eq!(app.get("/api/v1/chart-views", &bob).await.json(), json!([]));
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/chart-views/{first}"),
            &bob,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());

    // The run page offers it as a link with its settings; the save form goes back there.
    let (access, csrf) = browser_session(&app, "ada@example.org").await;
    let resp = app
        .get(
            &format!("/runs/{run}"),
            &Cred::Cookie {
                access: access.clone(),
                csrf: None,
            },
        )
        .await;
    let page = resp.text();
    // Once seen failing under a full run's load with an empty body: the status and where it
    // pointed say what the server did next time.
    assert!(
        page.contains(&format!(
            "href=\"/runs/{run}?smooth=0.80&amp;x=time&amp;log=1\""
        )),
        "status {} location {:?}: {page}",
        resp.status,
        resp.header("location")
    );
    let body = format!(
        "csrf={csrf}&name=loss+only&smoothing=0.3&x_axis=step&log_y=&find=loss&back=%2Fruns%2F{run}"
    );
    let r = post_form(&app, "/chart-views/save", &access, FORM, &body).await;
    assert_eq!(
        r.header("location"),
        format!("/runs/{run}?smooth=0.30&find=loss#chart-views")
    );
    let body = format!("csrf={csrf}&name=bad&smoothing=lots&back=%2Fruns%2F{run}");
    let r = post_form(&app, "/chart-views/save", &access, FORM, &body).await;
    assert!(
        r.header("location")
            .starts_with(&format!("/runs/{run}?error=")),
        "{}",
        r.header("location")
    );
    // Off-site `back` values end on the runs list.
    let body = format!("csrf={csrf}&name=x&back=https%3A%2F%2Fevil.example");
    let r = post_form(&app, "/chart-views/save", &access, FORM, &body).await;
    assert_eq!(r.header("location"), "/runs#chart-views");
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/chart-views/{first}"),
            &ada,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let names: Vec<String> = app
        .get("/api/v1/chart-views", &ada)
        .await
        .json()
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, vec!["loss only".to_owned(), "x".to_owned()]);
    // The account page's Delete form: the person's own view goes, another's id is refused.
    let views = app.get("/api/v1/chart-views", &ada).await.json();
    let x = views[1]["id"].as_i64().unwrap_or(-1);
    let (b_access, b_csrf) = browser_session(&app, "bob@example.org").await;
    let path = format!("/chart-views/{x}/delete");
    let r = post_form(&app, &path, &b_access, FORM, &format!("csrf={b_csrf}")).await;
    assert!(
        r.header("location").starts_with("/account?error="),
        "{}",
        r.header("location")
    );
    let r = post_form(&app, &path, &access, FORM, &format!("csrf={csrf}")).await;
    assert!(
        r.header("location").starts_with("/account?notice="),
        "{}",
        r.header("location")
    );
    let left = app.get("/api/v1/chart-views", &ada).await.json();
    assert_eq!(left.as_array().map(Vec::len), Some(1), "{left}");
    Ok(())
}
