//! Entry point of `spade-server`; see `spade-server --help`.

use anyhow::Context;
use clap::Parser;
use leptos::prelude::LeptosOptions;
use spade_server::auth::{AuthState, secret::JwtSecret};
use spade_server::{AppState, app, config::Config};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let cfg = Config::parse();
    tracing::info!(?cfg, "starting");

    let site_root = cfg.site_root.to_string_lossy().into_owned();
    let pkg_dir = spade_server::site::pkg_dir(&cfg.site_root);
    let wasm = cfg
        .site_root
        .join(&pkg_dir)
        .join(format!("{}_bg.wasm", spade_server::OUTPUT_NAME));
    if !wasm.exists() {
        tracing::warn!(
            path = %wasm.display(),
            "hydration bundle missing: pages render but do not react to clicks (run scripts/build-site)"
        );
    }

    let db = spade_db::connect(&cfg.database_url).await?;
    if cfg.migrate {
        spade_db::migrate(&db)
            .await
            .context("while migrating the database at start-up")?;
    }

    let secret = JwtSecret::load_or_create(cfg.jwt_secret.as_deref(), &cfg.data_dir)?;
    let auth = AuthState::new(secret, cfg.registration.into(), cfg.secure_cookies);

    let leptos = LeptosOptions::builder()
        .output_name(spade_server::OUTPUT_NAME)
        .site_root(site_root)
        .site_pkg_dir(pkg_dir)
        .site_addr(cfg.addr)
        .build();
    let listener = tokio::net::TcpListener::bind(cfg.addr)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.addr))?;
    let url = format!("http://{}", listener.local_addr()?);
    tracing::info!(%url, "listening");
    println!("SPADE Studio is up at {url}");
    if cfg.demo {
        match spade_server::demo::ensure(&db, &cfg.data_dir).await? {
            Some(login) => {
                println!("Demo: log in as {} / {}", login.email, login.password);
                if let Some(run) = login.run_id {
                    println!("      then open {url}/runs/{run} to watch the tiny run");
                }
            }
            None => println!("Demo: not seeded (this database already has users)"),
        }
    }
    // Connect info gives handlers the client address (login rate limiting is per IP).
    let public_url = cfg
        .scheduler
        .public_url
        .clone()
        .unwrap_or_else(|| url.clone());
    let state = AppState::new(leptos, db, auth)
        .with_scheduler(cfg.scheduler.clone())
        .with_public_url(public_url)
        .with_paths(
            spade_server::service::paths::PathRoots::new(
                &cfg.model_roots,
                &cfg.corpus_roots,
                &cfg.pool_roots,
            )
            .with_venvs(&cfg.venv_roots)
            .with_vllm_weights(&cfg.vllm_weights_roots)
            .with_vllm_hosts(&cfg.vllm_url_allow)
            .with_run_states(&cfg.scheduler.jobs_dir),
        );
    // The job scheduler (backend/src/scheduling.rs); running jobs outlive a shutdown and are
    // re-attached at the next start, and an ended job's unsent reports are taken (spool.rs).
    let (stop_scheduler, scheduler_stopped) = tokio::sync::watch::channel(false);
    let scheduler = spade_server::spool::spawn_scheduler(
        &state,
        &cfg.scheduler,
        listener.local_addr()?,
        scheduler_stopped,
    )?;
    spade_server::serve::serve(
        listener,
        app(state),
        spade_server::serve::IDLE_TIMEOUT,
        spade_server::serve::shutdown_signal(),
    )
    .await?;
    let _ = stop_scheduler.send(true);
    if let Some(task) = scheduler {
        task.await.context("the scheduler task panicked")?;
    }
    Ok(())
}
