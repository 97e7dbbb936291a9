//! Sharing and roles in a real browser: an owner shares a run and a logged-out browser reads it
//! (no action of any kind, and nothing once the link is revoked); an owner adds a second user
//! as a viewer on the teams page, and that viewer sees no cancel button and cannot cancel by
//! forging the form's POST. Each test gets a fresh database (`#[sqlx::test]`); the run is
//! seeded through `spade-db` as a worker would have reported it. Screenshots go to
//! `artifacts/screenshots/`.

use fantoccini::{Client, Locator};
use spade_db::ingest::NewEnvironment;
use spade_db::types::{EnvKind, EnvStatus};
use spade_db::{Pool, RunScope, RunStatus, ingest, runs};
use spade_e2e::{
    Browser, TestServer, click, fill, register, scroll_to, seed, set_theme, text_of, user_id,
    wait_for, wait_for_path,
};

const PASSWORD: &str = "correct horse battery";

/// A team ("lab") and project owned by `owner`, with one running run (as reported by a worker) with curves and two
/// environments. Returns (team id, run id).
async fn seed_run(db: &Pool, owner: i64) -> anyhow::Result<(i64, i64)> {
    let (team_scope, project) = seed::team_and_project(db, owner, "lab", "coin games").await?;
    let config = serde_json::json!({"run": {"steps": 40, "seed": 3}});
    let scope = seed::run_in(db, &team_scope, owner, project, "shared-demo", &config, 3).await?;
    let mut b = ingest::begin(db, &scope).await?;
    b.run_started("e2e", 40).await?;
    let names = ["regret_mean", "learnable_share"]
        .map(String::from)
        .to_vec();
    for step in 0..12i64 {
        let t = step as f64;
        b.metrics(step, 10.0 * t, &names, &[0.05 + 0.01 * t, 0.1 + 0.015 * t])
            .await?;
    }
    b.progress(12, 40, "playing").await?;
    for (env_id, status) in [("e-1", EnvStatus::Accepted), ("e-2", EnvStatus::Rejected)] {
        b.environment(&NewEnvironment {
            env_id,
            step: 4,
            skill: "Optimization",
            kind: EnvKind::Game,
            status,
            rejection_reason: (status == EnvStatus::Rejected).then_some("not_solvable"),
            rejection_message: None,
            code: "class CoinEnv:\n    pass\n",
            hint: None,
            parent_env_id: None,
            regret: Some(0.2),
            win_rate_hint: Some(0.6),
            win_rate_no_hint: Some(0.4),
            designer_reward: Some(0.5),
            reward_levels: Some(2),
            attempts: 1,
        })
        .await?;
    }
    b.commit().await?;
    Ok((team_scope.team_id(), scope.run_id()))
}

