//! The dashboard in a real browser against the real server and database: a person registers,
//! logs out and in again through the HTML forms, sees the runs page, opens a run with curves
//! and an environment with its diff, and switches the theme. Rows are seeded through `spade-db`
//! (the worker's ingestion path, `spade_e2e::seed`) for a team the new user owns, in the test's
//! own database (`#[sqlx::test]`). Each step saves a screenshot
//! under `artifacts/screenshots/` for people to look at.

use fantoccini::Locator;
use spade_db::{Pool, RunScope, runs, users};
use spade_e2e::seed::{dashboard_runs, demo_config, run_in, team_and_project};
use spade_e2e::{Browser, TestServer, fill, text_of, wait_for, wait_for_path};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// POSTs JSON with a bearer token over a plain HTTP/1.1 connection; fails unless 200.
async fn http_post_json(
    url: &str,
    token: &str,
    body: &serde_json::Value,
) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let body = body.to_string();
    let mut s = tokio::net::TcpStream::connect(host).await?;
    s.write_all(
        format!(
            "POST /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    anyhow::ensure!(out.starts_with("HTTP/1.1 200"), "ingest answered: {out}");
    Ok(out)
}

/// A server on the test's own database (`#[sqlx::test]`), that database, and a tag for this
/// test's names.
async fn start(pool: Pool, test: &str) -> anyhow::Result<(TestServer, Pool, String)> {
    let server = TestServer::start(pool.clone()).await?;
    let tag = format!(
        "{test}-{}",
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis()
    );
    Ok((server, pool, tag))
}

/// Registers `name` as `email` through the HTML form (which logs the browser in) and gives the
/// new user a team `lab-TAG` with a project "demo": (user id, the user's team scope, project id).
async fn signed_up_with_project(
    c: &fantoccini::Client,
    server: &TestServer,
    db: &Pool,
    name: &str,
    email: &str,
    tag: &str,
) -> anyhow::Result<(i64, spade_db::TeamScope, i64)> {
    spade_e2e::register(c, server, name, email, "correct horse battery").await?;
    let user = spade_e2e::user_id(db, email).await?;
    let (team, project) = team_and_project(db, user, &format!("lab-{tag}"), "demo").await?;
    Ok((user, team, project))
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_new_user_registers_logs_in_and_reads_a_run(pool: Pool) -> anyhow::Result<()> {
    let (server, db, tag) = start(pool, "ada").await?;
    let email = format!("ada-{tag}@example.org");
    let password = "correct horse battery";
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();

    // Register through the HTML form: it logs the new account in and lands on the runs list.
    c.goto(&format!("{}/register", server.url)).await?;
    fill(&c, "reg-name", "Ada Lovelace").await?;
    fill(&c, "reg-email", &email).await?;
    fill(&c, "reg-password", password).await?;
    browser.screenshot("dashboard-register").await?;
    c.find(Locator::Css("form.stack button[type=submit]"))
        .await?
        .click()
        .await?;
    wait_for_path(&c, "/runs").await?;
    wait_for(&c, "#runs-empty").await?;
    assert!(
        text_of(&c, "#runs-empty").await?.contains("not in a team"),
        "a new user has no team yet"
    );
    assert!(
        text_of(&c, ".user-menu summary")
            .await?
            .contains("Ada Lovelace")
    );

    // Log out through the user menu, then log in through the form.
    c.find(Locator::Css(".user-menu summary"))
        .await?
        .click()
        .await?;
    c.find(Locator::Css(".user-menu form button"))
        .await?
        .click()
        .await?;
    wait_for_path(&c, "/login").await?;
    fill(&c, "login-email", &email).await?;
    fill(&c, "login-password", "wrong password").await?;
    c.find(Locator::Css("form.stack button[type=submit]"))
        .await?
        .click()
        .await?;
    wait_for_path(&c, "/login?error=").await?;
    wait_for(&c, "#login-error").await?;
    assert!(
        text_of(&c, "#login-error")
            .await?
            .contains("Wrong email or password")
    );
    browser.screenshot("dashboard-login-error").await?;
    fill(&c, "login-password", password).await?;
    c.find(Locator::Css("form.stack button[type=submit]"))
        .await?
        .click()
        .await?;
    wait_for_path(&c, "/runs").await?;

    // The user's team gets a run (as a worker would report it); the list shows it.
    let user = users::credentials(&db, &email)
        .await?
        .ok_or_else(|| anyhow::anyhow!("registered user not found"))?
        .user;
    let (run_id, run_b, run_c) = dashboard_runs(&db, user.id, &tag).await?;
    c.goto(&format!("{}/runs", server.url)).await?;
    wait_for(&c, "#runs-table").await?;
    let row = text_of(&c, "#runs-table tbody tr").await?;
    assert!(
        row.contains("tiny-demo") && row.contains("24 / 40"),
        "{row}"
    );
    assert!(row.contains("33%"), "latest learnable share: {row}");
    browser.screenshot("dashboard-runs").await?;

    // Compare: tick both runs and submit: overlay curves and only the settings that differ.
    c.find(Locator::Css(&format!("#pick-{run_id}")))
        .await?
        .click()
        .await?;
    c.find(Locator::Css(&format!("#pick-{run_b}")))
        .await?
        .click()
        .await?;
    c.find(Locator::Css(&format!("#pick-{run_c}")))
        .await?
        .click()
        .await?;
    c.find(Locator::Css(".table-actions button"))
        .await?
        .click()
        .await?;
    wait_for_path(&c, "/compare?run=").await?;
    wait_for(&c, ".chart-svg svg").await?;
    let diff = text_of(&c, "table.kv tbody").await?;
    assert!(
        diff.contains("grpo.clip_high") && diff.contains("seed"),
        "{diff}"
    );
    assert!(
        !diff.contains("clip_low"),
        "equal settings are hidden: {diff}"
    );
    browser.screenshot("dashboard-compare").await?;
    // tiny-demo and tiny-demo-seed9 differ only in the seed: one mean curve with a band.
    let seeds = c
        .find_all(Locator::Css("#seed-charts .chart-svg svg polygon"))
        .await?;
    assert!(!seeds.is_empty(), "a spread band over the two seeds");
    c.execute(
        "document.getElementById('seeds-h').scrollIntoView()",
        vec![],
    )
    .await?;
    browser.screenshot("dashboard-compare-seeds").await?;
    // The compare view's benchmarks: the shared base model, then each run's newest checkpoint.
    let bench = text_of(&c, "#compare-benchmarks").await?;
    assert!(
        bench.contains("base model (step 0)")
            && bench.contains("tiny-demo-b")
            && bench.contains("(step 24)"),
        "{bench}"
    );
    c.execute(
        "document.getElementById('cmp-bench-h').scrollIntoView()",
        vec![],
    )
    .await?;
    browser.screenshot("dashboard-compare-benchmarks").await?;
    // The team's benchmarks page: the same table over every run with results.
    c.goto(&format!("{}/benchmarks", server.url)).await?;
    wait_for(&c, "#compare-benchmarks").await?;
    let team_bench = text_of(&c, "#compare-benchmarks").await?;
    assert!(
        team_bench.contains("base model (step 0)")
            && team_bench.contains("tiny-demo (#")
            && team_bench.contains("tiny-demo-b (#"),
        "{team_bench}"
    );
    // The paper's table: mean ± standard error per suite, then the games average (headings
    // are upper-cased by the stylesheet).
    let lower = team_bench.to_lowercase();
    assert!(
        lower.contains("humaneval") && lower.contains("games avg (2)") && lower.contains(" ± "),
        "{team_bench}"
    );
    let csv = c
        .find(Locator::Css("a[download=\"benchmarks.csv\"]"))
        .await?
        .attr("href")
        .await?
        .unwrap_or_default();
    assert!(
        csv.starts_with("/api/v1/benchmarks.csv?runs=") && csv.ends_with("&rows=newest"),
        "{csv}"
    );
    browser.screenshot("dashboard-benchmarks").await?;
    // Rows per checkpoint: every run's base model and evaluated steps.
    c.find(Locator::LinkText("every evaluated checkpoint"))
        .await?
        .click()
        .await?;
    wait_for_path(&c, "/benchmarks?rows=checkpoints").await?;
    wait_for(&c, "#compare-benchmarks").await?;
    let by_step = text_of(&c, "#compare-benchmarks").await?;
    assert!(
        by_step.contains("· base")
            && by_step.contains("· step 12")
            && by_step.contains("· step 24"),
        "{by_step}"
    );
    browser
        .screenshot("dashboard-benchmarks-checkpoints")
        .await?;
    c.goto(&format!("{}/runs", server.url)).await?;
    wait_for(&c, "#runs-table").await?;

    // The run page: status, progress, curves (SVG from plotters), log and configuration. A
    // tall window, so the screenshots show whole pages.
    c.set_window_size(1280, 1800).await?;
    c.find(Locator::LinkText("tiny-demo"))
        .await?
        .click()
        .await?;
    wait_for_path(&c, &format!("/runs/{run_id}")).await?;
    wait_for(&c, ".chart-svg svg").await?;
    let charts = c.find_all(Locator::Css(".chart-svg svg")).await?;
    assert!(charts.len() >= 2, "{} charts", charts.len());
    assert!(text_of(&c, "#run-log").await?.contains("19 accepted"));
    assert!(
        c.find(Locator::Css("form[action$='/cancel'] button"))
            .await
            .is_ok(),
        "the owner may cancel"
    );
    browser.screenshot("dashboard-run").await?;
    // Benchmarks: a table per suite by checkpoint (base first), a chart of the suite means,
    // and the evaluate form for the owner with the run's checkpoints to choose from.
    // (Column heads are upper-cased by the stylesheet.)
    let table = text_of(&c, "#benchmarks table.bench").await?.to_lowercase();
    assert!(
        table.contains("base") && table.contains("step 24") && table.contains("mean of tasks"),
        "{table}"
    );
    assert!(
        c.find(Locator::Css("#benchmarks .chart-svg svg"))
            .await
            .is_ok(),
        "a chart of the suite mean over checkpoints"
    );
    let options = c
        .find_all(Locator::Css("#eval-checkpoint option"))
        .await?
        .len();
    assert_eq!(options, 3, "checkpoints 0, 12 and 24");
    c.execute(
        "document.getElementById('benchmarks').scrollIntoView()",
        vec![],
    )
    .await?;
    browser.screenshot("dashboard-run-benchmarks").await?;

    // Live: the worker reports progress over the ingest API; the open page follows (its event
    // stream starts with a snapshot, so this holds whether it connected before or after).
    c.execute(
        "window.__spadeMarker = 'same-document'; return null;",
        vec![],
    )
    .await?;
    let token = spade_server::tokens::random_token("sprun_");
    let scope = RunScope::for_member(&db, user.id, run_id).await?;
    runs::set_token_hash(&db, &scope, &spade_server::tokens::hash_token(&token)).await?;
    let batch = serde_json::json!({"envelopes": [
        {"run_id": run_id.to_string(), "seq": 1000, "key": format!("{run_id}/1000"), "sent_at_ms": 0,
         "message": {"kind": "progress", "step": 30, "total_steps": 40, "phase": "training"}},
        {"run_id": run_id.to_string(), "seq": 1001, "key": format!("{run_id}/1001"), "sent_at_ms": 0,
         "message": {"kind": "log", "level": "info", "line": "step 30: policy updated"}}
    ]});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Posted again until the page shows it: the first post may precede hydration.
        http_post_json(
            &format!("{}/api/v1/ingest/{run_id}", server.url),
            &token,
            &batch,
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if text_of(&c, "#run-phase").await? == "training" {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the run page never showed the new phase"
        );
    }
    assert!(text_of(&c, "#run-progress").await?.contains("30 / 40"));
    let marker = c
        .execute("return window.__spadeMarker || null;", vec![])
        .await?;
    assert_eq!(
        marker,
        serde_json::json!("same-document"),
        "updated without a reload"
    );
    browser.screenshot("dashboard-run-live").await?;

    // In-app navigation (the page is hydrated: the marker above survived) to the environment
    // list: the route change calls the list's server function with every filter empty, which
    // once failed with "missing field q" until a full reload.
    c.find(Locator::Css(&format!(
        "main a[href='/runs/{run_id}/environments']"
    )))
    .await?
    .click()
    .await?;
    wait_for_path(&c, &format!("/runs/{run_id}/environments")).await?;
    wait_for(&c, "table.envs").await?;
    let page = text_of(&c, "main").await?;
    assert!(!page.contains("error deserializing"), "{page}");
    let marker = c
        .execute("return window.__spadeMarker || null;", vec![])
        .await?;
    assert_eq!(
        marker,
        serde_json::json!("same-document"),
        "navigated without a reload"
    );
    browser.screenshot("dashboard-environments-in-app").await?;

    // The environment that was derived from a memory environment shows the diff.
    c.goto(&format!("{}/runs/{run_id}/environments/e-24", server.url))
        .await?;
    wait_for(&c, ".diff-summary").await?;
    assert_eq!(text_of(&c, ".diff-summary").await?, "2 lines: 2 changed");
    assert!(
        c.find(Locator::Css(".code .tok-kw")).await.is_ok(),
        "highlighted code"
    );
    browser.screenshot("dashboard-environment").await?;

    // The theme switch: dark persists across a reload (cookie read by the server).
    c.goto(&format!("{}/runs/{run_id}", server.url)).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Before hydration the click is a plain form POST; after it, a script; both persist.
        if let Ok(b) = c.find(Locator::Css("button.theme-to-dark")).await
            && b.is_displayed().await.unwrap_or(false)
        {
            b.click().await?;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.refresh().await?;
        let theme = c
            .find(Locator::Css("html"))
            .await?
            .attr("data-theme")
            .await?;
        if theme.as_deref() == Some("dark") {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the dark theme did not stick");
    }
    browser.screenshot("dashboard-run-dark").await?;
    browser.close().await?;
    Ok(())
}

/// Every page on a 390 px phone, in both themes (issue 20, item 13): nothing is wider than the
/// screen (wide tables scroll inside their own region), and hydrating a page logs no warning or
/// error in the console (Leptos warned three times per page). Screenshots of each page, light
/// and dark, go to `artifacts/screenshots/phone-*.png`.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn every_page_fits_a_phone_and_hydrates_without_console_warnings(
    pool: Pool,
) -> anyhow::Result<()> {
    let (server, db, tag) = start(pool, "phone").await?;
    let email = format!("phone-{tag}@example.org");
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    spade_e2e::register(&c, &server, "Pia Phone", &email, "correct horse battery").await?;
    let user = users::credentials(&db, &email)
        .await?
        .ok_or_else(|| anyhow::anyhow!("registered user not found"))?
        .user;
    let (run_id, run_b, run_c) = dashboard_runs(&db, user.id, &tag).await?;
    c.set_window_size(390, 844).await?;
    let pages = [
        ("runs", "/runs".to_owned()),
        ("run", format!("/runs/{run_id}")),
        ("environments", format!("/runs/{run_id}/environments")),
        ("environment", format!("/runs/{run_id}/environments/e-24")),
        (
            "compare",
            format!("/compare?run={run_id}&run={run_b}&run={run_c}"),
        ),
        ("launch", "/runs/new".to_owned()),
        ("teams", "/teams".to_owned()),
        ("benchmarks", "/benchmarks".to_owned()),
        ("account", "/account".to_owned()),
    ];
    let mut problems = Vec::new();
    for (theme, suffix) in [(Some("light"), "light"), (Some("dark"), "dark")] {
        for (name, path) in &pages {
            c.goto(&format!("{}{path}", server.url)).await?;
            spade_e2e::set_theme(&c, theme).await?;
            let _ = spade_e2e::console_messages(&c).await?;
            // A fresh load, so the log holds this page's hydration alone.
            c.refresh().await?;
            if let Err(e) = spade_e2e::wait_hydrated(&c, Instant::now()).await {
                // What the page said is the reason (a panic in the bundle, a refused script).
                let said = spade_e2e::console_messages(&c).await.unwrap_or_default();
                anyhow::bail!("{name} ({suffix}): {e}; console: {said:?}");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            let width = c
                .execute(
                    "return [document.documentElement.scrollWidth, window.innerWidth];",
                    vec![],
                )
                .await?;
            let (scroll, inner) = (
                width[0].as_i64().unwrap_or(-1),
                width[1].as_i64().unwrap_or(-1),
            );
            if scroll > inner {
                let wide = c
                    .execute(
                        "const w = window.innerWidth; return [...document.querySelectorAll('body *')]\
                         .filter(e => e.getBoundingClientRect().right > w + 1 && !(e.parentElement && e.parentElement.closest('.table-scroll, .diff-scroll, pre')))\
                         .slice(-6).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));",
                        vec![],
                    )
                    .await?;
                problems.push(format!(
                    "{name} ({suffix}): {scroll} px wide on a {inner} px screen: {wide}"
                ));
            }
            for (level, msg) in spade_e2e::console_messages(&c).await? {
                if level == "WARNING" || level == "SEVERE" {
                    problems.push(format!("{name} ({suffix}): console {level}: {msg}"));
                }
            }
            browser
                .screenshot(&format!("phone-{name}-{suffix}"))
                .await?;
        }
    }
    browser.close().await?;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// Issue 43: a run that finished and produced nothing (every environment rejected, no win) no
/// longer looks like a plain success: the runs list flags it beside its status and its page
/// says why, while the status stays "succeeded".
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_run_that_produced_nothing_is_flagged_beside_its_status(
    pool: Pool,
) -> anyhow::Result<()> {
    let (server, db, tag) = start(pool, "nothing").await?;
    let email = format!("bo-{tag}@example.org");
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    let (user, team, project) =
        signed_up_with_project(&c, &server, &db, "Bo", &email, &tag.to_string()).await?;
    let scope = run_in(
        &db,
        &team,
        user,
        project,
        "tiny-demo",
        &demo_config(7, 0.28)?,
        7,
    )
    .await?;
    let mut b = spade_db::ingest::begin(&db, &scope).await?;
    b.run_started("e2e", 8).await?;
    let names: Vec<String> = [
        "accepted",
        "rejected",
        "rejections/syntax_error",
        "rejections/no_code",
        "win_rate/Optimization",
    ]
    .map(String::from)
    .to_vec();
    for step in 0..8i64 {
        let syntax = if step % 3 == 0 { 6.0 } else { 7.0 };
        b.metrics(
            step,
            30.0 * step as f64,
            &names,
            &[0.0, 9.0, syntax, 9.0 - syntax, 0.0],
        )
        .await?;
    }
    b.progress(8, 8, "done").await?;
    b.finished(spade_db::RunStatus::Succeeded, "").await?;
    b.commit().await?;

    c.goto(&format!("{}/runs", server.url)).await?;
    wait_for(&c, "#runs-table .run-warning").await?;
    let row = text_of(&c, "#runs-table tbody tr").await?;
    assert!(
        row.contains("Succeeded") || row.contains("succeeded"),
        "the status stays: {row}"
    );
    assert!(row.contains("no environment accepted, no win"), "{row}");
    browser.screenshot("dashboard-runs-nothing-usable").await?;
    c.goto(&format!("{}/runs/{}", server.url, scope.run_id()))
        .await?;
    wait_for(&c, "#run-warning").await?;
    let warning = text_of(&c, "#run-warning").await?;
    assert!(
        warning.contains("No environment was accepted in 8 steps: all 72 environments the designer wrote were rejected (53 syntax_error, 19 no_code)"),
        "{warning}"
    );
    assert!(
        warning.contains("never won an environment without a hint"),
        "{warning}"
    );
    browser.screenshot("dashboard-run-nothing-usable").await?;
    browser.close().await?;
    server.stop().await;
    Ok(())
}

/// Issue 43: an open run page follows the job's output without a reload. The warm start prints
/// its epochs long before the worker reports anything, and the page once kept the phase it was
/// loaded with ("warm start (epoch 2/12)" for 11 minutes) and never appended a line. Here a
/// real job (a script the local executor runs in place of the worker) prints the warm start's
/// lines; the page shows the newest phase and lines, scrolled to the newest while "Follow" is
/// on, and the log search narrows the panel to the matching lines.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_run_page_follows_the_jobs_output_without_a_reload(pool: Pool) -> anyhow::Result<()> {
    let tag = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let dir = std::env::temp_dir().join(format!("spade-e2e-follow-{tag}"));
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("warm-start.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         echo \"worker for run $1\"\n\
         i=1\n\
         while [ $i -le 40 ]; do\n\
           echo \"warm start: epoch $i/40, SFT loss 2.$i\"\n\
           echo \"  batch $i of the corpus\"\n\
           sleep 0.4\n\
           i=$((i + 1))\n\
         done\n\
         sleep 60\n",
    )?;
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let server = TestServer::start_with(
        pool.clone(),
        spade_e2e::ServerOptions {
            workers: true,
            worker_command: Some(format!("{} {{run}}", script.display())),
            ..Default::default()
        },
    )
    .await?;
    let email = format!("fo-{tag}@example.org");
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    c.set_window_size(1280, 1400).await?;
    let (user, team, project) =
        signed_up_with_project(&c, &server, &pool, "Fo Follow", &email, &tag.to_string()).await?;
    let scope = run_in(
        &pool,
        &team,
        user,
        project,
        "warm-start",
        &demo_config(7, 0.28)?,
        7,
    )
    .await?;
    let run_id = scope.run_id();
    spade_e2e::until(Duration::from_secs(30), "the job never started", || async {
        Ok(
            sqlx::query_scalar::<_, String>("SELECT status::text FROM runs WHERE id = $1")
                .bind(run_id)
                .fetch_one(&pool)
                .await?
                == "running",
        )
    })
    .await?;
    c.goto(&format!("{}/runs/{run_id}", server.url)).await?;
    spade_e2e::wait_hydrated(&c, Instant::now()).await?;
    wait_for(&c, "#log-follow").await?;
    let loaded_with = text_of(&c, "#run-phase").await?;
    c.execute(
        "window.__spadeMarker = 'same-document'; return null;",
        vec![],
    )
    .await?;
    let reached = spade_e2e::until(
        Duration::from_secs(40),
        "the page never reached the last epoch",
        || async {
            Ok(
                text_of(&c, "#run-phase").await? == "warm start (epoch 40/40)"
                    && text_of(&c, "#run-log")
                        .await?
                        .contains("batch 40 of the corpus"),
            )
        },
    )
    .await;
    if let Err(e) = reached {
        browser
            .screenshot("dashboard-run-log-follow-failed")
            .await?;
        anyhow::bail!(
            "{e}: loaded with phase {loaded_with:?}, now {:?}; log: {}",
            text_of(&c, "#run-phase").await?,
            text_of(&c, "#run-log").await?
        );
    }
    assert_ne!(
        loaded_with, "warm start (epoch 40/40)",
        "loaded too late to tell"
    );
    let marker = c
        .execute("return window.__spadeMarker || null;", vec![])
        .await?;
    assert_eq!(
        marker,
        serde_json::json!("same-document"),
        "a reload happened"
    );
    let log = text_of(&c, "#run-log").await?;
    let epochs: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("warm start: epoch"))
        .collect();
    assert_eq!(epochs.len(), 40, "each line once, in order: {log}");
    assert!(epochs.windows(2).all(|w| {
        let n = |l: &str| {
            l.split("epoch ")
                .nth(1)
                .and_then(|t| t.split('/').next())
                .and_then(|t| t.parse::<u32>().ok())
        };
        n(w[0]) < n(w[1])
    }));
    // Following: the panel is scrolled to its newest line.
    let gap = c
        .execute(
            "const e = document.getElementById('run-log'); \
             return e.scrollHeight - e.clientHeight - e.scrollTop;",
            vec![],
        )
        .await?;
    assert!(
        gap.as_f64().is_some_and(|g| g <= 2.0),
        "not at the newest line: {gap}"
    );
    browser.screenshot("dashboard-run-log-follow").await?;
    // The search narrows the panel; clearing it brings every line back.
    spade_e2e::fill(&c, "log-find", "epoch 17/").await?;
    spade_e2e::until(
        Duration::from_secs(5),
        "the search never applied",
        || async { Ok(text_of(&c, "#run-log").await?.lines().count() == 1) },
    )
    .await?;
    assert!(text_of(&c, "#run-log").await?.contains("SFT loss 2.17"));
    browser.screenshot("dashboard-run-log-search").await?;
    browser.close().await?;
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Issue 43: what a W&B user does with a run besides watching it, through the pages: rename,
/// tag and annotate it, find it by tag on the runs list, launch it again with changes (the
/// launch form starts from its configuration) and delete it.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_editor_tags_finds_launches_again_and_deletes_a_run(pool: Pool) -> anyhow::Result<()> {
    let (server, db, tag) = start(pool, "manage").await?;
    let email = format!("ed-{tag}@example.org");
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    c.set_window_size(1280, 1400).await?;
    let (user, team, project) =
        signed_up_with_project(&c, &server, &db, "Ed Editor", &email, &tag.to_string()).await?;
    let mut ids = Vec::new();
    for name in ["alpha", "beta"] {
        let scope = run_in(&db, &team, user, project, name, &demo_config(7, 0.28)?, 7).await?;
        let mut b = spade_db::ingest::begin(&db, &scope).await?;
        b.run_started("e2e", 8).await?;
        b.progress(8, 8, "done").await?;
        b.finished(spade_db::RunStatus::Succeeded, "").await?;
        b.commit().await?;
        ids.push(scope.run_id());
    }
    let (alpha, beta) = (ids[0], ids[1]);

    c.goto(&format!("{}/runs/{alpha}", server.url)).await?;
    spade_e2e::wait_hydrated(&c, Instant::now()).await?;
    spade_e2e::click(&c, "#edit-run summary").await?;
    fill(&c, "run-edit-name", "alpha lr sweep").await?;
    fill(&c, "run-edit-tags", "sweep, lr 1e-6").await?;
    fill(&c, "run-edit-notes", "KL blew up at step 40").await?;
    spade_e2e::click(&c, "#run-edit-save").await?;
    wait_for(&c, "#run-notes").await?;
    assert_eq!(text_of(&c, "h1").await?, "alpha lr sweep");
    assert_eq!(text_of(&c, "#run-notes").await?, "KL blew up at step 40");
    let tags = text_of(&c, ".run-details .tags").await?;
    assert!(tags.contains("sweep") && tags.contains("lr 1e-6"), "{tags}");
    browser.screenshot("dashboard-run-tags-notes").await?;

    // The tag is a link to the runs of the run's team that carry it.
    spade_e2e::click(&c, ".run-details a.tag").await?;
    wait_for_path(&c, &format!("/runs?team={}&tag=sweep", team.team_id())).await?;
    wait_for(&c, "#runs-table").await?;
    let table = text_of(&c, "#runs-table tbody").await?;
    assert!(
        table.contains("alpha lr sweep") && !table.contains("beta"),
        "{table}"
    );
    browser.screenshot("dashboard-runs-by-tag").await?;

    // Run again with changes: the launch form holds the run's configuration and a new name.
    c.goto(&format!("{}/runs/{alpha}", server.url)).await?;
    wait_for(&c, "#clone-run").await?;
    spade_e2e::click(&c, "#clone-run").await?;
    wait_for_path(&c, &format!("/runs/new?from={alpha}")).await?;
    wait_for(&c, "#launch-name").await?;
    let name = c
        .find(Locator::Id("launch-name"))
        .await?
        .prop("value")
        .await?
        .unwrap_or_default();
    assert_eq!(name, "alpha lr sweep-again");
    browser.screenshot("dashboard-launch-again").await?;

    // Delete, confirmed: back on the runs list without it.
    c.goto(&format!("{}/runs/{beta}", server.url)).await?;
    wait_for(&c, "#delete-run summary").await?;
    spade_e2e::click(&c, "#delete-run summary").await?;
    browser.screenshot("dashboard-run-delete-confirm").await?;
    spade_e2e::click(&c, "#delete-run-confirm").await?;
    wait_for(&c, "#runs-table").await?;
    let table = text_of(&c, "#runs-table tbody").await?;
    assert!(
        !table.contains("beta") && table.contains("alpha lr sweep"),
        "{table}"
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE id = $1")
        .bind(beta)
        .fetch_one(&db)
        .await?;
    assert_eq!(left, 0);
    browser.close().await?;
    server.stop().await;
    Ok(())
}

/// Issue 43: an owner makes an API token on the teams page, sees it once, a script reads the
/// team's runs with it, and revoking it on the page refuses it at the next request; then the
/// account page renames the person, refuses a mistyped password confirmation beside nothing
/// lost, changes the password, and lists this session and a chart view saved on the run page.
/// Screenshots `dashboard-team-token-new.png`, `dashboard-team-token-revoked.png`,
/// `dashboard-run-saved-view.png`, `dashboard-account.png`.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_owner_makes_uses_and_revokes_an_api_token_and_manages_the_account(
    pool: Pool,
) -> anyhow::Result<()> {
    let (server, db, tag) = start(pool, "tokens").await?;
    let email = format!("tia-{tag}@example.org");
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    c.set_window_size(1280, 1400).await?;
    let (user, team, project) =
        signed_up_with_project(&c, &server, &db, "Tia Token", &email, &tag.to_string()).await?;
    let run = run_in(
        &db,
        &team,
        user,
        project,
        "scripted",
        &demo_config(7, 0.28)?,
        7,
    )
    .await?;
    let t = team.team_id();

    c.goto(&format!("{}/teams", server.url)).await?;
    spade_e2e::wait_hydrated(&c, Instant::now()).await?;
    fill(&c, &format!("token-name-{t}"), "nightly eval").await?;
    spade_e2e::click(&c, &format!("#token-form-{t} button[type=submit]")).await?;
    wait_for(&c, &format!("#token-new-{t}")).await?;
    let token = c
        .find(Locator::Css(&format!("#token-new-{t} input")))
        .await?
        .prop("value")
        .await?
        .unwrap_or_default();
    assert!(token.starts_with("spt_"), "{token}");
    assert!(
        !c.current_url().await?.as_str().contains("spt_"),
        "never in the address"
    );
    spade_e2e::scroll_to(&c, &format!("tokens-{t}")).await?;
    browser.screenshot("dashboard-team-token-new").await?;

    let runs_url = format!("{}/api/v1/runs/{}", server.url, run.run_id());
    let bearer = format!("Bearer {token}");
    let (status, body) =
        spade_e2e::http_get_with(&runs_url, &[("Authorization", bearer.as_str())]).await?;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"scripted\""), "{body}");

    // Shown once: a reload does not show it again.
    c.refresh().await?;
    wait_for(&c, &format!("#tokens-{t}")).await?;
    assert!(
        c.find(Locator::Id(&format!("token-new-{t}")))
            .await
            .is_err(),
        "the token is not shown twice"
    );
    let row = text_of(&c, &format!("#tokens-{t} tbody")).await?;
    assert!(
        row.contains("nightly eval") && row.contains("viewer"),
        "{row}"
    );
    spade_e2e::click(&c, &format!("#tokens-{t} button.danger")).await?;
    wait_for(&c, "#teams-notice").await?;
    assert!(text_of(&c, "#teams-notice").await?.contains("revoked"));
    let (status, _) =
        spade_e2e::http_get_with(&runs_url, &[("Authorization", bearer.as_str())]).await?;
    assert_eq!(status, 401, "refused at the next request");
    spade_e2e::scroll_to(&c, &format!("tokens-{t}")).await?;
    browser.screenshot("dashboard-team-token-revoked").await?;

    // A saved chart view: the run page's settings under a name, offered as a link.
    c.goto(&format!(
        "{}/runs/{}?smooth=0.5&log=1&find=regret",
        server.url,
        run.run_id()
    ))
    .await?;
    spade_e2e::wait_hydrated(&c, Instant::now()).await?;
    fill(&c, "view-name", "regret, smoothed").await?;
    spade_e2e::click(&c, "#chart-views button[type=submit]").await?;
    wait_for(&c, "#chart-views a.view-link").await?;
    let href = c
        .find(Locator::Css("#chart-views a.view-link"))
        .await?
        .attr("href")
        .await?
        .unwrap_or_default();
    assert!(
        href.contains("smooth=0.50") && href.contains("log=1") && href.contains("find=regret"),
        "{href}"
    );
    spade_e2e::scroll_to(&c, "chart-views").await?;
    browser.screenshot("dashboard-run-saved-view").await?;

    // The account: name, password (a mistyped confirmation first), sessions.
    spade_e2e::click(&c, ".user-menu summary").await?;
    spade_e2e::click(&c, ".user-menu a[href='/account']").await?;
    wait_for_path(&c, "/account").await?;
    spade_e2e::wait_hydrated(&c, Instant::now()).await?;
    fill(&c, "account-name", "Tia Renamed").await?;
    spade_e2e::click(&c, "#name button[type=submit]").await?;
    wait_for(&c, "#account-notice").await?;
    assert!(
        text_of(&c, ".user-menu summary")
            .await?
            .contains("Tia Renamed")
    );
    fill(&c, "account-current", "correct horse battery").await?;
    fill(&c, "account-new", "a brand new passphrase").await?;
    fill(&c, "account-confirm", "a brand new passphrasf").await?;
    spade_e2e::click(&c, "#password button[type=submit]").await?;
    wait_for(&c, "#account-error").await?;
    assert!(
        text_of(&c, "#account-error")
            .await?
            .contains("confirm_password")
    );
    fill(&c, "account-current", "correct horse battery").await?;
    fill(&c, "account-new", "a brand new passphrase").await?;
    fill(&c, "account-confirm", "a brand new passphrase").await?;
    spade_e2e::click(&c, "#password button[type=submit]").await?;
    wait_for(&c, "#account-notice").await?;
    assert!(
        text_of(&c, "#account-notice")
            .await?
            .contains("Password changed"),
        "{}",
        text_of(&c, "#account-notice").await?
    );
    assert!(
        text_of(&c, "#sessions tbody")
            .await?
            .contains("this session")
    );
    assert!(text_of(&c, "#views").await?.contains("regret, smoothed"));
    browser.screenshot("dashboard-account").await?;
    browser.close().await?;
    server.stop().await;
    Ok(())
}
