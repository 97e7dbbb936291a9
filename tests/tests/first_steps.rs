//! What a new user and a viewer meet first (issue 20, items 8 and 12), in a real browser against a
//! fresh database: a user without a team is pointed to creating one (not left with an empty team
//! list), a viewer is told they cannot launch runs (not offered a launch form with an empty
//! project list), cancelling a run asks for confirmation first, and the keyboard works on a
//! hydrated page (skip link, Esc). Screenshots in both themes and at 390 px go to
//! `artifacts/screenshots/`.

use fantoccini::{Client, Locator};
use spade_db::{Pool, RunStatus, runs};
use spade_e2e::{
    Browser, TestServer, click, fill, register, seed, set_theme, text_of, user_id, wait_for,
    wait_for_path,
};

const PASSWORD: &str = "correct horse battery";

async fn exists(c: &Client, css: &str) -> anyhow::Result<bool> {
    Ok(!c.find_all(Locator::Css(css)).await?.is_empty())
}

/// Screenshots of the current page in the light and dark theme and 390 px wide (then back to
/// the system theme at 1280 px). `open`, if given, is clicked before each (a theme change
/// reloads the page, which closes disclosures).
async fn shots(b: &mut Browser, name: &str, ready: &str, open: Option<&str>) -> anyhow::Result<()> {
    let c = b.client.clone();
    b.screenshot(name).await?;
    set_theme(&c, Some("dark")).await?;
    wait_for(&c, ready).await?;
    if let Some(css) = open {
        click(&c, css).await?;
    }
    b.screenshot(&format!("{name}-dark")).await?;
    set_theme(&c, None).await?;
    c.set_window_size(390, 844).await?;
    wait_for(&c, ready).await?;
    if let Some(css) = open {
        click(&c, css).await?;
    }
    b.screenshot(&format!("{name}-390")).await?;
    c.set_window_size(1280, 800).await?;
    Ok(())
}