/// Whether any element matches `css`.
async fn exists(c: &Client, css: &str) -> anyhow::Result<bool> {
    Ok(!c.find_all(Locator::Css(css)).await?.is_empty())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_shared_link_shows_the_run_to_a_logged_out_browser_until_revoked(
    pool: Pool,
) -> anyhow::Result<()> {
    let server = TestServer::start(pool.clone()).await?;
    let mut owner = Browser::start().await?;
    let c = owner.client.clone();
    c.set_window_size(1280, 1400).await?;
    register(&c, &server, "Olga Owner", "olga@example.org", PASSWORD).await?;
    let (_, run_id) = seed_run(&pool, user_id(&pool, "olga@example.org").await?).await?;

    // The owner creates a labelled link that expires in 7 days on the run page; it is shown
    // once, as a full URL, and the token is nowhere in the address (so not in the history).
    c.goto(&format!("{}/runs/{run_id}", server.url)).await?;
    wait_for(&c, "#share-create").await?;
    fill(&c, "share-label", "for the reviewers").await?;
    c.find(Locator::Css("#share-expiry option[value='7']"))
        .await?
        .click()
        .await?;
    click(&c, "#share-create").await?;
    wait_for(&c, "#share-url").await?;
    let url = c
        .find(Locator::Id("share-url"))
        .await?
        .prop("value")
        .await?
        .unwrap_or_default();
    assert!(
        url.starts_with(&format!("{}/share/sps_", server.url)),
        "{url}"
    );
    let token = url.rsplit('/').next().unwrap_or_default().to_owned();
    let here = c.current_url().await?;
    assert_eq!(here.path(), format!("/runs/{run_id}"));
    assert!(
        !here.as_str().contains(&token) && !here.as_str().contains("share="),
        "the token is in the address: {here}"
    );
    let cookies = c.execute("return document.cookie", vec![]).await?;
    assert!(
        !cookies.as_str().unwrap_or_default().contains(&token),
        "the token's cookie is readable by scripts: {cookies}"
    );
    let table = text_of(&c, "table.shares").await?;
    assert!(
        table.contains("active")
            && table.contains("for the reviewers")
            && table.contains("expires 20"),
        "{table}"
    );
    // The copy button (a script's) says what happened.
    spade_e2e::wait_hydrated(&c, std::time::Instant::now()).await?;
    click(&c, "#share-copy").await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let said = loop {
        let t = text_of(&c, "#share-copied").await?;
        if !t.is_empty() || std::time::Instant::now() > deadline {
            break t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(said.contains("Copied"), "after Copy: {said:?}");
    scroll_to(&c, "sharing").await?;
    owner.screenshot("share-created").await?;
    // Shown once: a reload of the run page no longer has it.
    c.refresh().await?;
    wait_for(&c, "table.shares").await?;
    assert!(
        c.find(Locator::Id("share-url")).await.is_err(),
        "the new link is shown again after a reload"
    );

    // A second browser with no cookies at all reads it: status, progress, curves, environments.
    let mut guest = Browser::start().await?;
    let g = guest.client.clone();
    g.set_window_size(1280, 1400).await?;
    g.goto(&url).await?;
    wait_for(&g, ".chart-svg svg").await?;
    assert_eq!(text_of(&g, "h1").await?, "shared-demo");
    assert!(text_of(&g, "#run-status").await?.contains("running"));
    assert!(text_of(&g, "#run-progress").await?.contains("12 / 40"));
    let envs = text_of(&g, "#shared-envs tbody").await?;
    assert!(
        envs.contains("e-1") && envs.contains("rejected: not_solvable"),
        "{envs}"
    );
    // Logged out, and nothing to act on: no cancel/resume/share form, no environment links.
    assert!(exists(&g, ".auth-links a[href='/login']").await?);
    for css in [
        "form[action$='/cancel']",
        "form[action$='/resume']",
        "form[action$='/shares']",
        "main form[method='post']",
        "a[href*='/environments']",
    ] {
        assert!(!exists(&g, css).await?, "{css} on the shared page");
    }
    guest.screenshot("share-logged-out").await?;

    // Revoked: the same link now says so instead of showing the run.
    click(&c, "table.shares form button").await?;
    wait_for(&c, "table.shares .status-cancelled").await?;
    g.refresh().await?;
    wait_for(&g, "#shared-error").await?;
    assert!(text_of(&g, "#shared-error").await?.contains("not found"));
    assert!(!exists(&g, ".chart-svg svg").await?);
    guest.screenshot("share-revoked").await?;
    guest.close().await?;
    owner.close().await?;
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_viewer_sees_no_cancel_button_and_a_forged_cancel_is_refused(
    pool: Pool,
) -> anyhow::Result<()> {
    let server = TestServer::start(pool.clone()).await?;
    // Vera has an account, so she can accept the owner's invitation.
    let mut viewer = Browser::start().await?;
    let v = viewer.client.clone();
    register(&v, &server, "Vera Viewer", "vera@example.org", PASSWORD).await?;
    let mut owner = Browser::start().await?;
    let c = owner.client.clone();
    c.set_window_size(1280, 1000).await?;
    register(&c, &server, "Olga Owner", "olga@example.org", PASSWORD).await?;
    let (team_id, run_id) = seed_run(&pool, user_id(&pool, "olga@example.org").await?).await?;

    // The owner invites Vera as a viewer on the teams page; she joins by accepting.
    c.goto(&format!("{}/teams", server.url)).await?;
    wait_for(&c, &format!("#invite-email-{team_id}")).await?;
    fill(&c, &format!("invite-email-{team_id}"), "vera@example.org").await?;
    c.find(Locator::Id(&format!("invite-role-{team_id}")))
        .await?
        .select_by_value("viewer")
        .await?;
    click(&c, &format!("#invite-{team_id} button")).await?;
    wait_for_path(&c, "/teams?notice=").await?;
    wait_for(&c, "#teams-notice").await?;
    assert!(
        text_of(&c, "#teams-notice")
            .await?
            .contains("Invitation sent to vera@example.org as viewer")
    );
    // The owner's page shows the invitation's link once; Vera opens it, which fills its code in.
    let link_box = format!("#invitation-link-{team_id} input");
    wait_for(&c, &link_box).await?;
    let link = c
        .find(Locator::Css(&link_box))
        .await?
        .prop("value")
        .await?
        .unwrap_or_default();
    anyhow::ensure!(link.contains("code=spi_"), "invitation link {link:?}");
    let link = if link.starts_with('/') {
        format!("{}{link}", server.url)
    } else {
        link
    };
    let accept = "#invitations form[action$='/accept'] button[type=submit]:not([formaction])";
    v.goto(&link).await?;
    wait_for(&v, accept).await?;
    click(&v, accept).await?;
    wait_for_path(&v, "/teams?notice=").await?;
    c.goto(&format!("{}/teams", server.url)).await?;
    wait_for(&c, &format!("#team-{team_id} table.members tbody")).await?;
    let members = text_of(&c, &format!("#team-{team_id} table.members tbody")).await?;
    assert!(members.contains("vera@example.org"), "{members}");
    owner.screenshot("teams-owner").await?;
    set_theme(&c, Some("dark")).await?;
    wait_for(&c, &format!("#invite-{team_id}")).await?;
    owner.screenshot("teams-owner-dark").await?;
    set_theme(&c, None).await?;
    // The owner may cancel the (running, so active) run.
    c.goto(&format!("{}/runs/{run_id}", server.url)).await?;
    wait_for(&c, "form[action$='/cancel'] button").await?;

    // The viewer reads the run but gets no cancel button and no share section.
    v.goto(&format!("{}/runs/{run_id}", server.url)).await?;
    wait_for(&v, "#run-status").await?;
    assert!(text_of(&v, "#run-status").await?.contains("running"));
    assert!(!exists(&v, "form[action$='/cancel']").await?);
    assert!(!exists(&v, "#sharing").await?);
    viewer.screenshot("viewer-run").await?;

    // A forged cancel: the form the owner gets, posted with the viewer's own valid CSRF token
    // (from the log-out form). The API's role check refuses it and the run keeps running.
    let marker = v
        .execute(
            "const csrf = document.querySelector('.user-menu input[name=csrf]').value;
             const f = document.createElement('form');
             f.method = 'post'; f.action = arguments[0];
             const i = document.createElement('input');
             i.type = 'hidden'; i.name = 'csrf'; i.value = csrf;
             f.appendChild(i); document.body.appendChild(f); f.submit();
             return csrf.length;",
            vec![serde_json::json!(format!("/runs/{run_id}/cancel"))],
        )
        .await?;
    assert!(
        marker.as_u64().unwrap_or(0) > 0,
        "the viewer has a CSRF token"
    );
    wait_for_path(&v, &format!("/runs/{run_id}?error=")).await?;
    wait_for(&v, "p.form-error").await?;
    assert!(
        text_of(&v, "p.form-error").await?.contains("read-only"),
        "the refusal names the role"
    );
    let owner_id = user_id(&pool, "olga@example.org").await?;
    let scope = RunScope::for_member(&pool, owner_id, run_id).await?;
    assert_eq!(runs::get(&pool, &scope).await?.status, RunStatus::Running);
    viewer.screenshot("viewer-forged-cancel").await?;

    // The teams page shows the viewer their role and no owner controls.
    v.goto(&format!("{}/teams", server.url)).await?;
    wait_for(&v, &format!("#team-{team_id}")).await?;
    assert!(
        text_of(&v, &format!("#team-{team_id} .badge"))
            .await?
            .contains("viewer")
    );
    assert!(!exists(&v, "form[action$='/members']").await?);
    assert!(!exists(&v, "form[action$='/remove']").await?);
    viewer.close().await?;
    owner.close().await?;
    Ok(())
}
