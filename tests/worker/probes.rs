//! A worker's probes: /healthz about the process and its loops, /readyz about the database.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::*;
use crate::support::{
    PgProxy, Proc, assert_connection_cap, assert_lingering_connections_closed, free_addr,
};

/// A worker's probes: /healthz is about the process and its loops, /readyz about the database.
/// A database outage (its connections cut, new ones refused) makes the worker unready but not
/// unhealthy — restarting would not help; a delivery loop wedged for three leases makes it
/// unhealthy while it is still ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_probes_tell_a_database_outage_from_a_stuck_loop() {
    let env = Env::new("probes", &config("http://127.0.0.1:9/x", "key", "")).await;
    // A TCP proxy to Postgres that can be cut: every connection closed, new ones refused.
    let proxy = PgProxy::start(&env.url).await;
    let proxied = proxy.url.clone();
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
    proxy.cut().await;
    let (code, body) = probe(&outage_addr, "/readyz").await;
    assert_eq!(code, 503, "the database is unreachable: not ready: {body}");
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

/// A database that stops answering (its connections held open, silent): `/readyz` says so
/// within its 2 s — concurrent probes too — rather than waiting on the hung database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_answers_in_time_when_the_database_stops_answering() {
    let env = Env::new("probes_frozen", &config("http://127.0.0.1:9/x", "key", "")).await;
    let proxy = PgProxy::start(&env.url).await;
    let addr = free_addr();
    let mut cmd = Command::new(BIN);
    cmd.args(["worker", "--config"])
        .arg(&env.config)
        .args(["--poll-interval", "100ms", "--metrics-addr", &addr])
        .env("DATABASE_URL", &proxy.url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let worker = Proc::spawn(&mut cmd, "worker");
    env.wait_until(Duration::from_secs(20), "ready", || async {
        probe(&addr, "/readyz").await.0 == 200
    })
    .await;
    proxy.freeze();
    let probes: Vec<_> = (0..8)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move { probe(&addr, "/readyz").await })
        })
        .collect();
    for p in probes {
        let (code, body) = p.await.expect("probe");
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("no answer within 2 s"), "{body}");
    }
    drop(worker);
    env.drop_db().await;
}
