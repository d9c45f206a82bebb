//! End-to-end tests of the `oncebox` binary against the real Postgres: exit codes, output,
//! errors that name the field, and the demo as a user runs it.
//! Each test works in a database of its own.

mod support;
use support::{TestDb as Db, assert_help, code, free_addr, stdout_json, subcommands, url_for};

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use sqlx::{Connection, PgConnection};

const BIN: &str = env!("CARGO_BIN_EXE_oncebox");

/// A fresh, empty database for one test and a directory for its files, both removed when the
/// test ends (passed or not).
struct TestDb {
    db: Db,
    url: String,
    dir: PathBuf,
}

impl TestDb {
    async fn new(test: &str) -> TestDb {
        let db = Db::new("e2e", test, false).await;
        let dir = std::env::temp_dir().join(db.name());
        std::fs::create_dir_all(&dir).expect("temp dir");
        TestDb {
            url: db.url().to_owned(),
            db,
            dir,
        }
    }

    fn write(&self, file: &str, text: &str) -> PathBuf {
        let p = self.dir.join(file);
        std::fs::write(&p, text).expect("write");
        p
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_stdin(args, None)
    }

    /// Runs oncebox with `env` set (and the tests' redaction keys unless `env` names others).
    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("DATABASE_URL", &self.url)
            .env_remove("ONCEBOX_CONFIG")
            .env("ONCEBOX_REDACTION_KEYS", TEST_KEYS)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("oncebox output")
    }

    /// Runs oncebox with `env` set and no redaction keys unless `env` names them.
    fn run_keyless(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("DATABASE_URL", &self.url)
            .env_remove("ONCEBOX_CONFIG")
            .env_remove("ONCEBOX_REDACTION_KEYS")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("oncebox output")
    }

    fn run_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(BIN)
            .args(args)
            .env("DATABASE_URL", &self.url)
            .env_remove("ONCEBOX_CONFIG")
            .env("ONCEBOX_REDACTION_KEYS", TEST_KEYS)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn oncebox");
        let mut input = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("write stdin");
        }
        drop(input);
        child.wait_with_output().expect("oncebox output")
    }

    async fn count(&self, sql: &str) -> i64 {
        let mut c = PgConnection::connect(&self.url).await.expect("connect");
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(&mut c)
            .await
            .expect("count")
    }

    async fn drop_db(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        self.db.drop_db().await;
    }
}

fn stderr_json(o: &Output) -> Value {
    let text = String::from_utf8_lossy(&o.stderr);
    let last = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON error in {text}"));
    serde_json::from_str(last).expect("error JSON")
}

/// The redaction keys the tests' commands run with (the configuration's rules need one).
const TEST_KEYS: &str = "test:a secret of thirty-two bytes or more";

const CONFIG: &str = r#"
[actions.create_invoice]
destination = "billing"

[actions.charge_card]
destination = "billing"
redact = [{ pointer = "/card", mode = "drop" }]

[actions.refund]
destination = "billing"
[actions.refund.arguments_schema]
type = "object"
required = ["amount"]
properties.amount = { type = "string", pattern = "^[0-9]+[.][0-9]{2}$" }

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:9/invoices"
idempotency = "key"
"#;

/// Every command at every depth answers `--help` with its usage and the exit codes, which are
/// attached once to the whole tree: a command added without them fails here.
#[test]
fn every_command_at_every_depth_ends_its_help_with_the_exit_codes() {
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = 0;
    while let Some(path) = pending.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let o = Command::new(BIN)
            .args(&args)
            .arg("--help")
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(code(&o), 0, "{args:?} --help");
        assert!(text.contains("Usage:"), "{args:?} --help:\n{text}");
        assert!(
            text.contains("Exit codes: 0 ok"),
            "{args:?} --help lacks the exit codes:\n{text}"
        );
        seen += 1;
        for sub in subcommands(BIN, &args) {
            let mut deeper = path.clone();
            deeper.push(sub);
            pending.push(deeper);
        }
    }
    // oncebox, 10 commands, 12 under ops, 3 + 3 + 2 under token, destinations and lanes.
    assert!(seen >= 31, "only {seen} commands found");
}

