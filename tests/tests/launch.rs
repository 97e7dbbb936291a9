//! Launching a run from the browser with a real worker: a new user creates a team and a project
//! on the teams page, opens the launch form from the runs list, gets a validation message beside
//! the field they got wrong, launches the tiny CPU demo, and watches the run page follow the
//! real `spade worker` (started by the server's scheduler) to its first completed step over
//! server-sent events; then cancels it through the page and sees the worker stop.
//!
//! Needs `target/debug/spade` and `spade-sandbox-runner` (cargo build -p spade-cli -p
//! spade-sandbox-runner) and the site bundle. The tiny model's warm start is cached in
//! $SPADE_CACHE/warmstart; the first run on a machine trains it (the game family's warm start:
//! 8 to 12 minutes on 2 busy cores; the worker's tests have usually cached it by then).

use fantoccini::Locator;
use spade_db::{Pool, RunScope, RunStatus, runs, users};
use spade_e2e::{
    Browser, ServerOptions, TestServer, click, fill, register, scroll_to, set_theme, text_of,
    wait_for, wait_for_path,
};
use std::time::{Duration, Instant};

/// How long the first step may take: a cached warm start and one step take about a minute on
/// two cores; a cold cache trains the warm start first, until its criterion is met (462-716 s
/// for the demo's on an Intel Xeon beside a cold `scripts/test`). In `scripts/test` the worker's
/// tests have usually cached it by now; the margin is for a machine where they have not.
const FIRST_STEP: Duration = Duration::from_secs(2400);

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_run_launched_from_the_form_progresses_live_and_cancels(
    pool: Pool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let server = TestServer::start_with(
        pool.clone(),
        ServerOptions {
            workers: true,
            ..ServerOptions::default()
        },
    )
    .await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    c.set_window_size(1280, 1400).await?;
    register(
        &c,
        &server,
        "Lin Launcher",
        "lin@example.org",
        "correct horse battery",
    )
    .await?;

    // A team and a project, through the teams page.
    c.goto(&format!("{}/teams", server.url)).await?;
    wait_for(&c, "#team-new-name").await?;
    fill(&c, "team-new-name", "Self-play lab").await?;
    click(&c, "#team-create").await?;
    wait_for_path(&c, "/teams?notice=").await?;
    wait_for(&c, "section.team input[name=name]").await?;
    let project_input = c
        .find(Locator::Css("section.team input[name=name]"))
        .await?;
    project_input.send_keys("tiny runs").await?;
    click(&c, "section.team form[action$='/projects'] button").await?;
    wait_for_path(&c, "/teams?notice=").await?;
    wait_for(&c, ".project-list").await?;
    assert!(text_of(&c, ".project-list").await?.contains("tiny runs"));
    browser.screenshot("teams-new-team").await?;

    // The launch form, from the runs list; the tiny CPU demo as scripts/serve runs it is the
    // default preset.
    c.goto(&format!("{}/runs", server.url)).await?;
    wait_for(&c, "#new-run").await?;
    click(&c, "#new-run").await?;
    wait_for_path(&c, "/runs/new").await?;
    wait_for(&c, "#cfg-designer-plateau-low").await?;
    let steps = c
        .find(Locator::Id("cfg-run-steps"))
        .await?
        .prop("value")
        .await?;
    assert_eq!(steps.as_deref(), Some("8"), "the demo preset's step count");
    browser.screenshot("launch-form").await?;
    set_theme(&c, Some("dark")).await?;
    wait_for(&c, "#cfg-designer-plateau-low").await?;
    browser.screenshot("launch-form-dark").await?;
    set_theme(&c, None).await?;
    wait_for(&c, "#cfg-designer-plateau-low").await?;

    // The settings sections fold (issue 43: the form was 8,100 px tall at 1280 px).
    let height = c
        .execute("return document.documentElement.scrollHeight;", vec![])
        .await?
        .as_i64()
        .unwrap_or(i64::MAX);
    assert!(height < 4000, "the launch page is {height} px tall");

    // A plateau whose low end is above its high end is refused, beside the field.
    click(&c, "#section-designer summary").await?;
    fill(&c, "cfg-designer-plateau-low", "0.9").await?;
    fill(&c, "launch-name", "tiny-from-form").await?;
    click(&c, "#launch-submit").await?;
    wait_for(&c, "#cfg-designer-plateau-low-err").await?;
    let msg = text_of(&c, "#cfg-designer-plateau-low-err").await?;
    assert!(msg.contains("designer.plateau.low"), "{msg}");
    assert!(
        text_of(&c, "#launch-problems")
            .await?
            .contains("designer.plateau.low")
    );
    let kept = c
        .find(Locator::Id("cfg-designer-plateau-low"))
        .await?
        .prop("value")
        .await?;
    assert_eq!(kept.as_deref(), Some("0.9"), "what was typed stays");
    scroll_to(&c, "cfg-designer-plateau-low").await?;
    browser.screenshot("launch-invalid").await?;

    // Fixed, it launches and opens the run page.
    fill(&c, "cfg-designer-plateau-low", "0.4").await?;
    click(&c, "#launch-submit").await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let run_id: i64 = loop {
        let url = c.current_url().await?;
        if let Some(Ok(id)) = url.path().strip_prefix("/runs/").map(str::parse::<i64>) {
            break id;
        }
        anyhow::ensure!(Instant::now() < deadline, "no run page: at {url}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    wait_for(&c, "#run-status").await?;
    assert_eq!(text_of(&c, "h1").await?, "tiny-from-form");

    // The scheduler starts the worker; the open page follows it over SSE to step 1 of 8.
    c.execute(
        "window.__spadeMarker = 'same-document'; return null;",
        vec![],
    )
    .await?;
    let deadline = Instant::now() + FIRST_STEP;
    loop {
        let progress = text_of(&c, "#run-progress").await?;
        if progress.contains("1 / 8") || progress.contains("2 / 8") {
            break;
        }
        let status = text_of(&c, "#run-status").await?;
        anyhow::ensure!(
            !status.contains("failed"),
            "the run failed: {}",
            text_of(&c, "main").await?
        );
        anyhow::ensure!(
            Instant::now() < deadline,
            "no completed step within {FIRST_STEP:?}: {status}, {progress}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let marker = c
        .execute("return window.__spadeMarker || null;", vec![])
        .await?;
    assert_eq!(
        marker,
        serde_json::json!("same-document"),
        "progress arrived without a reload"
    );
    assert!(text_of(&c, "#run-status").await?.contains("running"));
    // The page opened before any metrics; the charts come with the first step's, live too.
    wait_for(&c, ".chart-svg svg").await?;
    let marker = c
        .execute("return window.__spadeMarker || null;", vec![])
        .await?;
    assert_eq!(
        marker,
        serde_json::json!("same-document"),
        "charts without a reload"
    );
    browser.screenshot("launch-run-progress").await?;

    // Cancel through the page; the scheduler stops the worker and the run ends cancelled.
    // "Cancel run" opens a confirmation; its button cancels.
    click(&c, "#cancel-run summary").await?;
    click(&c, "#cancel-run-confirm").await?;
    wait_for_path(&c, &format!("/runs/{run_id}")).await?;
    // The cancel form's answer is a new page (still "cancelling" while the worker stops): wait
    // for it (the old document's marker is gone); from there the page must not reload to
    // learn the end.
    // (If a script handled the form there is no new page; after 10 s go on either way.)
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline
        && c.execute("return window.__spadeMarker || null;", vec![])
            .await?
            .is_string()
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for(&c, "#run-status").await?;
    c.execute(
        "window.__spadeMarker = 'after-cancel'; return null;",
        vec![],
    )
    .await?;
    let user = users::credentials(&pool, "lin@example.org")
        .await?
        .ok_or_else(|| anyhow::anyhow!("the user is gone"))?
        .user;
    let scope = RunScope::for_member(&pool, user.id, run_id).await?;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status = runs::get(&pool, &scope).await?.status;
        if status == RunStatus::Cancelled {
            break;
        }
        anyhow::ensure!(
            status == RunStatus::Cancelling && Instant::now() < deadline,
            "after cancel the run is {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The open page learns the final status too (the scheduler finishes the job without an
    // event; the stream reads the status on its tick), without a reload.
    let deadline = Instant::now() + Duration::from_secs(30);
    while c
        .find(Locator::Css("#run-status .status-cancelled"))
        .await
        .is_err()
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the open page still says {}",
            text_of(&c, "#run-status").await?
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let marker = c
        .execute("return window.__spadeMarker || null;", vec![])
        .await?;
    assert_eq!(
        marker,
        serde_json::json!("after-cancel"),
        "cancelled without a reload"
    );
    c.refresh().await?;
    wait_for(&c, "#run-status .status-cancelled").await?;
    // The log tail is the worker's output (warm start, steps), not only the reported lines.
    let log = text_of(&c, "#run-log").await?;
    assert!(log.contains("warm start"), "{log}");
    assert!(
        c.find_all(Locator::Css("form[action$='/cancel']"))
            .await?
            .is_empty(),
        "a cancelled run has no cancel button"
    );
    browser.screenshot("launch-run-cancelled").await?;
    browser.close().await?;
    eprintln!("launch test took {:?}", started.elapsed());
    Ok(())
}
