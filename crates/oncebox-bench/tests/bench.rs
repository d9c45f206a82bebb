//! The benchmark binary as a user runs it: each benchmark reports both sides and a ratio, and
//! says when a baseline was skipped. (The figures themselves are for people: no threshold is
//! asserted here.)

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::process::Command;

use serde_json::Value;
use support::{assert_help, code, stdout_json, subcommands};

const BIN: &str = env!("CARGO_BIN_EXE_oncebox-bench");

/// Runs `oncebox-bench ARGS` against the local server (each run makes its own scratch database),
/// as one heavy test at a time across every test binary: a benchmark loads the whole machine.
fn bench(args: &[&str]) -> std::process::Output {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let heavy = rt.block_on(support::heavy());
    let out = Command::new(BIN)
        .args(args)
        .env("DATABASE_URL", url)
        .output()
        .expect("oncebox-bench");
    rt.block_on(async move { drop(heavy) });
    out
}

/// Runs `oncebox-bench ARGS --json` (ARGS as one line), which must succeed; its report.
fn report(args: &str) -> Value {
    let mut all: Vec<&str> = args.split_whitespace().collect();
    all.push("--json");
    let o = bench(&all);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    stdout_json(&o)
}

#[test]
fn help_is_there_for_every_benchmark() {
    assert_help(BIN, &[]);
    // Every benchmark the top-level help lists, so that a new one cannot be left out.
    let listed = subcommands(BIN, &[]);
    for expected in [
        "intake", "deliver", "latency", "tools", "signing", "lanes", "scale",
    ] {
        assert!(
            listed.iter().any(|l| l == expected),
            "{expected} in {listed:?}"
        );
    }
    for sub in &listed {
        assert_help(BIN, &[sub]);
    }
    let o = bench(&["deliver", "--intents", "0"]);
    assert_eq!(code(&o), 2, "a zero count is a usage error");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--intents"));
}

#[test]
fn bench_tools_reports_both_sides_and_a_ratio() {
    let r = report("tools --clients 2 --seconds 1 --rounds 1");
    assert!(r["mcp"]["per_second"].as_f64() > Some(0.0), "{r}");
    assert!(r["http_api"]["per_second"].as_f64() > Some(0.0), "{r}");
    assert!(r["ratio_to_http_api"].as_f64() > Some(0.0), "{r}");
    assert!(
        r["effects"].as_u64() > Some(0),
        "calls reached the receiver: {r}"
    );
}

#[test]
fn bench_signing_reports_each_scheme_against_unsigned() {
    let r = report("signing --intents 200 --rounds 1 --concurrency 16");
    for case in ["unsigned", "v1", "v1a"] {
        assert!(r[case]["per_second"].as_f64() > Some(0.0), "{case}: {r}");
    }
    assert!(r["ratio_v1"].as_f64() > Some(0.0), "{r}");
    assert!(r["ratio_v1a"].as_f64() > Some(0.0), "{r}");
}

#[test]
fn bench_lanes_reports_ordered_against_unordered() {
    let r = report("lanes --lanes 4 --per-lane 10 --rounds 1 --concurrency 16");
    for case in ["unordered", "ordered"] {
        assert!(r[case]["per_second"].as_f64() > Some(0.0), "{case}: {r}");
    }
    assert!(r["ratio_ordered"].as_f64() > Some(0.0), "{r}");
}

#[test]
fn bench_intake_reports_both_sides_and_a_ratio() {
    let r = report("intake --clients 2 --seconds 1 --rounds 1 --baseline-dir /nonexistent");
    assert!(r["oncebox"]["per_second"].as_f64() > Some(0.0), "{r}");
    assert!(r["raw_sql"]["per_second"].as_f64() > Some(0.0), "{r}");
    assert!(r["ratio_to_raw_sql"].as_f64() > Some(0.0), "{r}");
    assert!(
        r["pgbench"].is_null(),
        "pgbench skipped without its script: {r}"
    );
}

