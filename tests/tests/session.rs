//! Sessions in a real browser: access cookies live 15 minutes and refresh cookies 30 days, so
//! a page loaded with its access cookie gone but the refresh cookie there is renewed by the
//! server and shown at once (nobody is sent to the login form every quarter of an hour); a
//! browser without a refresh cookie stays on the login prompt instead of looping.

use fantoccini::Locator;
use spade_e2e::{Browser, TestServer, register, text_of, wait_for};
use std::time::Duration;

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_expired_access_cookie_is_renewed_from_the_refresh_cookie(
    pool: sqlx::PgPool,
) -> anyhow::Result<()> {
    let server = TestServer::start(pool).await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    register(
        &c,
        &server,
        "Sam Session",
        "sam@example.org",
        "correct horse battery",
    )
    .await?;

    // What the browser does when the access cookie's 15 minutes are over: it drops it.
    c.delete_cookie("spade_access").await?;
    c.goto(&format!("{}/runs", server.url)).await?;
    // The server renews the session from the refresh cookie and renders the page for the
    // person on this first load (issue 43: it rendered the login prompt, then the hydrated page
    // refreshed and reloaded itself: a flash and two loads).
    wait_for(&c, "#runs-empty, #runs-table").await?;
    let resumed = c
        .execute(
            "return window.sessionStorage.getItem('spade_resumed_at');",
            vec![],
        )
        .await?;
    assert!(
        resumed.is_null(),
        "the page had to resume the session itself: {resumed}"
    );
    assert!(
        c.get_named_cookie("spade_access").await.is_ok(),
        "a new access cookie was set"
    );
    browser.screenshot("session-renewed").await?;

    // No refresh cookie either (logged out elsewhere, cookies cleared): the prompt stays, and
    // the page does not reload in a loop.
    c.delete_all_cookies().await?;
    c.goto(&format!("{}/runs", server.url)).await?;
    wait_for(&c, ".login-prompt").await?;
    c.execute("window.__stay = 1; return null;", vec![]).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let same = c.execute("return window.__stay || null;", vec![]).await?;
    assert_eq!(same, serde_json::json!(1), "no reload without a session");
    assert!(text_of(&c, "h1").await?.contains("Log in"));
    assert!(c.find(Locator::Css("#runs-table")).await.is_err());
    browser.close().await
}
