//! `GET /runs/{id}/environments.jsonl`: the pool export, streamed page by page.

use crate::ingest::{batch, fixture};
use crate::support::*;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::json;
use spade::EnvKind;
use spade::pool::PoolEntry;
use spade::report::{EnvStatus, EnvironmentRecord, Message};
use sqlx::PgPool;
use std::time::Instant;
use tower::ServiceExt;

pub fn env(i: u64) -> Message {
    let skill = if i.is_multiple_of(2) {
        "Logical Deduction"
    } else {
        "Optimization"
    };
    let status = if i.is_multiple_of(7) {
        EnvStatus::Rejected
    } else {
        EnvStatus::Accepted
    };
    Message::Environment {
        record: EnvironmentRecord {
            hint: Some("think".into()),
            regret: Some((i % 10) as f64 / 10.0),
            win_rate_hint: Some(1.0),
            win_rate_no_hint: Some((i % 5) as f64 / 4.0),
            designer_reward: Some(0.1),
            reward_levels: Some(2),
            ..EnvironmentRecord::new(
                format!("e{i}"),
                i / 10,
                skill,
                EnvKind::Game,
                status,
                format!("class Env{i}:\n    pass\n"),
            )
        },
    }
}

fn lines(r: &Resp) -> Vec<PoolEntry> {
    r.text()
        .lines()
        .map(|l| match serde_json::from_str(l) {
            Ok(e) => e,
            Err(e) => panic!("not a pool line ({e}): {l}"),
        })
        .collect()
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_export_streams_every_filtered_environment_as_pool_lines(pool: PgPool) -> TestResult {
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    // 1,200 environments: more than two pages of the export.
    for first in (0..1200u64).step_by(400) {
        let msgs = (first..first + 400).map(env).collect();
        let r = app
            .post(
                &format!("/api/v1/ingest/{run}"),
                &f.worker,
                batch(run, first, msgs),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    let base = format!("/api/v1/runs/{run}/environments.jsonl");
    let all = app.get(&base, &f.owner).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text());
    assert!(
        all.headers[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|c| c.starts_with("application/jsonl"))
    );
    let got = lines(&all);
    assert_eq!(got.len(), 1200, "every environment once, across pages");
    assert!(
        got.windows(2).all(|w| w[0].step <= w[1].step),
        "in step order"
    );
    assert_eq!(got[3].id, "e3");
    assert_eq!(got[3].code.as_deref(), Some("class Env3:\n    pass\n"));
    assert_eq!(got[3].run.as_deref(), Some(run.to_string().as_str()));
    let filtered = lines(
        &app.get(
            &format!(
                "{base}?status=accepted&skill=Optimization&win_rate_min=0.5&win_rate_max=0.75&regret_min=0.5&step_min=10&step_max=99"
            ),
            &f.owner,
        )
        .await,
    );
    let expected = (0..1200u64)
        .filter(|i| {
            i % 7 != 0
                && i % 2 == 1
                && (2..=3).contains(&(i % 5))
                && i % 10 >= 5
                && (10..=99).contains(&(i / 10))
        })
        .count();
    assert!(expected > 0);
    assert_eq!(filtered.len(), expected);
    assert!(filtered.iter().all(|e| {
        e.status == EnvStatus::Accepted
            && e.skill == "Optimization"
            && e.win_rate_no_hint
                .is_some_and(|w| (0.5..=0.75).contains(&w))
    }));

    // Bad filters are refused naming the field; a stranger sees no run.
    app.get(&format!("{base}?win_rate_min=2"), &f.owner)
        .await
        .assert_refused("win_rate_min", "within 0..=1", "win rate out of range");
    app.get(&format!("{base}?step_min=5&step_max=1"), &f.owner)
        .await
        .assert_refused("step_min", "must not exceed", "empty step range");
    let stranger = app.user("stranger@x.org").await;
    assert_eq!(
        app.get(&base, &stranger).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.get(&base, &Cred::None).await.status,
        StatusCode::UNAUTHORIZED
    );
    Ok(())
}

/// The test process's peak resident memory (`VmHWM`), KiB.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// Measurement, not a check CI runs (`cargo test -p spade-server --test api -- --ignored
/// export_of_100k`): 100,000 environments of 2 KB code each (about 230 MB of JSONL) stream
/// through the handler while the test process's peak RSS is watched. Collecting the rows
/// would need the whole body in memory; a page at a time needs one page. Then the real
/// `spade env export --server` writes them as a pool under `/usr/bin/time` (max RSS).
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
#[ignore = "a measurement: inserts 100,000 rows (about a minute)"]
async fn export_of_100k_environments_streams_in_bounded_memory(pool: PgPool) -> TestResult {
    let f = fixture(pool.clone()).await;
    let (app, run) = (&f.app, f.run);
    let t0 = Instant::now();
    sqlx::query(
        "INSERT INTO environments (run_id, env_id, step, skill, kind, status, code, hint,
                                   regret, win_rate_hint, win_rate_no_hint, designer_reward,
                                   reward_levels)
         SELECT $1, 'e' || i, i / 24, 'Logical Deduction', 'game', 'accepted',
                repeat('x = 1  # padding of a generated environment\n', 44), 'a hint',
                0.5, 1.0, 0.25, 0.1, 2
         FROM generate_series(1, 100000) AS i",
    )
    .bind(run)
    .execute(&pool)
    .await?;
    eprintln!(
        "inserted 100,000 environments in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let Cred::Bearer(token) = &f.owner else {
        return Err("the fixture's owner has a bearer token".into());
    };
    let before = peak_rss_kib();
    let t1 = Instant::now();
    let req = Request::builder()
        .method(Method::GET)
        .uri(format!("/api/v1/runs/{run}/environments.jsonl"))
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())?;
    let resp = app.router.clone().oneshot(req).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let first_byte = t1.elapsed();
    let mut body = resp.into_body();
    let (mut bytes, mut lines) = (0u64, 0u64);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len() as u64;
            lines += data.iter().filter(|b| **b == b'\n').count() as u64;
        }
    }
    let took = t1.elapsed();
    let after = peak_rss_kib();
    eprintln!(
        "exported {lines} lines, {:.1} MB in {:.1} s (first byte after {} ms, {:.0} lines/s); \
         peak RSS {} MiB before, {} MiB after (+{} MiB)",
        bytes as f64 / 1e6,
        took.as_secs_f64(),
        first_byte.as_millis(),
        lines as f64 / took.as_secs_f64(),
        before / 1024,
        after / 1024,
        (after - before) / 1024
    );
    assert_eq!(lines, 100_000);
    // Bounded: the peak grew by far less than the body (a few pages, not 230 MB).
    assert!(
        (after - before) * 1024 < bytes / 4,
        "peak RSS grew {} KiB for a {bytes}-byte body",
        after - before
    );

    // The client side: `spade env export --server` writes the 100,000 files line by line.
    let spade = crate::evaluations::bin_dir()?.join("spade");
    let (addr, _server) = app.serve().await?;
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("pool");
    let max_rss = |stderr: &str| {
        stderr
            .lines()
            .find_map(|l| l.strip_prefix("max_rss_kib="))
            .and_then(|n| n.trim().parse::<u64>().ok())
    };
    // What the binary holds doing nothing (it links libtorch), to tell the export's share.
    let idle = tokio::process::Command::new("/usr/bin/time")
        .args(["-f", "max_rss_kib=%M"])
        .arg(&spade)
        .arg("--help")
        .output()
        .await?;
    let idle = max_rss(&String::from_utf8_lossy(&idle.stderr)).ok_or("no max RSS")?;
    let t2 = Instant::now();
    let o = tokio::process::Command::new("/usr/bin/time")
        .args(["-f", "max_rss_kib=%M"])
        .arg(&spade)
        .args([
            "env",
            "export",
            "--server",
            &format!("http://{addr}"),
            "--run",
            &run.to_string(),
            "--token",
            token,
            "--out",
            out.to_str().ok_or("path")?,
        ])
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let rss = max_rss(&stderr).ok_or("no max RSS from /usr/bin/time")?;
    eprintln!(
        "spade env export --server: 100,000 environments in {:.1} s, max RSS {} MiB ({} MiB \
         for `spade --help`: +{} MiB)",
        t2.elapsed().as_secs_f64(),
        rss / 1024,
        idle / 1024,
        rss.saturating_sub(idle) / 1024
    );
    assert!(
        rss.saturating_sub(idle) * 1024 < bytes / 4,
        "the client held {rss} KiB ({idle} idle)"
    );
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn review_marks_show_in_the_environment_and_in_the_export(pool: PgPool) -> TestResult {
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let r = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &f.worker,
            batch(run, 0, vec![env(1), env(2)]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let path = format!("/api/v1/runs/{run}/environments/e1/review");
    let r = app
        .post(
            &path,
            &f.owner,
            json!({ "verdict": "reward_hackable", "comment": "boxed{} of anything wins" }),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["verdict"], "reward_hackable");
    // Marking again replaces the caller's mark.
    let r = app
        .post(
            &path,
            &f.owner,
            json!({ "verdict": "broken", "comment": "the checker is wrong" }),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let detail = app
        .get(&format!("/api/v1/runs/{run}/environments/e1"), &f.owner)
        .await
        .json();
    let marks = detail["reviews"].as_array().cloned().unwrap_or_default();
    assert_eq!(marks.len(), 1, "{detail}");
    assert_eq!(marks[0]["verdict"], "broken");
    assert_eq!(marks[0]["comment"], "the checker is wrong");

    let exported = lines(
        &app.get(&format!("/api/v1/runs/{run}/environments.jsonl"), &f.owner)
            .await,
    );
    let e1 = exported
        .iter()
        .find(|e| e.id == "e1")
        .ok_or("e1 exported")?;
    assert_eq!(e1.reviews.len(), 1);
    assert_eq!(e1.reviews[0].verdict, spade::pool::Verdict::Broken);
    assert!(
        exported
            .iter()
            .find(|e| e.id == "e2")
            .is_some_and(|e| e.reviews.is_empty())
    );

    // Bad marks are refused naming the field; an unknown environment is 404.
    let r = app.post(&path, &f.owner, json!({ "verdict": "meh" })).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    assert!(r.message().contains("verdict"), "{}", r.text());
    let long = "x".repeat(2001);
    app.post(
        &path,
        &f.owner,
        json!({ "verdict": "good", "comment": long }),
    )
    .await
    .assert_refused("comment", "at most 2000 characters", "long comment");
    let r = app
        .post(
            &format!("/api/v1/runs/{run}/environments/nope/review"),
            &f.owner,
            json!({ "verdict": "good" }),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    Ok(())
}

/// `spade env export --server`: the real binary against the served app writes a pool of the
/// filtered environments with the team's marks, and the card names the run and its model.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn spade_env_export_from_the_service_writes_the_pool(pool: PgPool) -> TestResult {
    let spade = crate::evaluations::bin_dir()?.join("spade");
    if !spade.exists() {
        return Err(format!("{} is missing: cargo build -p spade-cli", spade.display()).into());
    }
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let r = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &f.worker,
            batch(run, 0, (0..30).map(env).collect()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = app
        .post(
            &format!("/api/v1/runs/{run}/environments/e1/review"),
            &f.owner,
            json!({ "verdict": "good", "comment": "keep" }),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let (addr, _server) = app.serve().await?;
    let Cred::Bearer(token) = &f.owner else {
        return Err("the fixture's owner has a bearer token".into());
    };
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("pool");
    let args = [
        "env",
        "export",
        "--server",
        &format!("http://{addr}"),
        "--run",
        &run.to_string(),
        "--token",
        token,
        "--out",
        out.to_str().ok_or("path")?,
        "--skill",
        "Optimization",
        "--win-rate-max",
        "0.5",
    ];
    let o = tokio::process::Command::new(&spade)
        .args(args)
        .output()
        .await?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{text}");
    // Odd ids are Optimization; accepted unless a multiple of 7; win rate (i % 5) / 4 <= 0.5.
    let expected: Vec<String> = (0..30u64)
        .filter(|i| i % 2 == 1 && i % 7 != 0 && i % 5 <= 2)
        .map(|i| format!("e{i}"))
        .collect();
    let index = std::fs::read_to_string(out.join("pool.jsonl"))?;
    let got: Vec<PoolEntry> = index
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(
        got.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        expected
    );
    let e1 = got.iter().find(|e| e.id == "e1").ok_or("e1 exported")?;
    assert_eq!(e1.reviews.len(), 1, "the mark travels with the pool");
    assert_eq!(
        std::fs::read_to_string(out.join(e1.code_file.as_deref().ok_or("code_file")?))?,
        "class Env1:\n    pass\n"
    );
    let card = std::fs::read_to_string(out.join("README.md"))?;
    assert!(
        card.contains(&format!("run {run} of http://{addr}")),
        "{card}"
    );
    assert!(card.contains("model: preset tiny"), "{card}");
    assert!(
        card.contains(&format!("environments: {}", expected.len())),
        "{card}"
    );

    // Leaving out what a member marked: e1 (marked good) goes, the rest stays.
    let unmarked = tmp.path().join("unmarked");
    let o = tokio::process::Command::new(&spade)
        .args([
            "env",
            "export",
            "--server",
            &format!("http://{addr}"),
            "--run",
            &run.to_string(),
            "--token",
            token,
            "--out",
            unmarked.to_str().ok_or("path")?,
            "--skill",
            "Optimization",
            "--win-rate-max",
            "0.5",
            "--without-verdict",
            "good,broken",
        ])
        .output()
        .await?;
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let index = std::fs::read_to_string(unmarked.join("pool.jsonl"))?;
    assert_eq!(index.lines().count(), expected.len() - 1);
    assert!(!index.contains("\"e1\""), "{index}");

    // A bad token is refused by the service, and the command says so (exit 2).
    let bad = tmp.path().join("bad");
    let o = tokio::process::Command::new(&spade)
        .args([
            "env",
            "export",
            "--server",
            &format!("http://{addr}"),
            "--run",
            &run.to_string(),
            "--token",
            "nope",
            "--out",
            bad.to_str().ok_or("path")?,
        ])
        .output()
        .await?;
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(())
}

/// A "broken" or "reward-hackable" mark on a live environment reaches the worker: every ingest
/// reply names it in `retire` (with who and why) until the worker reports it broken, and a
/// "good" mark or a rejected environment never does.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_broken_mark_retires_a_live_environment_through_the_ingest_reply(
    pool: PgPool,
) -> TestResult {
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let ingest = format!("/api/v1/ingest/{run}");
    let r = app
        .post(
            &ingest,
            &f.worker,
            batch(run, 0, vec![env(1), env(2), env(3)]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["retire"], json!([]), "nothing marked yet");
    for (e, verdict) in [("e1", "broken"), ("e2", "good"), ("e3", "reward_hackable")] {
        let r = app
            .post(
                &format!("/api/v1/runs/{run}/environments/{e}/review"),
                &f.owner,
                json!({ "verdict": verdict, "comment": "seen in review" }),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    let r = app.post(&ingest, &f.worker, batch(run, 10, vec![])).await;
    let retire: Vec<spade::report::Retire> = serde_json::from_value(r.json()["retire"].clone())?;
    let ids: Vec<&str> = retire.iter().map(|x| x.env_id.as_str()).collect();
    assert_eq!(ids, ["e1", "e3"], "{retire:?}");
    assert_eq!(retire[1].verdict, "reward_hackable");
    assert!(
        retire[0].message.contains("seen in review"),
        "{:?}",
        retire[0]
    );
    // The worker's report of the retirement ends it.
    let broken = Message::EnvironmentBroken {
        env_id: "e1".into(),
        step: 1,
        seed: -1,
        reason: "retired_by_review".into(),
        message: retire[0].message.clone(),
    };
    let r = app
        .post(&ingest, &f.worker, batch(run, 20, vec![broken]))
        .await;
    let left: Vec<spade::report::Retire> = serde_json::from_value(r.json()["retire"].clone())?;
    assert_eq!(
        left.iter().map(|x| x.env_id.as_str()).collect::<Vec<_>>(),
        ["e3"]
    );
    let e1 = app
        .get(&format!("/api/v1/runs/{run}/environments/e1"), &f.owner)
        .await
        .json();
    assert_eq!(e1["status"], "broken_in_play", "{e1}");
    // The curated pool: marked good by someone, bad by no one.
    let curated = lines(
        &app.get(
            &format!("/api/v1/runs/{run}/environments.jsonl?curated=true"),
            &f.owner,
        )
        .await,
    );
    let ids: Vec<&str> = curated.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["e2"]);
    Ok(())
}