#[test]
fn help_is_there_for_every_subcommand() {
    let top = Command::new(BIN).arg("--help").output().expect("run");
    assert_eq!(code(&top), 0);
    let text = String::from_utf8_lossy(&top.stdout);
    for sub in [
        "migrate",
        "submit",
        "hash",
        "show",
        "serve",
        "worker",
        "ops",
        "demo",
        "receiver",
        "mcp",
        "completions",
        "Exit codes",
    ] {
        assert!(text.contains(sub), "--help lacks {sub}:\n{text}");
    }
    for sub in [
        &["migrate"][..],
        &["submit"],
        &["hash"],
        &["show"],
        &["worker"],
        &["ops"],
        &["ops", "list"],
        &["ops", "show"],
        &["ops", "retry"],
        &["ops", "resolve"],
        &["ops", "cancel"],
        &["ops", "purge"],
        &["ops", "stats"],
        &["demo"],
        &["serve"],
        &["receiver"],
        &["mcp"],
        &["ops", "token", "create"],
        &["ops", "token", "revoke"],
        &["completions"],
    ] {
        assert_help(BIN, sub);
    }
    let o = Command::new(BIN).arg("frobnicate").output().expect("run");
    assert_eq!(code(&o), 2, "unknown subcommand is a usage error");

    // The summary of `ops` names every one of its commands as a word (it left out `token`).
    let ops = Command::new(BIN)
        .args(["ops", "--help"])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&ops.stdout);
    // The summary is the first paragraph (clap wraps it to the terminal's width).
    let first: Vec<&str> = text.lines().take_while(|l| !l.trim().is_empty()).collect();
    let first = first.join(" ");
    let summary: Vec<&str> = first.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    let commands = subcommands(BIN, &["ops"]);
    assert!(commands.len() >= 8, "{text}");
    for sub in commands {
        assert!(
            summary.contains(&sub.as_str()),
            "the ops summary lacks {sub}: {summary:?}"
        );
    }
    // Flags that would be ignored or dropped are refused instead (exit 2, before any database).
    for args in [
        &["ops", "show", "k", "--actor", "bob"][..],
        &[
            "ops",
            "resolve",
            "k",
            "--failed",
            "--reason",
            "r",
            "--reference",
            "R",
        ],
        &["show", "--key", "k", "--tenant", "t"],
    ] {
        let o = Command::new(BIN)
            .args(args)
            .env("DATABASE_URL", "postgres://postgres@127.0.0.1:1/none")
            .output()
            .expect("run");
        assert_eq!(
            code(&o),
            2,
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn hash_prints_the_request_hash() {
    // printf '%s' '{"action":"create_invoice","arguments":{"amount":"12500.00","order_id":"order-8172"}}' | sha256sum
    let want = "e06c55b04e2fd1efa0a73bf5546202f7238dd9e992e089fa9389ddab3489985f";
    let o = Command::new(BIN)
        .args([
            "hash",
            "--action",
            "create_invoice",
            "--arguments",
            r#"{ "order_id": "order-8172", "amount": "12500.00" }"#,
        ])
        .env_remove("ONCEBOX_CONFIG")
        .output()
        .expect("run");
    assert_eq!(code(&o), 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), want);
    let o = Command::new(BIN)
        .args([
            "hash",
            "--action",
            "create_invoice",
            "--arguments",
            "not json",
            "--json",
        ])
        .env_remove("ONCEBOX_CONFIG")
        .output()
        .expect("run");
    assert_eq!(code(&o), 2);
    assert_eq!(stderr_json(&o)["field"], "arguments");
}

/// The database oncebox joins is the application's, and the application may migrate with sqlx
/// too, keeping its history in `public._sqlx_migrations`. oncebox keeps its own in
/// `oncebox._sqlx_migrations`: whichever migrates first, both succeed, and a database migrated
/// by an older oncebox (its rows in the shared table) is tidied so the application's migrator
/// runs again. Before, `oncebox migrate` exited 1 beside an application's migrations.
#[tokio::test]
async fn migrate_shares_a_database_with_an_application_using_sqlx() {
    let ours = oncebox_store::MIGRATOR.iter().count() as i64;
    let histories =
        |db: &TestDb| {
            let url = db.url.clone();
            async move {
                let mut c = PgConnection::connect(&url).await.expect("connect");
                let count = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql);
                (
                count("SELECT count(*) FROM oncebox._sqlx_migrations WHERE success")
                    .fetch_one(&mut c)
                    .await
                    .expect("oncebox's history"),
                count("SELECT count(*) FROM public._sqlx_migrations WHERE description LIKE 'app %'")
                    .fetch_one(&mut c)
                    .await
                    .expect("the application's history"),
                count("SELECT count(*) FROM public._sqlx_migrations")
                    .fetch_one(&mut c)
                    .await
                    .expect("the shared table"),
            )
            }
        };
    let app = |db: &TestDb, n: i64| {
        let url = db.url.clone();
        async move {
            let mut c = PgConnection::connect(&url).await.expect("connect");
            support::app_migrator(n).run(&mut c).await
        }
    };
    let migrate = |db: &TestDb| {
        let o = db.run(&["migrate"]);
        assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    };

    // The application first, then oncebox, then the application's next migration.
    let db = TestDb::new("share_app_first").await;
    app(&db, 3).await.expect("the application migrates");
    migrate(&db);
    app(&db, 4).await.expect("the application migrates again");
    assert_eq!(histories(&db).await, (ours, 4, 4));
    db.drop_db().await;

    // oncebox first, then the application, then oncebox again.
    let db = TestDb::new("share_oncebox_first").await;
    migrate(&db);
    app(&db, 3)
        .await
        .expect("the application migrates beside oncebox");
    migrate(&db);
    assert_eq!(histories(&db).await, (ours, 3, 3));
    db.drop_db().await;

    // A database an older oncebox migrated: its rows in the shared table, where the application's
    // migrator refuses them. `oncebox migrate` moves them (and only them) to its own table.
    let db = TestDb::new("share_legacy").await;
    let mut c = PgConnection::connect(&db.url).await.expect("connect");
    sqlx::migrate::Migrator::with_migrations(oncebox_store::MIGRATOR.iter().cloned().collect())
        .run(&mut c)
        .await
        .expect("the way an older oncebox migrated");
    let refused = app(&db, 2)
        .await
        .expect_err("oncebox's rows are unknown to the application");
    assert!(
        refused
            .to_string()
            .contains("previously applied but is missing"),
        "{refused}"
    );
    migrate(&db);
    assert_eq!(
        histories(&db).await,
        (ours, 0, 0),
        "every oncebox row moved"
    );
    app(&db, 2)
        .await
        .expect("the application migrates after the move");
    migrate(&db);
    assert_eq!(histories(&db).await, (ours, 2, 2));
    drop(c);
    db.drop_db().await;
}

