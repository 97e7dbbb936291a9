//! Server-rendered pages as a client without JavaScript gets them: the status code and the
//! `<title>` (issue 20, item 13). Pages about one run render completely before the response
//! starts, so a run that does not exist answers 404 with a not-found page, not 200.

use super::support::*;
use axum::http::StatusCode;

/// The text of the document's `<title>`.
fn title_of(html: &str) -> String {
    html.split_once("<title>")
        .and_then(|(_, rest)| rest.split_once("</title>"))
        .map(|(t, _)| t.to_owned())
        .unwrap_or_default()
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_missing_run_answers_404_with_a_not_found_page(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (_, _, run) = app.team_project_run(&ada, "lab").await;

    let page = app.get(&format!("/runs/{run}"), &ada).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    assert_eq!(title_of(&page.text()), "r · Run · SPADE Studio");

    for path in [
        "/no-such-page".to_owned(),
        "/runs/999".to_owned(),
        format!("/runs/{}", run + 1000),
        "/runs/999/environments".to_owned(),
        format!("/runs/{run}/environments/no-such-env"),
        "/runs/abc".to_owned(),
    ] {
        let missing = app.get(&path, &ada).await;
        let html = missing.text();
        assert_eq!(missing.status, StatusCode::NOT_FOUND, "{path}: {html}");
        assert!(html.contains("<html"), "{path}: a page, not an API error");
        // Issue 43: the not-found page offered "Log in / Register" to a logged-in user.
        assert!(
            html.contains("class=\"user-menu\"") && !html.contains("class=\"auth-links\""),
            "{path}: the signed-in viewer's menu is missing: {html}"
        );
        if path != "/runs/abc" {
            assert!(html.contains("id=\"not-found\""), "{path}: {html}");
            assert!(
                title_of(&html).ends_with("not found · SPADE Studio"),
                "{path}"
            );
        }
    }
    // Another team's run is as missing as one that never existed.
    let eve = app.user("eve@example.org").await;
    let theirs = app.get(&format!("/runs/{run}"), &eve).await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND);
    assert_eq!(title_of(&theirs.text()), "Run not found · SPADE Studio");
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn pages_have_titles_of_their_own(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (_, _, run) = app.team_project_run(&ada, "lab").await;
    for (path, title) in [
        ("/".to_owned(), "SPADE Studio"),
        ("/runs".to_owned(), "Runs · SPADE Studio"),
        (format!("/runs/{run}"), "r · Run · SPADE Studio"),
        (
            format!("/runs/{run}/environments"),
            "Environments of r · SPADE Studio",
        ),
        ("/teams".to_owned(), "Teams · SPADE Studio"),
        ("/runs/new".to_owned(), "New run · SPADE Studio"),
    ] {
        let page = app.get(&path, &ada).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert_eq!(title_of(&page.text()), title, "{path}");
    }
    Ok(())
}

/// A SPICE run's tasks are stored as environments (issue 21): the environment list, a task's
/// page (question, answer, document excerpt, the reasoner's answers) and the run page with the
/// SPICE chart render them.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_spice_runs_tasks_render_on_the_environment_and_run_pages(
    pool: sqlx::PgPool,
) -> TestResult {
    use crate::ingest::{batch, fixture, metrics};
    use spade::report::{EnvStatus, EnvironmentRecord, Message, PlayRecord, Turn, TurnRole};
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let corpus = spade::corpus::Corpus::bundled();
    let task = spade::spice::cloze_task(&corpus.documents()[0].text, 5, true)
        .ok_or("a task from the corpus")?;
    let record = EnvironmentRecord {
        win_rate_no_hint: Some(0.5),
        designer_reward: Some(1.0),
        attempts: 2,
        ..EnvironmentRecord::new(
            "spice-s0-d0",
            0,
            spade::spice::skill(&task),
            spade::EnvKind::Game,
            EnvStatus::Accepted,
            task.describe("the excerpt the challenger read"),
        )
    };
    let play = |won: bool| PlayRecord {
        env_id: "spice-s0-d0".into(),
        step: 0,
        with_hint: false,
        episode_return: if won { 1.0 } else { 0.0 },
        won,
        turns: 1,
        transcript: vec![
            Turn {
                role: TurnRole::User,
                content: spade::spice::reasoner_prompt(&task),
            },
            Turn {
                role: TurnRole::Assistant,
                content: format!(
                    "\\boxed{{{}}}",
                    if won { task.reference() } else { "Z".into() }
                ),
            },
        ],
    };
    let messages = vec![
        Message::Environment { record },
        Message::Plays {
            records: vec![play(true), play(false)],
        },
        metrics(
            0,
            &[
                ("spice/pass_rate", 0.5),
                ("spice/variance_reward", 1.0),
                ("spice/invalid_rate", 0.5),
            ],
        ),
    ];
    let r = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &f.worker,
            batch(run, 0, messages),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    let list = app
        .get(&format!("/runs/{run}/environments"), &f.owner)
        .await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(
        list.text().contains("spice_multiple_choice"),
        "{}",
        list.text()
    );
    let page = app
        .get(&format!("/runs/{run}/environments/spice-s0-d0"), &f.owner)
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    let html = page.text();
    for want in [
        "# SPICE task (multiple choice)",
        "Which word fills the blank?",
        "the excerpt the challenger read",
    ] {
        assert!(html.contains(want), "{want} missing from the task page");
    }
    let run_page = app.get(&format!("/runs/{run}"), &f.owner).await;
    assert_eq!(run_page.status, StatusCode::OK);
    assert!(run_page.text().contains("SPICE tasks"), "no SPICE chart");
    Ok(())
}

