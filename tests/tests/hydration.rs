//! The dashboard served by axum hydrates in a real browser: a click updates the page without a
//! reload, which only happens if the wasm bundle loaded and took over the server-rendered DOM.

use fantoccini::Locator;
use spade_e2e::{Browser, TestServer};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_page_hydrates_and_reacts_to_clicks_without_reloading() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let mut browser = Browser::start().await?;
    let c = browser.client.clone();
    c.goto(&server.url).await?;

    // Server-rendered content is there before any script runs.
    let count = c.find(Locator::Id("click-count")).await?;
    assert_eq!(count.text().await?, "0");
    // A marker on `window` dies with the document: if it survives the clicks, nothing reloaded.
    c.execute(
        "window.__spadeMarker = 'same-document'; return null;",
        vec![],
    )
    .await?;

    // Hydration finishes asynchronously after the wasm loads; until then a click does nothing.
    let button = c.find(Locator::Id("hydration-check")).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut clicks_needed = 0;
    loop {
        button.click().await?;
        clicks_needed += 1;
        let text = c.find(Locator::Id("click-count")).await?.text().await?;
        if text != "0" {
            assert_eq!(text, "1", "one click after hydration counts once");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page never hydrated: clicks did nothing for 30 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    button.click().await?;
    button.click().await?;
    let text = c.find(Locator::Id("click-count")).await?.text().await?;
    assert_eq!(text, "3");
    let marker = c
        .execute("return window.__spadeMarker || null;", vec![])
        .await?;
    assert_eq!(
        marker,
        serde_json::json!("same-document"),
        "the page reloaded"
    );

    let shot = browser.screenshot("hydration").await?;
    eprintln!(
        "hydrated after {clicks_needed} click(s); screenshot: {}",
        shot.display()
    );
    browser.close().await?;
    Ok(())
}

#[tokio::test]
async fn the_health_endpoint_reports_the_migrated_schema() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
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

/// A plain HTTP/1.1 GET over a TCP socket: enough for a JSON endpoint, no client crate needed.
async fn http_get(url: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = tokio::net::TcpStream::connect(host).await?;
    s.write_all(
        format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    anyhow::ensure!(
        head.starts_with("HTTP/1.1 200"),
        "unexpected response: {head}"
    );
    Ok(body.to_owned())
}
