//! Issue 36's attacks through a run token and a run configuration, one test each: a
//! checkpoint path naming another team's run or the file system (item 2), `[vllm]` paths and
//! URLs outside what the administrator allows (item 3), and the weaknesses of item 8 (tokens
//! that outlive their job, a re-issued token that ends the live worker, `env_id`s the database
//! refuses, megabyte log lines).

use crate::ingest::{batch, fixture_with};
use crate::support::*;
use axum::http::StatusCode;
use serde_json::json;
use spade::EnvKind;
use spade::report::{EnvStatus, EnvironmentRecord, LogLevel, Message};
use sqlx::PgPool;

fn checkpoint(step: u64, path: &str) -> Message {
    Message::Checkpoint {
        step,
        path: path.into(),
        bytes: 1,
    }
}

/// Item 2: an editor of team A, with A's run token, reports a checkpoint inside team B's run
/// state (and probes the file system) to get B's weights evaluated into A's run. Refused at
/// ingest with the field named; A's own checkpoint is accepted and shown relative to its state
/// directory, never as a server path; a path that got stored before the rule (or is 5,000
/// characters long) is refused again when an evaluation is queued, as a 422, not a 500.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_checkpoint_of_another_teams_run_is_refused_at_ingest_and_at_evaluation(
    pool: PgPool,
) -> TestResult {
    let dir = tempfile::tempdir()?;
    let app = TestApp::with_checkpoint_roots(pool.clone(), dir.path());
    let a = fixture_with(app).await;
    let bob = a.app.user("bob@x.org").await;
    let (_, _, run_b) = a.app.team_project_run(&bob, "bravo").await;
    let theirs = checkpoint_in(dir.path(), run_b, "checkpoints/step-3");
    let mine = checkpoint_in(dir.path(), a.run, "checkpoints/step-3");
    // A link inside A's own state directory that leads into B's.
    let link = spade_scheduler::run_state_dir(&dir.path().join("jobs"), a.run).join("b");
    std::os::unix::fs::symlink(&theirs, &link)?;
    let url = format!("/api/v1/ingest/{}", a.run);
    let long = format!("/{}", "x".repeat(5000));
    for bad in [
        theirs.as_str(),
        link.to_str().ok_or("path")?,
        &format!("{mine}/../../../spade-run-{run_b}-state/checkpoints/step-3"),
        "/etc",
        "/root/.ssh",
        "",
        &long,
    ] {
        let r = a
            .app
            .post(&url, &a.worker, batch(a.run, 0, vec![checkpoint(3, bad)]))
            .await;
        r.assert_refused(
            "envelopes[0].message.path",
            "inside this run's state directory",
            &format!("{bad:.80}"),
        );
    }
    let r = a
        .app
        .post(&url, &a.worker, batch(a.run, 0, vec![checkpoint(3, &mine)]))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let shown = a
        .app
        .get(&format!("/api/v1/runs/{}/checkpoints", a.run), &a.owner)
        .await;
    assert_eq!(
        shown.json()[0]["path"],
        "checkpoints/step-3",
        "{}",
        shown.text()
    );
    assert!(!shown.text().contains(&dir.path().display().to_string()));

    // Rows stored before the rule: B's path and an over-long one.
    for (step, path) in [(7_i64, theirs.clone()), (8, long.clone())] {
        sqlx::query("INSERT INTO checkpoints (run_id, step, path, bytes) VALUES ($1, $2, $3, 1)")
            .bind(a.run)
            .bind(step)
            .bind(&path)
            .execute(&pool)
            .await?;
        let r = a
            .app
            .post(
                &format!("/api/v1/runs/{}/evaluations", a.run),
                &a.owner,
                json!({"checkpoint_step": step, "suite": "rg-logic"}),
            )
            .await;
        r.assert_refused(
            "checkpoint_step",
            "inside this run's state directory",
            "queue",
        );
    }
    Ok(())
}

/// A change to one key of a run configuration.
type SetKey<'a> = Box<dyn Fn(&mut spade::config::RunConfig) + 'a>;

async fn create_run(app: &TestApp, cred: &Cred, project: i64, toml: String) -> Resp {
    app.post(
        &format!("/api/v1/projects/{project}/runs"),
        cred,
        json!({ "name": "v", "config_toml": toml }),
    )
    .await
}

