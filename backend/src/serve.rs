//! The HTTP server loop: one hyper connection per accepted socket, with the limits a public
//! server needs that `axum::serve` does not offer.
//!
//! - **One idle deadline from accept.** A connection with no request in flight is closed
//!   [`IDLE_TIMEOUT`] after it was accepted or after its last response ended. That bounds a
//!   client that connects and sends nothing, one that trickles header bytes ("slowloris": hyper's
//!   own header timeout starts only at the first byte), an HTTP/2 client that never finishes its
//!   preface (hyper has no deadline there at all) and idle keep-alive sockets, so silent
//!   connections cannot use up the server's file descriptors. A request is in flight from its
//!   head until its response body ends, so live event streams are never cut by it. Bodies are
//!   bounded by `guard` and the time to a response head by the router's timeout.
//! - Handlers see the client address (`ConnectInfo`), which the login limits key on.
//! - On shutdown the listener closes at once, requests in flight get up to [`DRAIN_TIMEOUT`] to
//!   finish (open event streams are cut then; pages reconnect), and the function returns.

use axum::Router;
use axum::extract::ConnectInfo;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Longest time a connection may stay open with no request in flight: after accept (so also the
/// longest time a client may take to send a request's headers) and after each response.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest time in-flight requests get to finish after shutdown was asked for.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// What the idle deadline of one connection reads: how many requests are in flight and when the
/// last one ended.
#[derive(Debug)]
struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds since `started` when the last response body ended (or 0: accept).
    last_end_ms: AtomicU64,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_end_ms: AtomicU64::new(0),
        })
    }

    /// When the connection may be closed if nothing starts before then; `None` while a request
    /// is in flight.
    fn idle_until(&self, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_end_ms.load(Ordering::SeqCst));
        Some(self.started + last + idle)
    }
}

/// Held by a request from its head until its response body is dropped (ended, failed or the
/// connection gone).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(a: &Arc<Activity>) -> Self {
        a.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(a.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_end_ms.fetch_max(ms, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then drains (see the module doc).
/// `idle_timeout` is the connection deadline ([`IDLE_TIMEOUT`] in the server).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    idle_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's own header deadline stays as a second bound on HTTP/1 (it starts at the first
    // byte, so it never fires before ours).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout);
    builder.http2().timer(TokioTimer::new());
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
        let activity = Activity::new();
        let service = {
            let activity = activity.clone();
            hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(addr));
                let guard = InFlight::start(&activity);
                let response = app.clone().oneshot(req.map(axum::body::Body::new));
                async move {
                    let res = response.await?;
                    // The guard lives in the body, so the request counts until the body ends.
                    Ok::<_, std::convert::Infallible>(res.map(move |body| {
                        axum::body::Body::new(body.map_frame(move |f| {
                            let _ = &guard;
                            f
                        }))
                    }))
                }
            })
        };
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            tokio::pin!(conn);
            loop {
                let deadline = activity.idle_until(idle_timeout);
                let wait = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at.into()).await,
                        // A request in flight: look again a deadline later.
                        None => tokio::time::sleep(idle_timeout).await,
                    }
                };
                tokio::select! {
                    ended = &mut conn => {
                        if let Err(e) = ended {
                            tracing::debug!(error = %e, %addr, "connection ended with an error");
                        }
                        return;
                    }
                    () = wait => {
                        if activity
                            .idle_until(idle_timeout)
                            .is_some_and(|at| at <= Instant::now())
                        {
                            tracing::debug!(%addr, "closing a connection idle since accept or its last response");
                            return;
                        }
                    }
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    const IDLE: Duration = Duration::from_millis(600);

    async fn start(
        app: Router,
    ) -> std::io::Result<(std::net::SocketAddr, tokio::sync::oneshot::Sender<()>)> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, app, IDLE, async {
            let _ = stopped.await;
        }));
        Ok((addr, stop))
    }

    /// Whether the server closed `s`: a read returns end of file or a reset within `within`.
    async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                // HTTP/2 may answer a broken preface with a GOAWAY first; keep reading.
                Ok(Ok(_)) => {}
            }
        }
    }

    async fn get_ok(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    }

    /// The attack: many sockets that connect and say nothing, HTTP/2 clients that stop in the
    /// middle of the preface and HTTP/1 clients that trickle a header line, all held open to use
    /// up the server's file descriptors. Every one is closed within the deadline from accept,
    /// while a normal client is served meanwhile.
    #[tokio::test]
    async fn silent_and_trickling_connections_are_closed_within_the_deadline()
    -> Result<(), Box<dyn std::error::Error>> {
        let (addr, _stop) = start(Router::new().route("/ok", get(|| async { "fine" }))).await?;
        let mut held = Vec::new();
        for _ in 0..50 {
            held.push(TcpStream::connect(addr).await?);
        }
        for _ in 0..10 {
            let mut s = TcpStream::connect(addr).await?;
            s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM").await?;
            held.push(s);
        }
        for _ in 0..10 {
            let mut s = TcpStream::connect(addr).await?;
            s.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n").await?;
            held.push(s);
        }
        let started = Instant::now();
        let answer = get_ok(addr, "/ok").await?;
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("fine"),
            "{answer}"
        );
        for (i, s) in held.iter_mut().enumerate() {
            assert!(
                closed_within(s, IDLE * 3).await,
                "connection {i} still open {:?} after the attack began",
                started.elapsed()
            );
        }
        // The trickling clients keep writing: still nothing is read from them.
        let answer = get_ok(addr, "/ok").await?;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        Ok(())
    }

    /// The control: a keep-alive connection is served several times, each request after a pause
    /// shorter than the deadline, and a response body that streams for longer than the deadline
    /// is not cut (a request is in flight until its body ends).
    #[tokio::test]
    async fn busy_connections_and_long_bodies_are_not_cut() -> Result<(), Box<dyn std::error::Error>>
    {
        let slow = || async {
            let chunks = futures_util::stream::unfold(0u32, |i| async move {
                if i == 6 {
                    return None;
                }
                tokio::time::sleep(IDLE / 3).await;
                Some((Ok::<_, std::io::Error>(format!("chunk{i};")), i + 1))
            });
            axum::body::Body::from_stream(chunks)
        };
        let app = Router::new()
            .route("/ok", get(|| async { "fine" }))
            .route("/slow", get(slow));
        let (addr, _stop) = start(app).await?;
        let body = get_ok(addr, "/slow").await?;
        assert!(
            body.contains("chunk0;") && body.contains("chunk5;"),
            "{body}"
        );

        let mut s = TcpStream::connect(addr).await?;
        for _ in 0..3 {
            tokio::time::sleep(IDLE / 2).await;
            s.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").await?;
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(IDLE, s.read(&mut buf)).await??;
            let head = String::from_utf8_lossy(&buf[..n]);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        }
        // Then left idle, it is closed too.
        assert!(
            closed_within(&mut s, IDLE * 3).await,
            "an idle keep-alive socket stayed open"
        );
        Ok(())
    }
}
