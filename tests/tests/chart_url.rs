//! Chart settings as permalinks (issue 20, item 14) in a real browser: on the hydrated run
//! page, changing the smoothing, the x axis or the log scale writes them into the address bar
//! at once (no Apply), keeping the page's other parameters, and a reload of that address draws
//! the charts with them. The run is seeded through `spade-db` with a few metric points.

use fantoccini::{Client, Locator};
use spade_db::{Pool, ingest};
use spade_e2e::{
    Browser, TestServer, register, seed, text_of, until, user_id, wait_for, wait_hydrated,
};
use std::time::{Duration, Instant};

const PASSWORD: &str = "correct horse battery";

async fn seed(db: &Pool, owner: i64) -> anyhow::Result<i64> {
    let (team_scope, project) = seed::team_and_project(db, owner, "lab", "curves").await?;
    let config = serde_json::json!({"run": {"steps": 8, "seed": 1}});
    let scope = seed::run_in(db, &team_scope, owner, project, "curves-demo", &config, 1).await?;
    let mut b = ingest::begin(db, &scope).await?;
    b.run_started("e2e", 8).await?;
    for step in 0..8 {
        let v = 0.1 * step as f64;
        b.metrics(
            step,
            2.0 * step as f64,
            &[
                "loss".into(),
                "regret_mean".into(),
                "learnable_share".into(),
            ],
            &[1.0 - v, v / 2.0, 0.2 + v],
        )
        .await?;
    }
    b.commit().await?;
    Ok(scope.run_id())
}

async fn search(c: &Client) -> anyhow::Result<String> {
    Ok(c.execute("return window.location.search;", vec![])
        .await?
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Polls the address bar until it contains `want`.
async fn wait_for_search(c: &Client, want: &str) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = search(c).await?;
        if s.contains(want) {
            return Ok(s);
        }
        anyhow::ensure!(Instant::now() < deadline, "{want} never in the URL: {s:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn chart_settings_go_into_the_address_bar_and_come_back_on_reload(
    pool: Pool,
) -> anyhow::Result<()> {
    let server = TestServer::start(pool.clone()).await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    c.set_window_size(1280, 1000).await?;
    register(&c, &server, "Cleo Curves", "cleo@example.org", PASSWORD).await?;
    let run = seed(&pool, user_id(&pool, "cleo@example.org").await?).await?;

    let started = Instant::now();
    c.goto(&format!("{}/runs/{run}?keep=me", server.url))
        .await?;
    wait_hydrated(&c, started).await?;
    wait_for(&c, "#chart-x").await?;
    // A user's change, as the browser fires it: the select's value, then its change event.
    c.execute(
        "const s = document.getElementById('chart-x'); s.value = 'time'; \
         s.dispatchEvent(new Event('change', { bubbles: true }));",
        vec![],
    )
    .await?;
    let s = wait_for_search(&c, "x=time").await?;
    assert!(s.contains("keep=me"), "other parameters stay: {s}");
    c.execute(
        "const r = document.getElementById('chart-smooth'); r.value = '0.5'; \
         r.dispatchEvent(new Event('input', { bubbles: true }));",
        vec![],
    )
    .await?;
    let s = wait_for_search(&c, "smooth=0.50").await?;
    assert!(s.contains("x=time"), "{s}");
    browser.screenshot("chart-settings-in-url").await?;

    // The address is a permalink: a fresh load shows the same settings.
    let url = c.current_url().await?;
    let reloaded = Instant::now();
    c.goto(url.as_str()).await?;
    wait_hydrated(&c, reloaded).await?;
    let x = c
        .find(Locator::Id("chart-x"))
        .await?
        .prop("value")
        .await?
        .unwrap_or_default();
    assert_eq!(x, "time");
    let smooth = c
        .find(Locator::Id("chart-smooth"))
        .await?
        .prop("value")
        .await?
        .unwrap_or_default();
    assert_eq!(smooth, "0.5");

    // Back to the defaults: the parameters leave the address again.
    c.execute(
        "const s = document.getElementById('chart-x'); s.value = 'step'; \
         s.dispatchEvent(new Event('change', { bubbles: true }));",
        vec![],
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while search(&c).await?.contains("x=") {
        anyhow::ensure!(Instant::now() < deadline, "x= stayed in the URL");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Issue 20, item 6: "Find a chart" hides the charts whose title does not contain the text, and
/// the pointer over a chart shows a crosshair with every series' value at the nearest step.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn charts_can_be_searched_and_read_with_a_crosshair(pool: Pool) -> anyhow::Result<()> {
    let server = TestServer::start(pool.clone()).await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    c.set_window_size(1280, 1000).await?;
    register(&c, &server, "Cleo Curves", "cleo@example.org", PASSWORD).await?;
    let run = seed(&pool, user_id(&pool, "cleo@example.org").await?).await?;
    let started = Instant::now();
    c.goto(&format!("{}/runs/{run}", server.url)).await?;
    wait_hydrated(&c, started).await?;
    wait_for(&c, "#chart-find").await?;
    let shown = |c: &Client| {
        let c = c.clone();
        async move {
            let v = c
                .execute(
                    "return [...document.querySelectorAll('section.chart')]\
                     .filter(e => getComputedStyle(e).display !== 'none').map(e => e.querySelector('h3').textContent);",
                    vec![],
                )
                .await?;
            anyhow::Ok(
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect::<Vec<_>>(),
            )
        }
    };
    let all = shown(&c).await?;
    assert!(all.len() >= 3, "{all:?}");
    let find = |text: &str| {
        format!(
            "const f = document.getElementById('chart-find'); f.value = {text:?}; \
             f.dispatchEvent(new Event('input', {{ bubbles: true }}));"
        )
    };
    c.execute(&find("REGRET"), vec![]).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let only = loop {
        let v = shown(&c).await?;
        if v.len() < all.len() || Instant::now() > deadline {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        !only.is_empty() && only.iter().all(|t| t.to_lowercase().contains("regret")),
        "{only:?} of {all:?}"
    );
    browser.screenshot("chart-find").await?;
    c.execute(&find(""), vec![]).await?;
    until(
        Duration::from_secs(10),
        "an empty search shows every chart",
        || async { Ok(shown(&c).await? == all) },
    )
    .await?;

    // The pointer in the middle of the first chart.
    c.execute(
        "const b = document.querySelector('section.chart .chart-svg'); const r = b.getBoundingClientRect(); \
         b.dispatchEvent(new MouseEvent('mousemove', { bubbles: true, clientX: r.left + r.width / 2, clientY: r.top + r.height / 2 }));",
        vec![],
    )
    .await?;
    wait_for(&c, ".chart-readout").await?;
    let text = text_of(&c, ".chart-readout").await?;
    assert!(text.starts_with("step "), "{text}");
    assert!(text.contains(": "), "a value per series: {text}");
    assert!(exists_css(&c, ".chart-crosshair").await?);
    browser.screenshot("chart-crosshair").await?;
    c.execute(
        "document.querySelector('section.chart .chart-svg').dispatchEvent(new MouseEvent('mouseleave'));",
        vec![],
    )
    .await?;
    until(
        Duration::from_secs(10),
        "the readout goes with the pointer",
        || async { Ok(!exists_css(&c, ".chart-readout").await?) },
    )
    .await?;
    Ok(())
}

async fn exists_css(c: &Client, css: &str) -> anyhow::Result<bool> {
    Ok(!c.find_all(Locator::Css(css)).await?.is_empty())
}
