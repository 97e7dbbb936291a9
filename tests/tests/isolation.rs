//! Issue 35, item 5: the browser tests never write into the database `DATABASE_URL` names.
//! People export `DATABASE_URL` for the server they run (`scripts/serve` serves it), and the
//! browser tests used to start their server on it and seed teams and runs there, so a running
//! server's scheduler started workers for the tests' runs. Now every test server takes the test's
//! own database (`TestServer::start(pool)`).
//!
//! The check runs the tests' seeding in a child process of this binary whose `DATABASE_URL` names
//! a scratch database standing for a user's server database, and counts that database's rows
//! before and after. (`#[sqlx::test]` itself keeps its list of test databases in schema
//! `_sqlx_test` of `DATABASE_URL`'s database, not in the application's tables: that is why
//! `scripts/test` points `DATABASE_URL` at a database of its own, `spade_test`.)

use spade_db::Pool;
use spade_e2e::TestServer;
use spade_e2e::seed::dashboard_runs;
use std::process::Command;

/// The name of the child test that seeds.
const CHILD: &str = "seeding_a_test_server_as_the_browser_tests_do";

/// The URL of `pool`'s database on `DATABASE_URL`'s server (`#[sqlx::test]` made it there).
async fn url_of(pool: &Pool) -> anyhow::Result<String> {
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await?;
    let base = std::env::var("DATABASE_URL")?;
    let server = base.rsplit_once('/').map_or(base.as_str(), |(s, _)| s);
    Ok(format!("{server}/{name}"))
}

/// Rows of the tables a server's pages and scheduler read.
async fn counts(pool: &Pool) -> anyhow::Result<Vec<(String, i64)>> {
    let mut out = Vec::new();
    for table in [
        "users",
        "teams",
        "projects",
        "runs",
        "jobs",
        "environments",
        "run_logs",
        "metrics",
    ] {
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(pool)
            .await?;
        out.push((table.to_owned(), n));
    }
    Ok(out)
}

#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_browser_tests_seed_their_own_database_never_database_urls(
    server_db: Pool,
) -> anyhow::Result<()> {
    // A user's server database: migrated, with an account of its own.
    spade_db::users::register(
        &server_db,
        "owner@example.org",
        "Owner",
        "not a hash",
        spade_db::users::Registration::Open,
    )
    .await?;
    let before = counts(&server_db).await?;
    let url = url_of(&server_db).await?;

    let out = Command::new(std::env::current_exe()?)
        .args([
            CHILD,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DATABASE_URL", &url)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the seeding child failed:\n{stdout}\n{stderr}"
    );
    // It did seed, somewhere else.
    // (The harness prints the test's name on the same line as its output.)
    let seeded_into = stdout
        .split("seeded 3 runs into ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("the child did not say where it seeded:\n{stdout}"))?;
    assert!(
        !url.ends_with(&format!("/{seeded_into}")),
        "the child seeded the server's database {seeded_into}"
    );

    let after = counts(&server_db).await?;
    assert_eq!(
        before, after,
        "the browser tests' seeding wrote into the database DATABASE_URL names"
    );
    Ok(())
}

/// What a browser test does before its browser starts: a server and the dashboard's rows. Run by
/// the test above with `DATABASE_URL` at its scratch database.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
#[ignore = "a child of the_browser_tests_seed_their_own_database_never_database_urls"]
async fn seeding_a_test_server_as_the_browser_tests_do(pool: Pool) -> anyhow::Result<()> {
    let server = TestServer::start(pool.clone()).await?;
    let user = spade_db::users::register(
        &server.db,
        "seeder@example.org",
        "Seeder",
        "not a hash",
        spade_db::users::Registration::Open,
    )
    .await?
    .ok_or_else(|| anyhow::anyhow!("open registration refused"))?;
    dashboard_runs(&server.db, user.id, "isolation").await?;
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&server.db)
        .await?;
    println!("seeded 3 runs into {name}");
    Ok(())
}

/// Issue 39: a browser test that fails (its `Browser` dropped without `close`) leaves no
/// Chromium behind; after `scripts/test` two orphaned Chromium trees had been found running.
#[tokio::test]
async fn a_dropped_browser_leaves_no_chromium_running() -> anyhow::Result<()> {
    let browser = spade_e2e::Browser::start().await?;
    browser.client.goto("about:blank").await?;
    let profile = browser.profile().to_path_buf();
    let running = spade_e2e::processes_with_arg(&profile);
    assert!(
        !running.is_empty(),
        "no process runs with the profile {}: the check would prove nothing",
        profile.display()
    );
    drop(browser);
    let left = spade_e2e::processes_with_arg(&profile);
    assert!(left.is_empty(), "still running after the drop: {left:?}");
    assert!(
        !profile.exists(),
        "the profile {} is left",
        profile.display()
    );
    Ok(())
}
