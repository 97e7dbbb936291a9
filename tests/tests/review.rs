//! Reviewing environments in a real browser: an editor marks an environment good with a
//! comment on its page (the HTML form, no script needed), sees the mark in the list's Review
//! column, finds it with the Review filter, whose value the pool downloads carry; the zip
//! download answers with the browser's own session. A viewer of the same team reads the mark
//! and gets no form. The run is seeded through `spade-db` as a worker would have reported it;
//! each test gets a fresh database (`#[sqlx::test]`). Screenshots (light theme, 1280 and
//! 390 px wide) go to `artifacts/screenshots/`.

use fantoccini::{Client, Locator};
use spade_db::ingest::NewEnvironment;
use spade_db::types::{EnvKind, EnvStatus, Role};
use spade_db::{Pool, ingest};
use spade_e2e::{
    Browser, TestServer, click, fill, register, scroll_to, seed, set_theme, text_of, user_id,
    wait_for, wait_for_path,
};

const PASSWORD: &str = "correct horse battery";

/// A team owned by `owner` with `viewer` as a viewer, and a run with three accepted
/// environments. Returns the run id.
async fn seed(db: &Pool, owner: i64, viewer: &str) -> anyhow::Result<i64> {
    let (team_scope, project) = seed::team_and_project(db, owner, "lab", "coin games").await?;
    seed::join(db, &team_scope, viewer, Role::Viewer).await?;
    let config = serde_json::json!({"run": {"steps": 40, "seed": 3}, "model": {"preset": "tiny"}});
    let scope = seed::run_in(db, &team_scope, owner, project, "review-demo", &config, 3).await?;
    let mut b = ingest::begin(db, &scope).await?;
    b.run_started("e2e", 40).await?;
    for (i, env_id) in ["s4-game-0", "s4-game-1", "s5-game-0"]
        .into_iter()
        .enumerate()
    {
        b.environment(&NewEnvironment {
            env_id,
            step: 4 + i as i64 / 2,
            skill: "Optimization",
            kind: EnvKind::Game,
            status: EnvStatus::Accepted,
            rejection_reason: None,
            rejection_message: None,
            code: "\"\"\"Skill: Optimization. Pay with the fewest coins.\"\"\"\nclass CoinEnv:\n    pass\n",
            hint: Some("greedy fails for 1, 5, 7"),
            parent_env_id: None,
            regret: Some(0.2 + 0.1 * i as f64),
            win_rate_hint: Some(0.6),
            win_rate_no_hint: Some(0.4),
            designer_reward: Some(0.5),
            reward_levels: Some(2),
            attempts: 1,
        })
        .await?;
    }
    b.commit().await?;
    Ok(scope.run_id())
}

async fn exists(c: &Client, css: &str) -> anyhow::Result<bool> {
    Ok(!c.find_all(Locator::Css(css)).await?.is_empty())
}

