//! Serving HTTP with limits, for the API (`oncebox serve`) and a worker's probes
//! (`--metrics-addr`): neither lets a client hold a connection for as long as it likes.
//!
//! - A connection must send a complete request head within [`Limits::header_timeout`] of being
//!   accepted or of its previous answer: a half-sent request and an idle keep-alive connection
//!   are both closed then (hyper's header-read timer runs while it waits for the next head).
//! - A request's body must arrive within [`Limits::body_timeout`] of its head: a read that
//!   waits longer fails ([`BodyTimedOut`]; the handler answers 408 or 400) and the connection,
//!   its body unread, is closed.
//! - At most [`Limits::max_connections`] connections are served at once; beyond that, new ones
//!   wait in the listen backlog until one closes (idle ones close within the timeout).
//! - On shutdown the listener closes, connections finish the request they are serving and are
//!   then closed, for at most [`Limits::shutdown_grace`].
//! - With [`Tls`], every connection is TLS (rustls, ring provider), and the handshake counts
//!   against the header timeout like the request head does.

mod body;
pub mod metric;
mod tls;

pub use body::{BodyTimedOut, timed_out};
pub use tls::Tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long and how many connections a server keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request head must arrive within this long after the connection opened or its previous
    /// answer was sent; otherwise the connection is closed.
    pub header_timeout: Duration,
    /// A request body must be read whole within this long of its head.
    pub body_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// On shutdown, how long connections may finish what they are doing.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, within `limits`, in plain HTTP.
/// An accept that fails (a connection reset before it was taken, no file descriptors left) is
/// logged and tried again shortly: the server keeps serving.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) {
    serve_with(listener, router, limits, None, shutdown).await;
}

/// [`serve`], over TLS when `tls` is given.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let body_timeout = limits.body_timeout;
    let router = router.layer(axum::middleware::map_request(
        move |request: axum::extract::Request| async move {
            request.map(|b| body::timed(b, body_timeout))
        },
    ));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            _ = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed; trying again");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        // Answers are small and written in pieces (headers, then a streamed body): without
        // TCP_NODELAY, Nagle's algorithm holds the last piece until the client's delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let conn = Accepted {
            slot,
            stream,
            peer,
            service: TowerToHyperService::new(WithPeer {
                router: router.clone(),
                peer,
            }),
        };
        match &tls {
            None => conn.serve_plain(&builder, &graceful),
            Some(tls) => conn.serve_tls(tls, &builder, &graceful, limits.header_timeout),
        }
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!("connections still open after the shutdown grace period: dropped");
    }
}

/// The router of one connection: each request carries the connection's peer address as
/// `axum::extract::ConnectInfo<SocketAddr>` (what per-source limits key on).
#[derive(Clone)]
struct WithPeer {
    router: Router,
    peer: SocketAddr,
}

impl<B> tower_service::Service<axum::http::Request<B>> for WithPeer
where
    Router: tower_service::Service<axum::http::Request<B>>,
{
    type Response = <Router as tower_service::Service<axum::http::Request<B>>>::Response;
    type Error = <Router as tower_service::Service<axum::http::Request<B>>>::Error;
    type Future = <Router as tower_service::Service<axum::http::Request<B>>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower_service::Service::poll_ready(&mut self.router, cx)
    }

    fn call(&mut self, mut request: axum::http::Request<B>) -> Self::Future {
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(self.peer));
        tower_service::Service::call(&mut self.router, request)
    }
}

/// A connection accepted, with the slot it holds until it closes.
struct Accepted {
    slot: OwnedSemaphorePermit,
    stream: TcpStream,
    peer: SocketAddr,
    service: TowerToHyperService<WithPeer>,
}

impl Accepted {
    /// Serves the connection in plain HTTP in a task of its own.
    fn serve_plain(self, builder: &http1::Builder, graceful: &GracefulShutdown) {
        let Accepted {
            slot,
            stream,
            peer,
            service,
        } = self;
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }

    /// Serves the connection over TLS in a task of its own. The handshake runs in that task (a
    /// slow client holds only its slot), and within the header timeout; then the connection is
    /// served like a plain one.
    fn serve_tls(
        self,
        tls: &Tls,
        builder: &http1::Builder,
        graceful: &GracefulShutdown,
        header_timeout: Duration,
    ) {
        let Accepted {
            slot,
            stream,
            peer,
            service,
        } = self;
        let (acceptor, builder, watcher) = (tls.acceptor(), builder.clone(), graceful.watcher());
        tokio::spawn(async move {
            let _slot = slot;
            let stream = match tokio::time::timeout(header_timeout, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake not done within the header timeout");
                    return;
                }
            };
            let conn = watcher.watch(builder.serve_connection(TokioIo::new(stream), service));
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

/// How long to wait after a failed accept (for example, no file descriptors left).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
