//! `GET /runs/{id}/pool.zip` and `GET /shared/{token}/pool.zip`: the pool directory as a zip.
//! Unzipped, it holds exactly the files the real `spade env export --server` writes for the
//! same filters (code files, `pool.jsonl`, the card), for members and through a share link;
//! a stranger, a bad link and a bad filter are refused before any byte of a zip.

use crate::ingest::{batch, fixture_with};
use crate::pools::env;
use crate::support::*;
use axum::http::{StatusCode, header};
use serde_json::json;
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

type Files = BTreeMap<String, Vec<u8>>;

fn unzip(bytes: &[u8]) -> Result<Files, Box<dyn std::error::Error>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))?;
    let mut files = Files::new();
    for i in 0..archive.len() {
        let mut f = archive.by_index(i)?;
        let mut data = Vec::new();
        f.read_to_end(&mut data)?;
        let name = f.name()?.into_owned();
        if files.insert(name.clone(), data).is_some() {
            return Err(format!("{name} twice in the zip").into());
        }
    }
    Ok(files)
}

fn read_dir(dir: &Path) -> Result<Files, Box<dyn std::error::Error>> {
    let mut files = Files::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        files.insert(name, std::fs::read(entry.path())?);
    }
    Ok(files)
}

/// The real binary's export of `run` from the served app with `args` as filters.
async fn cli_export(
    addr: std::net::SocketAddr,
    run: i64,
    token: &str,
    out: &Path,
    args: &[&str],
) -> Result<Files, Box<dyn std::error::Error>> {
    let spade = crate::evaluations::bin_dir()?.join("spade");
    if !spade.exists() {
        return Err(format!("{} is missing: cargo build -p spade-cli", spade.display()).into());
    }
    let o = tokio::process::Command::new(&spade)
        .args(["env", "export", "--server", &format!("http://{addr}")])
        .args(["--run", &run.to_string(), "--token", token])
        .args(["--out", out.to_str().ok_or("path")?])
        .args(args)
        .output()
        .await?;
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    read_dir(out)
}

type Seeded = (
    crate::ingest::Fixture,
    std::net::SocketAddr,
    tokio::task::JoinHandle<()>,
);

