//! Issue 43: what a W&B or MLflow user does with runs besides watching them: rename, tag and
//! annotate (`PATCH /runs/{id}`), find them again across the team's projects by tag,
//! configuration value and latest metric, delete them (never while a job is live), and launch
//! one again with changes. Each written as the attack or the mistake it refuses, beside what it
//! allows.

use crate::support::{Cred, TestApp, TestResult};
use axum::http::{Method, StatusCode};
use serde_json::json;
use spade::report::Message;
use std::collections::BTreeMap;

async fn patch(
    app: &TestApp,
    run: i64,
    who: &Cred,
    body: serde_json::Value,
) -> crate::support::Resp {
    app.call(
        Method::PATCH,
        &format!("/api/v1/runs/{run}"),
        who,
        Some(body),
    )
    .await
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn editors_rename_tag_and_annotate_runs_and_others_cannot(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (team, _, run) = app.team_project_run(&ada, "lab").await;
    let r = patch(
        &app,
        run,
        &ada,
        json!({"name": "  lr sweep 3 ", "tags": ["baseline", "lr 1e-6", "baseline"], "notes": "KL blew up\nat step 40"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let got = app.get(&format!("/api/v1/runs/{run}"), &ada).await.json();
    assert_eq!(got["name"], "lr sweep 3", "trimmed");
    assert_eq!(
        got["tags"],
        json!(["baseline", "lr 1e-6"]),
        "duplicates dropped, order kept"
    );
    assert_eq!(got["notes"], "KL blew up\nat step 40");
    // A field left out stays as it was.
    let r = patch(&app, run, &ada, json!({"notes": ""})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["tags"], json!(["baseline", "lr 1e-6"]));
    assert_eq!(r.json()["notes"], "");

    // Bad input names its field and changes nothing.
    patch(&app, run, &ada, json!({"tags": ["ok", "no<script>"]}))
        .await
        .assert_refused("tags[1]", "letters, digits", "a tag with markup");
    patch(
        &app,
        run,
        &ada,
        json!({"tags": (0..21).map(|i| format!("t{i}")).collect::<Vec<_>>()}),
    )
    .await
    .assert_refused("tags", "at most 20", "too many tags");
    patch(&app, run, &ada, json!({"name": "   "}))
        .await
        .assert_refused("name", "1 to 200", "a blank name");
    patch(&app, run, &ada, json!({"notes": "x".repeat(10_001)}))
        .await
        .assert_refused("notes", "at most 10000", "notes too long");
    let r = patch(&app, run, &ada, json!({"status": "succeeded"})).await;
    assert_eq!(
        r.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "an unknown field: {}",
        r.text()
    );
    assert!(r.message().contains("status"), "{}", r.message());
    let got = app.get(&format!("/api/v1/runs/{run}"), &ada).await.json();
    assert_eq!(
        got["tags"],
        json!(["baseline", "lr 1e-6"]),
        "nothing changed"
    );
    assert_eq!(got["status"], "queued");

    // A viewer of the team reads but cannot change; another team's run is not there at all.
    let vic = app.user("vic@example.org").await;
    let joined = app.join(&ada, team, "vic@example.org", "viewer").await;
    assert_eq!(joined.status, StatusCode::OK, "{}", joined.text());
    let r = patch(&app, run, &vic, json!({"tags": ["mine"]})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
    let eve = app.user("eve@example.org").await;
    let r = patch(&app, run, &eve, json!({"name": "pwned"})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &ada).await.json()["name"],
        "lr sweep 3"
    );
    let _ = vic;
    Ok(())
}

/// Three runs in two projects of one team, tagged and configured differently, with different
/// latest metrics: each search finds exactly its runs, across the projects.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn runs_are_found_by_tag_configuration_value_and_latest_metric(
    pool: sqlx::PgPool,
) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (team, p1, a) = app.team_project_run(&ada, "lab").await;
    let p2 = app
        .post(
            &format!("/api/v1/teams/{team}/projects"),
            &ada,
            json!({"name": "p2"}),
        )
        .await
        .json()["id"]
        .as_i64()
        .unwrap_or(-1);
    let b = app.run_in(&ada, p1, "b").await;
    let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
    // One trainer serves both roles at one temperature (the config refuses them apart).
    cfg.agent.temperature = 0.9;
    cfg.designer.temperature = 0.9;
    let c = app
        .post(
            &format!("/api/v1/projects/{p2}/runs"),
            &ada,
            json!({"name": "c", "config_toml": cfg.to_toml()}),
        )
        .await;
    assert_eq!(c.status, StatusCode::CREATED, "{}", c.text());
    let c = c.json()["id"].as_i64().unwrap_or(-1);
    for (run, tags) in [(a, vec!["sweep"]), (c, vec!["sweep", "hot"])] {
        let r = patch(&app, run, &ada, json!({ "tags": tags })).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    // Latest learnable share: a 0.1 -> 0.5, b 0.6 -> 0.2, c never logged it.
    for (run, values) in [(a, [0.1, 0.5]), (b, [0.6, 0.2])] {
        let msgs = values
            .iter()
            .enumerate()
            .map(|(step, v)| Message::Metrics {
                step: step as u64,
                elapsed_s: step as f64,
                values: BTreeMap::from([("learnable_share".to_owned(), *v)]),
            })
            .collect();
        app.ingest_as_worker(&ada, run, msgs).await;
    }
    let ids = |q: &str| {
        let app = &app;
        let ada = &ada;
        let url = format!("/api/v1/teams/{team}/runs?{q}");
        async move {
            let r = app.get(&url, ada).await;
            assert_eq!(r.status, StatusCode::OK, "{url}: {}", r.text());
            let mut ids: Vec<i64> = r.json()["items"]
                .as_array()
                .map(|a| a.iter().filter_map(|r| r["id"].as_i64()).collect())
                .unwrap_or_default();
            ids.sort_unstable();
            ids
        }
    };
    assert_eq!(
        ids("tag=sweep").await,
        vec![a, c],
        "by tag, across projects"
    );
    assert_eq!(ids("tag=hot").await, vec![c]);
    assert_eq!(
        ids("tag=swee").await,
        Vec::<i64>::new(),
        "a tag matches whole"
    );
    assert_eq!(ids("config=agent.temperature%3D0.9").await, vec![c]);
    let demo_t = spade::config::RunConfig::tiny_cpu_demo().agent.temperature;
    assert_eq!(
        ids(&format!("config=agent.temperature%3D{demo_t}")).await,
        vec![a, b]
    );
    assert_eq!(ids("metric=learnable_share").await, vec![a, b], "logged it");
    assert_eq!(
        ids("metric=learnable_share&metric_min=0.4").await,
        vec![a],
        "the latest value counts, not the best"
    );
    assert_eq!(ids("metric=learnable_share&metric_max=0.3").await, vec![b]);
    assert_eq!(
        ids("tag=sweep&metric=learnable_share").await,
        vec![a],
        "filters combine"
    );

    // Malformed searches name their parameter.
    for (q, field) in [
        ("config=agent.temperature", "config"),
        ("config=.x%3D1", "config"),
        ("metric_min=0.1", "metric"),
        ("metric=x&metric_min=2&metric_max=1", "metric_min"),
        ("tag=a%3Cb", "tag"),
    ] {
        let r = app
            .get(&format!("/api/v1/teams/{team}/runs?{q}"), &ada)
            .await;
        assert!(
            r.status == StatusCode::UNPROCESSABLE_ENTITY || r.status == StatusCode::BAD_REQUEST,
            "{q}: {} {}",
            r.status,
            r.text()
        );
        assert!(r.message().contains(field), "{q}: {}", r.message());
    }

    // The runs page does the same search and shows the tags.
    let page = app
        .get(&format!("/runs?team={team}&tag=hot"), &ada)
        .await
        .text();
    assert!(
        page.contains(&format!("href=\"/runs/{c}\"")),
        "run c listed"
    );
    assert!(
        !page.contains(&format!("href=\"/runs/{a}\"")),
        "run a not listed"
    );
    assert!(page.contains("class=\"tag\""), "tags shown");
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_running_run_cannot_be_deleted_and_an_ended_one_goes_with_its_data(
    pool: sqlx::PgPool,
) -> TestResult {
    let app = TestApp::new(pool.clone());
    let ada = app.user("ada@example.org").await;
    let (team, _, run) = app.team_project_run(&ada, "lab").await;
    app.ingest_as_worker(
        &ada,
        run,
        vec![Message::Metrics {
            step: 0,
            elapsed_s: 1.0,
            values: BTreeMap::from([("regret_mean".to_owned(), 0.2)]),
        }],
    )
    .await;
    sqlx::query("UPDATE runs SET status = 'running' WHERE id = $1")
        .bind(run)
        .execute(&pool)
        .await?;
    let r = app
        .call(Method::DELETE, &format!("/api/v1/runs/{run}"), &ada, None)
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    assert!(r.message().contains("cancel the run"), "{}", r.message());
    // The form on the page says the same, and the run stays.
    let vic = app.user("vic@example.org").await;
    app.join(&ada, team, "vic@example.org", "viewer").await;
    sqlx::query("UPDATE runs SET status = 'succeeded' WHERE id = $1")
        .bind(run)
        .execute(&pool)
        .await?;
    let r = app
        .call(Method::DELETE, &format!("/api/v1/runs/{run}"), &vic, None)
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "a viewer: {}", r.text());
    let eve = app.user("eve@example.org").await;
    let r = app
        .call(Method::DELETE, &format!("/api/v1/runs/{run}"), &eve, None)
        .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "another team: {}",
        r.text()
    );
    let r = app
        .call(Method::DELETE, &format!("/api/v1/runs/{run}"), &ada, None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text());
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &ada).await.status,
        StatusCode::NOT_FOUND
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM metrics WHERE run_id = $1")
        .bind(run)
        .fetch_one(&pool)
        .await?;
    assert_eq!(left, 0, "its metrics went with it");
    Ok(())
}

/// "Run again with changes": the launch form starts from the run's whole configuration, its
/// project and a new name; another team's run is a 404, not a form with its settings.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_run_is_launched_again_from_its_own_configuration(pool: sqlx::PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let (_, project, _) = app.team_project_run(&ada, "lab").await;
    let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
    cfg.agent.temperature = 0.83;
    cfg.designer.temperature = 0.83;
    let r = app
        .post(
            &format!("/api/v1/projects/{project}/runs"),
            &ada,
            json!({"name": "hot-run", "config_toml": cfg.to_toml()}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let run = r.json()["id"].as_i64().unwrap_or(-1);
    let page = app.get(&format!("/runs/{run}"), &ada).await.text();
    assert!(
        page.contains(&format!("href=\"/runs/new?from={run}\"")),
        "no clone link"
    );
    let form = app.get(&format!("/runs/new?from={run}"), &ada).await;
    assert_eq!(form.status, StatusCode::OK, "{}", form.text());
    let html = form.text();
    assert!(html.contains("value=\"hot-run-again\""), "the new name");
    assert!(
        html.contains("temperature = 0.83"),
        "the run's configuration in the TOML"
    );
    let eve = app.user("eve@example.org").await;
    let theirs = app.get(&format!("/runs/new?from={run}"), &eve).await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND, "{}", theirs.text());
    assert!(!theirs.text().contains("0.83"), "nothing of the run leaks");
    Ok(())
}

/// A checkpoint downloads as a zip of its directory's regular files, byte for byte; a link
/// inside it that points elsewhere on the server is left out; another team's run and a step
/// without a checkpoint are 404s.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_checkpoint_downloads_as_a_zip_and_never_for_another_team(
    pool: sqlx::PgPool,
) -> TestResult {
    use crate::support::checkpoint_in;
    let dir = tempfile::tempdir()?;
    let app = TestApp::with_checkpoint_roots(pool, dir.path());
    let ada = app.user("ada@example.org").await;
    let (_, _, run) = app.team_project_run(&ada, "lab").await;
    let ckpt = checkpoint_in(dir.path(), run, "checkpoints/step-3");
    let weights: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(format!("{ckpt}/model.safetensors"), &weights)?;
    std::fs::write(format!("{ckpt}/config.json"), br#"{"hidden_size": 64}"#)?;
    std::fs::create_dir_all(format!("{ckpt}/optimizer"))?;
    std::fs::write(format!("{ckpt}/optimizer/state.bin"), b"moments")?;
    let secret = dir.path().join("server-secret.txt");
    std::fs::write(&secret, b"not for download")?;
    std::os::unix::fs::symlink(&secret, format!("{ckpt}/leak.txt"))?;
    app.ingest_as_worker(
        &ada,
        run,
        vec![Message::Checkpoint {
            step: 3,
            path: ckpt.clone(),
            bytes: weights.len() as u64,
        }],
    )
    .await;
    let r = app
        .get(&format!("/api/v1/runs/{run}/checkpoints/3/download"), &ada)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.header("content-type"), "application/zip");
    assert!(
        r.header("content-disposition")
            .contains(&format!("run-{run}-step-3.zip"))
    );
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(r.body.clone()))?;
    let mut names: Vec<String> = zip
        .file_names()
        .map(|n| n.map(|n| n.into_owned()))
        .collect::<Result<_, _>>()?;
    names.sort();
    assert_eq!(
        names,
        ["config.json", "model.safetensors", "optimizer/state.bin"],
        "regular files only: the link is left out"
    );
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut zip.by_name("model.safetensors")?, &mut got)?;
    assert_eq!(got, weights, "byte for byte");

    let missing = app
        .get(&format!("/api/v1/runs/{run}/checkpoints/4/download"), &ada)
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.text());
    let eve = app.user("eve@example.org").await;
    let theirs = app
        .get(&format!("/api/v1/runs/{run}/checkpoints/3/download"), &eve)
        .await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND, "{}", theirs.text());
    assert!(!theirs.text().contains("hidden_size"));
    // The run page links it.
    let page = app.get(&format!("/runs/{run}"), &ada).await.text();
    assert!(page.contains(&format!("/api/v1/runs/{run}/checkpoints/3/download")));
    Ok(())
}