#[test]
fn bench_deliver_over_amqp_reports_both_sides() {
    let r = report("deliver --amqp --intents 300");
    assert_eq!(r["confirm_window"], 256, "{r}");
    assert_eq!(
        r["concurrency"], 512,
        "by default twice the confirm window in flight: {r}"
    );
    assert!(r["deliveries_per_second"].as_f64() > Some(0.0), "{r}");
    assert!(
        r["raw_publish_confirm_per_second"].as_f64() > Some(0.0),
        "{r}"
    );
    assert!(r["ratio_to_raw"].as_f64() > Some(0.0), "{r}");
}

#[test]
fn bench_deliver_over_http_reports_rate_and_latency() {
    let r =
        report("deliver --intents 300 --seconds 1 --concurrency 32 --baseline-dir /nonexistent");
    assert!(r["deliveries_per_second"].as_f64() > Some(0.0), "{r}");
    assert_eq!(r["concurrency"], 32, "{r}");
    assert!(r["latency"]["samples"].as_u64() > Some(0), "{r}");
    assert!(r["latency"]["achieved_rate"].as_f64() > Some(0.0), "{r}");
    // When the first outcome, a tenth and nine tenths of them were counted, in that order.
    let at = |mark: &str| r["progress"][mark].as_f64().unwrap_or(-1.0);
    assert!(
        0.0 < at("first") && at("first") <= at("tenth") && at("tenth") <= at("nine_tenths"),
        "{r}"
    );
    assert!(
        r["raw_delivery_rps"].is_null(),
        "pgbench baseline skipped without its scripts: {r}"
    );
}

/// A raw baseline that completes its whole backlog within its window would give too low a
/// rate (pgbench claims nothing for the rest of it): the run fails and names the flag to raise.
#[test]
fn bench_deliver_fails_when_the_raw_baseline_runs_out() {
    let args = "deliver --intents 300 --seconds 1 --concurrency 32 --baseline-rows 100 --json";
    let o = bench(&args.split_whitespace().collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 1, "{stderr}");
    assert!(
        stderr.contains("completed all 100 rows") && stderr.contains("--baseline-rows"),
        "{stderr}"
    );
    assert!(o.stdout.is_empty(), "no report printed");
}

/// A backlog spread over tenants is drained whole (the benchmark checks every intent
/// succeeded) and says how many tenants it had.
#[test]
fn bench_deliver_spreads_its_backlog_over_tenants() {
    let r = report(
        "deliver --intents 300 --tenants 7 --seconds 1 --concurrency 32 --baseline-dir /nonexistent",
    );
    assert_eq!(r["tenants"], 7, "{r}");
    assert!(r["deliveries_per_second"].as_f64() > Some(0.0), "{r}");
}

/// The scale benchmark drains each size whole (it checks every intent succeeded), reports the
/// tenants it counted at each size, the cost ratios and a commit-to-arrival point at each size
/// (every timed intent arrived: the benchmark waits for each), and draws its chart; sizes that
/// do not increase, and a saturation rate, are refused.
#[test]
fn bench_scale_reports_each_size_and_draws_its_chart() {
    let chart = std::env::temp_dir().join(format!("oncebox-scale-{}.png", std::process::id()));
    let r = report(&format!(
        "scale --axis tenants --sizes 1,9 --intents 300 --submits 20 --concurrency 32 \
         --rates 250 --latency-seconds 1 --chart {}",
        chart.display()
    ));
    let points = r["points"].as_array().expect("points");
    let tenants: Vec<i64> = points
        .iter()
        .filter_map(|p| p["tenants"].as_i64())
        .collect();
    assert_eq!(tenants, [1, 9], "{r}");
    assert!(
        points.iter().all(|p| {
            p["deliveries_per_second"].as_f64() > Some(0.0)
                && p["intents"] == 320
                && p["submit_p50_ms"].as_f64() > Some(0.0)
                && p["claim_ms"].as_f64() > Some(0.0)
        }),
        "{r}"
    );
    assert_eq!(r["cost_ratio_to_smallest"][0], 1.0, "{r}");
    // The server's vacuum settings are part of what was measured.
    assert!(r["server"]["autovacuum"].is_boolean(), "{r}");
    assert!(
        r["server"]["autovacuum_naptime"]
            .as_str()
            .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit())),
        "{r}"
    );
    for p in points {
        let arrival = &p["arrival"][0];
        assert_eq!(arrival["offered"], 250.0, "{r}");
        assert!(arrival["samples"].as_u64() >= Some(500), "{r}");
        assert!(
            arrival["p50_ms"].as_f64() > Some(0.0)
                && arrival["p99_ms"].as_f64() >= arrival["p50_ms"].as_f64(),
            "{r}"
        );
    }
    let png = std::fs::read(&chart).expect("the chart was written");
    assert!(png.starts_with(b"\x89PNG"), "the chart is a PNG");
    let _ = std::fs::remove_file(&chart);
    let o = bench(&["scale", "--axis", "backlog", "--sizes", "200,100"]);
    assert_ne!(code(&o), 0);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--sizes"));
    let o = bench(&["scale", "--axis", "tenants", "--sizes", "0,10"]);
    assert_ne!(code(&o), 0);
    assert!(String::from_utf8_lossy(&o.stderr).contains("size 0"));
    let o = bench(&["scale", "--axis", "tenants", "--rates", "100,max"]);
    assert_ne!(code(&o), 0);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--rates"));
}