/// Thirty environments (odd ids Optimization, multiples of 7 rejected, win rate (i % 5) / 4),
/// e1 and e3 marked good, e5 broken, e9 good by the owner and reward-hackable by an editor.
async fn seeded(pool: PgPool) -> Result<Seeded, Box<dyn std::error::Error>> {
    let (app, addr, server) = TestApp::served_at_public_url(pool).await?;
    let f = fixture_with(app).await;
    let run = f.run;
    let r = f
        .app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &f.worker,
            batch(run, 0, (0..30).map(env).collect()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let editor = f.app.user("editor@x.org").await;
    let team = f.app.get("/api/v1/teams", &f.owner).await.json()[0]["id"].clone();
    let r = f.app.join(&f.owner, team, "editor@x.org", "editor").await;
    assert!(r.status.is_success(), "{}", r.text());
    for (who, e, verdict) in [
        (&f.owner, "e1", "good"),
        (&f.owner, "e3", "good"),
        (&f.owner, "e5", "broken"),
        (&f.owner, "e9", "good"),
        (&editor, "e9", "reward_hackable"),
    ] {
        let r = f
            .app
            .post(
                &format!("/api/v1/runs/{run}/environments/{e}/review"),
                who,
                json!({ "verdict": verdict, "comment": format!("{verdict} in review") }),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    Ok((f, addr, server))
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn pools_zip_holds_what_spade_env_export_writes_for_the_same_filters(
    pool: PgPool,
) -> TestResult {
    let (f, addr, _server) = seeded(pool).await?;
    let run = f.run;
    let Cred::Bearer(token) = &f.owner else {
        return Err("the fixture's owner has a bearer token".into());
    };
    let tmp = tempfile::tempdir()?;
    // (query of the browser's download, the same filters as `spade env export` options)
    let cases: [(&str, &[&str]); 4] = [
        ("", &["--status", "any"]),
        (
            "status=accepted&skill=Optimization&win_rate_max=0.5",
            &["--skill", "Optimization", "--win-rate-max", "0.5"],
        ),
        ("status=accepted&verdict=good", &["--verdict", "good"]),
        ("curated=true", &["--status", "any", "--curated"]),
    ];
    for (i, (query, args)) in cases.into_iter().enumerate() {
        let url = format!("/api/v1/runs/{run}/pool.zip?{query}");
        let r = f.app.get(&url, &f.owner).await;
        assert_eq!(r.status, StatusCode::OK, "{url}: {}", r.text());
        assert_eq!(r.header("content-type"), "application/zip");
        assert!(
            r.header("content-disposition")
                .contains(&format!("run-{run}-pool.zip")),
            "{:?}",
            r.headers.get(header::CONTENT_DISPOSITION)
        );
        let zipped = unzip(&r.body)?;
        let cli = cli_export(addr, run, token, &tmp.path().join(format!("p{i}")), args).await?;
        assert_eq!(
            zipped.keys().collect::<Vec<_>>(),
            cli.keys().collect::<Vec<_>>(),
            "{url}: the same files"
        );
        for (name, data) in &cli {
            assert_eq!(
                String::from_utf8_lossy(&zipped[name]),
                String::from_utf8_lossy(data),
                "{url}: {name}"
            );
        }
        let index = String::from_utf8_lossy(&zipped["pool.jsonl"]).into_owned();
        let ids: Vec<String> = index
            .lines()
            .map(|l| serde_json::from_str::<spade::pool::PoolEntry>(l).map(|e| e.id))
            .collect::<Result<_, _>>()?;
        // Each case keeps what its filter says (and not nothing, or equality proves little).
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let band: Vec<String> = (0..30u64)
            .filter(|i| i % 2 == 1 && i % 7 != 0 && i % 5 <= 2)
            .map(|i| format!("e{i}"))
            .collect();
        match i {
            0 => assert_eq!(ids.len(), 30, "{url}"),
            1 => assert_eq!(ids, band, "{url}"),
            2 => assert_eq!(ids, ["e1", "e3", "e9"], "{url}"),
            _ => assert_eq!(ids, ["e1", "e3"], "{url}: e9 is disputed"),
        }
        let e9 = index.lines().find(|l| l.contains("\"e9\""));
        if let Some(line) = e9 {
            assert!(
                line.contains("reward_hackable in review"),
                "the marks travel: {line}"
            );
        }
        let card = String::from_utf8_lossy(&zipped["README.md"]).into_owned();
        assert!(
            card.contains(&format!("run {run} of http://{addr}")),
            "{card}"
        );
        assert!(
            card.contains(&format!("environments: {}", ids.len())),
            "{card}"
        );
    }
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn pools_zip_through_a_share_link_and_refusals_name_the_reason(pool: PgPool) -> TestResult {
    let (f, _addr, _server) = seeded(pool).await?;
    let run = f.run;
    let member = f
        .app
        .get(
            &format!("/api/v1/runs/{run}/pool.zip?verdict=good"),
            &f.owner,
        )
        .await;
    assert_eq!(member.status, StatusCode::OK, "{}", member.text());

    // Through the compression layer (what a browser asks for), which polls the body once more
    // after its end: the zip's and the JSONL's streams must take that.
    let Cred::Bearer(token) = &f.owner else {
        return Err("the fixture's owner has a bearer token".into());
    };
    for export in ["pool.zip", "environments.jsonl"] {
        let req = axum::http::Request::builder()
            .uri(format!("/api/v1/runs/{run}/{export}"))
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::ACCEPT_ENCODING, "gzip")
            .body(axum::body::Body::empty())?;
        let r = f.app.send(req).await;
        assert_eq!(r.status, StatusCode::OK, "{export}: {}", r.text());
        assert!(!r.body.is_empty(), "{export}");
    }

    // A share link reads the same zip without logging in, until it is revoked.
    let created = f
        .app
        .post(&format!("/api/v1/runs/{run}/shares"), &f.owner, json!({}))
        .await
        .json();
    let link = created["token"].as_str().ok_or("a share token")?.to_owned();
    let shared_url = format!("/api/v1/shared/{link}/pool.zip?verdict=good");
    let shared = f.app.get(&shared_url, &Cred::None).await;
    assert_eq!(shared.status, StatusCode::OK, "{}", shared.text());
    assert_eq!(unzip(&shared.body)?, unzip(&member.body)?);
    f.app
        .get(
            &format!("/api/v1/shared/{link}/pool.zip?verdict=meh"),
            &Cred::None,
        )
        .await
        .assert_refused("verdict", "expected good, broken", "a link's bad verdict");
    assert_eq!(
        f.app
            .get("/api/v1/shared/sps_not-a-link/pool.zip", &Cred::None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let r = f
        .app
        .call(
            axum::http::Method::DELETE,
            &format!("/api/v1/runs/{run}/shares/{}", created["id"]),
            &f.owner,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        f.app.get(&shared_url, &Cred::None).await.status,
        StatusCode::NOT_FOUND,
        "a revoked link"
    );

    // Another team's run is not found; no session is 401.
    let base = format!("/api/v1/runs/{run}/pool.zip");
    let stranger = f.app.user("stranger@x.org").await;
    let r = f.app.get(&base, &stranger).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    assert_eq!(r.code(), "not_found");
    assert_eq!(
        f.app.get(&base, &Cred::None).await.status,
        StatusCode::UNAUTHORIZED
    );

    // Bad filters: a clear refusal naming the parameter, before any byte of a zip.
    f.app
        .get(&format!("{base}?verdict=meh"), &f.owner)
        .await
        .assert_refused("verdict", "expected good, broken", "unknown verdict");
    f.app
        .get(&format!("{base}?win_rate_min=2"), &f.owner)
        .await
        .assert_refused("win_rate_min", "within 0..=1", "win rate out of range");
    f.app
        .get(&format!("{base}?step_min=-1"), &f.owner)
        .await
        .assert_refused("step_min", "at least 0", "negative step");
    let r = f.app.get(&format!("{base}?status=maybe"), &f.owner).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(r.message().contains("`status`"), "{}", r.text());
    let r = f.app.get(&format!("{base}?colour=red"), &f.owner).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(r.message().contains("colour"), "{}", r.text());
    Ok(())
}

/// Measurement, not a check CI runs (`cargo test -p spade-server --test api -- --ignored
/// pools_zip_of_many --nocapture`; `SPADE_ZIP_ENVS` environments, default 100,000, of 2 KB
/// code each): the zip streams through the handler while the test process's peak RSS is
/// watched; the body is counted, never collected, then checked to be a whole zip by its end
/// (the end-of-central-directory record).
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
#[ignore = "a measurement: inserts many rows and compresses them"]
async fn pools_zip_of_many_environments_streams_in_bounded_memory(pool: PgPool) -> TestResult {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let n: i64 = std::env::var("SPADE_ZIP_ENVS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let f = fixture_with(TestApp::new(pool.clone())).await;
    let run = f.run;
    sqlx::query(
        "INSERT INTO environments (run_id, env_id, step, skill, kind, status, code, hint,
                                   regret, win_rate_hint, win_rate_no_hint, designer_reward,
                                   reward_levels)
         SELECT $1, 'e' || i, i / 24, 'Logical Deduction', 'game', 'accepted',
                'x_' || i || ' = 1\n' || repeat('x = 1  # padding of a generated environment\n', 44),
                'a hint', 0.5, 1.0, 0.25, 0.1, 2
         FROM generate_series(1, $2) AS i",
    )
    .bind(run)
    .bind(n)
    .execute(&pool)
    .await?;
    let Cred::Bearer(token) = &f.owner else {
        return Err("the fixture's owner has a bearer token".into());
    };
    let before = crate::pools::peak_rss_kib();
    let t = std::time::Instant::now();
    let req = axum::http::Request::builder()
        .uri(format!("/api/v1/runs/{run}/pool.zip"))
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(axum::body::Body::empty())?;
    let resp = f.app.router.clone().oneshot(req).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let first_byte = t.elapsed();
    let mut body = resp.into_body();
    let (mut bytes, mut tail) = (0u64, Vec::<u8>::new());
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len() as u64;
            tail.extend_from_slice(&data);
            let keep = tail.len().saturating_sub(4096);
            tail.drain(..keep);
        }
    }
    let took = t.elapsed();
    let after = crate::pools::peak_rss_kib();
    eprintln!(
        "pool.zip of {n} environments: {:.1} MB in {:.1} s (first byte after {} ms); peak RSS \
         {} MiB before, {} MiB after (+{} MiB)",
        bytes as f64 / 1e6,
        took.as_secs_f64(),
        first_byte.as_millis(),
        before / 1024,
        after / 1024,
        (after - before) / 1024
    );
    // A whole zip ends with its end-of-central-directory record (PK\x05\x06).
    assert!(
        tail.windows(4).any(|w| w == b"PK\x05\x06"),
        "the zip has its end record"
    );
    // Far less than the pool it holds (n * ~2 KB of code). Not constant: a zip's central
    // directory comes last, so the writer keeps every entry's name, offset and CRC until the
    // end, as the builder keeps every id and file name.
    let code = n as u64 * 1_990;
    assert!(
        (after - before) * 1024 < code / 4,
        "peak RSS grew {} KiB for {code} bytes of code",
        after - before
    );
    Ok(())
}
