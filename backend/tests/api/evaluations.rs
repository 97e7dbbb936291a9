//! Evaluations of checkpoints: queued by editors or automatically from the run configuration,
//! run as jobs beside training, and stored only through the job's own token. The last test runs
//! a real `spade eval` job on a tiny model through the local scheduler and finds its scores in
//! the database.

use crate::ingest::batch;
use crate::support::*;
use axum::http::StatusCode;
use serde_json::{Value, json};
use spade::report::Message;
use spade_db::jobs::{self, JobExecutor, JobKind, JobState};
use sqlx::PgPool;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn checkpoint(step: u64, path: &str) -> Message {
    Message::Checkpoint {
        step,
        path: path.into(),
        bytes: 1,
    }
}

fn result(suite: &str, step: Option<u64>, task: &str, score: f64) -> Message {
    Message::BenchmarkResult {
        checkpoint_step: step,
        suite: suite.into(),
        task: task.into(),
        score,
        n: 4,
        stderr: Some(0.125),
        samples: 2,
    }
}

async fn worker_token(app: &TestApp, owner: &Cred, run: i64) -> String {
    app.post(&format!("/api/v1/runs/{run}/token"), owner, json!({}))
        .await
        .json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn evaluations(app: &TestApp, run: i64, cred: &Cred) -> Vec<Value> {
    let r = app
        .get(&format!("/api/v1/runs/{run}/evaluations"), cred)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    r.json().as_array().cloned().unwrap_or_default()
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn evaluations_are_queued_by_editors_and_results_need_the_jobs_own_token(
    pool: PgPool,
) -> TestResult {
    let dir = tempfile::tempdir()?;
    let app = &TestApp::with_checkpoint_roots(pool.clone(), dir.path());
    let owner = &app.user("owner@x.org").await;
    let (team, _, run) = app.team_project_run(owner, "t").await;
    let worker = Cred::Bearer(worker_token(app, owner, run).await);
    let base = model_in(dir.path(), "base");
    let step3 = checkpoint_in(dir.path(), run, "checkpoints/step-3");
    // The demo configuration evaluates checkpoint 0 (the base model) and every 6th step.
    let r = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &worker,
            batch(run, 0, vec![checkpoint(0, &base), checkpoint(3, &step3)]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let auto = evaluations(app, run, owner).await;
    assert_eq!(auto.len(), 1, "only checkpoint 0 is due: {auto:?}");
    assert_eq!(auto[0]["checkpoint_step"], 0);
    assert_eq!(auto[0]["suite"], "rg-logic");
    assert_eq!(auto[0]["trigger"], "auto");
    assert_eq!(auto[0]["state"], "queued");
    // A replay of checkpoint 0 under a new key queues nothing more.
    app.post(
        &format!("/api/v1/ingest/{run}"),
        &worker,
        batch(run, 10, vec![checkpoint(0, &base)]),
    )
    .await;
    assert_eq!(evaluations(app, run, owner).await.len(), 1);

    // Bad requests name the field and what was expected.
    let path = format!("/api/v1/runs/{run}/evaluations");
    let missing = app
        .post(
            &path,
            owner,
            json!({ "checkpoint_step": 7, "suite": "rg-hard" }),
        )
        .await;
    assert_eq!(missing.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        missing
            .text()
            .contains("no checkpoint at step 7 (it has 0, 3)"),
        "{}",
        missing.text()
    );
    let bad_suite = app
        .post(
            &path,
            owner,
            json!({ "checkpoint_step": 3, "suite": "gsm8k" }),
        )
        .await;
    assert_eq!(bad_suite.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad_suite.text().contains("`suite`"), "{}", bad_suite.text());
    let zero = app
        .post(
            &path,
            owner,
            json!({ "checkpoint_step": 3, "suite": "rg-hard", "limit": 0 }),
        )
        .await;
    assert!(zero.text().contains("`limit`"), "{}", zero.text());
    // k samples need a temperature above 0; with one they are queued and listed.
    for (bad, field) in [
        (json!({ "samples": 4 }), "`temperature`"),
        (json!({ "samples": 4, "temperature": 0.0 }), "`temperature`"),
        (json!({ "samples": 0 }), "`samples`"),
        (json!({ "samples": 2000, "temperature": 0.5 }), "`samples`"),
        (json!({ "temperature": -1.0 }), "`temperature`"),
    ] {
        let mut body = json!({ "checkpoint_step": 3, "suite": "humaneval" });
        for (k, v) in bad.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        let r = app.post(&path, owner, body).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{bad}: {}",
            r.text()
        );
        assert!(r.text().contains(field), "{bad}: {}", r.text());
    }

    // A viewer reads evaluations but cannot queue one.
    let viewer = app.user("viewer@x.org").await;
    let added = app.join(owner, team, "viewer@x.org", "viewer").await;
    assert_eq!(added.status, StatusCode::OK, "{}", added.text());
    let refused = app
        .post(
            &path,
            &viewer,
            json!({ "checkpoint_step": 3, "suite": "rg-hard" }),
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text());
    assert_eq!(evaluations(app, run, &viewer).await.len(), 1);
    let sampled = app
        .post(
            &path,
            owner,
            json!({ "checkpoint_step": 3, "suite": "humaneval", "limit": 5, "samples": 4,
                    "temperature": 0.7 }),
        )
        .await;
    assert_eq!(sampled.status, StatusCode::CREATED, "{}", sampled.text());
    assert_eq!(
        (&sampled.json()["samples"], &sampled.json()["temperature"]),
        (&json!(4), &json!(0.7))
    );

    let created = app
        .post(
            &path,
            owner,
            json!({ "checkpoint_step": 3, "suite": "rg-hard", "limit": 5 }),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
    let e = created.json();
    assert_eq!(e["trigger"], "manual");
    assert_eq!(e["item_limit"], 5);
    let job_id = e["job_id"].as_i64().ok_or("job_id")?;
    // Queued evaluations say what they wait for on the run's page (issue 43).
    let page = app.get(&format!("/runs/{run}"), owner).await.text();
    assert!(page.contains("queued ahead of it"), "{page}");

    // The evaluation is a job of kind eval beside the run's training job; claiming and ending
    // it leaves the run's status alone.
    let status_before =
        app.get(&format!("/api/v1/runs/{run}"), owner).await.json()["status"].clone();
    let job = jobs::get(&pool, job_id).await?.ok_or("job")?;
    assert_eq!((job.kind, job.state), (JobKind::Eval, JobState::Queued));
    sqlx::query("UPDATE jobs SET created_at = now() - interval '1 hour' WHERE id = $1")
        .bind(job_id)
        .execute(&pool)
        .await?;
    let claimed = jobs::claim_next(&pool, JobExecutor::Local, "node-a")
        .await?
        .ok_or("claimed")?;
    assert_eq!(claimed.id, job_id);
    jobs::record_started(&pool, job_id, "pid:1:1", None).await?;

    // Results: only with this job's token, only for its suite and checkpoint.
    let url = format!("/api/v1/evaluations/{job_id}/results");
    let body = |msgs: Vec<Message>| json!({ "messages": msgs });
    let good = body(vec![
        result("rg-hard", Some(3), "ab", 0.5),
        result("rg-hard", Some(3), "all", 0.25),
    ]);
    assert_eq!(
        app.post(&url, &Cred::None, good.clone()).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        app.post(&url, &worker, good.clone()).await.status,
        StatusCode::UNAUTHORIZED,
        "the run's worker token is not the job's"
    );
    let token = spade_server::tokens::jobs::for_evaluation(&pool, job_id).await?;
    let job_cred = Cred::Bearer(token);
    let other_job = app
        .post(
            &format!("/api/v1/evaluations/{}/results", auto[0]["job_id"]),
            &job_cred,
            good.clone(),
        )
        .await;
    assert_eq!(
        other_job.status,
        StatusCode::UNAUTHORIZED,
        "a token is for one job"
    );
    let wrong_suite = app
        .post(
            &url,
            &job_cred,
            body(vec![result("rg-logic", Some(3), "all", 1.0)]),
        )
        .await;
    assert_eq!(wrong_suite.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        wrong_suite.text().contains("messages[0].suite"),
        "{}",
        wrong_suite.text()
    );
    let wrong_step = app
        .post(
            &url,
            &job_cred,
            body(vec![result("rg-hard", Some(6), "all", 1.0)]),
        )
        .await;
    assert!(
        wrong_step.text().contains("messages[0].checkpoint_step"),
        "{}",
        wrong_step.text()
    );
    let not_a_result = app
        .post(&url, &job_cred, body(vec![checkpoint(9, "/x")]))
        .await;
    assert!(
        not_a_result.text().contains("messages[0].kind"),
        "{}",
        not_a_result.text()
    );

    let stored = app.post(&url, &job_cred, good).await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.text());
    assert_eq!(stored.json()["stored"], 2);
    // A retry replaces the evaluation's rows instead of adding to them.
    let retried = app
        .post(
            &url,
            &job_cred,
            body(vec![result("rg-hard", None, "all", 0.75)]),
        )
        .await;
    assert_eq!(retried.status, StatusCode::OK, "{}", retried.text());
    let rows = app
        .get(&format!("/api/v1/runs/{run}/benchmarks"), owner)
        .await
        .json();
    let rows = rows.as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0]["checkpoint_step"], 3,
        "the evaluation's step, not the caller's"
    );
    assert_eq!(rows[0]["score"], 0.75);
    // The standard error and the samples per question are kept for the paper's tables.
    assert_eq!(
        (&rows[0]["stderr"], &rows[0]["samples"]),
        (&json!(0.125), &json!(2))
    );
    for (field, bad) in [("stderr", json!(-0.5)), ("samples", json!(0))] {
        let mut m = serde_json::to_value(result("rg-hard", None, "all", 0.5))?;
        m[field] = bad;
        let r = app.post(&url, &job_cred, json!({ "messages": [m] })).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
        assert!(
            r.text().contains(&format!("messages[0].{field}")),
            "{}",
            r.text()
        );
    }

    jobs::finish(&pool, job_id, JobState::Succeeded, Some(0), "exit 0").await?;
    let late = app
        .post(
            &url,
            &job_cred,
            body(vec![result("rg-hard", Some(3), "all", 1.0)]),
        )
        .await;
    // Issue 36, item 8: the job's token died with the job.
    assert_eq!(late.status, StatusCode::UNAUTHORIZED, "{}", late.text());
    let status_after =
        app.get(&format!("/api/v1/runs/{run}"), owner).await.json()["status"].clone();
    assert_eq!(status_before, status_after);
    let listed = evaluations(app, run, owner).await;
    assert_eq!(listed[0]["state"], "succeeded");
    Ok(())
}

