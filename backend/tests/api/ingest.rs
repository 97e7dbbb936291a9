//! Worker ingestion, metrics downsampling, CSV export and environments.

use crate::support::*;
use axum::http::{StatusCode, header};
use serde_json::{Value, json};
use spade::EnvKind;
use spade::report::{EnvStatus, Envelope, EnvironmentRecord, Message, PlayRecord, Turn, TurnRole};
use sqlx::PgPool;
use std::collections::BTreeMap;

pub struct Fixture {
    pub app: TestApp,
    pub owner: Cred,
    pub run: i64,
    pub worker: Cred,
}

pub async fn fixture(pool: PgPool) -> Fixture {
    fixture_with(TestApp::new(pool)).await
}

/// The fixture's user, team, run and worker token on `app`.
pub async fn fixture_with(app: TestApp) -> Fixture {
    let owner = app.user("owner@x.org").await;
    let (_, _, run) = app.team_project_run(&owner, "t").await;
    let token = app
        .post(&format!("/api/v1/runs/{run}/token"), &owner, json!({}))
        .await
        .json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Fixture {
        app,
        owner,
        run,
        worker: Cred::Bearer(token),
    }
}

fn env(id: &str, step: u64, skill: &str, parent: Option<&str>, regret: f64) -> Message {
    Message::Environment {
        record: EnvironmentRecord {
            hint: Some("think first".into()),
            parent_env_id: parent.map(Into::into),
            regret: Some(regret),
            win_rate_hint: Some(0.5),
            win_rate_no_hint: Some(0.25),
            reward_levels: Some(3),
            ..EnvironmentRecord::new(
                id,
                step,
                skill,
                EnvKind::Game,
                EnvStatus::Accepted,
                format!("class Env_{id}: pass"),
            )
        },
    }
}

pub fn batch(run: i64, first_seq: u64, messages: Vec<Message>) -> Value {
    let envelopes: Vec<Envelope> = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| Envelope::at(run.to_string(), first_seq + i as u64, 1_700_000_000_000, m))
        .collect();
    json!({ "envelopes": envelopes })
}

