//! The dashboard served by axum hydrates in a real browser: once the wasm bundle has taken the
//! server-rendered DOM over, the theme switch changes the theme without a reload (before
//! hydration it is a plain form POST that reloads the page).

use fantoccini::Locator;
use spade_e2e::{Browser, TestServer, wait_hydrated};
use std::time::{Duration, Instant};

/// The `data-theme` of `<html>` (`None`: following the system).
async fn theme(c: &fantoccini::Client) -> anyhow::Result<Option<String>> {
    let v = c
        .execute(
            "return document.documentElement.getAttribute('data-theme');",
            vec![],
        )
        .await?;
    Ok(v.as_str().map(str::to_owned))
}

/// Clicks whichever of the two theme buttons the stylesheet shows (the one leading away from
/// the theme in effect).
async fn click_theme_switch(c: &fantoccini::Client) -> anyhow::Result<()> {
    for b in c.find_all(Locator::Css(".theme-toggle button")).await? {
        if b.is_displayed().await? {
            b.click().await?;
            return Ok(());
        }
    }
    anyhow::bail!("no theme button is displayed")
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_home_page_hydrates_and_its_theme_switch_works_without_reloading(
    pool: sqlx::PgPool,
) -> anyhow::Result<()> {
    let server = TestServer::start(pool).await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    c.goto(&server.url).await?;

    // Server-rendered content is there before any script runs, and no test widget is.
    let hero = c.find(Locator::Css(".hero h1")).await?;
    assert_eq!(hero.text().await?, "SPADE Studio");
    let source = c.source().await?;
    assert!(
        !source.contains("Clicked") && !source.contains("hydration-check"),
        "the landing page still carries the test button"
    );
    // A marker on `window` dies with the document: if it survives the clicks, nothing reloaded.
    c.execute(
        "window.__spadeMarker = 'same-document'; return null;",
        vec![],
    )
    .await?;
    let took = wait_hydrated(&c, Instant::now()).await?;

    // Headless Chromium prefers the light theme: the switch leads to dark, then back.
    let before = theme(&c).await?;
    click_theme_switch(&c).await?;
    let switched = theme(&c).await?;
    assert!(
        switched.is_some() && switched != before,
        "the switch changed nothing: {before:?} -> {switched:?}"
    );
    let shot = browser.screenshot("hydration-theme-switched").await?;
    click_theme_switch(&c).await?;
    let back = theme(&c).await?;
    assert!(
        back.is_some() && back != switched,
        "{switched:?} -> {back:?}"
    );
    let marker = c
        .execute("return window.__spadeMarker || null;", vec![])
        .await?;
    assert_eq!(
        marker,
        serde_json::json!("same-document"),
        "the page reloaded"
    );
    browser.screenshot("hydration").await?;
    eprintln!(
        "hydrated after {:.0} ms; screenshot: {}",
        took.as_secs_f64() * 1e3,
        shot.display()
    );
    browser.close().await?;
    Ok(())
}

/// Waits until the page is hydrated (interactive); returns how long that took from `since`.
async fn until_hydrated(c: &fantoccini::Client, since: Instant) -> anyhow::Result<Duration> {
    wait_hydrated(c, since).await
}

/// What the browser fetched for the wasm module: (URL, bytes over the wire, bytes decoded).
async fn wasm_entry(c: &fantoccini::Client) -> anyhow::Result<(String, f64, f64)> {
    let v = c
        .execute(
            "const e = performance.getEntriesByType('resource').find(r => r.name.endsWith('.wasm'));\
             return e ? [e.name, e.transferSize, e.decodedBodySize] : null;",
            vec![],
        )
        .await?;
    let name = v[0].as_str().unwrap_or_default().to_owned();
    anyhow::ensure!(!name.is_empty(), "no wasm fetched: {v}");
    Ok((
        name,
        v[1].as_f64().unwrap_or(-1.0),
        v[2].as_f64().unwrap_or(-1.0),
    ))
}

/// Issue 20, item 2: the bundle is served from a content-hashed directory, precompressed (no
/// compression at request time) and marked immutable, so a reload takes it from the cache.
/// Prints the time to interactive with a cold and a warm cache.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_bundle_is_precompressed_cached_and_not_fetched_again_on_reload(
    pool: sqlx::PgPool,
) -> anyhow::Result<()> {
    let server = TestServer::start(pool).await?;
    let browser = Browser::start().await?;
    let c = browser.client.clone();
    let t0 = Instant::now();
    c.goto(&server.url).await?;
    let cold = until_hydrated(&c, t0).await?;
    let (url, sent, decoded) = wasm_entry(&c).await?;
    let dir = url
        .split("/pkg/")
        .nth(1)
        .and_then(|rest| rest.split_once('/'))
        .map(|(d, _)| d.to_owned())
        .unwrap_or_default();
    assert!(
        dir.len() == 16 && dir.bytes().all(|b| b.is_ascii_hexdigit()),
        "the page names an unversioned bundle: {url}"
    );
    assert!(
        sent > 0.0 && sent < decoded / 2.0,
        "the wasm came uncompressed: {sent} bytes sent for {decoded}"
    );
    let t1 = Instant::now();
    c.refresh().await?;
    let warm = until_hydrated(&c, t1).await?;
    let (again, sent_again, _) = wasm_entry(&c).await?;
    assert_eq!(again, url);
    assert_eq!(sent_again, 0.0, "a reload fetched the wasm again");
    eprintln!(
        "time to interactive: cold {:.0} ms ({:.0} KB sent for {:.0} KB of wasm), warm {:.0} ms \
         (wasm from the cache)",
        cold.as_secs_f64() * 1e3,
        sent / 1e3,
        decoded / 1e3,
        warm.as_secs_f64() * 1e3
    );
    browser.close().await?;

    // The headers as any client sees them.
    let path = url.split_once(&server.url).map_or(url.as_str(), |(_, p)| p);
    for (encoding, ext) in [("br", ".br"), ("gzip", ".gz")] {
        let head = http_head(&server.url, path, encoding).await?;
        assert!(
            head.contains(&format!("content-encoding: {encoding}")),
            "{encoding}: {head}"
        );
        assert!(head.contains("max-age=31536000, immutable"), "{head}");
        let file = spade_e2e::workspace_root()
            .join("site")
            .join(path.trim_start_matches('/'));
        let size = std::fs::metadata(format!("{}{ext}", file.display()))?.len();
        assert!(
            head.contains(&format!("content-length: {size}")),
            "{encoding}: not the precompressed file ({size} bytes): {head}"
        );
    }
    let page = http_head(&server.url, "/", "gzip").await?;
    assert!(!page.contains("immutable"), "{page}");
    Ok(())
}

/// The response head of a GET with the given `Accept-Encoding`, header names lowercased.
async fn http_head(base: &str, path: &str, encoding: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = base.strip_prefix("http://").unwrap_or(base);
    let mut s = tokio::net::TcpStream::connect(host).await?;
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: {encoding}\r\n\
             Connection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out);
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_lowercase();
    anyhow::ensure!(
        head.starts_with("http/1.1 200"),
        "unexpected response: {head}"
    );
    Ok(head)
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_health_endpoint_reports_the_migrated_schema(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let server = TestServer::start(pool).await?;
    let body = http_get(&format!("{}/api/v1/health", server.url)).await?;
    let v: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(v["status"], "ok", "{body}");
    assert_eq!(v["database"]["ok"], true, "{body}");
    assert!(
        v["database"]["schema_version"].as_i64().unwrap_or(0) >= 20261129000001,
        "{body}"
    );
    Ok(())
}

/// A GET that must answer 200: its body.
async fn http_get(url: &str) -> anyhow::Result<String> {
    let (status, body) = spade_e2e::http_get_with(url, &[]).await?;
    anyhow::ensure!(status == 200, "unexpected status {status}: {body}");
    Ok(body)
}
