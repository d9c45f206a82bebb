//! What the worker tests share: a database and a config file of the test's own, worker
//! processes, and small helpers to read the journal, the retry report and the probes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oncebox_core::config::Config;
use oncebox_core::redact::RedactionKeys;
use oncebox_core::{IntentNames, NewIntent};
use oncebox_receiver::{Receiver, ReceiverConfig};
use oncebox_store::Intake;
use serde_json::Value;
use sqlx::{PgPool, Row};

use crate::support::{Proc, TestDb};

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_oncebox");

/// A database and a config file of one test's own, both removed when dropped.
pub(crate) struct Env {
    db: TestDb,
    pub(crate) url: String,
    pub(crate) config: PathBuf,
    pub(crate) pool: PgPool,
    pub(crate) intake: Intake,
}

impl Env {
    pub(crate) async fn new(test: &str, config: &str) -> Env {
        let db = TestDb::new("w", test, true).await;
        let pool = db.pool(8).await;
        Env::with_db(db, pool, config).await
    }

    /// An environment over a database the test made (and migrated) itself.
    pub(crate) async fn with_db(db: TestDb, pool: PgPool, config: &str) -> Env {
        let path = std::env::temp_dir().join(format!("{}.toml", db.name()));
        std::fs::write(&path, config).expect("config file");
        let keys = RedactionKeys::parse("test:a secret of thirty-two bytes or more").expect("key");
        let intake = Intake::new(
            &Config::from_toml(config).expect("valid config"),
            Some(keys),
        )
        .expect("keys given");
        Env {
            url: db.url().to_owned(),
            db,
            config: path,
            pool,
            intake,
        }
    }

    /// The test database's name (also used to name queues and exchanges of the test).
    pub(crate) fn name(&self) -> &str {
        self.db.name()
    }

    /// Submits `create_invoice` for tenant `t1` under `key`.
    pub(crate) async fn intent(&self, key: impl AsRef<str>, arguments: Value) {
        self.submit(NewIntent::new(
            IntentNames {
                tenant_id: "t1",
                idempotency_key: key.as_ref(),
                action: "create_invoice",
            },
            arguments,
        ))
        .await;
    }

    pub(crate) async fn submit(&self, intent: NewIntent) {
        let mut tx = self.pool.begin().await.expect("begin");
        self.intake.submit(&mut tx, intent).await.expect("submit");
        tx.commit().await.expect("commit");
    }

    pub(crate) fn worker(&self, id: &str, extra_env: &[(&str, &str)], lease: &str) -> Proc {
        self.worker_with(id, extra_env, lease, &[])
    }