/// `target/debug` of the running test binary (`target/debug/deps/api-*`).
pub fn bin_dir() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    Ok(exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or("no target dir")?
        .to_path_buf())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_tiny_models_evaluation_runs_as_a_job_and_lands_in_the_database(
    pool: PgPool,
) -> TestResult {
    let spade = bin_dir()?.join("spade");
    if !spade.exists() {
        return Err(format!(
            "{} is missing: build the workspace first (cargo build; scripts/test does)",
            spade.display()
        )
        .into());
    }
    let tmp = tempfile::tempdir()?;
    let model = tmp.path().join("tiny");
    let init = std::process::Command::new(&spade)
        .args(["model", "init", "--preset", "tiny", "--out"])
        .arg(&model)
        .output()?;
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );

    let jobs_dir = tmp.path().join("jobs");
    let command = format!(
        "{} worker --run {{run}} --server {{server}}",
        spade.display()
    );
    let flags = [
        "--worker-command",
        command.as_str(),
        "--jobs-dir",
        jobs_dir.to_str().ok_or("path")?,
        "--scheduler-poll-ms",
        "100",
    ];
    let app = TestApp::with_scheduler_flags(pool.clone(), &flags);
    let (addr, server) = app.serve().await?;
    let owner = app.user("owner@x.org").await;
    let (_, _, run) = app.team_project_run(&owner, "t").await;
    // The model as the run's checkpoint 0, in its state directory (where the path rule
    // accepts a run's checkpoints), reported while the run is queued (a token dies with its
    // run).
    let ckpt = spade_scheduler::run_state_dir(&jobs_dir, run).join("checkpoints/base");
    std::fs::create_dir_all(ckpt.parent().ok_or("parent")?)?;
    std::fs::rename(&model, &ckpt)?;
    let token = worker_token(&app, &owner, run).await;
    let r = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &Cred::Bearer(token),
            batch(run, 0, vec![checkpoint(0, ckpt.to_str().ok_or("path")?)]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    // No training here: the run is cancelled before any job starts; its checkpoint 0 is still
    // evaluated, as the configuration asks (eval.base_model).
    let c = app
        .post(&format!("/api/v1/runs/{run}/cancel"), &owner, json!({}))
        .await;
    assert_eq!(c.json()["status"], "cancelled", "{}", c.text());

    let mut argv = vec!["spade-server"];
    argv.extend_from_slice(&flags);
    let settings = <spade_server::config::Config as clap::Parser>::parse_from(argv).scheduler;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task =
        spade_server::scheduling::spawn_with_run_tokens(pool.clone(), &settings, addr, stopped)?
            .ok_or("a local scheduler")?;

    let t0 = Instant::now();
    let done = loop {
        let e = evaluations(&app, run, &owner).await;
        let state = e
            .first()
            .map(|e| e["state"].as_str().unwrap_or_default().to_owned());
        if matches!(state.as_deref(), Some("succeeded" | "failed" | "cancelled")) {
            break e[0].clone();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "still {state:?}: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let elapsed = t0.elapsed();
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), task).await??;
    server.abort();
    let logs = std::fs::read_dir(&jobs_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|d| std::fs::read_to_string(d.path().join("output.log")).ok())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(done["state"], "succeeded", "{done}\njob output:\n{logs}");

    let rows = app
        .get(&format!("/api/v1/runs/{run}/benchmarks"), &owner)
        .await
        .json();
    let rows = rows.as_array().cloned().unwrap_or_default();
    // rg-logic has six datasets, plus the aggregate; two questions each (eval.limit = 2).
    assert_eq!(rows.len(), 7, "{rows:?}\njob output:\n{logs}");
    for row in &rows {
        assert_eq!(row["suite"], "rg-logic");
        assert_eq!(row["checkpoint_step"], 0);
        let score = row["score"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&score), "{row}");
    }
    let all = rows
        .iter()
        .find(|r| r["task"] == "all")
        .ok_or("aggregate")?;
    assert_eq!(all["n"], 12);
    let run_now = app.get(&format!("/api/v1/runs/{run}"), &owner).await.json();
    assert_eq!(
        run_now["status"], "cancelled",
        "an evaluation does not move its run"
    );
    eprintln!(
        "evaluation job: queued to succeeded in {:.1} s",
        elapsed.as_secs_f64()
    );
    Ok(())
}

