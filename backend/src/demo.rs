//! The demo a fresh installation shows (`--demo`, which `scripts/serve` passes): on a database
//! with no users it creates a demo account, a team and a project, and queues one run of the tiny
//! CPU configuration (`configs/tiny-demo.toml`). The scheduler then starts a real `spade worker`
//! for it, so a person who opens the dashboard watches an actual SPADE run (warm start, designer,
//! sandbox validation, plays, rewards, GRPO) rather than canned data.
//!
//! The demo account is the first user, so it is the admin: it exists to be logged into. Its
//! password is random, kept in `<data dir>/demo-login.txt` (mode 0600) and printed at every
//! start while that file exists. A database that already has users is never touched.

use crate::auth::password;
use crate::tokens;
use anyhow::Context;
use spade::config::RunConfig;
use spade_db::Pool as PgPool;
use spade_db::runs::NewRun;
use spade_db::scope::TeamScope;
use spade_db::users::Registration;
use std::io::Write;
use std::path::Path;

/// The run configuration the demo queues (`configs/tiny-demo.toml`, the same file `spade train`
/// takes).
pub const DEMO_CONFIG: &str = spade::config::DEMO_TOML;
/// The demo account's email.
pub const DEMO_EMAIL: &str = "demo@spade.local";
const LOGIN_FILE: &str = "demo-login.txt";

/// What a person needs to watch the demo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoLogin {
    pub email: String,
    pub password: String,
    pub run_id: Option<i64>,
}

/// Seeds the demo when the database has no users; otherwise returns the login recorded by an
/// earlier seeding (if its file is still there). `None`: nothing to show.
pub async fn ensure(db: &PgPool, data_dir: &Path) -> anyhow::Result<Option<DemoLogin>> {
    let file = data_dir.join(LOGIN_FILE);
    // After the first start the account exists: skip the argon2 hash below (it only decides
    // "first user?" again, under the registration lock).
    if spade_db::users::credentials(db, DEMO_EMAIL)
        .await?
        .is_some()
    {
        return read_login(&file);
    }
    // 16 URL-safe characters of a 256-bit random token: above the password policy's minimum
    // and short enough to type.
    let secret: String = tokens::random_token("demo-").chars().take(21).collect();
    let hash = password::hash(secret.clone())
        .await
        .map_err(|e| anyhow::anyhow!("hashing the demo password: {e:?}"))?;
    let registered =
        spade_db::users::register(db, DEMO_EMAIL, "Demo", &hash, Registration::FirstUserOnly)
            .await
            .context("creating the demo account")?;
    let Some(user) = registered else {
        return read_login(&file);
    };
    let team = spade_db::teams::create_team(db, user.id, "Demo")
        .await
        .context("creating the demo team")?;
    let scope = TeamScope::for_member(db, user.id, team.id).await?;
    let project = spade_db::teams::create_project(db, &scope, "Tiny CPU demo")
        .await
        .context("creating the demo project")?;
    let cfg = RunConfig::from_toml_str(DEMO_CONFIG)
        .map_err(|e| anyhow::anyhow!("configs/tiny-demo.toml: {e}"))?;
    let run = spade_db::runs::create(
        db,
        &scope,
        &NewRun {
            project_id: project.id,
            name: "tiny demo",
            config: &cfg.to_json(),
            executor: "local",
            seed: i64::try_from(cfg.run.seed).unwrap_or(0),
            code_version: env!("CARGO_PKG_VERSION"),
        },
    )
    .await
    .context("queueing the demo run")?;
    let login = DemoLogin {
        email: DEMO_EMAIL.into(),
        password: secret,
        run_id: Some(run.id),
    };
    write_login(&file, &login)?;
    Ok(Some(login))
}

fn write_login(file: &Path, login: &DemoLogin) -> anyhow::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(file)
        .with_context(|| format!("writing {}", file.display()))?;
    writeln!(f, "{}\n{}", login.email, login.password)?;
    if let Some(id) = login.run_id {
        writeln!(f, "{id}")?;
    }
    Ok(())
}

fn read_login(file: &Path) -> anyhow::Result<Option<DemoLogin>> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
    };
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(email), Some(password)) => Ok(Some(DemoLogin {
            email: email.into(),
            password: password.into(),
            run_id: lines.next().and_then(|l| l.trim().parse().ok()),
        })),
        _ => Ok(None),
    }
}