#[tokio::test]
async fn migrate_submit_replay_conflict_show() {
    let db = TestDb::new("flow").await;
    let config = db.write("oncebox.toml", CONFIG);
    let config = config.to_str().expect("utf-8 path");
    assert_eq!(code(&db.run(&["migrate"])), 0);
    assert_eq!(
        code(&db.run(&["migrate", "--json"])),
        0,
        "migrate is idempotent"
    );

    let args = r#"{"order_id": "order-8172", "amount": "125.00"}"#;
    let submit = |key: &str, args: &str| {
        db.run(&[
            "submit",
            "--json",
            "--config",
            config,
            "--tenant",
            "t1",
            key,
            "--action",
            "create_invoice",
            "--arguments",
            args,
        ])
    };
    let first = submit("inv-8172", args);
    assert_eq!(
        code(&first),
        0,
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first = stdout_json(&first);
    assert_eq!(first["created"], true);
    assert_eq!(first["intent"]["status"], "pending");

    let replay = stdout_json(&submit(
        "inv-8172",
        r#"{"amount":"125.00","order_id":"order-8172"}"#,
    ));
    assert_eq!(replay["created"], false);
    assert_eq!(replay["intent"]["id"], first["intent"]["id"]);

    let conflict = submit(
        "inv-8172",
        r#"{"order_id": "order-8172", "amount": "999.00"}"#,
    );
    assert_eq!(
        code(&conflict),
        3,
        "{}",
        String::from_utf8_lossy(&conflict.stderr)
    );
    let err = stderr_json(&conflict);
    assert_eq!(err["error"], "conflict");
    assert_eq!(err["field"], "idempotency_key");
    assert!(
        err["message"]
            .as_str()
            .expect("message")
            .contains(first["intent"]["request_hash"].as_str().expect("hash"))
    );

    let shown = db.run(&["show", "--json", "--tenant", "t1", "inv-8172"]);
    assert_eq!(code(&shown), 0);
    assert_eq!(stdout_json(&shown)["id"], first["intent"]["id"]);
    let text = db.run(&["show", "--tenant", "t1", "inv-8172"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("pending"));

    assert_eq!(
        code(&db.run(&["show", "--tenant", "t2", "inv-8172"])),
        4,
        "other tenant sees nothing"
    );
    assert_eq!(code(&db.run(&["show", "--tenant", "t1", "nope"])), 4);

    // Arguments from stdin, and redaction configured for the action.
    let o = db.run_stdin(
        &[
            "submit",
            "--json",
            "--config",
            config,
            "--tenant",
            "t1",
            "pay-1",
            "--action",
            "charge_card",
            "--arguments",
            "-",
        ],
        Some(r#"{"card": {"number": "4111111111111111"}, "amount": "5.00"}"#),
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        stdout_json(&o)["intent"]["payload"],
        serde_json::json!({"amount": "5.00"})
    );
    // The dropped card is kept nowhere, yet it is part of the request: the same card is the
    // same request, another card another (a resubmit with it would be a conflict).
    let hash_of = |card: &str| {
        let arguments = format!(r#"{{"card": {{"number": "{card}"}}, "amount": "5.00"}}"#);
        let h = db.run(&[
            "hash",
            "--config",
            config,
            "--action",
            "charge_card",
            "--arguments",
            &arguments,
        ]);
        assert_eq!(code(&h), 0, "{}", String::from_utf8_lossy(&h.stderr));
        String::from_utf8_lossy(&h.stdout).trim().to_owned()
    };
    assert_eq!(
        hash_of("4111111111111111"),
        stdout_json(&o)["intent"]["request_hash"]
    );
    assert_ne!(hash_of("1"), stdout_json(&o)["intent"]["request_hash"]);

    assert_eq!(db.count("SELECT count(*) FROM oncebox.intents").await, 2);
    assert_eq!(db.count("SELECT count(*) FROM oncebox.outbox").await, 2);
    db.drop_db().await;
}

#[tokio::test]
async fn bad_input_is_exit_2_naming_the_field_and_writes_nothing() {
    let db = TestDb::new("bad").await;
    let config = db.write("oncebox.toml", CONFIG);
    let config = config.to_str().expect("utf-8 path");
    assert_eq!(code(&db.run(&["migrate"])), 0);
    // (key, action, arguments, more flags) → the field named.
    let cases: &[(&str, &str, &str, &[&str], &str)] = &[
        ("has space", "create_invoice", "{}", &[], "idempotency_key"),
        ("k", "create_invoice", "[1, 2]", &[], "arguments"),
        ("k", "create_invoice", "{", &[], "arguments"),
        (
            "k",
            "create_invoice",
            r#"{"id": 9007199254740993}"#,
            &[],
            "arguments/id",
        ),
        // Beyond the 64-bit range serde_json would make a float of it: refused all the same.
        (
            "k",
            "create_invoice",
            r#"{"a": [{"n": 123456789012345678901234567890}]}"#,
            &[],
            "arguments/a/0/n",
        ),
        (
            "k",
            "create_invoice",
            r#"{"n": -9223372036854775809}"#,
            &[],
            "arguments/n",
        ),
        ("k", "send_email", "{}", &[], "action"),
        // The action's JSON Schema, as on every intake path.
        ("k", "refund", r#"{"amount": "5"}"#, &[], "arguments/amount"),
        ("k", "refund", r#"{"amount": 5}"#, &[], "arguments/amount"),
        ("k", "refund", r#"{"note": "x"}"#, &[], "arguments"),
        (
            "k",
            "create_invoice",
            "{}",
            &["--deadline", "tomorrow"],
            "deadline",
        ),
    ];
    for (key, action, arguments, more, field) in cases {
        let extra: Vec<&str> = [key, "--action", action, "--arguments", arguments]
            .into_iter()
            .chain(more.iter().copied())
            .collect();
        let mut args = vec!["submit", "--json", "--config", config, "--tenant", "t1"];
        args.extend_from_slice(&extra);
        let o = db.run(&args);
        assert_eq!(
            code(&o),
            2,
            "{extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(stderr_json(&o)["field"], *field, "{extra:?}");
    }
    let long_key = "k".repeat(256);
    let o = db.run(&[
        "submit",
        "--config",
        config,
        "--tenant",
        "t1",
        &long_key,
        "--action",
        "create_invoice",
        "--arguments",
        "{}",
    ]);
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("idempotency_key"));
    // `oncebox hash` reads its arguments the same way: a hash of a rounded number would match
    // a different request.
    for arguments in [
        r#"{"n": 18446744073709551616}"#,
        r#"{"n": 9007199254740993}"#,
    ] {
        let o = db.run(&["hash", "--json", "--action", "a", "--arguments", arguments]);
        assert_eq!(
            code(&o),
            2,
            "{arguments}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(stderr_json(&o)["field"], "arguments/n", "{arguments}");
    }

    // Configuration errors: exit 2, naming where the problem is.
    let submit_with = |file: &str, text: &str| {
        let path = db.write(file, text);
        let path = path.to_str().expect("utf-8 path").to_owned();
        let o = db.run(&[
            "submit",
            "--json",
            "--config",
            &path,
            "--tenant",
            "t1",
            "k",
            "--action",
            "create_invoice",
            "--arguments",
            "{}",
        ]);
        assert_eq!(
            code(&o),
            2,
            "{file}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        stderr_json(&o)
    };
    let e = submit_with(
        "unknown-field.toml",
        &CONFIG.replace("idempotency = \"key\"", "idempotency = \"key\"\ncolour = 5"),
    );
    assert!(
        e["message"].as_str().expect("message").contains("colour"),
        "{e}"
    );
    // The unknown field is named by its path (it used to be only a line and column).
    assert_eq!(e["field"], "destinations.billing.colour", "{e}");
    let e = submit_with(
        "dangling.toml",
        &CONFIG.replace(
            "destination = \"billing\"\n\n[actions.charge_card]",
            "destination = \"ledger\"\n\n[actions.charge_card]",
        ),
    );
    assert_eq!(e["field"], "actions.create_invoice.destination");

    assert_eq!(db.count("SELECT count(*) FROM oncebox.intents").await, 0);
    db.drop_db().await;
}

/// A database that cannot be reached is exit 1 with one sentence: where to (never the
/// password), the cause once, and what to do.
#[test]
fn database_unreachable_is_exit_1() {
    let o = Command::new(BIN)
        .args(["show", "--tenant", "t", "k"])
        .env(
            "DATABASE_URL",
            "postgres://postgres:s3cret@127.0.0.1:1/none",
        )
        .output()
        .expect("run");
    assert_eq!(code(&o), 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error: cannot connect to the database \"none\" at 127.0.0.1:1")
            && err.contains("is Postgres running")
            && !err.contains("s3cret")
            && err.trim_end().lines().count() == 1,
        "{err}"
    );
}

/// A wrong database name, as a newcomer first meets it: the cause once, no line number of
/// Postgres's source, and the way out — for the commands and the worker alike.
#[test]
fn a_missing_database_reads_as_one_sentence() {
    let config = std::env::temp_dir().join(format!("oncebox-nodb-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        "[actions.noop]\ndestination = \"sink\"\n[destinations.sink]\nkind = \"http\"\n\
         url = \"http://127.0.0.1:9/\"\nidempotency = \"key\"\ntimeout = \"5s\"\n",
    )
    .expect("config");
    let config = config.to_str().expect("utf-8 path");
    for args in [
        &["show", "--tenant", "t", "k"][..],
        &["worker", "--config", config][..],
    ] {
        let o = Command::new(BIN)
            .args(args)
            .env(
                "DATABASE_URL",
                "postgres://postgres@127.0.0.1:5432/oncebox_no_such_database",
            )
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(code(&o), 1, "{args:?}: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(
            errors,
            [
                "error: cannot connect to the database \"oncebox_no_such_database\" at \
             127.0.0.1:5432 (DATABASE_URL): database \"oncebox_no_such_database\" does not \
             exist; create it (createdb NAME) or correct the name in DATABASE_URL"
            ],
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_file(config);
}

/// A database that was never migrated: one sentence that says to run `oncebox migrate`, the
/// cause once, no line number of Postgres's source.
#[tokio::test]
async fn an_unmigrated_database_points_at_migrate() {
    let db = TestDb::new("unmigrated").await;
    let o = db.run(&["show", "--tenant", "t", "k"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 1, "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(
        errors,
        [
            "error: schema \"oncebox\" does not exist; this database has no oncebox schema, or \
             an older one: run `oncebox migrate` first"
        ],
        "{err}"
    );
    db.drop_db().await;
}

#[tokio::test]
async fn demo_runs_end_to_end_with_faults() {
    let db = TestDb::new("demo").await;
    let name = format!("{}_run", db.db.name());
    let o = db.run(&[
        "demo",
        "--json",
        "--database-url",
        &url_for("postgres"),
        "--database-name",
        &name,
        "--intents",
        "120",
        "--agents",
        "8",
    ]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let r = stdout_json(&o);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["duplicates"], 0);
    assert_eq!(r["lost"], 0);
    assert_eq!(r["journal_rows"], 120);
    assert_eq!(r["outbox_rows_left"], 0, "all work done");
    assert_eq!(r["effects"], 120, "one effect per intent at the receiver");
    assert_eq!(r["by_status"]["succeeded"], 120);
    assert!(
        r["events_applied"].as_u64() > Some(0),
        "events went through RabbitMQ and the inbox: {r}"
    );
    assert!(
        r["attempts_unknown"].as_u64() > Some(0),
        "dropped answers were re-sent: {r}"
    );
    assert!(
        r["attempts_busy"].as_u64() > Some(0),
        "503s were retried: {r}"
    );
    assert_eq!(r["business_rows"], 120);
    assert!(r["connections_cut"].as_u64() > Some(0), "{r}");
    assert!(r["answers_dropped"].as_u64() > Some(0), "{r}");
    assert!(r["conflicts_refused"].as_u64() > Some(0), "{r}");
    assert_eq!(r["created"], 120);
    db.drop_db().await;
}

#[tokio::test]
async fn the_reference_receiver_runs_as_a_server_and_counts_effects_per_key() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let bad = Command::new(BIN)
        .args(["receiver", "--drop-rate", "2"])
        .output()
        .expect("run");
    assert_eq!(code(&bad), 2);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--drop-rate"));

    let addr = free_addr();
    let server = Command::new(BIN)
        .args(["receiver", "--honours-keys", "--listen", &addr])
        .stderr(Stdio::piped())
        .spawn()
        .expect("receiver");
    let request = |raw: String| {
        let addr = addr.clone();
        async move {
            for _ in 0..100 {
                if let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await {
                    s.write_all(raw.as_bytes()).await.expect("write");
                    // The receiver keeps connections alive: end ours so that it closes.
                    s.shutdown().await.expect("shutdown");
                    let mut out = String::new();
                    let _ = s.read_to_string(&mut out).await;
                    return out;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("the receiver did not come up");
        }
    };
    let body = r#"{"order_id":"o-1"}"#;
    let post = format!(
        "POST /effects HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    assert!(request(post.clone()).await.starts_with("HTTP/1.1 201"));
    assert!(request(post).await.starts_with("HTTP/1.1 201"), "a replay");
    let found =
        request("GET /effects?key=k-1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".into())
            .await;
    let json = found.split("\r\n\r\n").nth(1).expect("body");
    let v: Value = serde_json::from_str(json).expect("json");
    assert_eq!(
        v["data"].as_array().map(Vec::len),
        Some(1),
        "one effect for k-1: {v}"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let out = server.wait_with_output().expect("exit");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 effects"));
}

/// `hash` redaction is keyed: without `ONCEBOX_REDACTION_KEYS` every command that would hash
/// refuses to start (exit 2, naming the variable) and writes nothing; with it, the journal holds
/// `hmac-sha256:<key id>:…`, never the value, and `oncebox hash` agrees with `submit`.
#[tokio::test]
async fn hash_redaction_needs_a_key_and_never_keeps_the_value() {
    let db = TestDb::new("keyed").await;
    let config = db.write(
        "oncebox.toml",
        &CONFIG.replace(
            r#"redact = [{ pointer = "/card", mode = "drop" }]"#,
            r#"redact = [{ pointer = "/card/number", mode = "hash" }]"#,
        ),
    );
    let config = config.to_str().expect("utf-8 path");
    assert_eq!(code(&db.run(&["migrate"])), 0);
    let args = r#"{"card": {"number": "4111111111111111"}, "amount": "5.00"}"#;
    let submit = [
        "submit",
        "pay-1",
        "--json",
        "--config",
        config,
        "--tenant",
        "t1",
        "--action",
        "charge_card",
        "--arguments",
        args,
    ];
    let hash = [
        "hash",
        "--json",
        "--config",
        config,
        "--action",
        "charge_card",
        "--arguments",
        args,
    ];
    let listen = free_addr();
    let serve = ["serve", "--json", "--config", config, "--listen", &listen];
    let secret = "an operator secret of 32 bytes or more";
    for (env, says) in [
        (vec![], "ONCEBOX_REDACTION_KEYS"),
        (vec![("ONCEBOX_REDACTION_KEYS", "k1:short")], "at least 32"),
    ] {
        for cmd in [&submit[..], &hash, &serve] {
            let o = db.run_keyless(cmd, &env);
            assert_eq!(
                code(&o),
                2,
                "{cmd:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let e = stderr_json(&o);
            assert_eq!(e["field"], "ONCEBOX_REDACTION_KEYS", "{e}");
            assert!(
                e["message"].as_str().is_some_and(|m| m.contains(says)),
                "{e}"
            );
        }
    }
    assert_eq!(db.count("SELECT count(*) FROM oncebox.intents").await, 0);

    let keys = format!("k1:{secret}");
    let env = [("ONCEBOX_REDACTION_KEYS", keys.as_str())];
    let o = db.run_env(&submit, &env);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let submitted = stdout_json(&o);
    let number = submitted["intent"]["payload"]["card"]["number"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(number.starts_with("hmac-sha256:k1:"), "{submitted}");
    let h = db.run_env(&hash, &env);
    assert_eq!(code(&h), 0);
    assert_eq!(
        stdout_json(&h)["request_hash"],
        submitted["intent"]["request_hash"]
    );
    let journal: String = {
        let mut c = PgConnection::connect(&db.url).await.expect("connect");
        sqlx::query_scalar("SELECT payload::text FROM oncebox.intents")
            .fetch_one(&mut c)
            .await
            .expect("journal")
    };
    assert!(
        !journal.contains("4111111111111111") && !journal.contains(secret),
        "{journal}"
    );
    db.drop_db().await;
}

/// A binary refuses a schema newer than it knows — `migrate`, `serve` and `worker` exit 1 with a
/// message saying so — unless told `--allow-newer-schema` (a rollback the release notes allow).
#[tokio::test]
async fn a_schema_newer_than_the_binary_is_refused_with_a_clear_message() {
    let db = TestDb::new("newer").await;
    let config = db.write("oncebox.toml", CONFIG);
    let config = config.to_str().expect("utf-8 path");
    assert_eq!(code(&db.run(&["migrate"])), 0);
    // A newer oncebox's migration.
    {
        let mut c = PgConnection::connect(&db.url).await.expect("connect");
        sqlx::query(
            "INSERT INTO oncebox._sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (9999, 'from the future', true, '\\x00', 1)",
        )
        .execute(&mut c)
        .await
        .expect("a newer migration");
    }
    let listen = free_addr();
    for cmd in [
        &["migrate"][..],
        &["serve", "--config", config, "--listen", &listen],
        &["worker", "--config", config],
    ] {
        let o = db.run_env(cmd, &[]);
        assert_eq!(
            code(&o),
            1,
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("migration 9999, newer than this binary knows"),
            "{cmd:?}: {err}"
        );
    }
    // Allowed explicitly, the API comes up.
    let serve = support::Proc::spawn(
        Command::new(BIN)
            .args([
                "serve",
                "--config",
                config,
                "--listen",
                &listen,
                "--allow-newer-schema",
            ])
            .env("DATABASE_URL", &db.url)
            .env("ONCEBOX_REDACTION_KEYS", TEST_KEYS)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "oncebox serve --allow-newer-schema",
    );
    let mut up = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(&listen).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(up, "serve --allow-newer-schema starts");
    assert!(serve.stop().await.success());
    db.drop_db().await;
}

/// Every connection oncebox opens to Postgres disables Nagle's algorithm. sqlx 0.9.0 stopped
/// doing it (its issue 4335), and a statement longer than one TCP segment — a record of a few
/// hundred outcomes, a large payload — then waited ~40 ms for the server's delayed ACK; the
/// workspace patches sqlx-core until a release carries the fix (vendor/README.md). Watched
/// with strace: each socket connected to Postgres's port gets `TCP_NODELAY` set before it is
/// closed or the process ends.
#[tokio::test]
async fn every_postgres_socket_has_tcp_nodelay() {
    let db = TestDb::new("nodelay").await;
    let port = db
        .url
        .parse::<sqlx::postgres::PgConnectOptions>()
        .expect("DATABASE_URL")
        .get_port();
    let trace = db.dir.join("strace.txt");
    let o = strace(
        "trace=connect,setsockopt,close",
        &trace,
        &["migrate"],
        &[("DATABASE_URL", &db.url)],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let trace = std::fs::read_to_string(&trace).expect("strace output");
    let verdict = nodelay_verdict(&trace, port);
    assert!(verdict.is_ok(), "{verdict:?}\n{trace}");
    db.drop_db().await;
}

/// Runs the binary with `args` and `env` under strace (following forks, tracing `events` into
/// `out`).
fn strace(events: &str, out: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("strace")
        .args(["-f", "-qq", "-e", events, "-o"])
        .arg(out)
        .arg(BIN)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("strace (scripts/test-tools.sh installs it)")
}

/// From an strace of connect, setsockopt and close: how many sockets connected to `port`, or
/// the first that was closed (or left open) without `TCP_NODELAY`.
fn nodelay_verdict(trace: &str, port: u16) -> Result<usize, String> {
    let fd = |line: &str, call: &str| -> Option<u32> {
        let rest = &line[line.find(&format!("{call}("))? + call.len() + 1..];
        rest.split([',', ' ', ')']).next()?.parse().ok()
    };
    let (mut pending, mut connected) = (std::collections::HashSet::new(), 0);
    for line in trace.lines() {
        if let Some(n) = fd(line, "connect")
            && line.contains(&format!("port=htons({port})"))
        {
            pending.insert(n);
            connected += 1;
        } else if let Some(n) = fd(line, "setsockopt")
            && line.contains("TCP_NODELAY, [1]")
        {
            pending.remove(&n);
        } else if let Some(n) = fd(line, "close")
            && pending.contains(&n)
        {
            return Err(format!("fd {n} closed without TCP_NODELAY"));
        }
    }
    match (connected, pending.is_empty()) {
        (0, _) => Err(format!("no connection to port {port} seen")),
        (_, false) => Err(format!("sockets without TCP_NODELAY: {pending:?}")),
        (n, true) => Ok(n),
    }
}

/// The binary's allocator asks for no transparent huge pages: with them, the kernel zeroed a
/// whole 2 MiB page on the runtime thread that first touched it, and a worker's calls stalled
/// for milliseconds while its memory grew (`docs/performance.md`). mimalloc asks with
/// `madvise(MADV_HUGEPAGE)` as soon as it maps its first arena, so a short command shows it;
/// watched with strace.
#[test]
fn the_allocator_asks_for_no_transparent_huge_pages() {
    let trace = std::env::temp_dir().join(format!("oncebox-thp-{}.txt", std::process::id()));
    let args = [
        "hash",
        "--action",
        "create_invoice",
        "--arguments",
        r#"{"n":1}"#,
    ];
    let o = strace("trace=madvise", &trace, &args, &[]);
    let text = std::fs::read_to_string(&trace).expect("strace output");
    let _ = std::fs::remove_file(&trace);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !text.contains("MADV_HUGEPAGE"),
        "the allocator asked for huge pages:\n{text}"
    );
}

/// The README's quickstart, run as written: its one shell block, with only what a test must
/// change — the binary already built instead of `cargo build`, a database of its own, free
/// ports instead of 9000 and 8080 — then the checks its prose promises: the intent succeeded,
/// a replay is 200 with one effect at the receiver, other arguments under the key are 422.
#[tokio::test]
async fn the_readme_quickstart_runs_as_written() {
    let db = TestDb::new("quickstart").await;
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README");
    let section = readme
        .split("\n## Quickstart")
        .nth(1)
        .expect("a Quickstart section in the README");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the quickstart's shell block");
    let (receiver, api) = (free_addr(), free_addr());
    let bin_dir = std::path::Path::new(BIN).parent().expect("bin dir");
    let build = r#"cargo build --release -p oncebox && export PATH="$PWD/target/release:$PATH""#;
    let url = "postgres://postgres:postgres@127.0.0.1:5432/postgres";
    for written in [
        build,
        url,
        "127.0.0.1:9000",
        "127.0.0.1:8080",
        "localhost:8080",
    ] {
        assert!(block.contains(written), "the quickstart names {written}");
    }
    let script = block
        .replace(
            build,
            &format!("export PATH=\"{}:$PATH\"", bin_dir.display()),
        )
        .replace(url, &db.url)
        .replace(
            "oncebox receiver --honours-keys",
            &format!("oncebox receiver --honours-keys --listen {receiver}"),
        )
        .replace(
            "oncebox serve --config quickstart.toml",
            &format!("oncebox serve --config quickstart.toml --listen {api}"),
        )
        .replace("127.0.0.1:9000", &receiver)
        .replace("127.0.0.1:8080", &api)
        .replace("localhost:8080", &api);
    let checks = format!(
        r#"
echo
echo "replay $(curl -s -o /dev/null -w '%{{http_code}}' -X POST {api}/v1/intents \
  -H "Authorization: Bearer $TOKEN" -H 'Idempotency-Key: invoice-order-8172' \
  -H 'Content-Type: application/json' \
  -d '{{"action": "create_invoice", "arguments": {{"order_id": "order-8172", "amount": "125.00"}}}}')"
echo "effects $(curl -s '{receiver}/effects?key=tenant-42:invoice-order-8172')"
echo "conflict $(curl -s -o /dev/null -w '%{{http_code}}' -X POST {api}/v1/intents \
  -H "Authorization: Bearer $TOKEN" -H 'Idempotency-Key: invoice-order-8172' \
  -H 'Content-Type: application/json' \
  -d '{{"action": "create_invoice", "arguments": {{"order_id": "order-8172", "amount": "999.00"}}}}')"
"#
    );
    let full = format!("trap 'kill $(jobs -p) 2>/dev/null' EXIT\nset -e\n{script}\n{checks}");
    let o = Command::new("timeout")
        .args(["120", "bash", "-c", &full])
        .current_dir(&db.dir)
        .env_remove("ONCEBOX_CONFIG")
        .env_remove("ONCEBOX_REDACTION_KEYS")
        .stdin(Stdio::null())
        .output()
        .expect("bash");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 0, "stdout:\n{out}\nstderr:\n{err}");
    let waited = out
        .lines()
        .find(|l| l.contains("\"status\":\"succeeded\""))
        .unwrap_or_else(|| panic!("the waited answer says succeeded:\n{out}"));
    assert!(waited.contains("\"attempt_count\":1"), "{waited}");
    assert!(out.contains("\nreplay 200"), "{out}");
    assert!(out.contains("\nconflict 422"), "{out}");
    let effects = out
        .lines()
        .find_map(|l| l.strip_prefix("effects "))
        .expect("effects line");
    let effects: Value = serde_json::from_str(effects).expect("the receiver's JSON");
    assert_eq!(
        effects["data"].as_array().map(Vec::len),
        Some(1),
        "{effects}"
    );
    db.drop_db().await;
}

#[test]
fn completions_come_from_the_command_tree_and_its_closed_sets() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .expect("run");
        assert_eq!(
            code(&o),
            0,
            "{shell}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let script = String::from_utf8_lossy(&o.stdout);
        // Commands, nested ones and options.
        for word in ["oncebox", "migrate", "destinations", "--older-than"] {
            assert!(script.contains(word), "{shell}'s script lacks {word}");
        }
        // Bash's script holds no descriptions, only the words it completes: a status in it is a
        // value of `ops list --status`, from the core's list through its value enum (zsh and
        // fish complete values too, with descriptions; elvish and powershell do not).
        if shell == "bash" {
            for status in oncebox_core::Status::ALL {
                assert!(script.contains(status.as_str()), "{shell}: {status}");
            }
        }
    }
    let o = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .expect("run");
    assert_eq!(code(&o), 2, "an unknown shell is a usage error");
}