pub fn metrics(step: u64, values: &[(&str, f64)]) -> Message {
    Message::Metrics {
        step,
        elapsed_s: step as f64 * 0.5,
        values: values
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn ingestion_is_idempotent_and_reports_cancellation(pool: PgPool) -> TestResult {
    let dir = tempfile::tempdir()?;
    let f = fixture_with(TestApp::with_checkpoint_roots(pool, dir.path())).await;
    let (app, run) = (&f.app, f.run);
    let ckpt = checkpoint_in(dir.path(), run, "checkpoints/step-1");
    let path = format!("/api/v1/ingest/{run}");
    let body = batch(
        run,
        0,
        vec![
            Message::RunStarted {
                config: json!({}),
                code_version: "test-1".into(),
                total_steps: 10,
            },
            env("e1", 0, "arithmetic", None, 0.3),
            Message::Plays {
                records: vec![PlayRecord {
                    env_id: "e1".into(),
                    step: 0,
                    with_hint: true,
                    episode_return: 1.0,
                    won: true,
                    turns: 2,
                    transcript: vec![Turn {
                        role: TurnRole::User,
                        content: "go".into(),
                    }],
                }],
            },
            metrics(0, &[("loss", 1.5), ("reward/mean", 0.1)]),
            Message::Progress {
                step: 1,
                total_steps: 10,
                phase: "play".into(),
            },
            Message::Checkpoint {
                step: 1,
                path: ckpt.clone(),
                bytes: 1234,
            },
            Message::BenchmarkResult {
                checkpoint_step: Some(1),
                suite: "held-out".into(),
                task: "sudoku".into(),
                score: 0.75,
                n: 20,
                stderr: None,
                samples: 1,
            },
        ],
    );
    let first = app.post(&path, &f.worker, body.clone()).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    assert_eq!(
        first.json()["acknowledged"].as_array().map(Vec::len),
        Some(7)
    );
    assert_eq!(first.json()["cancel_requested"], false);
    // Replay: acknowledged again, stored once.
    let replay = app.post(&path, &f.worker, body).await;
    assert_eq!(replay.json()["acknowledged"], first.json()["acknowledged"]);
    let envs = app
        .get(&format!("/api/v1/runs/{run}/environments"), &f.owner)
        .await
        .json();
    assert_eq!(envs["items"].as_array().map(Vec::len), Some(1));
    let names = app
        .get(&format!("/api/v1/runs/{run}/metrics"), &f.owner)
        .await
        .json();
    assert_eq!(names[0]["name"], "loss");
    assert_eq!(names[0]["points"], 1);
    let detail = app
        .get(&format!("/api/v1/runs/{run}/environments/e1"), &f.owner)
        .await
        .json();
    assert_eq!(
        detail["plays"].as_array().map(Vec::len),
        Some(1),
        "the play was stored once"
    );
    let r = app
        .get(&format!("/api/v1/runs/{run}"), &f.owner)
        .await
        .json();
    assert_eq!(
        (
            r["status"].as_str(),
            r["progress_step"].as_i64(),
            r["code_version"].as_str()
        ),
        (Some("running"), Some(1), Some("test-1"))
    );
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}/checkpoints"), &f.owner)
            .await
            .json()[0]["bytes"],
        1234
    );
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}/benchmarks"), &f.owner)
            .await
            .json()[0]["score"],
        0.75
    );

    // A step logged again under a new key (a resumed worker) replaces the value, not the count.
    let relog = app
        .post(
            &path,
            &f.worker,
            batch(
                run,
                20,
                vec![metrics(0, &[("loss", 2.5)]), metrics(1, &[("loss", 1.0)])],
            ),
        )
        .await;
    assert_eq!(relog.status, StatusCode::OK, "{}", relog.text());
    let names = app
        .get(&format!("/api/v1/runs/{run}/metrics"), &f.owner)
        .await
        .json();
    assert_eq!(
        (names[0]["points"].as_i64(), names[0]["last_step"].as_i64()),
        (Some(2), Some(1))
    );
    let series = app
        .get(&format!("/api/v1/runs/{run}/metrics/loss"), &f.owner)
        .await
        .json();
    assert_eq!(series["points"][0]["value"], 2.5);

    // Cancelling reaches the worker in the next reply.
    assert_eq!(
        app.post(&format!("/api/v1/runs/{run}/cancel"), &f.owner, json!({}))
            .await
            .json()["status"],
        "cancelling"
    );
    let next = app
        .post(
            &path,
            &f.worker,
            batch(
                run,
                7,
                vec![Message::Progress {
                    step: 2,
                    total_steps: 10,
                    phase: "train".into(),
                }],
            ),
        )
        .await;
    assert_eq!(next.json()["cancel_requested"], true);
    let done = app
        .post(
            &path,
            &f.worker,
            batch(
                run,
                8,
                vec![Message::Finished {
                    status: spade::report::FinishStatus::Cancelled,
                    message: "stopped".into(),
                }],
            ),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK);
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &f.owner)
            .await
            .json()["status"],
        "cancelled"
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn ingestion_refuses_bad_tokens_and_bad_envelopes(pool: PgPool) -> TestResult {
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let path = format!("/api/v1/ingest/{run}");
    let ok = batch(
        run,
        0,
        vec![Message::Progress {
            step: 0,
            total_steps: 1,
            phase: "x".into(),
        }],
    );
    assert_eq!(
        app.post(&path, &Cred::None, ok.clone()).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        app.post(&path, &Cred::Bearer("spr_wrong".into()), ok.clone())
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        app.post(&path, &f.owner, ok.clone()).await.status,
        StatusCode::UNAUTHORIZED,
        "a user token is not a run token"
    );
    assert_eq!(
        app.get(&format!("{path}/config"), &Cred::Bearer("spr_wrong".into()))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // A token for this run does not open another run.
    let (_, _, other) = app.team_project_run(&f.owner, "t2").await;
    assert_eq!(
        app.post(
            &format!("/api/v1/ingest/{other}"),
            &f.worker,
            batch(other, 0, vec![])
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );
    // Envelopes naming another run, or with an inconsistent key, are refused with the field.
    let wrong_run = batch(
        other,
        0,
        vec![Message::Progress {
            step: 0,
            total_steps: 1,
            phase: "x".into(),
        }],
    );
    let r = app.post(&path, &f.worker, wrong_run).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.text().contains("envelopes[0].run_id"), "{}", r.text());
    let mut bad_key = ok.clone();
    bad_key["envelopes"][0]["key"] = json!("other");
    assert!(
        app.post(&path, &f.worker, bad_key)
            .await
            .text()
            .contains("envelopes[0].key")
    );
    let unknown = batch(
        run,
        0,
        vec![Message::EnvironmentScored {
            env_id: "ghost".into(),
            step: 0,
            regret: 0.1,
            win_rate_hint: 0.1,
            win_rate_no_hint: 0.1,
            designer_reward: 0.1,
            reward_levels: 1,
        }],
    );
    let r = app.post(&path, &f.worker, unknown).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.text().contains("ghost"), "{}", r.text());
    // The failed batch stored nothing, not even its key: the valid batch with seq 0 applies.
    assert_eq!(app.post(&path, &f.worker, ok).await.status, StatusCode::OK);
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &f.owner)
            .await
            .json()["phase"],
        "x"
    );
    let too_many = batch(
        run,
        100,
        (0..501)
            .map(|s| Message::Progress {
                step: s,
                total_steps: 600,
                phase: "x".into(),
            })
            .collect(),
    );
    assert!(
        app.post(&path, &f.worker, too_many)
            .await
            .text()
            .contains("at most 500")
    );
    // The worker reads its configuration back as TOML.
    let cfg = app.get(&format!("{path}/config"), &f.worker).await;
    assert_eq!(cfg.status, StatusCode::OK);
    let parsed = spade::config::RunConfig::from_toml_str(&cfg.text())?;
    assert_eq!(parsed, spade::config::RunConfig::tiny_cpu_demo());
    Ok(())
}

