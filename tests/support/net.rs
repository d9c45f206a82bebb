//! Ports for servers a test starts.

/// A loopback address whose port was free a moment ago, for a server the test starts.
pub(crate) fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .to_string()
}

/// Holds `n` connections of each kind a careless or hostile client leaves open — opened and
/// silent, half a request line sent, one request answered and then silent (keep-alive) — to
/// the server at `addr`, and checks that the server closes every one of them within
/// `header_timeout` plus a margin, while `GET /healthz` on new connections keeps answering 200.
pub(crate) async fn assert_lingering_connections_closed(
    addr: &str,
    n: usize,
    header_timeout: std::time::Duration,
) {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    let mut held = Vec::new();
    for kind in ["silent", "half-sent", "keep-alive"] {
        for _ in 0..n {
            let mut c = TcpStream::connect(addr).await.expect("connect");
            match kind {
                "half-sent" => c.write_all(b"GET /healthz HT").await.expect("send"),
                "keep-alive" => {
                    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                        .await
                        .expect("send");
                    let mut answer = Vec::new();
                    while !answer.ends_with(b"ok\n") {
                        let mut buf = [0u8; 512];
                        let got = c.read(&mut buf).await.expect("answer");
                        assert!(got > 0, "closed before answering");
                        answer.extend_from_slice(&buf[..got]);
                    }
                }
                _ => {}
            }
            held.push((kind, c));
        }
    }
    let deadline = header_timeout + Duration::from_secs(5);
    let closed = async {
        for (kind, mut c) in held {
            let mut buf = [0u8; 256];
            loop {
                match tokio::time::timeout(deadline, c.read(&mut buf)).await {
                    // Closed (EOF or reset); a half-sent request may get a 4xx/408 first.
                    Ok(Ok(0) | Err(_)) => break,
                    Ok(Ok(_)) => continue,
                    Err(_) => panic!("a {kind} connection was still open after {deadline:?}"),
                }
            }
        }
    };
    let answering = async {
        loop {
            let mut c = TcpStream::connect(addr).await.expect("connect for healthz");
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .await
                .expect("healthz");
            let mut answer = Vec::new();
            tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut answer))
                .await
                .expect("healthz answers within 5 s while connections linger")
                .expect("healthz answer");
            assert!(
                answer.starts_with(b"HTTP/1.1 200"),
                "healthz while connections linger: {}",
                String::from_utf8_lossy(&answer)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::select! {
        () = closed => {}
        () = answering => unreachable!("the health loop only ends by panicking"),
    }
}

/// Holds `cap` silent connections to the server at `addr`, whose connection cap is `cap` and
/// header timeout `header_timeout` (at least 2 s): one more request is not served while they
/// are held — for half the timeout — and is answered once the server has closed them.
pub(crate) async fn assert_connection_cap(
    addr: &str,
    cap: usize,
    header_timeout: std::time::Duration,
) {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    assert!(
        header_timeout >= Duration::from_secs(2),
        "room to observe the cap"
    );
    let mut held = Vec::new();
    for _ in 0..cap {
        held.push(TcpStream::connect(addr).await.expect("connect"));
    }
    // The kernel completes this connection (listen backlog), but the server takes it only when
    // one of the held ones is closed.
    let mut extra = TcpStream::connect(addr)
        .await
        .expect("connect beyond the cap");
    extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let mut answer = Vec::new();
    let early = tokio::time::timeout(header_timeout / 2, extra.read_to_end(&mut answer)).await;
    assert!(
        early.is_err() && answer.is_empty(),
        "a request beyond the cap of {cap} was answered while {cap} connections were held: {}",
        String::from_utf8_lossy(&answer)
    );
    tokio::time::timeout(
        header_timeout + Duration::from_secs(5),
        extra.read_to_end(&mut answer),
    )
    .await
    .expect("answered once the held connections were closed")
    .expect("answer");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    drop(held);
}

/// A TCP proxy to the Postgres of a database URL, for tests of a database that goes away: `cut`
/// closes every connection and refuses new ones; `freeze` keeps every connection (and accepts
/// new ones) but forwards nothing more — a database that stops answering.
pub(crate) struct PgProxy {
    /// The database URL, through the proxy.
    pub(crate) url: String,
    cut: tokio_util::sync::CancellationToken,
    frozen: tokio::sync::watch::Sender<bool>,
    accepting: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl PgProxy {
    /// A proxy to the server of `db_url`.
    pub(crate) async fn start(db_url: &str) -> PgProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let proxy_addr = listener.local_addr().expect("addr");
        let authority = db_url
            .split("://")
            .nth(1)
            .and_then(|u| u.split('/').next())
            .expect("authority");
        let upstream = authority.rsplit('@').next().expect("host").to_owned();
        let url = db_url.replacen(&upstream, &proxy_addr.to_string(), 1);
        let cut = tokio_util::sync::CancellationToken::new();
        let (frozen, _) = tokio::sync::watch::channel(false);
        let (stop, thaw) = (cut.clone(), frozen.subscribe());
        let accepting = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let accepted = tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    a = listener.accept() => a,
                };
                let Ok((client, _)) = accepted else {
                    break;
                };
                let (stop, upstream, thaw) = (stop.clone(), upstream.clone(), thaw.clone());
                connections.spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => {}
                        _ = pipe(client_read, server_write, thaw.clone()) => {}
                        _ = pipe(server_read, client_write, thaw) => {}
                    }
                });
            }
            // Refuse new connections, then close every one accepted.
            drop(listener);
            connections.shutdown().await;
        });
        PgProxy {
            url,
            cut,
            frozen,
            accepting: std::sync::Mutex::new(Some(accepting)),
        }
    }

    /// Closes every connection and refuses new ones; on return the listener is closed and no
    /// connection is still forwarded.
    pub(crate) async fn cut(&self) {
        self.cut.cancel();
        let accepting = self.accepting.lock().expect("lock").take();
        if let Some(accepting) = accepting {
            accepting.await.expect("the proxy's accept loop");
        }
    }

    /// Forwards nothing more, holding every connection open.
    pub(crate) fn freeze(&self) {
        let _ = self.frozen.send(true);
    }
}

/// Copies `from` to `to` until either closes, and stops copying (holding both) once `frozen`.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if *frozen.borrow() {
            // Held open, silent, until the test ends.
            std::future::pending::<()>().await;
        }
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = frozen.changed() => continue,
        };
        if *frozen.borrow() {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
