//! The overview: tiles of what needs a person, completions over the last hour, intents by
//! status, the ready queue, workers and dead-letter queues.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use oncebox_core::Status;
use oncebox_store::console::NEEDS_A_PERSON;

use super::{destination_of, respond};
use crate::AppState;
use crate::console::html::{self, Bar, Nav, age, columns, url_part};
use crate::console::{Signed, internal};

/// `/console`: what waits now, the last hour's deliveries, intents by status, the queues and
/// the workers.
pub(crate) async fn overview(State(state): State<Arc<AppState>>, Signed(s): Signed) -> Response {
    let tenant = &s.tenant_id;
    let pool = &state.pool;
    let (counts, completed, ready, workers) = match tokio::try_join!(
        oncebox_store::console::counts(pool, tenant),
        oncebox_store::console::completed_per_minute(pool, tenant),
        oncebox_store::console::ready(pool, tenant),
        oncebox_store::console::workers(pool),
    ) {
        Ok(all) => all,
        Err(e) => return internal(e),
    };
    let body = html! {
        (tiles(&counts, &ready, &workers))
        (completions_chart(&completed))
        (status_table(&state, &counts))
        (queues_and_workers(&state, &workers).await)
    };
    respond(&s, "Overview", Nav::Overview, body)
}

/// What waits now: ready intents, the oldest's age, reviews, workers reporting.
fn tiles(
    counts: &[oncebox_store::console::Count],
    ready: &oncebox_store::ReadyQueue,
    workers: &[oncebox_store::console::WorkerSeen],
) -> Markup {
    let of = |status: oncebox_core::Status| -> i64 {
        counts
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.n)
            .sum()
    };
    let waiting_person = of(oncebox_core::Status::NeedsReview);
    let awaiting = of(oncebox_core::Status::AwaitingApproval);
    let alive = workers.iter().filter(|w| w.seen_seconds_ago < 30.0).count();
    let oldest = if ready.depth == 0 {
        "—".to_owned()
    } else {
        age(ready.oldest_seconds)
    };
    html! {
        section.tiles {
            div.tile { span.n { (ready.depth) } span { "ready to deliver" } }
            div.tile { span.n { (oldest) } span { "oldest ready" } }
            div.tile.warn[awaiting > 0] {
                a href="/console/approvals" {
                    span.n { (awaiting) } span { "await approval" }
                }
            }
            div.tile.warn[waiting_person > 0] {
                a href="/console/attention?status=needs_review" {
                    span.n { (waiting_person) } span { "need review" }
                }
            }
            div.tile { span.n { (alive) } span { "workers reporting" } }
        }
    }
}

/// Intents completed per minute over the last hour, as a bar chart.
fn completions_chart(completed: &[oncebox_store::console::Completed]) -> Markup {
    // Completions per minute, oldest minute first.
    let mut per_minute = vec![(0u64, 0u64); 60];
    for c in completed {
        if let Some(slot) = usize::try_from(c.minutes_ago)
            .ok()
            .filter(|m| *m < 60)
            .map(|m| 59 - m)
        {
            let n = u64::try_from(c.n).unwrap_or(0);
            if c.status == Status::Succeeded {
                per_minute[slot].0 += n;
            } else {
                per_minute[slot].1 += n;
            }
        }
    }
    let bars: Vec<Bar> = per_minute
        .iter()
        .enumerate()
        .map(|(i, (ok, other))| Bar {
            label: if i == 59 {
                "now".to_owned()
            } else {
                format!("-{}m", 59 - i)
            },
            parts: vec![("ok", *ok), ("bad", *other)],
        })
        .collect();
    html! {
        section {
            h2 { "Deliveries per minute, last hour" }
            (html::bar_chart(
                "Intents completed per minute",
                &bars,
                &[("ok", "succeeded"), ("bad", "failed, cancelled or expired")],
            ))
        }
    }
}

/// The tenant's intents by status (columns) and destination (rows).
fn status_table(state: &AppState, counts: &[oncebox_store::console::Count]) -> Markup {
    let statuses: Vec<Status> = Status::ALL.to_vec();
    let mut by_dest: BTreeMap<&str, BTreeMap<Status, i64>> = BTreeMap::new();
    for c in counts {
        *by_dest
            .entry(destination_of(state, &c.action))
            .or_default()
            .entry(c.status)
            .or_default() += c.n;
    }
    html! {
        section {
            h2 { "Intents by status and destination" }
            table.grid {
                thead {
                    tr {
                        th scope="col" { "destination" }
                        @for st in &statuses { th scope="col" { (st.as_str()) } }
                    }
                }
                tbody {
                    @if by_dest.is_empty() {
                        tr { td colspan=(statuses.len() + 1) { "No intents yet." } }
                    }
                    @for (dest, row) in &by_dest {
                        tr {
                            th scope="row" { (dest) }
                            @for st in &statuses {
                                @let n = row.get(st).copied().unwrap_or(0);
                                @if n > 0 && NEEDS_A_PERSON.contains(st) {
                                    td {
                                        a href={
                                            "/console/attention?status=" (st.as_str())
                                            "&destination=" (url_part(dest))
                                        } { (n) }
                                    }
                                } @else {
                                    td { (n) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The dead-letter queues' depths and the workers seen.
async fn queues_and_workers(
    state: &AppState,
    workers: &[oncebox_store::console::WorkerSeen],
) -> Markup {
    let depths = match &state.console.dead_letter_depths {
        Some(read) => Some(read().await),
        None => None,
    };
    html! {
        section.cols {
            div {
                h2 { "Dead-letter queues" }
                @if let Some(depths) = &depths {
                    table {
                        (columns(&["queue", "messages"]))
                        tbody {
                            @for (queue, depth) in depths {
                                tr {
                                    td { code { (queue) } }
                                    td {
                                        @match depth {
                                            Some(d) => { (d) }
                                            None => { "unreadable" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    p.hint { "All tenants' dead letters share these queues." }
                } @else {
                    p.hint {
                        "Not shown: start " code { "oncebox serve" } " with "
                        code { "--amqp-url" } " (or " code { "AMQP_URL" } ") to read them."
                    }
                }
            }
            div {
                h2 { "Workers" }
                @if workers.is_empty() {
                    p.hint { "No worker has reported in the last day." }
                } @else {
                    table {
                        (columns(&["worker", "work", "last heartbeat", "since"]))
                        tbody {
                            @for w in workers {
                                tr class=(if w.seen_seconds_ago < 30.0 { "ok" } else { "stale" }) {
                                    td { code { (w.worker) } }
                                    td { (if w.delivers { "delivers" } else { "reconciles only" }) }
                                    td { (age(w.seen_seconds_ago)) " ago" }
                                    td { (html::time(w.started_at)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
