//! Stored script in a real browser (issue 36, item 1): a run, its team, an environment's id,
//! skill, hint and code, and a share link carry markup that runs script wherever it lands
//! unescaped. Chromium opens every page that shows them, signed in and through the share link
//! logged out: no script of theirs runs (`window.__pwned` stays unset, no alert), the pages still
//! hydrate under the Content-Security-Policy (the app's own scripts carry its nonce), and the
//! console reports no policy violation of the app's own. Screenshots go to
//! `artifacts/screenshots/`.

use spade_db::ingest::NewEnvironment;
use spade_db::types::{EnvKind, EnvStatus};
use spade_db::{Pool, ingest};

use spade_e2e::{Browser, TestServer, register, seed, user_id, wait_for, wait_hydrated};
use std::time::Instant;

const PASSWORD: &str = "correct horse battery";

/// Runs script in a `<title>`, an element or an attribute, and says so in `window.__pwned`.
const PAYLOAD: &str =
    "x</title><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">";

/// A team, project and run named with [`PAYLOAD`] and one environment carrying it everywhere.
/// Returns (team id, run id, env id).
async fn seed(db: &Pool, owner: i64) -> anyhow::Result<(i64, i64, String)> {
    let (team_scope, project) = seed::team_and_project(db, owner, PAYLOAD, PAYLOAD).await?;
    let config = seed::demo_config(3, 0.2)?;
    let scope = seed::run_in(db, &team_scope, owner, project, PAYLOAD, &config, 3).await?;
    let env_id = "e<script>window.__pwned=3</script>";
    let mut b = ingest::begin(db, &scope).await?;
    b.run_started("e2e", 10).await?;
    b.metrics(1, 1.0, &["regret_mean".to_owned()], &[0.5])
        .await?;
    b.environment(&NewEnvironment {
        env_id,
        step: 1,
        skill: PAYLOAD,
        kind: EnvKind::Game,
        status: EnvStatus::Accepted,
        rejection_reason: None,
        rejection_message: None,
        code: &format!("# {PAYLOAD}\nclass Env:\n    s = '{PAYLOAD}'\n"),
        hint: Some(PAYLOAD),
        parent_env_id: None,
        regret: Some(0.5),
        win_rate_hint: Some(0.75),
        win_rate_no_hint: Some(0.25),
        designer_reward: Some(0.5),
        reward_levels: Some(2),
        attempts: 1,
    })
    .await?;
    b.commit().await?;
    Ok((team_scope.team_id(), scope.run_id(), env_id.to_owned()))
}

/// Fails when the page ran the payload or lost its own scripts to the policy.
async fn check_page(c: &fantoccini::Client, what: &str) -> anyhow::Result<()> {
    let since = Instant::now();
    wait_hydrated(c, since)
        .await
        .map_err(|e| anyhow::anyhow!("{what}: {e} (the policy blocked the app's own scripts?)"))?;
    let pwned = c
        .execute(
            "return window.__pwned === undefined ? null : window.__pwned;",
            vec![],
        )
        .await?;
    anyhow::ensure!(
        pwned.is_null(),
        "{what}: the payload ran (window.__pwned = {pwned})"
    );
    for (level, message) in spade_e2e::console_messages(c).await? {
        anyhow::ensure!(
            !(level == "SEVERE"
                && message.contains("Content Security Policy")
                && !message.contains("__pwned")),
            "{what}: the policy refused something of the app's own: {message}"
        );
    }
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn stored_script_never_runs_on_any_page(pool: Pool) -> anyhow::Result<()> {
    let server = TestServer::start(pool.clone()).await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    c.set_window_size(1280, 1400).await?;
    register(&c, &server, "Mallory", "mallory@example.org", PASSWORD).await?;
    let owner = user_id(&pool, "mallory@example.org").await?;
    let (team, run, env_id) = seed(&pool, owner).await?;
    let env_path: String = url::form_urlencoded::byte_serialize(env_id.as_bytes())
        .collect::<String>()
        .replace('+', "%20");
    for (path, shot) in [
        (format!("/runs?team={team}"), "markup-runs"),
        (format!("/runs/{run}"), "markup-run"),
        (format!("/runs/{run}/environments"), "markup-environments"),
        (
            format!("/runs/{run}/environments/{env_path}"),
            "markup-environment",
        ),
        (format!("/compare?run={run}"), "markup-compare"),
        ("/teams".to_owned(), "markup-teams"),
    ] {
        c.goto(&format!("{}{path}", server.url)).await?;
        wait_for(&c, "main").await?;
        check_page(&c, &path).await?;
        browser.screenshot(shot).await?;
        if shot == "markup-run" {
            // The name is in the title as the text it is.
            let title = c.title().await?;
            anyhow::ensure!(
                title.starts_with(PAYLOAD),
                "the run page's title: {title:?}"
            );
        }
    }

    // The share page, logged out: the link made on the run page, opened by a second browser.
    c.goto(&format!("{}/runs/{run}", server.url)).await?;
    wait_for(&c, "#share-create").await?;
    spade_e2e::fill(&c, "share-label", PAYLOAD).await?;
    spade_e2e::click(&c, "#share-create").await?;
    wait_for(&c, "#share-url").await?;
    let url = c
        .find(fantoccini::Locator::Id("share-url"))
        .await?
        .prop("value")
        .await?
        .unwrap_or_default();
    check_page(&c, "the run page with its share links").await?;
    let mut guest = Browser::start().await?;
    let g = guest.client.clone();
    g.set_window_size(1280, 1400).await?;
    g.goto(&url).await?;
    wait_for(&g, "main").await?;
    check_page(&g, "the share page").await?;
    guest.screenshot("markup-share").await?;
    guest.close().await?;
    browser.close().await?;
    Ok(())
}
