//! Taking connections: HTTP/1.1 over a TCP listener, with the limits a server facing
//! untrusted clients needs and `axum::serve` does not set — a deadline for each request's
//! head (which also closes keep-alive connections left idle), a cap on open connections, and
//! a graceful shutdown that lets answers in flight finish.
//!
//! Why HTTP/1.1 only: every client of an OpenAI-style API speaks it, and the version sniffing
//! an HTTP/2-capable server needs waits for the first bytes without any deadline — exactly
//! what a slow client exploits.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How the server takes connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenConfig {
    /// Connections open at once; further clients wait in the kernel's backlog until one
    /// closes. Default 512.
    pub max_connections: usize,
    /// How long a client may take to send a request's head (request line and headers), and
    /// how long a keep-alive connection may stay idle between requests. Default 10 s.
    pub header_timeout: Duration,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops taking connections and
/// returns once every open connection has finished its answer and closed.
///
/// Accept errors (such as running out of file descriptors) are logged and retried after a
/// pause; they never end the server.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: ListenConfig,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(
        config.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    // Header names go out title-cased (`Access-Control-Allow-Origin`), as llama-server sends
    // them: names are case-insensitive, but some clients of llama-server compare them as written.
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .title_case_headers(true)
        .keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => {
                match permit {
                    Ok(permit) => permit,
                    // Never closed: `permits` lives until the loop ends.
                    Err(_) => break,
                }
            }
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection closed: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
