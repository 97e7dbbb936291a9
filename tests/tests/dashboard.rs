//! The dashboard in a real browser against the real server and database: a person registers,
//! logs out and in again through the HTML forms, sees the runs page, opens a run with curves
//! and an environment with its diff, and switches the theme. Rows are seeded through `spade-db`
//! (the worker's ingestion path) for a team the new user owns. Each step saves a screenshot
//! under `artifacts/screenshots/` for people to look at.

use fantoccini::Locator;
use spade_db::ingest::{NewEnvironment, NewPlay};
use spade_db::types::{EnvKind, EnvStatus};
use spade_db::{RunScope, TeamScope, ingest, runs, teams, users};
use spade_e2e::{Browser, TestServer, fill, text_of, wait_for, wait_for_path};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PARENT_CODE: &str = "class CoinEnv:\n    \"\"\"Pay an amount with the fewest coins.\"\"\"\n\n    def reset(self, seed=None):\n        self.amount = 7\n        return f\"Pay {self.amount}\", {}\n";
const CHILD_CODE: &str = "class CoinEnv:\n    \"\"\"Pay an amount with the fewest coins.\"\"\"\n\n    def reset(self, seed=None):\n        self.amount = 11  # harder than its parent\n        return f\"Pay {self.amount} with coins 1, 5, 7\", {}\n";

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

/// A queued run in `project` with `config`, reported started, with five curves.
async fn seeded_run(
    db: &spade_db::Pool,
    team_scope: &TeamScope,
    user_id: i64,
    project_id: i64,
    name: &str,
    config: &serde_json::Value,
    offset: f64,
) -> anyhow::Result<(i64, ingest::Batch)> {
    let run = runs::create(
        db,
        team_scope,
        &runs::NewRun {
            project_id,
            name,
            config,
            executor: "local",
            seed: 7,
            code_version: "e2e",
        },
    )
    .await?;
    let scope = RunScope::for_member(db, user_id, run.id).await?;
    let mut b = ingest::begin(db, &scope).await?;
    b.run_started("e2e", 40).await?;
    let names: Vec<String> = [
        "regret_mean",
        "learnable_share",
        "acceptance_rate",
        "r_hint",
        "r_no_hint",
    ]
    .map(String::from)
    .to_vec();
    for step in 0..24i64 {
        let t = step as f64;
        let values = [
            offset + 0.05 + 0.01 * t + 0.03 * (t * 1.3).sin(),
            (offset + 0.1 + 0.01 * t).min(0.33),
            0.6 + 0.01 * t - offset,
            0.4 + 0.012 * t,
            0.35 + 0.006 * t + offset,
        ];
        b.metrics(step, 12.0 * t, &names, &values).await?;
    }
    // Held-out results of three checkpoints (0 = the base model both runs start from), as
    // evaluation jobs report them: per task and the aggregate `all`.
    for (step, gain) in [(0i64, 0.0), (12, 0.5), (24, 1.0)] {
        b.checkpoint(step, &format!("/ckpt/{name}/step-{step}"), 1 << 20)
            .await?;
        let tasks = [
            ("aiw", 0.10),
            ("zebra_puzzles", 0.05),
            ("propositional_logic", 0.20),
        ];
        let mut sum = 0.0;
        for (task, base) in tasks {
            let score = if step == 0 {
                base
            } else {
                base + gain * (0.1 + offset)
            };
            sum += score;
            b.benchmark(Some(step), "rg-logic", task, score, 20).await?;
        }
        b.benchmark(Some(step), "rg-logic", "all", sum / 3.0, 60)
            .await?;
    }
    Ok((run.id, b))
}