async fn server(pool: &Pool) -> anyhow::Result<TestServer> {
    TestServer::start(pool.clone()).await
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_new_user_without_a_team_is_pointed_to_creating_one(pool: Pool) -> anyhow::Result<()> {
    let server = server(&pool).await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    register(&c, &server, "Nia New", "nia@example.org", PASSWORD).await?;

    // The runs list says why it is empty and links to where a team is made; it offers no
    // launch form and no team filter with nothing in it.
    wait_for(&c, "#runs-empty").await?;
    assert!(
        exists(&c, "#runs-empty a#runs-create-team[href^='/teams']").await?,
        "no way to a team from the empty list: {}",
        text_of(&c, "#runs-empty").await?
    );
    assert!(!exists(&c, "#new-run").await?, "New run without a team");
    assert!(!exists(&c, "#runs-team").await?, "an empty team filter");
    shots(&mut browser, "first-steps-no-team", "#runs-empty", None).await?;

    // Typed by hand, the launch page says what to do instead of showing an empty form.
    c.goto(&format!("{}/runs/new", server.url)).await?;
    wait_for(&c, "#launch-no-projects").await?;
    assert!(!exists(&c, "#launch-form").await?, "a form with no project");
    browser.screenshot("first-steps-launch-no-team").await?;

    // The link leads to the form that creates a team; then the runs list offers "New run".
    c.goto(&format!("{}/runs", server.url)).await?;
    click(&c, "#runs-create-team").await?;
    wait_for_path(&c, "/teams").await?;
    // Once hydrated the link navigates in the page, and the form comes with the loaded data.
    wait_for(&c, "#team-new-name").await?;
    fill(&c, "team-new-name", "nia's lab").await?;
    click(&c, "#team-create").await?;
    wait_for_path(&c, "/teams?notice=").await?;
    c.goto(&format!("{}/runs", server.url)).await?;
    wait_for(&c, "#new-run").await?;
    browser.close().await?;
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_viewer_cannot_launch_and_is_told_so_and_cancel_asks_first(
    pool: Pool,
) -> anyhow::Result<()> {
    let server = server(&pool).await?;
    let mut viewer = Browser::start().await?;
    let v = viewer.client.clone();
    register(&v, &server, "Vera Viewer", "vera@example.org", PASSWORD).await?;
    let mut owner = Browser::start().await?;
    let c = owner.client.clone();
    register(&c, &server, "Olga Owner", "olga@example.org", PASSWORD).await?;

    // Olga's team with a project and a run; Vera is a viewer in it.
    let olga = user_id(&pool, "olga@example.org").await?;
    let (scope, project) = seed::team_and_project(&pool, olga, "lab", "coin games").await?;
    seed::join(
        &pool,
        &scope,
        "vera@example.org",
        spade_db::types::Role::Viewer,
    )
    .await?;
    let config = serde_json::json!({"run": {"steps": 40, "seed": 3}});
    let owner_scope = seed::run_in(&pool, &scope, olga, project, "to-cancel", &config, 3).await?;
    let run = owner_scope.run_id();

    // The viewer's runs list: the run, no "New run", and a sentence saying why.
    v.goto(&format!("{}/runs", server.url)).await?;
    wait_for(&v, "#runs-table").await?;
    assert!(
        !exists(&v, "#new-run").await?,
        "a viewer is offered New run"
    );
    assert!(
        text_of(&v, "#runs-viewer-only")
            .await?
            .contains("viewer in every team"),
        "no word on why the viewer cannot launch"
    );
    shots(&mut viewer, "first-steps-viewer-runs", "#runs-table", None).await?;
    v.goto(&format!("{}/runs/new", server.url)).await?;
    wait_for(&v, "#launch-no-projects").await?;
    assert!(!exists(&v, "#launch-form").await?);
    assert!(
        !exists(&v, "#launch-project").await?,
        "an empty project list"
    );
    viewer.screenshot("first-steps-viewer-launch").await?;

    // The owner's "Cancel run" asks first: the run stays queued until the confirmation.
    c.goto(&format!("{}/runs/{}", server.url, run)).await?;
    wait_for(&c, "#cancel-run summary").await?;
    let confirm = c.find(Locator::Id("cancel-run-confirm")).await?;
    assert!(
        !confirm.is_displayed().await?,
        "the confirmation shows unasked"
    );
    click(&c, "#cancel-run summary").await?;
    assert!(
        confirm.is_displayed().await?,
        "no confirmation after Cancel run"
    );
    assert_eq!(
        runs::get(&pool, &owner_scope).await?.status,
        RunStatus::Queued,
        "Cancel run cancelled without asking"
    );
    shots(
        &mut owner,
        "first-steps-cancel-confirm",
        "#cancel-run summary",
        Some("#cancel-run summary"),
    )
    .await?;
    // The screenshots reloaded the page: ask again; Esc closes the question (once hydrated),
    // and the next ask is confirmed.
    c.goto(&format!("{}/runs/{}", server.url, run)).await?;
    wait_for(&c, "#cancel-run summary").await?;
    spade_e2e::wait_hydrated(&c, std::time::Instant::now()).await?;
    let summary = c.find(Locator::Css("#cancel-run summary")).await?;
    summary.click().await?;
    summary.send_keys("\u{E00C}").await?;
    let open = c
        .execute("return document.getElementById('cancel-run').open;", vec![])
        .await?;
    assert_eq!(open, serde_json::json!(false), "Esc left the question open");
    click(&c, "#cancel-run summary").await?;
    click(&c, "#cancel-run-confirm").await?;
    wait_for(&c, "#run-status .status-cancelled").await?;
    assert_eq!(
        runs::get(&pool, &owner_scope).await?.status,
        RunStatus::Cancelled
    );
    // A run that does not exist: a not-found page with its own title (the status is checked
    // in backend/tests/api/pages.rs).
    c.goto(&format!("{}/runs/999", server.url)).await?;
    wait_for(&c, "#not-found").await?;
    assert_eq!(c.title().await?, "Run not found · SPADE Studio");
    owner.screenshot("first-steps-run-not-found").await?;
    c.goto(&format!("{}/runs/{}", server.url, run)).await?;
    wait_for(&c, "#run-status").await?;
    assert_eq!(c.title().await?, "to-cancel · Run · SPADE Studio");
    viewer.close().await?;
    owner.close().await?;
    Ok(())
}

/// The id of the focused element (`""` when it has none, `"BODY"` for the page itself).
async fn focused(c: &Client) -> anyhow::Result<String> {
    let v = c
        .execute(
            "const e = document.activeElement; return e ? (e.id || e.tagName) : '';",
            vec![],
        )
        .await?;
    Ok(v.as_str().unwrap_or_default().to_owned())
}

/// Issue 20, item 12: on a hydrated page "Skip to content" moves focus to the main landmark,
/// and Esc closes the account menu (focus back on its summary).
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn after_hydration_the_skip_link_moves_focus_and_esc_closes_the_account_menu(
    pool: Pool,
) -> anyhow::Result<()> {
    let server = server(&pool).await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    register(&c, &server, "Kim Keys", "kim@example.org", PASSWORD).await?;
    c.goto(&format!("{}/teams", server.url)).await?;
    spade_e2e::wait_hydrated(&c, std::time::Instant::now()).await?;

    // Keyboard users reach the skip link first and press Enter on it.
    let skip = c.find(Locator::Css(".skip-link")).await?;
    c.execute(
        "document.querySelector('.skip-link').focus(); return null;",
        vec![],
    )
    .await?;
    browser.screenshot("keyboard-skip-link").await?;
    skip.send_keys("\u{E007}").await?;
    assert_eq!(focused(&c).await?, "main", "Enter on Skip to content");

    // The account menu opens from its summary and Esc closes it.
    let summary = c.find(Locator::Css(".user-menu summary")).await?;
    summary.click().await?;
    let open = || async {
        c.execute("return document.querySelector('.user-menu').open;", vec![])
            .await
    };
    assert_eq!(open().await?, serde_json::json!(true));
    browser.screenshot("keyboard-menu-open").await?;
    summary.send_keys("\u{E00C}").await?;
    assert_eq!(
        open().await?,
        serde_json::json!(false),
        "Esc left the menu open"
    );
    assert!(
        c.execute(
            "return document.activeElement === document.querySelector('.user-menu summary');",
            vec![],
        )
        .await?
            == serde_json::json!(true),
        "focus is not back on the menu's summary"
    );
    browser.close().await?;
    Ok(())
}