/// The compare page picks runs from every team the viewer is in (no address editing), and
/// offers nothing of a team the viewer is not in.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_compare_picker_offers_runs_of_every_team_of_the_viewer_only(
    pool: sqlx::PgPool,
) -> TestResult {
    let app = TestApp::new(pool);
    let ada = app.user("ada@example.org").await;
    let bob = app.user("bob@example.org").await;
    let eve = app.user("eve@example.org").await;
    let (_, pa, a1) = app.team_project_run(&ada, "ada-lab").await;
    let a2 = app.run_in(&ada, pa, "ada-second").await;
    let (bob_team, _, b1) = app.team_project_run(&bob, "bob-lab").await;
    let joined = app.join(&bob, bob_team, "ada@example.org", "viewer").await;
    assert_eq!(joined.status, StatusCode::OK, "{}", joined.text());
    let (_, _, e1) = app.team_project_run(&eve, "eve-lab").await;
    let html = app.get(&format!("/compare?run={a1}"), &ada).await.text();
    assert!(html.contains(r#"id="compare-add""#), "no picker");
    for id in [a2, b1] {
        assert!(
            html.contains(&format!(r#"<option value="{id}">"#)),
            "run {id} not offered"
        );
    }
    assert!(
        html.contains(r#"label="bob-lab / p""#),
        "grouped by team and project"
    );
    assert!(
        !html.contains(&format!(r#"<option value="{e1}">"#)),
        "another team's run offered"
    );
    assert!(
        !html.contains(&format!(r#"<option value="{a1}">"#)),
        "a run already shown is not offered again"
    );
    let both = app.get(&format!("/compare?run={a1}&run={b1}"), &ada).await;
    assert_eq!(both.status, StatusCode::OK, "{}", both.text());
    let html = both.text();
    assert!(html.contains(&format!("(#{a1})")) && html.contains(&format!("(#{b1})")));
    assert!(
        html.contains(&format!(r#"href="/compare?run={a1}""#)),
        "remove b1 link"
    );
    // Eve's one run shown, nothing else to offer: said, rather than an empty list.
    let html = app.get(&format!("/compare?run={e1}"), &eve).await.text();
    assert!(html.contains(r#"id="compare-none""#) && !html.contains(r#"id="compare-add""#));
    Ok(())
}