/// The paper's table as CSV: suite means with standard errors and the games average, per
/// newest checkpoint or per checkpoint; another team's run is a 404 and a bad `rows` a 422.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_benchmarks_table_downloads_as_csv(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool.clone());
    let owner = app.user("owner@x.org").await;
    let (_, _, run) = app.team_project_run(&owner, "t").await;
    for (step, suite, score, stderr) in [
        (0i64, "rg-logic", 0.25, Some(0.05)),
        (0, "humaneval", 0.5, Some(0.1)),
        (4, "rg-logic", 0.5, Some(0.05)),
        (4, "humaneval", 0.75, None),
    ] {
        sqlx::query(
            "INSERT INTO benchmark_results (run_id, checkpoint_step, suite, task, score, n,
                                            stderr, samples)
             VALUES ($1, $2, $3, 'all', $4, 10, $5, 1)",
        )
        .bind(run)
        .bind(step)
        .bind(suite)
        .bind(score)
        .bind(stderr)
        .execute(&pool)
        .await?;
    }
    let r = app
        .get(&format!("/api/v1/benchmarks.csv?runs={run}"), &owner)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.header("content-type").starts_with("text/csv"));
    let text = r.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "model,step,humaneval,humaneval stderr,rg-logic,rg-logic stderr,games avg (2),\
         games avg (2) stderr"
    );
    assert!(lines[1].starts_with("base model (step 0),0,0.5,0.1,0.25,0.05,0.375,"));
    // The newest checkpoint's humaneval has no standard error: the average has none either.
    assert!(
        lines[2].ends_with(",4,0.75,,0.5,0.05,0.625,"),
        "{}",
        lines[2]
    );
    let by_step = app
        .get(
            &format!("/api/v1/benchmarks.csv?runs={run}&rows=checkpoints"),
            &owner,
        )
        .await;
    assert_eq!(by_step.text().lines().count(), 3, "{}", by_step.text());

    let bad = app
        .get(
            &format!("/api/v1/benchmarks.csv?runs={run}&rows=all"),
            &owner,
        )
        .await;
    assert_eq!(
        bad.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        bad.text()
    );
    assert!(bad.text().contains("rows"), "{}", bad.text());
    let stranger = app.user("stranger@x.org").await;
    app.team_project_run(&stranger, "s").await;
    let hidden = app
        .get(&format!("/api/v1/benchmarks.csv?runs={run}"), &stranger)
        .await;
    assert_eq!(hidden.status, StatusCode::NOT_FOUND, "{}", hidden.text());
    Ok(())
}
