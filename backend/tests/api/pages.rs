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