/// The other axes run whole at small sizes: a journal kept beside the backlog (and purged by
/// the batched purge after the drain: a sixth of it is older than five days), ordered intents
/// over lanes with idle lanes beyond them, and one action per destination with breakers and
/// rate limits.
#[test]
fn bench_scale_runs_the_journal_lanes_and_destinations_axes() {
    let chart = std::env::temp_dir().join(format!("oncebox-scale-axes-{}.png", std::process::id()));
    for (axis, sizes) in [
        ("journal", "0,600"),
        ("lanes", "3,400"),
        ("destinations", "1,3"),
    ] {
        let r = report(&format!(
            "scale --axis {axis} --sizes {sizes} --intents 300 --submits 20 --concurrency 32 \
             --latency-seconds 0 --chart {}",
            chart.display()
        ));
        let points = r["points"].as_array().expect("points");
        assert_eq!(points.len(), 2, "{r}");
        assert!(
            points
                .iter()
                .all(|p| p["intents"] == 320 && p["deliveries_per_second"].as_f64() > Some(0.0)),
            "{r}"
        );
        // What each size spread its intents over: as many lanes (used and idle) as the size
        // along the lanes axis, as many destinations along the destinations axis.
        let spread = |field: &str| -> Vec<i64> {
            points
                .iter()
                .map(|p| p[field].as_i64().expect(field))
                .collect()
        };
        let (lanes, destinations) = match axis {
            "lanes" => (vec![3, 400], vec![1, 1]),
            "destinations" => (vec![0, 0], vec![1, 3]),
            _ => (vec![0, 0], vec![1, 1]),
        };
        assert_eq!(spread("lanes"), lanes, "{axis}: {r}");
        assert_eq!(spread("destinations"), destinations, "{axis}: {r}");
        if axis == "journal" {
            assert_eq!(points[0]["purged"], 0, "{r}");
            let purged = points[1]["purged"].as_i64().expect("purged");
            assert!((80..=120).contains(&purged), "a sixth of 600: {r}");
        }
    }
    let _ = std::fs::remove_file(&chart);
}

#[test]
fn bench_intake_over_http_reports_both_sides_and_a_ratio() {
    let r = report("intake --http --clients 4 --seconds 1 --rounds 1 --baseline-dir /nonexistent");
    assert_eq!(r["benchmark"], "intake_http", "{r}");
    assert!(r["http_api"]["per_second"].as_f64() > Some(0.0), "{r}");
    assert!(r["raw"]["per_second"].as_f64() > Some(0.0), "{r}");
    assert!(r["ratio_to_raw"].as_f64() > Some(0.0), "{r}");
    assert!(
        r["baseline"]
            .as_str()
            .is_some_and(|b| b.contains("pgbench not found")),
        "without the baseline script the raw transaction stands in, and says so: {r}"
    );
}
