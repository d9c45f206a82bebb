//! Prometheus metrics of a worker, rendered in the text exposition format and served on
//! `--metrics-addr` at `/metrics` (and `/healthz`).

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
    loop_heartbeat_ms: AtomicU64,
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

    /// Marks the main loop alive (milliseconds since the Unix epoch).
    pub fn heartbeat(&self, now_ms: u64) {
        self.loop_heartbeat_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Milliseconds since the Unix epoch of the main loop's last turn.
    pub fn last_heartbeat_ms(&self) -> u64 {
        self.loop_heartbeat_ms.load(Ordering::Relaxed)
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
        out
    }

    /// Serves `/metrics` and `/healthz` on `addr` until `cancel`.
    ///
    /// # Errors
    /// The bind error.
    pub async fn serve(
        self: Arc<Self>,
        addr: SocketAddr,
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
                tokio::spawn(async move {
                    let mut buf = [0u8; 2048];
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]);
                    let (status, body) = if head.starts_with("GET /metrics") {
                        ("200 OK", metrics.render())
                    } else if head.starts_with("GET /healthz") {
                        ("200 OK", "ok\n".to_owned())
                    } else {
                        ("404 Not Found", "not found\n".to_owned())
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
