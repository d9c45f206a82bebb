//! What the demo counts at the end, and how it prints it: intents, attempts, effects at the
//! receivers and the consumer, duplicates, lost intents and statuses.

use std::collections::HashMap;

use oncebox_core::Status;
use serde_json::json;
use sqlx::{PgPool, Row};

use super::agents::{Tally, n};
use super::queries;

/// The counts at the end of a run.
pub(super) struct Report {
    pub(super) intents: usize,
    counts: HashMap<&'static str, usize>,
    by_status: Vec<(Status, i64)>,
    /// Effects at the receivers and the consumer, by key.
    effect_total: usize,
    events_applied: usize,
    pub(super) duplicates: usize,
    pub(super) lost: usize,
    pub(super) unredacted: usize,
    requests: usize,
    filtered: usize,
}

const SUMMARY_COLUMNS: [&str; 9] = [
    "journal",
    "outbox",
    "orders",
    "orphans",
    "unredacted",
    "attempts",
    "unknown_attempts",
    "busy_attempts",
    "reconciled",
];

/// What the run observed outside the database.
pub(super) struct Observed {
    /// Effects at the two HTTP receivers, by key.
    pub(super) effects: HashMap<String, u32>,
    /// Requests the receivers saw.
    pub(super) requests: usize,
    /// Redeliveries the inbox filtered.
    pub(super) filtered: usize,
}

impl Report {
    /// Counts everything in the demo's database, with what the receivers saw.
    pub(super) async fn collect(
        pool: &PgPool,
        tally: &Tally,
        intents: usize,
        mut observed: Observed,
    ) -> anyhow::Result<Report> {
        let row = sqlx::query(queries::SUMMARY).fetch_one(pool).await?;
        let mut counts = HashMap::new();
        for c in SUMMARY_COLUMNS {
            counts.insert(c, usize::try_from(row.try_get::<i64, _>(c)?).unwrap_or(0));
        }
        let by_status: Vec<(Status, i64)> =
            sqlx::query_as(queries::BY_STATUS).fetch_all(pool).await?;
        let succeeded: Vec<String> =
            sqlx::query_as::<_, (String, String, oncebox_core::KeyForm)>(queries::SUCCEEDED_KEYS)
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(|(tenant, key, form)| form.delivery_key(&tenant, &key))
                .collect();
        let applied: Vec<(String, i64)> = sqlx::query_as(queries::APPLIED_PER_KEY)
            .fetch_all(pool)
            .await?;
        let events_applied = applied.len();
        let effects = &mut observed.effects;
        for (key, times) in applied {
            effects.insert(key, u32::try_from(times).unwrap_or(u32::MAX));
        }
        let journal = counts["journal"];
        // A duplicate: a second journal row, a second effect for one key, or a replay that
        // named another intent. Lost: an intent or business row missing, an intent not
        // terminal, a succeeded intent without its effect, or an effect without its intent.
        let duplicates = journal.saturating_sub(intents)
            + effects
                .values()
                .map(|c| (*c as usize).saturating_sub(1))
                .sum::<usize>()
            + n(&tally.wrong_replay);
        let terminal: usize = by_status
            .iter()
            .filter(|(st, _)| st.is_terminal())
            .map(|(_, c)| *c as usize)
            .sum();
        let missing_effects = succeeded
            .iter()
            .filter(|k| !effects.contains_key(*k))
            .count();
        let lost = intents.saturating_sub(journal)
            + intents.saturating_sub(counts["orders"])
            + counts["orphans"]
            + journal.saturating_sub(terminal)
            + missing_effects
            + effects.len().saturating_sub(succeeded.len());
        Ok(Report {
            intents,
            unredacted: counts["unredacted"],
            effect_total: effects.values().map(|c| *c as usize).sum(),
            counts,
            by_status,
            events_applied,
            duplicates,
            lost,
            requests: observed.requests,
            filtered: observed.filtered,
        })
    }

    /// Whether the run kept every promise.
    pub(super) fn ok(&self) -> bool {
        self.duplicates == 0 && self.lost == 0 && self.unredacted == 0 && self.counts["outbox"] == 0
    }

    fn status_count(&self, s: Status) -> usize {
        self.by_status
            .iter()
            .find(|(st, _)| *st == s)
            .map_or(0, |(_, c)| *c as usize)
    }

    /// One JSON document.
    pub(super) fn json(&self, tally: &Tally, agents: usize, seconds: f64) -> serde_json::Value {
        let c = &self.counts;
        json!({
            "intents": self.intents, "agents": agents, "submit_calls": n(&tally.calls),
            "created": n(&tally.created), "replayed": n(&tally.replayed),
            "conflicts_refused": n(&tally.conflicts), "connections_cut": n(&tally.cut),
            "answers_dropped": n(&tally.answers_dropped),
            "journal_rows": c["journal"], "outbox_rows_left": c["outbox"], "business_rows": c["orders"],
            "attempts": c["attempts"], "attempts_unknown": c["unknown_attempts"],
            "attempts_busy": c["busy_attempts"], "reconciled": c["reconciled"],
            "events_applied": self.events_applied, "redeliveries_filtered": self.filtered,
            "receiver_requests": self.requests, "effects": self.effect_total, "workers_killed": 1,
            "by_status": self.by_status.iter().map(|(s, c)| (s.as_str().to_owned(), json!(c)))
                .collect::<serde_json::Map<_, _>>(),
            "unredacted": self.unredacted,
            "duplicates": self.duplicates, "lost": self.lost, "ok": self.ok(),
            "seconds": seconds,
        })
    }

    /// The table people read.
    pub(super) fn print(&self, tally: &Tally) {
        let c = &self.counts;
        let rows: [(&str, usize); 19] = [
            ("intake: submit calls (with retries)", n(&tally.calls)),
            ("  created", n(&tally.created)),
            ("  replayed (same key, same request)", n(&tally.replayed)),
            ("  refused: key reused, other request", n(&tally.conflicts)),
            ("  connections cut before commit", n(&tally.cut)),
            ("  answers lost after commit", n(&tally.answers_dropped)),
            ("journal rows (intents)", c["journal"]),
            ("business rows (same transactions)", c["orders"]),
            ("delivery: attempts", c["attempts"]),
            ("  unknown (answer dropped)", c["unknown_attempts"]),
            ("    of which resolved by lookup", c["reconciled"]),
            ("  503 with Retry-After", c["busy_attempts"]),
            ("  requests at the receiver", self.requests),
            (
                "  events applied by the inbox consumer",
                self.events_applied,
            ),
            ("  redeliveries filtered by the inbox", self.filtered),
            ("effects (receivers + consumer)", self.effect_total),
            ("duplicates", self.duplicates),
            ("lost", self.lost),
            ("needs review", self.status_count(Status::NeedsReview)),
        ];
        for (k, v) in rows {
            println!("  {k:<38} {v:>6}");
        }
        let statuses: Vec<String> = self
            .by_status
            .iter()
            .map(|(st, c)| format!("{st} {c}"))
            .collect();
        println!("  {:<38} {}", "by status", statuses.join(", "));
        println!(
            "  {:<38} {:>6}",
            "payloads with an email in clear", self.unredacted
        );
    }
}