/// Item 3: a run configuration makes the worker run a planted `bin/vllm` (`vllm.venv`), write
/// weights anywhere (`vllm.weights_dir`) or connect anywhere (`vllm.urls`, SSRF). Each key
/// outside the roots or the allow-list is refused at creation, named; the allowed forms pass.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn vllm_paths_and_urls_outside_what_is_allowed_are_refused_at_run_creation(
    pool: PgPool,
) -> TestResult {
    let dir = tempfile::tempdir()?;
    let venvs = dir.path().join("venvs");
    let weights = dir.path().join("weights");
    std::fs::create_dir_all(venvs.join("vllm"))?;
    std::fs::create_dir_all(&weights)?;
    std::fs::create_dir_all(dir.path().join("planted/bin"))?;
    let app = TestApp::with_state(pool, |s| {
        s.with_paths(
            spade_server::service::paths::PathRoots::default()
                .with_venvs(std::slice::from_ref(&venvs))
                .with_vllm_weights(std::slice::from_ref(&weights))
                .with_vllm_hosts(&["vllm.internal:8000".to_owned()]),
        )
    });
    let a = app.user("a@x.org").await;
    let (_, project, _) = app.team_project_run(&a, "t").await;
    let planted = dir.path().join("planted").display().to_string();
    let cases: Vec<(&str, SetKey<'_>)> = vec![
        (
            "config.vllm.venv",
            Box::new(|c| c.vllm.venv = Some(planted.clone())),
        ),
        (
            "config.vllm.venv",
            Box::new(|c| c.vllm.venv = Some("../planted".into())),
        ),
        (
            "config.vllm.weights_dir",
            Box::new(|c| c.vllm.weights_dir = Some("/etc/spade".into())),
        ),
        (
            "config.vllm.weights_dir",
            Box::new(|c| c.vllm.weights_dir = Some("../../x".into())),
        ),
        (
            "config.vllm.urls[0]",
            Box::new(|c| c.vllm.urls = vec!["http://169.254.169.254/".into()]),
        ),
        (
            "config.vllm.urls[0]",
            Box::new(|c| c.vllm.urls = vec!["http://127.0.0.1@evil.example:80/".into()]),
        ),
        (
            "config.vllm.urls[0]",
            Box::new(|c| c.vllm.urls = vec!["http://10.0.0.5:8000".into()]),
        ),
        (
            "config.vllm.urls[0]",
            Box::new(|c| c.vllm.urls = vec!["http://vllm.internal:9999".into()]),
        ),
    ];
    for (key, set) in &cases {
        let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
        set(&mut cfg);
        let r = create_run(&app, &a, project, cfg.to_toml()).await;
        r.assert_refused(key, "allowed", key);
    }
    let mut cfg = spade::config::RunConfig::tiny_cpu_demo();
    cfg.vllm.venv = Some("vllm".into());
    cfg.vllm.weights_dir = Some("run-a/new".into());
    cfg.vllm.urls = vec![
        "http://127.0.0.1:8000".into(),
        "http://[::1]:8001".into(),
        "http://localhost:8002".into(),
        "http://vllm.internal:8000".into(),
    ];
    let r = create_run(&app, &a, project, cfg.to_toml()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    assert_eq!(
        r.json()["config"]["vllm"]["weights_dir"].as_str(),
        weights.canonicalize()?.join("run-a/new").to_str()
    );
    Ok(())
}

fn env(id: &str) -> Message {
    Message::Environment {
        record: EnvironmentRecord {
            ..EnvironmentRecord::new(
                id,
                0,
                "arithmetic",
                EnvKind::Game,
                EnvStatus::Accepted,
                "class Env: pass",
            )
        },
    }
}

/// Item 8: poison reports (an `env_id` the database's CHECK refuses was a 500, which the
/// worker retries forever) are 422s naming the field; a 5 MB log line is stored cut to 16 KiB
/// with a marker; and the run token stops working once the run has ended.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn poison_reports_are_refused_and_a_run_token_dies_with_its_run(pool: PgPool) -> TestResult {
    let f = fixture_with(TestApp::new(pool.clone())).await;
    let url = format!("/api/v1/ingest/{}", f.run);
    for bad in [String::new(), "e".repeat(201)] {
        let r = f
            .app
            .post(&url, &f.worker, batch(f.run, 0, vec![env(&bad)]))
            .await;
        r.assert_refused("envelopes[0].message.record.env_id", "1 to 200", "env_id");
    }
    let huge = "x".repeat(5 << 20);
    let r = f
        .app
        .post(
            &url,
            &f.worker,
            batch(
                f.run,
                0,
                vec![Message::Log {
                    level: LogLevel::Info,
                    line: huge,
                }],
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let longest: Option<i32> =
        sqlx::query_scalar("SELECT max(octet_length(line)) FROM run_logs WHERE run_id = $1")
            .bind(f.run)
            .fetch_one(&pool)
            .await?;
    assert!(longest.is_some_and(|n| n < 17 * 1024), "{longest:?}");

    // The run ends (here: cancelled before any job started); its token is worth nothing now.
    let c = f
        .app
        .post(
            &format!("/api/v1/runs/{}/cancel", f.run),
            &f.owner,
            json!({}),
        )
        .await;
    assert_eq!(c.json()["status"], "cancelled", "{}", c.text());
    let r = f
        .app
        .post(&url, &f.worker, batch(f.run, 1, vec![env("e1")]))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
    let r = f
        .app
        .get(&format!("/api/v1/ingest/{}/config", f.run), &f.worker)
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
    Ok(())
}

/// Item 8: an editor re-issues the run token while the scheduler's job runs; before, the new
/// hash replaced the worker's and its next report was a 401 that ended the run. Now the
/// re-issue is refused (409) and the live worker's token keeps working.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn reissuing_the_token_of_a_running_job_does_not_end_its_worker(pool: PgPool) -> TestResult {
    use spade_db::jobs::{self, JobExecutor, JobKind};
    let f = fixture_with(TestApp::new(pool.clone())).await;
    jobs::enqueue(&pool, f.run, JobKind::Train, JobExecutor::Local).await?;
    let job = jobs::claim_next(&pool, JobExecutor::Local, "node")
        .await?
        .ok_or("the run's job is queued")?;
    jobs::record_started(&pool, job.id, "pid:1:1", None).await?;
    let r = f
        .app
        .post(
            &format!("/api/v1/runs/{}/token", f.run),
            &f.owner,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    assert_eq!(r.code(), "job_running");
    let ok = f
        .app
        .post(
            &format!("/api/v1/ingest/{}", f.run),
            &f.worker,
            batch(f.run, 0, vec![env("e1")]),
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text());
    Ok(())
}