/// The run page's charts are reused while a run's series are unchanged, never after: a new
/// step and a re-logged value (a resume) both show on the next render.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_run_page_charts_follow_new_and_relogged_points(pool: sqlx::PgPool) -> TestResult {
    use crate::ingest::{batch, fixture, metrics};
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let loss = |page: &str| -> Vec<f64> {
        let v: serde_json::Value = serde_json::from_str(page).unwrap_or_default();
        let series = v["Granted"]["metrics"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        series
            .iter()
            .find(|s| s["name"] == "loss")
            .and_then(|s| s["points"]["value"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .collect()
    };
    let data = format!("/ui/run?run_id={run}");
    for (seq, (step, value, want)) in [
        (0, 1.5, vec![1.5]),
        (1, 0.75, vec![1.5, 0.75]),
        // Step 1 again with another value: no new point, a new revision.
        (1, 0.25, vec![1.5, 0.25]),
    ]
    .into_iter()
    .enumerate()
    {
        let r = app
            .post(
                &format!("/api/v1/ingest/{run}"),
                &f.worker,
                batch(run, seq as u64, vec![metrics(step, &[("loss", value)])]),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        // Twice: the second render is served from the cache and must say the same.
        for _ in 0..2 {
            let page = app.get(&data, &f.owner).await;
            assert_eq!(page.status, StatusCode::OK, "{}", page.text());
            assert_eq!(loss(&page.text()), want, "after step {step} = {value}");
        }
    }
    Ok(())
}

/// The compare view puts a SPADE run and a SPICE run on the same step axis (issue 21, item 4):
/// the metric both report (the training loss) is one chart with a series per run, SPICE's own
/// metrics get their chart, and the configuration diff names the algorithm.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_compare_view_overlays_a_spade_run_and_a_spice_run(pool: sqlx::PgPool) -> TestResult {
    use crate::ingest::{batch, metrics};
    use serde_json::json;
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (_, project, spade_run) = app.team_project_run(&ada, "lab").await;
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let spice_toml = std::fs::read_to_string(repo.join("configs/tiny-spice.toml"))?;
    let r = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &ada,
            json!({ "name": "spice-run", "config_toml": spice_toml }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let spice_run = r.json()["id"].as_i64().ok_or("run id")?;
    // The SPADE run again with another seed, stopped after two steps: a seed group whose runs
    // end at different steps (issue 20, item 9).
    let mut seed9 = spade::config::RunConfig::tiny_cpu_demo();
    seed9.run.seed = 9;
    let r = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &ada,
            json!({ "name": "seed9", "config_toml": seed9.to_toml() }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let seed_run = r.json()["id"].as_i64().ok_or("run id")?;
    for (run, values, steps) in [
        (spade_run, vec![("loss", 0.5), ("regret_mean", 0.1)], 3),
        (spice_run, vec![("loss", 0.7), ("spice/pass_rate", 0.4)], 3),
        (seed_run, vec![("loss", 0.6), ("regret_mean", 0.2)], 2),
    ] {
        let token = app
            .post(&format!("/api/v1/runs/{run}/token"), &ada, json!({}))
            .await
            .json()["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let worker = Cred::Bearer(token);
        let msgs = (0..steps).map(|s| metrics(s, &values)).collect();
        let r = app
            .post(
                &format!("/api/v1/ingest/{run}"),
                &worker,
                batch(run, 0, msgs),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    let page = app
        .get(&format!("/compare?run={spade_run}&run={spice_run}"), &ada)
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    let html = page.text();
    for want in [
        "Training loss",
        "Reasoner pass rate",
        "Regret (mean)",
        "spice-run",
        "run.algorithm",
    ] {
        assert!(html.contains(want), "{want} missing from the compare view");
    }
    let three = app
        .get(
            &format!("/compare?run={spade_run}&run={spice_run}&run={seed_run}&band=stderr&log=1&smooth=0.5"),
            &ada,
        )
        .await
        .text();
    for want in [
        "Mean and spread over seeds",
        "mean ± 1 standard error",
        "after step 2 the mean covers 1 of 2 runs",
        &format!("name=\"run\" value=\"{seed_run}\""),
        // Applying another band keeps the chart settings (the log scale was dropped).
        r#"name="log" value="1""#,
        r#"name="smooth" value="0.5""#,
    ] {
        assert!(three.contains(want), "{want} missing from the compare view");
    }
    // The compare view's CSV (issue 20, item 14): every run's rows; bad ids and other teams'
    // runs refused as the pages would.
    assert!(html.contains(&format!(
        "/api/v1/compare/metrics.csv?runs={spade_run},{spice_run}"
    )));
    let csv = app
        .get(
            &format!("/api/v1/compare/metrics.csv?runs={spade_run},{spice_run}"),
            &ada,
        )
        .await;
    assert_eq!(csv.status, StatusCode::OK, "{}", csv.text());
    let text = csv.text();
    assert!(
        text.starts_with("run_id,name,step,value,elapsed_s\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("\n{spade_run},regret_mean,3,0.1,")),
        "{text}"
    );
    assert!(
        text.contains(&format!("\n{spice_run},spice/pass_rate,1,0.4,")),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1 + 6 + 6);
    let bad = app.get("/api/v1/compare/metrics.csv?runs=1,x", &ada).await;
    assert_eq!(
        bad.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        bad.text()
    );
    assert!(bad.text().contains("runs"), "{}", bad.text());
    let eve = app.user("eve@example.org").await;
    let theirs = app
        .get(
            &format!("/api/v1/compare/metrics.csv?runs={spade_run}"),
            &eve,
        )
        .await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND, "{}", theirs.text());
    Ok(())
}

/// The runs list searches by name (issue 20, item 14): case-insensitive, `%` and `_` matching
/// themselves, in the API and on the page; an overlong search is refused naming `q`.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_runs_list_searches_by_name(pool: sqlx::PgPool) -> TestResult {
    use serde_json::json;
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (team, project, _) = app.team_project_run(&ada, "lab").await;
    for name in ["Alpha_1", "alpha-2", "beta%"] {
        let r = app
            .post(
                &format!("/api/v1/projects/{project}/runs"),
                &ada,
                json!({ "name": name, "config_toml": tiny_toml() }),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    }
    let names = |q: &str| {
        let app = &app;
        let ada = &ada;
        let path = format!("/api/v1/teams/{team}/runs?q={q}");
        async move {
            let r = app.get(&path, ada).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text());
            let mut v: Vec<String> = r.json()["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter_map(|i| i["name"].as_str().map(str::to_owned))
                .collect();
            v.sort();
            v
        }
    };
    assert_eq!(names("ALPHA").await, ["Alpha_1", "alpha-2"]);
    assert_eq!(names("a_1").await, ["Alpha_1"], "_ is no wildcard");
    assert_eq!(names("%25").await, ["beta%"], "% is no wildcard");
    assert_eq!(names("%20%20").await.len(), 4, "a blank search is none");
    let long = "x".repeat(201);
    app.get(&format!("/api/v1/teams/{team}/runs?q={long}"), &ada)
        .await
        .assert_refused("q", "at most 200 characters", "long search");
    let page = app.get("/runs?q=beta", &ada).await.text();
    assert!(
        page.contains("beta%") && !page.contains("Alpha_1"),
        "{page}"
    );
    Ok(())
}

/// A run whose designer had every environment rejected (the demo on a fresh machine, issue 43)
/// says so on its page and in the runs list, with the rejection reasons, beside a status that
/// stays as reported; a run that accepted environments and won has no warning.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_run_that_produced_nothing_says_so_beside_its_status(pool: sqlx::PgPool) -> TestResult {
    use crate::ingest::metrics;
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (_, project, failed) = app.team_project_run(&ada, "lab").await;
    let good = app.run_in(&ada, project, "good").await;
    let nothing = [
        ("accepted", 0.0),
        ("rejected", 9.0),
        ("rejections/syntax_error", 7.0),
        ("rejections/no_code", 2.0),
        ("win_rate/Logic", 0.0),
    ];
    let fine = [
        ("accepted", 3.0),
        ("rejected", 6.0),
        ("win_rate/Logic", 0.25),
    ];
    for (run, values) in [(failed, &nothing[..]), (good, &fine[..])] {
        let msgs = (0..2).map(|s| metrics(s, values)).collect();
        app.ingest_as_worker(&ada, run, msgs).await;
    }
    let page = app.get(&format!("/runs/{failed}"), &ada).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    let html = page.text();
    for want in [
        "id=\"run-warning\"",
        "Nothing usable: no environment accepted, no win.",
        "No environment was accepted in 2 steps: all 18 environments the designer wrote were \
         rejected (14 syntax_error, 4 no_code)",
        "never won an environment without a hint in 2 steps",
    ] {
        assert!(html.contains(want), "{want} missing from the run page");
    }
    let page = app.get(&format!("/runs/{good}"), &ada).await.text();
    assert!(!page.contains("run-warning"), "a good run is warned about");
    let list = app.get("/runs", &ada).await.text();
    assert_eq!(
        list.matches("class=\"run-warning\"").count(),
        1,
        "one run of the list is flagged"
    );
    assert!(list.contains("no environment accepted, no win"), "{list}");
    Ok(())
}

/// Issue 43: a queued run said nothing of why it waited; its page now shows its place in line
/// (counts of every team's jobs, never their names) until it starts.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_queued_run_shows_its_place_in_line(pool: sqlx::PgPool) -> TestResult {
    let db = pool.clone();
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (_, project, first) = app.team_project_run(&ada, "lab").await;
    let eve = app.user("eve@example.org").await;
    app.team_project_run(&eve, "other").await;
    let second = app.run_in(&ada, project, "second").await;
    // The scheduler's tick gives queued runs their jobs (this server has no scheduler).
    spade_db::jobs::sync_with_runs(&db).await?;
    let page = app.get(&format!("/runs/{first}"), &ada).await.text();
    assert!(
        page.contains("id=\"run-queue\"") && page.contains("first in line"),
        "{page}"
    );
    let page = app.get(&format!("/runs/{second}"), &ada).await.text();
    assert!(
        page.contains("2 jobs queued ahead of it"),
        "ada's first run and eve's run are ahead: {page}"
    );
    Ok(())
}

/// Issue 43: the run page's log can be downloaded (`log.txt`): the lines its worker reported
/// when there is no job output, as an attachment; another team's run is a 404.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_runs_log_downloads_as_a_file(pool: sqlx::PgPool) -> TestResult {
    use spade::report::{LogLevel, Message};
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (_, _, run) = app.team_project_run(&ada, "lab").await;
    let lines = [
        "step 0: 9 environments, 0 accepted",
        "step 1: 9 environments, 2 accepted",
    ];
    let msgs = lines
        .iter()
        .map(|l| Message::Log {
            level: LogLevel::Info,
            line: (*l).to_owned(),
        })
        .collect();
    app.ingest_as_worker(&ada, run, msgs).await;
    let r = app.get(&format!("/api/v1/runs/{run}/log.txt"), &ada).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.header("content-type").starts_with("text/plain"));
    assert!(
        r.header("content-disposition")
            .contains(&format!("run-{run}.log")),
        "{}",
        r.header("content-disposition")
    );
    let text = r.text();
    assert!(
        text.contains(lines[0]) && text.find(lines[0]) < text.find(lines[1]),
        "oldest first: {text}"
    );
    // A search keeps the matching lines only, ignoring case.
    let found = app
        .get(
            &format!("/api/v1/runs/{run}/log.txt?grep=2%20ACCEPTED"),
            &ada,
        )
        .await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.text());
    assert!(
        found.text().contains(lines[1]) && !found.text().contains(lines[0]),
        "{}",
        found.text()
    );
    let long = "x".repeat(201);
    app.get(&format!("/api/v1/runs/{run}/log.txt?grep={long}"), &ada)
        .await
        .assert_refused("grep", "at most 200", "an overlong search");
    let page = app.get(&format!("/runs/{run}"), &ada).await.text();
    assert!(
        page.contains(&format!("/api/v1/runs/{run}/log.txt")),
        "no download link"
    );
    let eve = app.user("eve@example.org").await;
    let theirs = app.get(&format!("/api/v1/runs/{run}/log.txt"), &eve).await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND);
    Ok(())
}

/// Issue 43: "step from" after "step to" on a run's environments page answered a bare 422
/// without the form; now the page keeps the form and says what is wrong, listing nothing.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_inverted_step_range_keeps_the_environment_form(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (_, _, run) = app.team_project_run(&ada, "lab").await;
    let page = app
        .get(
            &format!("/runs/{run}/environments?step_min=5&step_max=2"),
            &ada,
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    let html = page.text();
    for want in [
        "id=\"env-step-min\"",
        "value=\"5\"",
        "Step from (5) is after step to (2); no environment can match.",
    ] {
        assert!(html.contains(want), "{want} missing from:\n{html}");
    }
    Ok(())
}

/// The runs list sorts (issue 20, item 14): newest, oldest and by name (ignoring case), each
/// paged by its own keyset cursor without a row lost or repeated; a bad order or a cursor of
/// another order is refused naming the parameter; the page's rows follow `?sort=`.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_runs_list_sorts_and_pages_in_each_order(pool: sqlx::PgPool) -> TestResult {
    use serde_json::json;
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (team, project, first) = app.team_project_run(&ada, "lab").await;
    let first_name = app.get(&format!("/api/v1/runs/{first}"), &ada).await.json()["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut created = vec![first_name];
    for name in ["delta", "Bravo", "alpha", "Charlie", "bravo"] {
        let r = app
            .post(
                &format!("/api/v1/projects/{project}/runs"),
                &ada,
                json!({ "name": name, "config_toml": tiny_toml() }),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
        created.push(name.to_owned());
    }
    let all = |sort: &str| {
        let (app, ada, sort) = (&app, &ada, sort.to_owned());
        async move {
            let mut names = Vec::new();
            let mut cursor: Option<String> = None;
            for _ in 0..10 {
                let mut path = format!("/api/v1/teams/{team}/runs?sort={sort}&limit=2");
                if let Some(c) = &cursor {
                    path.push_str(&format!("&cursor={}", spade_app::pages::encode_query(c)));
                }
                let r = app.get(&path, ada).await;
                assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text());
                let body = r.json();
                names.extend(
                    body["items"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|i| i["name"].as_str().map(str::to_owned)),
                );
                match body["next_cursor"].as_str() {
                    Some(c) => cursor = Some(c.to_owned()),
                    None => break,
                }
            }
            names
        }
    };
    let oldest = all("oldest").await;
    assert_eq!(oldest, created);
    let mut newest = all("newest").await;
    newest.reverse();
    assert_eq!(newest, created);
    let by_name = all("name").await;
    let mut want = created.clone();
    // Ties (Bravo, bravo) keep creation order: the id is the second key.
    want.sort_by_key(|n| n.to_lowercase());
    assert_eq!(by_name, want);

    app.get(&format!("/api/v1/teams/{team}/runs?sort=size"), &ada)
        .await
        .assert_refused("sort", "newest, oldest or name", "bad sort");
    app.get(
        &format!("/api/v1/teams/{team}/runs?sort=name&cursor=17"),
        &ada,
    )
    .await
    .assert_refused("cursor", "same sort order", "a newest-first cursor by name");

    let page = app.get("/runs?sort=name", &ada).await.text();
    let at = |n: &str| page.find(&format!(">{n}<")).unwrap_or(usize::MAX);
    assert!(
        at("alpha") < at("Bravo") && at("Bravo") < at("Charlie") && at("Charlie") < at("delta"),
        "rows by name on the page"
    );
    assert!(page.contains(r#"<option value="name" selected"#));
    Ok(())
}

/// A browser session: the access cookie and the CSRF token a page puts in its forms.
pub(crate) async fn browser_session(app: &TestApp, email: &str) -> (String, String) {
    let login = app
        .post(
            "/api/v1/auth/login",
            &Cred::None,
            serde_json::json!({ "email": email, "password": PASSWORD }),
        )
        .await;
    assert_eq!(login.status, StatusCode::OK, "{}", login.text());
    (
        login.cookie("spade_access").unwrap_or_default(),
        login.cookie("spade_csrf").unwrap_or_default(),
    )
}

/// A form POST as a browser without JavaScript sends it.
pub(crate) async fn post_form(
    app: &TestApp,
    path: &str,
    access: &str,
    content_type: &str,
    body: &str,
) -> Resp {
    let req = axum::http::Request::builder()
        .method(axum::http::Method::POST)
        .uri(path)
        .header(axum::http::header::CONTENT_TYPE, content_type)
        .header(axum::http::header::COOKIE, format!("spade_access={access}"))
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap_or_default();
    app.send(req).await
}

pub(crate) const FORM: &str = "application/x-www-form-urlencoded";

/// The dashboard's forms act through the service functions the API calls, with the same
/// checks: an owner's cancel form cancels; the same form from a viewer, without its CSRF field,
/// or sent as JSON changes nothing and comes back with the reason; the share form's fields
/// reach the link, and a field that does not parse is named.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn dashboard_forms_change_through_the_service_with_the_apis_checks(
    pool: sqlx::PgPool,
) -> TestResult {
    let app = TestApp::new(pool);
    let owner = app.user("owner@x.org").await;
    let (team, _, run) = app.team_project_run(&owner, "t").await;
    app.register("viewer@x.org").await;
    let r = app.join(&owner, team, "viewer@x.org", "viewer").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let status = || async {
        app.get(&format!("/api/v1/runs/{run}"), &owner).await.json()["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let cancel = format!("/runs/{run}/cancel");
    let location = |r: &Resp| r.header("location");

    let (v_access, v_csrf) = browser_session(&app, "viewer@x.org").await;
    let r = post_form(&app, &cancel, &v_access, FORM, &format!("csrf={v_csrf}")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text());
    assert!(
        location(&r).starts_with(&format!("/runs/{run}?error=")) && location(&r).contains("viewer"),
        "a viewer is told why: {}",
        location(&r)
    );
    assert_eq!(status().await, "queued");

    let (access, csrf) = browser_session(&app, "owner@x.org").await;
    let r = post_form(&app, &cancel, &access, FORM, "").await;
    assert!(
        location(&r).contains("error=") && location(&r).contains("csrf"),
        "no CSRF field: {}",
        location(&r)
    );
    let json = format!("{{\"csrf\": \"{csrf}\"}}");
    let r = post_form(&app, &cancel, &access, "application/json", &json).await;
    assert!(
        location(&r).contains("error=") && location(&r).contains("form"),
        "not a form: {}",
        location(&r)
    );
    assert_eq!(status().await, "queued", "refused forms changed nothing");

    let r = post_form(&app, &cancel, &access, FORM, &format!("csrf={csrf}")).await;
    assert_eq!(
        (r.status, location(&r)),
        (StatusCode::SEE_OTHER, format!("/runs/{run}"))
    );
    assert_eq!(status().await, "cancelled");

    let shares = format!("/runs/{run}/shares");
    let body = format!("csrf={csrf}&label=for+Ana+%26+Bo&expires_in_days=seven");
    let r = post_form(&app, &shares, &access, FORM, &body).await;
    assert!(
        location(&r).contains("error=") && location(&r).contains("expires_in_days"),
        "{}",
        location(&r)
    );
    let body = format!("csrf={csrf}&label=for+Ana+%26+Bo&expires_in_days=7");
    let r = post_form(&app, &shares, &access, FORM, &body).await;
    assert_eq!(location(&r), format!("/runs/{run}#sharing"));
    let links = app
        .get(&format!("/api/v1/runs/{run}/shares"), &owner)
        .await
        .json();
    assert_eq!(links.as_array().map(Vec::len), Some(1), "{links}");
    assert_eq!(links[0]["label"], "for Ana & Bo");
    assert!(links[0]["expires_at"].is_string(), "{links}");
    Ok(())
}

/// Pages end while other routers of the same process are being built. Building one lists the
/// pages' routes by rendering the app with resource loading suppressed process-wide, and a page
/// whose resource was first polled in that window never ended (leptos-rs/leptos#4773): CI saw
/// the compare page stall for the 30 s limit, as every API test builds its own router. Before
/// routes were listed once per process, this test's first compare page stalled so.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn pages_end_while_other_routers_are_built(pool: sqlx::PgPool) -> TestResult {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    /// Stops the builder however the test ends (the runtime waits for it before a panic is
    /// reported).
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let app = TestApp::new(pool.clone());
    let ada = app.user("ada@example.org").await;
    let (_, _, run) = app.team_project_run(&ada, "lab").await;
    let stop = Stop(Arc::new(AtomicBool::new(false)));
    let built = Arc::new(AtomicUsize::new(0));
    let builder = {
        let (stop, built) = (stop.0.clone(), built.clone());
        let state = state(pool, spade_db::users::Registration::Open);
        tokio::task::spawn_blocking(move || {
            while !stop.load(Ordering::Relaxed) {
                drop(spade_server::app(state.clone()));
                built.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mut pages = 0;
    // At least 40 pages, rendered while at least 40 routers were built.
    while pages < 40 || built.load(Ordering::Relaxed) < 40 {
        for path in [format!("/compare?run={run}"), format!("/runs/{run}")] {
            let page = app.get(&path, &ada).await;
            assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.text());
            assert!(page.text().contains("</html>"), "{path}: an ended page");
            pages += 1;
        }
    }
    drop(stop);
    builder.await?;
    Ok(())
}
