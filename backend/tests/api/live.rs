//! Live events (SSE) and transport limits.

use crate::ingest::{batch, fixture, metrics};
use crate::support::*;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use sqlx::PgPool;
use tower::ServiceExt;

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn run_events_stream_status_then_live_updates(pool: PgPool) -> TestResult {
    let f = fixture(pool).await;
    let (app, run) = (&f.app, f.run);
    let Cred::Bearer(token) = &f.owner else {
        return Err("bearer expected".into());
    };
    let req = Request::builder()
        .uri(format!("/api/v1/runs/{run}/events"))
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())?;
    let resp = app.router.clone().oneshot(req).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()[header::CONTENT_TYPE]
            .to_str()?
            .starts_with("text/event-stream")
    );
    let mut body = resp.into_body();
    let mut seen = String::new();
    while !seen.contains("event: progress") {
        let frame = next_frame(&mut body).await?.ok_or("stream ended")??;
        seen.push_str(&String::from_utf8_lossy(
            frame.data_ref().map(|d| d.as_ref()).unwrap_or_default(),
        ));
    }
    assert!(
        seen.contains("event: status") && seen.contains("\"status\":\"queued\""),
        "{seen}"
    );
    let r = app
        .post(
            &format!("/api/v1/ingest/{run}"),
            &f.worker,
            batch(run, 0, vec![metrics(3, &[("loss", 0.5)])]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    seen.clear();
    while !seen.contains("event: metrics") {
        let frame = next_frame(&mut body).await?.ok_or("stream ended")??;
        seen.push_str(&String::from_utf8_lossy(
            frame.data_ref().map(|d| d.as_ref()).unwrap_or_default(),
        ));
    }
    assert!(seen.contains("\"loss\":0.5"), "{seen}");
    Ok(())
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn oversized_bodies_are_refused(pool: PgPool) -> TestResult {
    let f = fixture(pool).await;
    let big = "x".repeat(2 << 20);
    let req = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/teams")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, big.len() + 12)
        .header(
            header::AUTHORIZATION,
            match &f.owner {
                Cred::Bearer(t) => format!("Bearer {t}"),
                _ => String::new(),
            },
        )
        .body(Body::from(format!("{{\"name\":\"{big}\"}}")))?;
    assert_eq!(f.app.send(req).await.status, StatusCode::PAYLOAD_TOO_LARGE);
    Ok(())
}

async fn next_frame(
    body: &mut Body,
) -> Result<
    Option<Result<http_body::Frame<axum::body::Bytes>, axum::Error>>,
    tokio::time::error::Elapsed,
> {
    tokio::time::timeout(std::time::Duration::from_secs(5), body.frame()).await
}
