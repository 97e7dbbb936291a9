//! The HTTP server loop: one hyper connection per accepted socket, with the limits a public
//! server needs that `axum::serve` does not offer.
//!
//! - A client must finish sending a request's headers within [`HEADER_READ_TIMEOUT`] or its
//!   connection is closed ("slowloris": holding many connections open by trickling header
//!   bytes). Bodies are bounded by `guard` and whole requests by the router's timeout.
//! - Handlers see the client address (`ConnectInfo`), which the login limits key on.
//! - On shutdown the listener closes at once, requests in flight get up to [`DRAIN_TIMEOUT`] to
//!   finish (open event streams are cut then; pages reconnect), and the function returns.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Longest time a client may take to send the headers of a request.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest time in-flight requests get to finish after shutdown was asked for.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` completes, then drains (see the module doc).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let (stream, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // A streamed page goes out in several writes; with Nagle's algorithm on, each write
        // after the first waited for the client's delayed ACK, about 40 ms a page (measured
        // with the load bench: the runs list's p50 was 44 ms, 4.6 ms without).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, %addr, "cannot set TCP_NODELAY");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(addr));
            app.clone().oneshot(req.map(axum::body::Body::new))
        });
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %addr, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down: no new connections; draining requests in flight");
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still in flight after {} s were cut off",
            DRAIN_TIMEOUT.as_secs()
        );
    }
    Ok(())
}

/// Completes on SIGTERM (what `docker stop` and systemd send) or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}