/// Issue 35: a stored configuration no worker can read (`{"preset": "tiny"}`, what the browser
/// tests once seeded) answers its worker 409 `unreadable_config` naming the field, which the
/// worker does not retry, and fails the run once with that reason in its status and log,
/// instead of answering 500 to every attempt.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_stored_configuration_no_worker_can_read_fails_the_run_once_saying_why(
    pool: PgPool,
) -> TestResult {
    let f = fixture(pool.clone()).await;
    let (app, run) = (&f.app, f.run);
    sqlx::query("UPDATE runs SET config = $2 WHERE id = $1")
        .bind(run)
        .bind(json!({"preset": "tiny", "seed": 7}))
        .execute(&pool)
        .await?;
    let config = format!("/api/v1/ingest/{run}/config");
    let r = app.get(&config, &f.worker).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    assert_eq!(r.code(), "unreadable_config");
    assert!(
        r.message().contains("unknown field `preset`"),
        "{}",
        r.message()
    );
    let record = app
        .get(&format!("/api/v1/runs/{run}"), &f.owner)
        .await
        .json();
    assert_eq!(record["status"], "failed", "{record}");
    assert!(
        record["status_message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown field `preset`")),
        "{record}"
    );
    // Asked again (a worker started by hand), it is refused again, and the run keeps one line.
    let again = app.get(&config, &f.worker).await;
    assert!(again.status.is_client_error(), "{}", again.status);
    let lines: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM run_logs WHERE run_id = $1 AND level = 'error' \
         AND line LIKE '%unknown field `preset`%'",
    )
    .bind(run)
    .fetch_one(&pool)
    .await?;
    assert_eq!(lines, 1, "the reason is logged once");
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn metrics_are_downsampled_keeping_endpoints_and_extremes_and_export_as_csv(
    pool: PgPool,
) -> TestResult {
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let path = format!("/api/v1/ingest/{run}");
    let n = 3_000u64;
    let value = |s: u64| match s {
        1_000 => 90.0,
        2_000 => -70.0,
        _ => (s as f64 / 100.0).sin(),
    };
    let msgs: Vec<Message> = (0..n)
        .map(|s| metrics(s, &[("loss", value(s)), ("odd,name", 1.0)]))
        .collect();
    for (i, chunk) in msgs.chunks(500).enumerate() {
        let r = app
            .post(
                &path,
                &f.worker,
                batch(run, (i * 500) as u64, chunk.to_vec()),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    let s = app
        .get(
            &format!("/api/v1/runs/{run}/metrics/loss?points=100"),
            &f.owner,
        )
        .await
        .json();
    let pts = s["points"].as_array().cloned().unwrap_or_default();
    assert_eq!(s["total_points"], n);
    assert_eq!(pts.len(), 100);
    assert_eq!(pts.first().map(|p| p["step"].clone()), Some(json!(0)));
    assert_eq!(pts.last().map(|p| p["step"].clone()), Some(json!(n - 1)));
    assert!(
        pts.iter().any(|p| p["step"] == 1_000 && p["value"] == 90.0),
        "the maximum survives"
    );
    assert!(
        pts.iter()
            .any(|p| p["step"] == 2_000 && p["value"] == -70.0),
        "the minimum survives"
    );
    let ranged = app
        .get(
            &format!("/api/v1/runs/{run}/metrics/loss?points=10&step_min=100&step_max=199"),
            &f.owner,
        )
        .await
        .json();
    assert_eq!(ranged["total_points"], 100);
    assert_eq!(ranged["points"][0]["step"], 100);
    assert_eq!(
        app.get(
            &format!("/api/v1/runs/{run}/metrics/loss?points=1"),
            &f.owner
        )
        .await
        .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}/metrics/nothing"), &f.owner)
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    let csv = app
        .get(
            &format!("/api/v1/runs/{run}/metrics.csv?names=loss"),
            &f.owner,
        )
        .await;
    assert_eq!(csv.status, StatusCode::OK);
    assert!(
        csv.headers[header::CONTENT_TYPE]
            .to_str()?
            .starts_with("text/csv")
    );
    let text = csv.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "run_id,name,step,value,elapsed_s");
    assert_eq!(lines.len(), n as usize + 1);
    // Steps in the CSV count from 1, as the charts and the log do (the stored index is 0).
    assert_eq!(lines[1], format!("{run},loss,1,0,0"));
    assert_eq!(lines[1001], format!("{run},loss,1001,90,500"));
    let all = app
        .get(&format!("/api/v1/runs/{run}/metrics.csv"), &f.owner)
        .await
        .text();
    assert_eq!(all.lines().count(), 2 * n as usize + 1);
    assert!(
        all.contains(&format!("{run},loss,")) && all.contains(&format!("{run},\"odd,name\",1,1,0")),
        "names with commas are quoted"
    );
    Ok(())
}

/// Four environments at steps 0, 4, 8, 12 (a, b, d logic; c math; regrets 0.1, 0.6, 0.9, 0.4),
/// then a's delayed scores: regret 0.2, win rates 0.9 / 0.3, designer reward 0.5.
fn four_envs() -> Vec<Message> {
    vec![
        env("a", 0, "logic", None, 0.1),
        env("b", 4, "logic", Some("a"), 0.6),
        env("c", 8, "math", Some("seed-7"), 0.9),
        env("d", 12, "logic", Some("b"), 0.4),
        Message::EnvironmentScored {
            env_id: "a".into(),
            step: 4,
            regret: 0.2,
            win_rate_hint: 0.9,
            win_rate_no_hint: 0.3,
            designer_reward: 0.5,
            reward_levels: 2,
        },
    ]
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn environments_filter_and_detail(pool: PgPool) -> TestResult {
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let msgs = four_envs();
    assert_eq!(
        app.post(
            &format!("/api/v1/ingest/{run}"),
            &f.worker,
            batch(run, 0, msgs)
        )
        .await
        .status,
        StatusCode::OK
    );
    let ids = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["env_id"].as_str().map(str::to_owned))
            .collect()
    };
    let base = format!("/api/v1/runs/{run}/environments");
    assert_eq!(
        ids(&app
            .get(&format!("{base}?skill=logic"), &f.owner)
            .await
            .json()),
        ["a", "b", "d"]
    );
    assert_eq!(
        ids(&app
            .get(&format!("{base}?step_min=4&step_max=8"), &f.owner)
            .await
            .json()),
        ["b", "c"]
    );
    assert_eq!(
        ids(&app
            .get(&format!("{base}?regret_min=0.3&regret_max=0.7"), &f.owner)
            .await
            .json()),
        ["b", "d"]
    );
    assert_eq!(
        ids(&app
            .get(&format!("{base}?status=rejected"), &f.owner)
            .await
            .json()),
        Vec::<String>::new()
    );
    let p1 = app.get(&format!("{base}?limit=3"), &f.owner).await.json();
    assert_eq!(ids(&p1), ["a", "b", "c"]);
    let p2 = app
        .get(
            &format!(
                "{base}?limit=3&cursor={}",
                p1["next_cursor"].as_str().unwrap_or("")
            ),
            &f.owner,
        )
        .await
        .json();
    assert_eq!(ids(&p2), ["d"]);
    assert!(p2["next_cursor"].is_null(), "the last page offers no next");
    // A page that ends exactly at the last environment offers none either (the list reads one
    // more than it shows to know).
    let exact = app.get(&format!("{base}?limit=4"), &f.owner).await.json();
    assert_eq!(ids(&exact), ["a", "b", "c", "d"]);
    assert!(exact["next_cursor"].is_null(), "{exact}");
    assert_eq!(
        app.get(&format!("{base}?step_min=9&step_max=1"), &f.owner)
            .await
            .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let a = app.get(&format!("{base}/a"), &f.owner).await.json();
    assert_eq!(
        (a["regret"].as_f64(), a["designer_reward"].as_f64()),
        (Some(0.2), Some(0.5)),
        "delayed scores applied"
    );
    let b = app.get(&format!("{base}/b"), &f.owner).await.json();
    assert_eq!(b["code"], "class Env_b: pass");
    assert_eq!(b["hint"], "think first");
    assert_eq!(b["parent"]["env_id"], "a");
    assert!(
        app.get(&format!("{base}/c"), &f.owner).await.json()["parent"].is_null(),
        "parent outside the run"
    );
    assert_eq!(
        app.get(&format!("{base}/zzz"), &f.owner).await.status,
        StatusCode::NOT_FOUND
    );
    Ok(())
}

/// An environment that broke the contract in play is stored as `broken_in_play` with its
/// reason and the failing play's seed; its plays stay; the status filter finds it.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_environment_broken_in_play_keeps_its_plays_and_shows_reason_and_seed(
    pool: PgPool,
) -> TestResult {
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let path = format!("/api/v1/ingest/{run}");
    let play = PlayRecord {
        env_id: "e1".into(),
        step: 2,
        with_hint: false,
        episode_return: 0.0,
        won: false,
        turns: 4,
        transcript: vec![],
    };
    let body = batch(
        run,
        0,
        vec![
            env("e1", 0, "arithmetic", None, 0.3),
            env("e2", 0, "arithmetic", None, 0.3),
            Message::Plays {
                records: vec![play],
            },
            Message::EnvironmentBroken {
                env_id: "e1".into(),
                step: 2,
                seed: 1_234_567,
                reason: "reward_out_of_range".into(),
                message: "with seed 1234567: reward 1000000 is outside [-10, 10]".into(),
            },
        ],
    );
    assert_eq!(
        app.post(&path, &f.worker, body).await.status,
        StatusCode::OK
    );
    let e = app
        .get(&format!("/api/v1/runs/{run}/environments/e1"), &f.owner)
        .await
        .json();
    assert_eq!(e["status"], "broken_in_play", "{e}");
    assert_eq!(e["rejection_reason"], "reward_out_of_range", "{e}");
    assert!(
        e["rejection_message"]
            .as_str()
            .is_some_and(|m| m.contains("seed 1234567")),
        "{e}"
    );
    assert_eq!(e["plays"].as_array().map(Vec::len), Some(1), "{e}");
    let broken = app
        .get(
            &format!("/api/v1/runs/{run}/environments?status=broken_in_play"),
            &f.owner,
        )
        .await
        .json();
    let ids: Vec<&str> = broken["items"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["env_id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["e1"], "{broken}");
    // An environment never reported cannot break.
    let ghost = batch(
        run,
        10,
        vec![Message::EnvironmentBroken {
            env_id: "ghost".into(),
            step: 2,
            seed: 1,
            reason: "exception".into(),
            message: "x".into(),
        }],
    );
    let r = app.post(&path, &f.worker, ghost).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.text().contains("ghost"), "{}", r.text());
    Ok(())
}

/// The environment list sorts (issue 20, item 14) by regret, win rates and designer reward,
/// missing values last and ties by id, each order paged by its own cursor; rows carry a title
/// (here the class name: the code has no docstring); a bad order or another order's cursor is
/// a 422 naming it.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn environments_sort_and_page_in_each_order(pool: PgPool) -> TestResult {
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let msgs = four_envs();
    let r = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &f.worker,
            batch(run, 0, msgs),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let base = format!("/api/v1/runs/{run}/environments");
    let (base_ref, owner) = (&base, &f.owner);
    let all = |sort: &'static str| async move {
        let base = base_ref;
        let mut ids = Vec::new();
        let mut cursor = String::new();
        for _ in 0..5 {
            let path = format!("{base}?sort={sort}&limit=2{cursor}");
            let r = app.get(&path, owner).await;
            assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text());
            let body = r.json();
            for e in body["items"].as_array().into_iter().flatten() {
                ids.push(e["env_id"].as_str().unwrap_or_default().to_owned());
                assert_eq!(
                    e["title"].as_str(),
                    Some(format!("Env_{}", e["env_id"].as_str().unwrap_or_default()).as_str())
                );
            }
            match body["next_cursor"].as_str() {
                Some(c) => cursor = format!("&cursor={}", spade_app::pages::encode_query(c)),
                None => break,
            }
        }
        ids
    };
    assert_eq!(all("step").await, ["a", "b", "c", "d"]);
    assert_eq!(all("regret").await, ["c", "b", "d", "a"]);
    assert_eq!(all("win_rate_no_hint").await, ["b", "c", "d", "a"]);
    assert_eq!(all("win_rate_hint").await, ["a", "b", "c", "d"]);
    assert_eq!(
        all("designer_reward").await,
        ["a", "b", "c", "d"],
        "missing last"
    );
    app.get(&format!("{base}?sort=fun"), &f.owner)
        .await
        .assert_refused("sort", "regret", "bad sort");
    app.get(&format!("{base}?sort=regret&cursor=4:2"), &f.owner)
        .await
        .assert_refused("cursor", "same sort order", "a step cursor for regret");
    Ok(())
}

