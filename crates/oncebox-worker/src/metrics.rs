//! Prometheus metrics of a worker, rendered in the text exposition format and served on
//! `--metrics-addr` at `/metrics`, beside the probes `/healthz` (alive, loops turning) and
//! `/readyz` (database reachable).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];
const BATCH_BUCKETS: [f64; 8] = [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0];

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (i, b) in bounds.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in bounds.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}",
                self.counts.get(i).copied().unwrap_or(0)
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// A worker's metrics.
#[derive(Default)]
pub struct Metrics {
    deliveries: Mutex<BTreeMap<(String, &'static str), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    claim_batch: Mutex<Histogram>,
    leases_lost: AtomicU64,
    ready_depth: AtomicU64,
    oldest_ready_ms: AtomicU64,
    heartbeats: Mutex<BTreeMap<&'static str, u64>>,
}

/// What the probes check: how long a loop may go without a turn, and the database to reach.
#[derive(Clone)]
pub struct Probes {
    /// A loop that has not turned for this long is stuck, and `/healthz` answers 503.
    pub stuck_after: std::time::Duration,
    /// `/readyz` answers 200 only when a new connection with these options answers `SELECT 1`
    /// within 2 s. A connection of its own, not one of the pool's: a query abandoned at the
    /// timeout must not leave a pooled connection in an unknown state.
    pub database: Option<sqlx::postgres::PgConnectOptions>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Metrics {
    /// Counts one delivery and its latency.
    pub fn delivered(&self, destination: &str, outcome: &'static str, seconds: f64) {
        *lock(&self.deliveries)
            .entry((destination.to_owned(), outcome))
            .or_insert(0) += 1;
        lock(&self.latency)
            .entry(destination.to_owned())
            .or_default()
            .observe(&LATENCY_BUCKETS, seconds);
    }

    /// Records the size of a claim.
    pub fn claimed(&self, n: usize) {
        lock(&self.claim_batch).observe(&BATCH_BUCKETS, n as f64);
    }

    /// Counts leases found taken over (their work was dropped, nothing written).
    pub fn leases_lost(&self, n: usize) {
        self.leases_lost.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Sets the ready-queue gauges.
    pub fn ready(&self, depth: u64, oldest_age_ms: u64) {
        self.ready_depth.store(depth, Ordering::Relaxed);
        self.oldest_ready_ms.store(oldest_age_ms, Ordering::Relaxed);
    }

    /// Marks `loop_name` alive at `now_ms` (milliseconds since the Unix epoch).
    pub fn heartbeat(&self, loop_name: &'static str, now_ms: u64) {
        lock(&self.heartbeats).insert(loop_name, now_ms);
    }

    /// Stops watching `loop_name` (it ended on purpose, at shutdown).
    pub fn loop_ended(&self, loop_name: &'static str) {
        lock(&self.heartbeats).remove(loop_name);
    }

    /// `Ok` when every watched loop turned within `stuck_after_ms` of `now_ms`; otherwise the
    /// loops that did not and for how long.
    pub fn liveness(&self, now_ms: u64, stuck_after_ms: u64) -> Result<(), String> {
        let stuck: Vec<String> = lock(&self.heartbeats)
            .iter()
            .filter(|(_, beat)| now_ms.saturating_sub(**beat) > stuck_after_ms)
            .map(|(name, beat)| {
                format!(
                    "{name} loop has not turned for {} ms",
                    now_ms.saturating_sub(*beat)
                )
            })
            .collect();
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(stuck.join("; "))
        }
    }

    /// The deliveries counted so far with `outcome`, over all destinations.
    pub fn deliveries_with(&self, outcome: &str) -> u64 {
        lock(&self.deliveries)
            .iter()
            .filter(|((_, o), _)| *o == outcome)
            .map(|(_, n)| n)
            .sum()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP oncebox_deliveries_total Delivery attempts by destination and outcome.\n# TYPE oncebox_deliveries_total counter\n");
        for ((dest, outcome), n) in lock(&self.deliveries).iter() {
            let _ = writeln!(
                out,
                "oncebox_deliveries_total{{destination=\"{dest}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        out.push_str("# HELP oncebox_delivery_seconds Time from sending an attempt to its classified outcome.\n# TYPE oncebox_delivery_seconds histogram\n");
        for (dest, h) in lock(&self.latency).iter() {
            h.render(
                &mut out,
                "oncebox_delivery_seconds",
                &format!("destination=\"{dest}\""),
                &LATENCY_BUCKETS,
            );
        }
        out.push_str("# HELP oncebox_claim_batch_size Outbox rows leased per claim.\n# TYPE oncebox_claim_batch_size histogram\n");
        lock(&self.claim_batch).render(&mut out, "oncebox_claim_batch_size", "", &BATCH_BUCKETS);
        let _ = writeln!(
            out,
            "# HELP oncebox_leases_lost_total Leases found taken over by another worker (work dropped, nothing written).\n# TYPE oncebox_leases_lost_total counter\noncebox_leases_lost_total {}",
            self.leases_lost.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP oncebox_ready_depth Deliver rows ready and unleased (capped at 100000).\n# TYPE oncebox_ready_depth gauge\noncebox_ready_depth {}",
            self.ready_depth.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP oncebox_oldest_ready_age_seconds Age of the oldest ready deliver row.\n# TYPE oncebox_oldest_ready_age_seconds gauge\noncebox_oldest_ready_age_seconds {}",
            self.oldest_ready_ms.load(Ordering::Relaxed) as f64 / 1000.0
        );
        out.push_str("# HELP oncebox_loop_heartbeat_timestamp_seconds When each worker loop last turned.\n# TYPE oncebox_loop_heartbeat_timestamp_seconds gauge\n");
        for (name, ms) in lock(&self.heartbeats).iter() {
            let _ = writeln!(
                out,
                "oncebox_loop_heartbeat_timestamp_seconds{{loop=\"{name}\"}} {}",
                *ms as f64 / 1000.0
            );
        }
        out
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until `cancel`.
    ///
    /// # Errors
    /// The bind error.
    pub async fn serve(
        self: Arc<Self>,
        addr: SocketAddr,
        probes: Probes,
        cancel: CancellationToken,
    ) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = cancel.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((mut stream, _)) = accepted else {
                    continue;
                };
                let metrics = self.clone();
                let probes = probes.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 2048];
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]);
                    let path = head.split_whitespace().nth(1).unwrap_or_default();
                    let path = path.split('?').next().unwrap_or_default();
                    let get = head.starts_with("GET ");
                    let (status, body) = match path {
                        "/metrics" if get => ("200 OK", metrics.render()),
                        "/healthz" if get => {
                            let stuck_ms =
                                u64::try_from(probes.stuck_after.as_millis()).unwrap_or(u64::MAX);
                            match metrics.liveness(now_ms(), stuck_ms) {
                                Ok(()) => ("200 OK", "ok\n".to_owned()),
                                Err(why) => ("503 Service Unavailable", format!("stuck: {why}\n")),
                            }
                        }
                        "/readyz" if get => match &probes.database {
                            Some(options) => match tokio::time::timeout(
                                std::time::Duration::from_secs(2),
                                ready(options),
                            )
                            .await
                            {
                                Ok(Ok(_)) => ("200 OK", "ready\n".to_owned()),
                                Ok(Err(e)) => {
                                    ("503 Service Unavailable", format!("database: {e}\n"))
                                }
                                Err(_) => (
                                    "503 Service Unavailable",
                                    "database: no answer within 2 s\n".to_owned(),
                                ),
                            },
                            None => ("200 OK", "ready\n".to_owned()),
                        },
                        _ if !get => ("405 Method Not Allowed", "GET only\n".to_owned()),
                        _ => ("404 Not Found", "not found\n".to_owned()),
                    };
                    let reply = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        Ok(bound)
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Opens a connection, asks `SELECT 1` and closes it.
async fn ready(options: &sqlx::postgres::PgConnectOptions) -> Result<i32, sqlx::Error> {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect_with(options).await?;
    let one = sqlx::query_scalar::<_, i32>("SELECT 1")
        .fetch_one(&mut conn)
        .await?;
    let _ = conn.close().await;
    Ok(one)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_stops_turning_is_stuck() {
        let m = Metrics::default();
        assert!(m.liveness(10_000, 1_000).is_ok(), "no loop yet: alive");
        m.heartbeat("deliver", 9_500);
        m.heartbeat("reconcile", 5_000);
        let why = m.liveness(10_000, 1_000).expect_err("reconcile is stuck");
        assert!(
            why.contains("reconcile loop has not turned for 5000 ms"),
            "{why}"
        );
        assert!(!why.contains("deliver"), "{why}");
        m.loop_ended("reconcile");
        assert!(m.liveness(10_000, 1_000).is_ok());
        assert!(
            m.render()
                .contains("oncebox_loop_heartbeat_timestamp_seconds{loop=\"deliver\"} 9.5")
        );
    }
}
