//! The overview: tiles of what needs a person, completions over the last hour, intents by
//! status, the ready queue, workers and dead-letter queues.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use oncebox_core::Status;
use oncebox_store::console::NEEDS_A_PERSON;

use super::{destination_of, respond};
use crate::AppState;
use crate::console::html::{self, Bar, Nav, age, esc, url_part};
use crate::console::{internal, session};

pub(crate) async fn overview(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let s = match session(&state, &headers).await {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    let tenant = &s.caller.tenant_id;
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
    let mut body = String::new();

    tiles(&counts, &ready, &workers, &mut body);
    completions_chart(&completed, &mut body);
    status_table(&state, &counts, &mut body);
    queues_and_workers(&state, &workers, &mut body).await;
    respond(&s, "Overview", Nav::Overview, &body)
}

/// What waits now: ready intents, the oldest's age, reviews, workers reporting.
fn tiles(
    counts: &[oncebox_store::console::Count],
    ready: &oncebox_store::ReadyQueue,
    workers: &[oncebox_store::console::WorkerSeen],
    body: &mut String,
) {
    // Now: what waits.
    let waiting_person: i64 = counts
        .iter()
        .filter(|c| c.status == "needs_review")
        .map(|c| c.n)
        .sum();
    let alive = workers.iter().filter(|w| w.seen_seconds_ago < 30.0).count();
    let _ = write!(
        body,
        "<section class=\"tiles\">\
         <div class=\"tile\"><span class=\"n\">{}</span><span>ready to deliver</span></div>\
         <div class=\"tile\"><span class=\"n\">{}</span><span>oldest ready</span></div>\
         <div class=\"tile{}\"><a href=\"/console/attention?status=needs_review\">\
         <span class=\"n\">{waiting_person}</span><span>need review</span></a></div>\
         <div class=\"tile\"><span class=\"n\">{alive}</span><span>workers reporting</span></div>\
         </section>",
        ready.depth,
        if ready.depth == 0 {
            "—".to_owned()
        } else {
            age(ready.oldest_seconds)
        },
        if waiting_person > 0 { " warn" } else { "" },
    );
}

/// Intents completed per minute over the last hour, as a bar chart.
fn completions_chart(completed: &[oncebox_store::console::Completed], body: &mut String) {
    // Completions per minute, oldest minute first.
    let mut per_minute = vec![(0u64, 0u64); 60];
    for c in completed {
        if let Some(slot) = usize::try_from(c.minutes_ago)
            .ok()
            .filter(|m| *m < 60)
            .map(|m| 59 - m)
        {
            let n = u64::try_from(c.n).unwrap_or(0);
            if c.status == "succeeded" {
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
    body.push_str("<section><h2>Deliveries per minute, last hour</h2>");
    body.push_str(&html::bar_chart(
        "Intents completed per minute",
        &bars,
        &[("ok", "succeeded"), ("bad", "failed, cancelled or expired")],
    ));
    body.push_str("</section>");
}

/// The tenant's intents by status (columns) and destination (rows).
fn status_table(state: &AppState, counts: &[oncebox_store::console::Count], body: &mut String) {
    // Intents by status and destination.
    let statuses: Vec<Status> = Status::ALL.to_vec();
    let mut by_dest: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
    for c in counts {
        *by_dest
            .entry(destination_of(state, &c.action))
            .or_default()
            .entry(c.status.clone())
            .or_default() += c.n;
    }
    body.push_str(
        "<section><h2>Intents by status and destination</h2><table class=\"grid\"><thead><tr>\
         <th scope=\"col\">destination</th>",
    );
    for st in &statuses {
        let _ = write!(body, "<th scope=\"col\">{}</th>", esc(st.as_str()));
    }
    body.push_str("</tr></thead><tbody>");
    if by_dest.is_empty() {
        let _ = write!(
            body,
            "<tr><td colspan=\"{}\">No intents yet.</td></tr>",
            statuses.len() + 1
        );
    }
    for (dest, row) in &by_dest {
        let _ = write!(body, "<tr><th scope=\"row\">{}</th>", esc(dest));
        for st in &statuses {
            let n = row.get(st.as_str()).copied().unwrap_or(0);
            if n > 0 && NEEDS_A_PERSON.contains(st) {
                let _ = write!(
                    body,
                    "<td><a href=\"/console/attention?status={}&amp;destination={}\">{n}</a></td>",
                    st.as_str(),
                    url_part(dest)
                );
            } else {
                let _ = write!(body, "<td>{n}</td>");
            }
        }
        body.push_str("</tr>");
    }
    body.push_str("</tbody></table></section>");
}

/// The dead-letter queues' depths and the workers seen.
async fn queues_and_workers(
    state: &AppState,
    workers: &[oncebox_store::console::WorkerSeen],
    body: &mut String,
) {
    // Dead-letter queues.
    body.push_str("<section class=\"cols\"><div><h2>Dead-letter queues</h2>");
    match &state.console.dead_letter_depths {
        Some(read) => {
            body.push_str(
                "<table><thead><tr><th scope=\"col\">queue</th><th scope=\"col\">messages</th>\
                 </tr></thead><tbody>",
            );
            for (queue, depth) in read().await {
                let shown = depth.map_or_else(|| "unreadable".to_owned(), |d| d.to_string());
                let _ = write!(
                    body,
                    "<tr><td><code>{}</code></td><td>{}</td></tr>",
                    esc(&queue),
                    esc(&shown)
                );
            }
            body.push_str("</tbody></table><p class=\"hint\">All tenants' dead letters share these queues.</p>");
        }
        None => body.push_str(
            "<p class=\"hint\">Not shown: start <code>oncebox serve</code> with \
             <code>--amqp-url</code> (or <code>AMQP_URL</code>) to read them.</p>",
        ),
    }
    body.push_str("</div><div><h2>Workers</h2>");
    if workers.is_empty() {
        body.push_str("<p class=\"hint\">No worker has reported in the last day.</p>");
    } else {
        body.push_str(
            "<table><thead><tr><th scope=\"col\">worker</th><th scope=\"col\">work</th>\
             <th scope=\"col\">last heartbeat</th><th scope=\"col\">since</th></tr></thead><tbody>",
        );
        for w in workers {
            let state_class = if w.seen_seconds_ago < 30.0 {
                "ok"
            } else {
                "stale"
            };
            let _ = write!(
                body,
                "<tr class=\"{state_class}\"><td><code>{}</code></td><td>{}</td>\
                 <td>{} ago</td><td>{}</td></tr>",
                esc(&w.worker),
                if w.delivers {
                    "delivers"
                } else {
                    "reconciles only"
                },
                age(w.seen_seconds_ago),
                html::time(w.started_at),
            );
        }
        body.push_str("</tbody></table>");
    }
    body.push_str("</div></section>");
}