fn play(env_id: &str) -> PlayRecord {
    PlayRecord {
        env_id: env_id.into(),
        step: 0,
        with_hint: false,
        episode_return: 1.0,
        won: true,
        turns: 1,
        transcript: vec![Turn {
            role: TurnRole::Assistant,
            content: "\\boxed{1}".into(),
        }],
    }
}

/// Before the fix a run token could store plays under any env_id: plays that show on no
/// environment page and that no reviewer can see (fixed-pool and RLVE runs sent only plays).
/// Now a play names an environment the run reported, earlier in the batch or before; one that
/// does not is refused by name, and the batch stores nothing. An env_id of another run (same
/// team) is as unknown as a made-up one, and the database refuses such a play even when
/// ingestion is bypassed.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn plays_of_an_environment_the_run_never_reported_are_refused(pool: PgPool) -> TestResult {
    let f = fixture(pool.clone()).await;
    let (app, run) = (&f.app, f.run);
    let path = format!("/api/v1/ingest/{run}");
    let plays_count = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM plays WHERE run_id = $1")
            .bind(run)
            .fetch_one(&pool)
            .await
            .unwrap_or(-1)
    };
    // Another run of the same team reports "theirs".
    let (_, _, other) = app.team_project_run(&f.owner, "t2").await;
    let other_token = app
        .post(&format!("/api/v1/runs/{other}/token"), &f.owner, json!({}))
        .await
        .json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let r = app
        .post(
            &format!("/api/v1/ingest/{other}"),
            &Cred::Bearer(other_token),
            batch(other, 0, vec![env("theirs", 0, "arithmetic", None, 0.1)]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    for (attack, messages) in [
        (
            "a made-up env_id",
            vec![Message::Plays {
                records: vec![play("ghost")],
            }],
        ),
        (
            "another run's env_id",
            vec![Message::Plays {
                records: vec![play("theirs")],
            }],
        ),
        (
            "a known env then an unknown one in the same message",
            vec![
                env("e1", 0, "arithmetic", None, 0.3),
                Message::Plays {
                    records: vec![play("e1"), play("ghost")],
                },
            ],
        ),
    ] {
        let r = app.post(&path, &f.worker, batch(run, 0, messages)).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{attack}: {}",
            r.text()
        );
        assert!(
            r.message().contains(".records[") && r.message().contains("never reported"),
            "{attack}: {}",
            r.message()
        );
        assert_eq!(plays_count().await, 0, "{attack}: nothing stored");
    }
    // Reported first, in the same batch: stored.
    let ok = batch(
        run,
        0,
        vec![
            env("e1", 0, "arithmetic", None, 0.3),
            Message::Plays {
                records: vec![play("e1"), play("e1")],
            },
        ],
    );
    let r = app.post(&path, &f.worker, ok).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(plays_count().await, 2);
    // The rule is the database's, not only ingestion's.
    let direct = sqlx::query(
        "INSERT INTO plays (run_id, env_id, step, with_hint, episode_return, won, turns, transcript)
         VALUES ($1, 'ghost', 0, false, 0, false, 0, '[]')",
    )
    .bind(run)
    .execute(&pool)
    .await;
    assert!(
        direct.is_err(),
        "the database stored a play of an unknown env"
    );
    Ok(())
}
