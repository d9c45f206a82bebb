//! `oncebox-bench signing`: deliveries per second over HTTP with Standard Webhooks signatures
//! against the same drain unsigned, in the same run: a backlog drained by one in-process worker
//! into a fresh key-honouring no-op receiver, unsigned, signed with a `whsec_` secret (`v1`,
//! HMAC-SHA256) and signed with a `whsk_` key (`v1a`, Ed25519), the three alternating in every
//! round (each round starting with another case) from the same empty journal.

use std::time::Duration;

use oncebox_store::scratch::ScratchDb;
use oncebox_worker::Routes;
use serde_json::json;

use crate::SigningArgs;
use crate::stats::{Figure, median, print_figures};

/// The cases, by name, with their `signing` table (none for unsigned).
const CASES: [(&str, Option<&str>); 3] = [
    ("unsigned", None),
    // 32 bytes of 'n' and of 'e', base64: fixed test secrets, not for use anywhere else.
    (
        "v1 (HMAC-SHA256)",
        Some("whsec_bm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm4="),
    ),
    (
        "v1a (Ed25519)",
        Some("whsk_ZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWU="),
    ),
];

/// Runs the signing benchmark in a scratch database of its own.
pub(crate) async fn run(a: SigningArgs, json_out: bool) -> anyhow::Result<()> {
    crate::in_scratch(&a.database_url, "signing", async |scratch| {
        rounds(&a, scratch, json_out).await
    })
    .await
}

async fn rounds(a: &SigningArgs, scratch: &ScratchDb, json_out: bool) -> anyhow::Result<()> {
    let pool = oncebox_store::connect_worker(&scratch.url, 24, Duration::from_secs(5)).await?;
    let n = a.intents as usize;
    let mut figures: Vec<Vec<Figure>> = vec![Vec::new(); CASES.len()];
    for round in 0..a.rounds {
        // Each round starts with another case, so that no case always runs first or last.
        for k in 0..CASES.len() {
            let i = (k + round as usize) % CASES.len();
            let (name, secret) = CASES[i];
            // A fresh receiver per drain: every key is a first effect, never a replay.
            let signing = secret.map_or(String::new(), |s: &str| {
                format!("signing = {{ secrets = [\"{s}\"] }}\n")
            });
            let (receiver, config) = crate::harness::noop_sink("", &signing).await?;
            let routes = Routes::from_config(&config, None)?;
            sqlx::raw_sql(crate::queries::RESET_JOURNAL)
                .execute(&pool)
                .await?;
            let (drain, worker) =
                crate::harness::drain_backlog(&pool, &routes, a.concurrency, n).await?;
            worker.stop().await?;
            anyhow::ensure!(
                receiver.effects().len() == n,
                "{name}: {} effects for {n} intents",
                receiver.effects().len()
            );
            let per_second = n as f64 / drain;
            if !json_out {
                eprintln!("round {}: {name} {per_second:.0} deliveries/s", round + 1);
            }
            figures[i].push(Figure {
                per_second,
                p50_ms: None,
                p99_ms: None,
            });
        }
    }
    let medians: Vec<Figure> = figures.iter().map(|f| median(f)).collect();
    let ratio = |i: usize| medians[i].per_second / medians[0].per_second;
    if json_out {
        println!(
            "{}",
            json!({
                "benchmark": "signing", "intents": a.intents, "rounds": a.rounds,
                "unsigned": medians[0], "v1": medians[1], "v1a": medians[2],
                "ratio_v1": ratio(1), "ratio_v1a": ratio(2),
            })
        );
    } else {
        let rows: Vec<(&str, Figure)> = CASES
            .iter()
            .zip(&medians)
            .map(|((name, _), f)| (*name, *f))
            .collect();
        print_figures(
            &format!(
                "HTTP deliveries draining {n} intents, {} rounds; medians",
                a.rounds
            ),
            24,
            &rows,
        );
        println!("  ratio v1 / unsigned:   {:.2}", ratio(1));
        println!("  ratio v1a / unsigned:  {:.2}", ratio(2));
    }
    Ok(())
}