/// A team and project for `user_id` with two runs that differ in two settings; the newer one
/// ("tiny-demo") also has progress, logs and two environments (one derived from the other), as
/// a worker would have reported them; a third repeats tiny-demo's setting with another seed.
/// Returns the ids of (tiny-demo, tiny-demo-b, tiny-demo-seed9).
async fn seed(db: &spade_db::Pool, user_id: i64, tag: &str) -> anyhow::Result<(i64, i64, i64)> {
    let team = teams::create_team(db, user_id, &format!("lab-{tag}")).await?;
    let team_scope = TeamScope::for_member(db, user_id, team.id).await?;
    let project = teams::create_project(db, &team_scope, "coin games").await?;
    let config_b = serde_json::json!({"preset": "tiny", "seed": 8, "grpo": {"clip_low": 0.2, "clip_high": 0.3}});
    let (run_b, b) = seeded_run(
        db,
        &team_scope,
        user_id,
        project.id,
        "tiny-demo-b",
        &config_b,
        0.04,
    )
    .await?;
    b.commit().await?;
    // The same setting as "tiny-demo" with another seed: the compare view averages the two.
    let config_c = serde_json::json!({"preset": "tiny", "seed": 9, "grpo": {"clip_low": 0.2, "clip_high": 0.28}});
    let (run_c, c) = seeded_run(
        db,
        &team_scope,
        user_id,
        project.id,
        "tiny-demo-seed9",
        &config_c,
        0.02,
    )
    .await?;
    c.commit().await?;
    let config = serde_json::json!({"preset": "tiny", "seed": 7, "grpo": {"clip_low": 0.2, "clip_high": 0.28}});
    let (run_id, mut b) = seeded_run(
        db,
        &team_scope,
        user_id,
        project.id,
        "tiny-demo",
        &config,
        0.0,
    )
    .await?;

    b.progress(24, 40, "playing").await?;
    b.log("info", "step 23: 24 environments, 19 accepted")
        .await?;
    b.log("warn", "environment e-23 rejected: not_solvable")
        .await?;
    for (env_id, code, parent, status) in [
        ("m-1", PARENT_CODE, None, EnvStatus::Accepted),
        ("e-24", CHILD_CODE, Some("m-1"), EnvStatus::Accepted),
    ] {
        b.environment(&NewEnvironment {
            env_id,
            step: if parent.is_some() { 20 } else { 4 },
            skill: "Optimization",
            kind: EnvKind::Game,
            status,
            rejection_reason: None,
            rejection_message: None,
            code,
            hint: Some("Use the largest coin first, then check whether 5 + 5 + 1 beats it."),
            parent_env_id: parent,
            regret: Some(0.35),
            win_rate_hint: Some(0.65),
            win_rate_no_hint: Some(0.3),
            designer_reward: Some(0.83),
            reward_levels: Some(2),
            attempts: 1,
        })
        .await?;
    }
    b.plays(&[NewPlay {
        env_id: "e-24",
        step: 20,
        with_hint: true,
        episode_return: 1.0,
        won: true,
        turns: 2,
        transcript: serde_json::json!([
            {"role": "user", "content": "Pay 11 with coins 1, 5, 7"},
            {"role": "assistant", "content": "7 + 1 + 1 + 1 + 1 uses five coins; 5 +5 + 1 uses three. \\boxed{3}"}
        ]),
    }])
    .await?;
    b.commit().await?;
    Ok((run_id, run_b, run_c))
}

/// A server, a connection to its database, and a tag that makes this test's names unique: the
/// tests share one database and run at once, so the time alone (milliseconds) can repeat.
async fn start(test: &str) -> anyhow::Result<(TestServer, spade_db::Pool, String)> {
    let server = TestServer::start().await?;
    let db = spade_db::connect(
        &std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| spade_server::config::DEFAULT_DATABASE_URL.to_owned()),
    )
    .await?;
    let tag = format!(
        "{test}-{}",
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis()
    );
    Ok((server, db, tag))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_user_registers_logs_in_and_reads_a_run() -> anyhow::Result<()> {
    let (server, db, tag) = start("ada").await?;
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
    let (run_id, run_b, run_c) = seed(&db, user.id, &tag).await?;
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
    browser.screenshot("dashboard-benchmarks").await?;
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
    let token = spade_server::auth::tokens::random_token("sprun_");
    let scope = RunScope::for_member(&db, user.id, run_id).await?;
    runs::set_token_hash(&db, &scope, &spade_server::auth::tokens::hash_token(&token)).await?;
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_a_phone_and_hydrates_without_console_warnings() -> anyhow::Result<()> {
    let (server, db, tag) = start("phone").await?;
    let email = format!("phone-{tag}@example.org");
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    spade_e2e::register(&c, &server, "Pia Phone", &email, "correct horse battery").await?;
    let user = users::credentials(&db, &email)
        .await?
        .ok_or_else(|| anyhow::anyhow!("registered user not found"))?
        .user;
    let (run_id, run_b, run_c) = seed(&db, user.id, &tag).await?;
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
    ];
    let mut problems = Vec::new();
    for (theme, suffix) in [(Some("light"), "light"), (Some("dark"), "dark")] {
        for (name, path) in &pages {
            c.goto(&format!("{}{path}", server.url)).await?;
            spade_e2e::set_theme(&c, theme).await?;
            let _ = spade_e2e::console_messages(&c).await?;
            // A fresh load, so the log holds this page's hydration alone.
            c.refresh().await?;
            spade_e2e::wait_hydrated(&c, Instant::now()).await?;
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