/// The ids of the listed environments (each row's first cell shows a title, then the id).
async fn listed(c: &Client) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for cell in c
        .find_all(Locator::Css("table.envs tbody tr td:first-child code"))
        .await?
    {
        ids.push(cell.text().await?);
    }
    Ok(ids)
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_editor_marks_an_environment_good_and_the_review_filter_finds_it(
    pool: Pool,
) -> anyhow::Result<()> {
    let server = TestServer::start(pool.clone()).await?;
    let mut viewer = Browser::start().await?;
    let v = viewer.client.clone();
    register(&v, &server, "Vera Viewer", "vera@example.org", PASSWORD).await?;
    let mut editor = Browser::start().await?;
    let c = editor.client.clone();
    c.set_window_size(1280, 1100).await?;
    register(&c, &server, "Olga Owner", "olga@example.org", PASSWORD).await?;
    set_theme(&c, Some("light")).await?;
    let run = seed(
        &pool,
        user_id(&pool, "olga@example.org").await?,
        "vera@example.org",
    )
    .await?;

    // The mark form on the environment page: verdict and comment, saved with who and when.
    let page = format!("/runs/{run}/environments/s4-game-1");
    c.goto(&format!("{}{page}", server.url)).await?;
    wait_for(&c, "form.review-form").await?;
    assert!(text_of(&c, "#review").await?.contains("Not reviewed yet."));
    click(&c, "form.review-form input[name='verdict'][value='good']").await?;
    fill(&c, "review-comment", "plays as described; keep it").await?;
    click(&c, "form.review-form button[type='submit']").await?;
    wait_for_path(&c, &page).await?;
    wait_for(&c, "ul.reviews li").await?;
    let marks = text_of(&c, "ul.reviews").await?;
    assert!(
        marks.contains("good") && marks.contains("Olga Owner") && marks.contains("keep it"),
        "{marks}"
    );
    scroll_to(&c, "review").await?;
    editor.screenshot("review-marked").await?;

    // The list's Review column shows the mark.
    c.goto(&format!("{}/runs/{run}/environments", server.url))
        .await?;
    wait_for(&c, "table.envs tbody tr").await?;
    assert_eq!(listed(&c).await?, ["s4-game-0", "s4-game-1", "s5-game-0"]);
    let row = text_of(&c, "table.envs tbody tr:nth-child(2)").await?;
    assert!(row.contains("s4-game-1") && row.contains("good"), "{row}");

    // The Review filter: "Good" keeps it alone, "Unreviewed" the other two.
    c.find(Locator::Id("env-verdict"))
        .await?
        .select_by_value("good")
        .await?;
    click(&c, "form.filters button[type='submit']").await?;
    wait_for_path(&c, &format!("/runs/{run}/environments?")).await?;
    wait_for(&c, "#env-verdict option[value='good'][selected]").await?;
    assert_eq!(listed(&c).await?, ["s4-game-1"]);
    let zip = c
        .find(Locator::Id("pool-zip"))
        .await?
        .attr("href")
        .await?
        .unwrap_or_default();
    assert!(
        zip.starts_with(&format!("/api/v1/runs/{run}/pool.zip?")) && zip.contains("verdict=good"),
        "the download carries the filter: {zip}"
    );
    // The browser's session downloads it (cookie auth on a plain GET).
    let got = c
        .execute(
            "return fetch(arguments[0]).then(r => r.arrayBuffer().then(b => \
             r.status + ' ' + r.headers.get('content-type') + ' ' + b.byteLength));",
            vec![serde_json::json!(zip)],
        )
        .await?;
    let got = got.as_str().unwrap_or_default().to_owned();
    assert!(got.starts_with("200 application/zip "), "{got}");
    editor.screenshot("review-filter-good").await?;
    c.set_window_size(390, 900).await?;
    c.refresh().await?;
    wait_for(&c, "table.envs tbody tr").await?;
    editor.screenshot("review-filter-good-390").await?;
    c.set_window_size(1280, 1100).await?;
    c.find(Locator::Id("env-verdict"))
        .await?
        .select_by_value("unreviewed")
        .await?;
    click(&c, "form.filters button[type='submit']").await?;
    wait_for(&c, "#env-verdict option[value='unreviewed'][selected]").await?;
    assert_eq!(listed(&c).await?, ["s4-game-0", "s5-game-0"]);

    // A viewer reads the mark and gets no form; the list shows it too.
    v.set_window_size(390, 900).await?;
    set_theme(&v, Some("light")).await?;
    v.goto(&format!("{}{page}", server.url)).await?;
    wait_for(&v, "ul.reviews li").await?;
    assert!(text_of(&v, "ul.reviews").await?.contains("keep it"));
    assert!(!exists(&v, "form.review-form").await?);
    assert!(!exists(&v, "main form[method='post']").await?);
    scroll_to(&v, "review").await?;
    viewer.screenshot("review-viewer-390").await?;
    v.goto(&format!(
        "{}/runs/{run}/environments?verdict=good",
        server.url
    ))
    .await?;
    wait_for(&v, "table.envs tbody tr").await?;
    assert_eq!(listed(&v).await?, ["s4-game-1"]);
    viewer.close().await?;
    editor.close().await?;
    Ok(())
}
