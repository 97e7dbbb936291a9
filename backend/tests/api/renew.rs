//! Issue 43: after the 15-minute access token expired, pages flashed "Log in to continue" and
//! loaded twice (the page's script refreshed, then reloaded). A page now renews the session
//! itself on the first load. Each property as the attack or the mistake it must survive: a
//! dead or forged refresh token renews nothing, the API is never renewed behind a client's
//! back, and two tabs renewing at once keep the session.

use crate::support::*;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use sqlx::PgPool;

/// A browser login: (access, refresh, csrf) cookies.
async fn browser(app: &TestApp, email: &str) -> (String, String, String) {
    let login = app
        .post(
            "/api/v1/auth/login",
            &Cred::None,
            json!({ "email": email, "password": PASSWORD }),
        )
        .await;
    assert_eq!(login.status, StatusCode::OK, "{}", login.text());
    let set = |n: &str| login.cookie(n).unwrap_or_default();
    (set("spade_access"), set("spade_refresh"), set("spade_csrf"))
}

/// `access` with its expiry an hour ago (still signed with the server's key).
fn expired(access: &str) -> Result<String, jsonwebtoken::errors::Error> {
    let mut claims = claims_of(access);
    let now = chrono::Utc::now().timestamp();
    claims["iat"] = json!(now - 7200);
    claims["exp"] = json!(now - 3600);
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET),
    )
}

async fn load(app: &TestApp, path: &str, cookies: &str) -> Resp {
    let req = Request::builder()
        .uri(path)
        .header(header::COOKIE, cookies)
        .body(Body::empty())
        .unwrap_or_default();
    app.send(req).await
}

fn signed_in(r: &Resp) -> bool {
    r.text().contains("class=\"user-menu\"")
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_page_renews_an_expired_session_on_its_first_load(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("ada@example.org").await;
    let (access, refresh, _) = browser(&app, "ada@example.org").await;
    let old = expired(&access)?;

    let page = load(
        &app,
        "/account",
        &format!("spade_access={old}; spade_refresh={refresh}"),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    assert!(signed_in(&page), "rendered for the person: {}", page.text());
    assert!(page.text().contains("Signed in as ada@example.org"));
    let new_access = page.cookie("spade_access").ok_or("a new access cookie")?;
    let new_refresh = page
        .cookie("spade_refresh")
        .ok_or("a rotated refresh cookie")?;
    assert_ne!(new_refresh, refresh, "rotated");
    let me = app
        .get(
            "/api/v1/auth/me",
            &Cred::Cookie {
                access: new_access,
                csrf: None,
            },
        )
        .await;
    assert_eq!(me.status, StatusCode::OK, "the new access cookie works");

    // No access cookie at all (the browser dropped it at its Max-Age): renewed the same way.
    let page = load(&app, "/runs", &format!("spade_refresh={new_refresh}")).await;
    assert!(signed_in(&page), "{}", page.text());

    // The API is not renewed: a client with an expired token is told so and refreshes itself.
    let newest = page.cookie("spade_refresh").ok_or("rotated again")?;
    let api = load(
        &app,
        "/api/v1/auth/me",
        &format!("spade_access={old}; spade_refresh={newest}"),
    )
    .await;
    assert_eq!(api.status, StatusCode::UNAUTHORIZED, "{}", api.text());
    assert_eq!(api.code(), "token_expired");
    assert!(api.cookie("spade_access").is_none());
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_dead_or_forged_refresh_token_renews_nothing(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("ada@example.org").await;
    let (access, refresh, csrf) = browser(&app, "ada@example.org").await;
    let old = expired(&access)?;
    let forged = format!("sprt_{}", "A".repeat(43));
    for cookies in [
        format!("spade_access={old}; spade_refresh={forged}"),
        "spade_refresh=not-a-token".to_owned(),
        format!("spade_access={old}"),
    ] {
        let page = load(&app, "/account", &cookies).await;
        assert!(!signed_in(&page), "{cookies}: {}", page.text());
        assert!(page.cookie("spade_access").is_none(), "{cookies}");
    }
    // Logged out: the real refresh token is dead too.
    let out = app
        .call(
            axum::http::Method::POST,
            "/api/v1/auth/logout",
            &Cred::Cookie {
                access: access.clone(),
                csrf: Some(csrf),
            },
            None,
        )
        .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert!(
        out.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|c| c.starts_with("spade_refresh=;") && c.contains("Path=/;")),
        "logout clears the refresh cookie where it now lives: {:?}",
        out.headers
    );
    let page = load(
        &app,
        "/account",
        &format!("spade_access={old}; spade_refresh={refresh}"),
    )
    .await;
    assert!(!signed_in(&page), "{}", page.text());
    assert!(page.cookie("spade_access").is_none());
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn two_tabs_renewing_at_once_keep_the_session(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    app.register("ada@example.org").await;
    let (access, refresh, _) = browser(&app, "ada@example.org").await;
    let cookies = format!(
        "spade_access={}; spade_refresh={refresh}",
        expired(&access)?
    );
    let (a, b) = tokio::join!(
        load(&app, "/runs", &cookies),
        load(&app, "/teams", &cookies)
    );
    // Status and headers too: a failure seen once under load had an empty body.
    assert!(
        signed_in(&a) && signed_in(&b),
        "/runs {} {:?}: {} / /teams {} {:?}: {}",
        a.status,
        a.headers,
        a.text(),
        b.status,
        b.headers,
        b.text()
    );
    // One of them rotated; the session lives on with its token.
    let current = a
        .cookie("spade_refresh")
        .or_else(|| b.cookie("spade_refresh"))
        .ok_or("one tab got the rotated token")?;
    let again = load(&app, "/account", &format!("spade_refresh={current}")).await;
    assert!(signed_in(&again), "{}", again.text());
    Ok(())
}