    pub(crate) fn worker_with(
        &self,
        id: &str,
        extra_env: &[(&str, &str)],
        lease: &str,
        args: &[&str],
    ) -> Proc {
        let mut cmd = Command::new(BIN);
        cmd.args(["worker", "--config"])
            .arg(&self.config)
            .args(["--id", id, "--lease", lease]);
        // Defaults for tests, unless the caller names the flag itself.
        for (flag, value) in [
            ("--poll-interval", "100ms"),
            ("--grace", "2s"),
            ("--concurrency", "32"),
        ] {
            if !args.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        cmd.args(args)
            .env("DATABASE_URL", &self.url)
            .env("ONCEBOX_LOG", "warn")
            .env_remove("AMQP_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        Proc::spawn(&mut cmd, format!("worker {id}"))
    }

    /// A worker whose stderr goes to a file of the test's own (read it with
    /// `std::fs::read_to_string`).
    pub(crate) fn worker_logged(&self, id: &str, extra_env: &[(&str, &str)]) -> (Proc, PathBuf) {
        let log = std::env::temp_dir().join(format!("{}-{id}.log", self.name()));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(BIN);
        cmd.args(["worker", "--config"])
            .arg(&self.config)
            .args(["--id", id, "--poll-interval", "100ms"])
            .env("DATABASE_URL", &self.url)
            .env("ONCEBOX_LOG", "warn")
            .env_remove("AMQP_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        (Proc::spawn(&mut cmd, format!("worker {id}")), log)
    }

    pub(crate) async fn status_counts(&self) -> HashMap<String, i64> {
        sqlx::query("SELECT status::text, count(*) AS n FROM oncebox.intents GROUP BY status")
            .fetch_all(&self.pool)
            .await
            .expect("counts")
            .into_iter()
            .map(|r| (r.get("status"), r.get("n")))
            .collect()
    }

    pub(crate) async fn status_of(&self, key: &str) -> String {
        self.scalar_for(
            "SELECT status::text FROM oncebox.intents WHERE idempotency_key = $1",
            key,
        )
        .await
    }

    /// Waits (at most 30 s) until the intent under `key` has `status`.
    pub(crate) async fn wait_status(&self, key: &str, status: &str) {
        self.wait_until(
            Duration::from_secs(30),
            &format!("{key} to be {status}"),
            || async { self.status_of(key).await == status },
        )
        .await;
    }

    /// Waits (at most 30 s) until the count `sql` returns is at least `n`.
    pub(crate) async fn wait_count(&self, sql: &'static str, n: i64) {
        self.wait_until(Duration::from_secs(30), sql, || async {
            self.count(sql).await >= n
        })
        .await;
    }

    /// Intents not yet terminal.
    pub(crate) async fn open(&self) -> i64 {
        self.count("SELECT count(*) FROM oncebox.intents WHERE completed_at IS NULL")
            .await
    }

    /// The single `bigint` a query of the test's own returns (a count).
    pub(crate) async fn count(&self, sql: &'static str) -> i64 {
        self.scalar(sql).await
    }

    /// The single value a query of the test's own returns.
    pub(crate) async fn scalar<T>(&self, sql: &'static str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The single value a query with one text parameter, `arg`, returns.
    pub(crate) async fn scalar_for<T>(&self, sql: &'static str, arg: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        sqlx::query_scalar(sql)
            .bind(arg)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql} ({arg}): {e}"))
    }

    /// Outbox rows leased to `worker` (for a worker just killed: what it held when it died).
    pub(crate) async fn held_by(&self, worker: &str) -> i64 {
        self.scalar_for(
            "SELECT count(*) FROM oncebox.outbox WHERE lease_owner = $1",
            worker,
        )
        .await
    }

    /// Waits until `done` holds, checking every 100 ms, for at most `limit`.
    pub(crate) async fn wait_until<F, Fut>(&self, limit: Duration, what: &str, mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let start = Instant::now();
        while !done().await {
            assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn drop_db(self) {
        self.pool.close().await;
        let _ = std::fs::remove_file(&self.config);
        self.db.drop_db().await;
    }
}

/// A reference receiver on loopback that honours keys (replays a repeated key) or not.
pub(crate) async fn receiver(honours_keys: bool) -> Receiver {
    Receiver::start(ReceiverConfig {
        honours_keys,
        ..ReceiverConfig::default()
    })
    .await
    .expect("receiver")
}

/// GET `path` from a worker's probe server: (status code, body); (0, why) when nothing answers.
pub(crate) async fn probe(addr: &str, path: &str) -> (u16, String) {
    oncebox_delivery::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    match client.get(format!("http://{addr}{path}")).send().await {
        Ok(r) => {
            let code = r.status().as_u16();
            (code, r.text().await.unwrap_or_default())
        }
        Err(e) => (0, e.to_string()),
    }
}

/// GET /metrics from a worker.
pub(crate) async fn scrape(addr: &str) -> String {
    let (code, body) = probe(addr, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    body
}

/// The value of the series `series` (name and labels, exactly) in a Prometheus text body.
pub(crate) fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(name, _)| *name == series)
        .and_then(|(_, v)| v.parse().ok())
}

/// `oncebox serve` over the test's database and config, for decisions made through the ops API.
pub(crate) struct Serve {
    /// Its base URL.
    pub(crate) base: String,
    _proc: Proc,
}

impl Env {
    /// Starts `oncebox serve` on a free port and waits until it listens.
    pub(crate) async fn serve(&self) -> Serve {
        let addr = crate::support::free_addr();
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--config"])
            .arg(&self.config)
            .args(["--listen", &addr])
            .env("DATABASE_URL", &self.url)
            .env(
                "ONCEBOX_REDACTION_KEYS",
                "test:a secret of thirty-two bytes or more",
            )
            .env("ONCEBOX_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let proc = Proc::spawn(&mut cmd, "oncebox serve");
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(&addr).await.is_ok() {
                return Serve {
                    base: format!("http://{addr}"),
                    _proc: proc,
                };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("oncebox serve did not come up");
    }

    /// A new ops token of tenant `t1` issued to `holder`.
    pub(crate) fn ops_token(&self, holder: &str) -> String {
        let out = Command::new(BIN)
            .args(["ops", "token", "create", "--tenant", "t1", "--role", "ops"])
            .args(["--holder", holder])
            .env("DATABASE_URL", &self.url)
            .output()
            .expect("oncebox ops token create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// Runs `oncebox ops DECISION ...` through the ops API at `serve` with `token`.
pub(crate) fn decide(serve: &Serve, token: &str, args: &[&str]) -> (i32, Value, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("ops")
        .args(args)
        .args(["--api", &serve.base, "--json"])
        .env("ONCEBOX_TOKEN", token)
        .env_remove("DATABASE_URL");
    json_run(&mut cmd)
}

/// Runs `oncebox ops ...` against the test's database.
pub(crate) fn ops(env: &Env, args: &[&str]) -> (i32, Value, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("ops")
        .args(args)
        .arg("--json")
        .env("DATABASE_URL", &env.url)
        .env("ONCEBOX_CONFIG", &env.config)
        .env("USER", "ana");
    json_run(&mut cmd)
}

/// Runs a `--json` command: its exit code, its stdout as JSON (null when it is none), stderr.
fn json_run(cmd: &mut Command) -> (i32, Value, String) {
    let out = cmd.output().expect("oncebox ops");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().expect("exit code"), doc, stderr)
}

pub(crate) fn config(url: &str, idempotency: &str, extra: &str) -> String {
    format!(
        r#"
[actions.create_invoice]
destination = "billing"

[destinations.billing]
kind = "http"
url = "{url}"
idempotency = "{idempotency}"
timeout = "1s"
reference_pointer = "/id"
{extra}
"#
    )
}

pub(crate) fn lookup_config(url: &str) -> String {
    config(
        url,
        "lookup",
        "[destinations.billing.lookup]\nurl = \"http://127.0.0.1:9/find?key={key}\"",
    )
}

pub(crate) fn reconcile_config(rx: &Receiver, window: &str) -> String {
    config(
        &rx.url(),
        "lookup",
        &format!(
            "consistency_window = \"{window}\"\n[destinations.billing.lookup]\nurl = \"{}?key={{key}}\"\nresults_pointer = \"/data\"\nfields = [\"/n\"]\nreference_pointer = \"/id\"\ntimeout = \"1s\"",
            rx.url()
        ),
    )
}

pub(crate) async fn reports(env: &Env, key: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT outcome::text FROM oncebox.attempts WHERE intent_id = (SELECT id FROM oncebox.intents WHERE idempotency_key = $1) ORDER BY id",
    )
    .bind(key)
    .fetch_all(&env.pool)
    .await
    .expect("reports")
}

/// The delivery key receivers see for tenant `t1`'s intent `key` (the tenant [`Env::intent`]
/// submits for).
pub(crate) fn dk(key: &str) -> String {
    oncebox_core::delivery_key("t1", key)
}
