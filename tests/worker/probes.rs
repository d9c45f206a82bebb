//! A worker's probes: /healthz about the process and its loops, /readyz about the database.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::env::*;
use crate::support::{Proc, assert_connection_cap, assert_lingering_connections_closed, free_addr};

/// A worker's probes: /healthz is about the process and its loops, /readyz about the database.
/// A database outage (its connections cut, new ones refused) makes the worker unready but not
/// unhealthy — restarting would not help; a delivery loop wedged for three leases makes it
/// unhealthy while it is still ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_probes_tell_a_database_outage_from_a_stuck_loop() {
    let env = Env::new("probes", &config("http://127.0.0.1:9/x", "key", "")).await;
    // A TCP proxy to Postgres that can be cut: every connection closed, new ones refused.
    let cut = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let proxy_addr = listener.local_addr().expect("addr");
    let authority = env
        .url
        .split("://")
        .nth(1)
        .and_then(|u| u.split('/').next())
        .expect("authority")
        .to_owned();
    let upstream = authority.rsplit('@').next().expect("host").to_owned();
    let proxied = env.url.replacen(&upstream, &proxy_addr.to_string(), 1);
    let stop = cut.clone();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                a = listener.accept() => a,
            };
            let Ok((mut client, _)) = accepted else {
                return;
            };
            let (stop, upstream) = (stop.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                }
            });
        }
    });
    let worker = |url: &str, addr: &str, crash: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args(["worker", "--config"])
            .arg(&env.config)
            .args([
                "--lease",
                "3s",
                "--poll-interval",
                "100ms",
                "--metrics-addr",
                addr,
            ])
            .env("DATABASE_URL", url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(point) = crash {
            cmd.env("ONCEBOX_CRASH_AT", point);
        }
        Proc::spawn(&mut cmd, "worker with probes")
    };

    // An outage: not ready, still alive.
    let outage_addr = free_addr();
    let mut outage = worker(&proxied, &outage_addr, None);
    env.wait_until(Duration::from_secs(20), "the probes answer", || async {
        probe(&outage_addr, "/readyz").await.0 == 200
    })
    .await;
    assert_eq!(
        probe(&outage_addr, "/healthz").await,
        (200, "ok\n".to_owned())
    );
    assert_eq!(probe(&outage_addr, "/nope").await.0, 404);
    cut.cancel();
    let (code, body) = probe(&outage_addr, "/readyz").await;
    assert_eq!(code, 503, "the database is unreachable: not ready");
    assert!(body.starts_with("database:"), "{body}");
    // Its loops keep turning (failing claims, waiting a poll interval): alive, for longer than
    // the three leases after which a loop counts as stuck.
    let outage_started = Instant::now();
    while outage_started.elapsed() < Duration::from_secs(11) {
        assert_eq!(
            probe(&outage_addr, "/healthz").await.0,
            200,
            "a database outage must not fail liveness (restarts would not help)"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    outage.kill().await;

    // A wedged delivery loop: alive until it has not turned for three leases, then 503.
    let stuck_addr = free_addr();
    let mut stuck = worker(&env.url, &stuck_addr, Some("hang_after_claim"));
    env.wait_until(Duration::from_secs(20), "the probes answer", || async {
        probe(&stuck_addr, "/healthz").await.0 == 200
    })
    .await;
    env.intent("wedge", json!({})).await;
    let submitted = Instant::now();
    env.wait_until(
        Duration::from_secs(30),
        "/healthz to report the stuck loop",
        || async { probe(&stuck_addr, "/healthz").await.0 == 503 },
    )
    .await;
    let (_, body) = probe(&stuck_addr, "/healthz").await;
    assert!(body.contains("deliver loop has not turned"), "{body}");
    assert!(
        submitted.elapsed() >= Duration::from_secs(8),
        "stuck means three leases (9 s) without a turn: {:?}",
        submitted.elapsed()
    );
    assert_eq!(
        probe(&stuck_addr, "/readyz").await.0,
        200,
        "the database is fine"
    );
    // A migration this binary knows is missing: not ready, and it says why.
    sqlx::query(
        "DELETE FROM oncebox._sqlx_migrations \
         WHERE version = (SELECT max(version) FROM oncebox._sqlx_migrations)",
    )
    .execute(&env.pool)
    .await
    .expect("forget a migration");
    let (code, body) = probe(&stuck_addr, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with("migrations:"), "{body}");
    stuck.kill().await;
    env.drop_db().await;
}

/// The probe server keeps no connection a client leaves open: silent, half-sent and idle
/// keep-alive connections are closed after `--http-header-timeout`, at most
/// `--http-max-connections` are served at once, and `/healthz` keeps answering meanwhile.
#[tokio::test]
async fn probe_connections_are_timed_out_and_capped() {
    let env = Env::new("probe_limits", &config("http://127.0.0.1:9/x", "key", "")).await;
    let addr = free_addr();
    let worker = env.worker_with(
        "w",
        &[],
        "5s",
        &[
            "--metrics-addr",
            &addr,
            "--http-header-timeout",
            "2s",
            "--http-max-connections",
            "64",
        ],
    );
    env.wait_until(Duration::from_secs(20), "the probes answer", || async {
        probe(&addr, "/healthz").await.0 == 200
    })
    .await;
    assert_lingering_connections_closed(&addr, 15, Duration::from_secs(2)).await;
    assert_connection_cap(&addr, 64, Duration::from_secs(2)).await;
    assert!(worker.stop().await.success());
    env.drop_db().await;
}
