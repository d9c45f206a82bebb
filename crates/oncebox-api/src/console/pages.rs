//! The console's pages: overview, needs a person, search, an intent with its history and audit
//! rows, and the operator's decisions (retry, resolve, cancel — each with a reason), which run
//! through `oncebox_store::ops` exactly as the CLI's and the API's do.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use oncebox_core::Status;
use oncebox_store::Intent;
use oncebox_store::console::{AttentionFilter, NEEDS_A_PERSON, Session};
use oncebox_store::ops::{Actor, OpsError, Resolution};

use super::html::{self, Bar, Frame, Nav, age, ago, badge, esc, excerpt, intent_href, url_part};
use super::{checked_session, internal, session};
use crate::AppState;

/// Intents per page of "Needs a person".
const PAGE: i64 = 50;

fn frame(s: &Session) -> Frame<'_> {
    Frame {
        tenant: &s.caller.tenant_id,
        token_id: s.caller.id,
        csrf: &s.csrf,
    }
}

fn respond(s: &Session, title: &str, nav: Nav, body: &str) -> Response {
    respond_with(StatusCode::OK, s, title, nav, body)
}

/// A page of the logged-in console with `status`.
fn respond_with(status: StatusCode, s: &Session, title: &str, nav: Nav, body: &str) -> Response {
    super::html(status, html::page(title, nav, Some(&frame(s)), body))
}

/// The destination an action delivers to, by the configuration.
fn destination_of<'a>(state: &'a AppState, action: &str) -> &'a str {
    state
        .console
        .destinations
        .iter()
        .find(|(_, actions)| actions.iter().any(|a| a == action))
        .map_or("—", |(d, _)| d.as_str())
}

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

/// Parses a page cursor `2026-12-01T10:00:00.123456Z,42`; a time outside the years 1970–9999
/// (which no intent has, and Postgres may not hold) is no cursor.
fn cursor(s: &str) -> Option<(DateTime<Utc>, i64)> {
    use chrono::Datelike as _;
    let (at, id) = s.rsplit_once(',')?;
    let at: DateTime<Utc> = at.parse().ok()?;
    (1970..=9999)
        .contains(&at.year())
        .then_some((at, id.parse().ok()?))
}

/// The longest age the "unchanged for" filter takes: ten years.
const MAX_AGE: Duration = Duration::from_secs(3650 * 86_400);

/// `30m`, `2h`, `1d`, `45s` as a duration, at most [`MAX_AGE`].
fn older_than(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    let secs = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        "d" => n.checked_mul(86_400)?,
        _ => return None,
    };
    Some(Duration::from_secs(secs)).filter(|d| *d <= MAX_AGE)
}

pub(crate) async fn attention(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let s = match session(&state, &headers).await {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    let (filter, problems) = attention_filter(&state, &s.caller.tenant_id, &q);
    let mut rows = match oncebox_store::console::attention(&state.pool, &filter).await {
        Ok(rows) => rows,
        Err(e) => return internal(e),
    };
    let more = rows.len() > PAGE as usize;
    rows.truncate(PAGE as usize);

    let mut body = String::new();
    for p in &problems {
        let _ = write!(body, "<p class=\"error\" role=\"alert\">{}</p>", esc(p));
    }
    filter_form(&state, &q, filter.newest_first, &mut body);
    if rows.is_empty() {
        body.push_str("<p class=\"empty\">Nothing needs a person here.</p>");
    } else {
        intent_table(&state, &rows, &mut body);
    }
    if more && let Some(last) = rows.last() {
        pager(&q, last, &mut body);
    }
    respond(&s, "Needs a person", Nav::Attention, &body)
}

/// The filter of "Needs a person" from its query, and what was wrong with it (each naming the
/// field; the rest of the filter still applies).
fn attention_filter(
    state: &AppState,
    tenant: &str,
    q: &HashMap<String, String>,
) -> (AttentionFilter, Vec<String>) {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let mut problems = Vec::new();
    let statuses = match get("status") {
        None => NEEDS_A_PERSON.to_vec(),
        Some(v) => match v.parse::<Status>() {
            Ok(st) if NEEDS_A_PERSON.contains(&st) => vec![st],
            _ => {
                problems.push(format!(
                    "status: {v:?} is not one of needs_review, unknown, failed, expired"
                ));
                NEEDS_A_PERSON.to_vec()
            }
        },
    };
    let destination = get("destination");
    let action = get("action");
    let mut actions: Option<Vec<String>> = None;
    if let Some(d) = destination {
        match state.console.destinations.get(d) {
            Some(list) => actions = Some(list.clone()),
            None => problems.push(format!("destination: no destination {d:?} is configured")),
        }
    }
    if let Some(a) = action {
        if a.chars().any(char::is_control) {
            problems.push(format!("action: {a:?} holds a control character"));
        } else {
            actions = Some(match actions {
                Some(list) => list.into_iter().filter(|x| x == a).collect(),
                None => vec![a.to_owned()],
            });
        }
    }
    let age_filter = match get("older_than") {
        None => None,
        Some(v) => match older_than(v) {
            Some(d) => Some(d),
            None => {
                problems.push(format!(
                    "older_than: {v:?} is not an age such as 30m, 2h or 1d (at most {}d)",
                    MAX_AGE.as_secs() / 86_400
                ));
                None
            }
        },
    };
    let newest_first = get("order") != Some("oldest");
    let after = match get("after") {
        None => None,
        Some(v) => match cursor(v) {
            Some(c) => Some(c),
            None => {
                problems.push(
                    "after: not a page cursor of this console; showing the first page".to_owned(),
                );
                None
            }
        },
    };
    let filter = AttentionFilter {
        tenant_id: tenant.to_owned(),
        statuses,
        actions,
        older_than: age_filter,
        newest_first,
        after,
        limit: PAGE + 1,
    };
    (filter, problems)
}

/// The filter form (GET: it changes nothing), showing the current choices.
fn filter_form(
    state: &AppState,
    q: &HashMap<String, String>,
    newest_first: bool,
    body: &mut String,
) {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let (destination, action) = (get("destination"), get("action"));
    body.push_str("<form class=\"filters\" method=\"get\" action=\"/console/attention\">");
    let select = |name: &str, label: &str, options: &[String], current: Option<&str>| {
        let mut out =
            format!("<label>{label} <select name=\"{name}\"><option value=\"\">all</option>");
        for o in options {
            let sel = if Some(o.as_str()) == current {
                " selected"
            } else {
                ""
            };
            let _ = write!(out, "<option{sel}>{}</option>", esc(o));
        }
        out.push_str("</select></label>");
        out
    };
    let status_options: Vec<String> = NEEDS_A_PERSON
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    let dest_options: Vec<String> = state.console.destinations.keys().cloned().collect();
    let action_options: Vec<String> = state
        .console
        .destinations
        .values()
        .flatten()
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    body.push_str(&select("status", "Status", &status_options, get("status")));
    body.push_str(&select(
        "destination",
        "Destination",
        &dest_options,
        destination,
    ));
    body.push_str(&select("action", "Action", &action_options, action));
    let _ = write!(
        body,
        "<label>Unchanged for <input name=\"older_than\" size=\"5\" placeholder=\"30m\" value=\"{}\"></label>\
         <label>Order <select name=\"order\"><option value=\"newest\"{}>newest first</option>\
         <option value=\"oldest\"{}>oldest first</option></select></label>\
         <button type=\"submit\">Filter</button></form>",
        esc(get("older_than").unwrap_or_default()),
        if newest_first { " selected" } else { "" },
        if newest_first { "" } else { " selected" },
    );
}

/// The link to the next page: the same query, after `last`.
fn pager(q: &HashMap<String, String>, last: &Intent, body: &mut String) {
    let mut query: Vec<String> = q
        .iter()
        .filter(|(k, v)| k.as_str() != "after" && !v.is_empty())
        .map(|(k, v)| format!("{}={}", url_part(k), url_part(v)))
        .collect();
    query.sort();
    let at = last
        .updated_at
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    query.push(format!("after={}", url_part(&format!("{at},{}", last.id))));
    let _ = write!(
        body,
        "<p class=\"pager\"><a href=\"/console/attention?{}\">Next {PAGE} →</a></p>",
        esc(&query.join("&"))
    );
}

/// A table of intents, each linking to its page.
fn intent_table(state: &AppState, rows: &[Intent], body: &mut String) {
    body.push_str(
        "<table class=\"intents\"><thead><tr><th scope=\"col\">key</th>\
         <th scope=\"col\">status</th><th scope=\"col\">action</th>\
         <th scope=\"col\">destination</th><th scope=\"col\">attempts</th>\
         <th scope=\"col\">last error</th><th scope=\"col\">changed</th></tr></thead><tbody>",
    );
    for i in rows {
        let error = i
            .last_error
            .as_ref()
            .map(|e| format!("{}: {}", e.code.as_str(), excerpt(&e.detail, 80)))
            .unwrap_or_default();
        let _ = write!(
            body,
            "<tr><td><a href=\"{}\"><code>{}</code></a></td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td title=\"{}\">{}</td></tr>",
            esc(&intent_href(&i.idempotency_key)),
            esc(&i.idempotency_key),
            badge(i.status.as_str()),
            esc(&i.action),
            esc(destination_of(state, &i.action)),
            i.attempt_count,
            esc(&error),
            esc(&html::time(i.updated_at)),
            esc(&ago(i.updated_at)),
        );
    }
    body.push_str("</tbody></table>");
}

pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let s = match session(&state, &headers).await {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    let query = q.get("q").map(|v| v.trim()).unwrap_or_default();
    let mut body = String::new();
    if query.is_empty() {
        body.push_str("<p class=\"hint\">Enter an idempotency key or a business reference.</p>");
        return respond(&s, "Search", Nav::Search, &body);
    }
    if query.chars().any(char::is_control) {
        // Neither a key nor a business reference holds one: nothing could match.
        let _ = write!(
            body,
            "<p class=\"error\" role=\"alert\">q: a key or business reference holds no control \
             character such as U+0000.</p>"
        );
        return respond_with(StatusCode::BAD_REQUEST, &s, "Search", Nav::Search, &body);
    }
    let found = match oncebox_store::console::search(&state.pool, &s.caller.tenant_id, query).await
    {
        Ok(found) => found,
        Err(e) => return internal(e),
    };
    if let [only] = found.as_slice() {
        return Redirect::to(&intent_href(&only.idempotency_key)).into_response();
    }
    if found.is_empty() {
        let _ = write!(
            body,
            "<p class=\"empty\">No intent of tenant {} has the key or business reference <code>{}</code>.</p>",
            esc(&s.caller.tenant_id),
            esc(query)
        );
    } else {
        let _ = write!(
            body,
            "<p>{} intents with business reference <code>{}</code>:</p>",
            found.len(),
            esc(query)
        );
        intent_table(&state, &found, &mut body);
    }
    respond(&s, "Search", Nav::Search, &body)
}

pub(crate) async fn intent(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let s = match session(&state, &headers).await {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    let note = q.get("done").map(|d| match d.as_str() {
        "retry" => "Retried: the intent is pending again, under the same key.",
        "resolve" => "Resolved.",
        "cancel" => "Cancelled.",
        _ => "Done.",
    });
    intent_page(&state, &s, &key, StatusCode::OK, note, None).await
}

/// The intent page of `key`, with a note (after a decision) or an error (a refused one).
async fn intent_page(
    state: &AppState,
    s: &Session,
    key: &str,
    status: StatusCode,
    note: Option<&str>,
    error: Option<&str>,
) -> Response {
    let tenant = &s.caller.tenant_id;
    // A key that could never have been accepted names no intent (and never reaches SQL).
    let found = match oncebox_core::validate_key(key) {
        Err(_) => None,
        Ok(()) => match oncebox_store::intent_by_key(&state.pool, tenant, key).await {
            Ok(found) => found,
            Err(e) => return internal(e),
        },
    };
    let Some(i) = found else {
        let body = format!(
            "<p class=\"error\" role=\"alert\">Tenant {} has no intent with the key <code>{}</code>.</p>",
            esc(tenant),
            esc(key)
        );
        return super::html(
            StatusCode::NOT_FOUND,
            html::page("No such intent", Nav::None, Some(&frame(s)), &body),
        );
    };
    let (history, audit) = match tokio::try_join!(
        oncebox_store::ops::history(&state.pool, i.id),
        oncebox_store::ops::audit_log(&state.pool, Some(tenant), Some(key), 200),
    ) {
        Ok(both) => both,
        Err(e) => return internal(e),
    };
    let mut body = String::new();
    if let Some(n) = note {
        let _ = write!(body, "<p class=\"note\" role=\"status\">{}</p>", esc(n));
    }
    if let Some(e) = error {
        let _ = write!(body, "<p class=\"error\" role=\"alert\">{}</p>", esc(e));
    }
    facts(state, &i, &mut body);
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let _ = write!(
        body,
        "<section class=\"cols\"><div><h2>Arguments (redacted)</h2><pre>{}</pre></div>",
        esc(&excerpt(&pretty(&i.payload), 4000))
    );
    let _ = write!(
        body,
        "<div><h2>Receiver's response</h2><pre>{}</pre></div></section>",
        esc(&i
            .response
            .as_ref()
            .map_or("—".to_owned(), |r| excerpt(&pretty(r), 4000)))
    );

    // The decisions this status allows.
    decisions(&i, s, &mut body);

    history_table(&history, &mut body);
    audit_table(&audit, &mut body);
    super::html(
        status,
        html::page(
            &format!("Intent {}", excerpt(&i.idempotency_key, 60)),
            Nav::None,
            Some(&frame(s)),
            &body,
        ),
    )
}

/// An intent's facts.
fn facts(state: &AppState, i: &Intent, body: &mut String) {
    let opt = |v: &Option<String>| v.as_deref().map_or("—".to_owned(), esc);
    let when = |t: Option<DateTime<Utc>>| t.map_or("—".to_owned(), |t| esc(&html::time(t)));
    let last_error = i.last_error.as_ref().map_or("—".to_owned(), |e| {
        esc(&format!(
            "{}{}: {}",
            e.code.as_str(),
            e.status_code
                .map_or(String::new(), |c| format!(" (HTTP {c})")),
            e.detail
        ))
    });
    let _ = write!(
        body,
        "<section><dl class=\"facts\">\
         <dt>key</dt><dd><code>{}</code></dd>\
         <dt>status</dt><dd>{}</dd>\
         <dt>action</dt><dd>{} → {}</dd>\
         <dt>request hash</dt><dd><code>{}</code></dd>\
         <dt>attempts</dt><dd>{}</dd>\
         <dt>external reference</dt><dd>{}</dd>\
         <dt>last error</dt><dd>{}</dd>\
         <dt>business reference</dt><dd>{}</dd>\
         <dt>ordering key</dt><dd>{}</dd>\
         <dt>run / step</dt><dd>{} / {}</dd>\
         <dt>created</dt><dd>{}</dd><dt>changed</dt><dd>{}</dd>\
         <dt>completed</dt><dd>{}</dd><dt>deadline</dt><dd>{}</dd>\
         </dl></section>",
        esc(&i.idempotency_key),
        badge(i.status.as_str()),
        esc(&i.action),
        esc(destination_of(state, &i.action)),
        esc(&i.request_hash),
        i.attempt_count,
        opt(&i.external_reference),
        last_error,
        opt(&i.business_ref),
        opt(&i.ordering_key),
        opt(&i.run_id),
        opt(&i.step),
        when(Some(i.created_at)),
        when(Some(i.updated_at)),
        when(i.completed_at),
        when(i.deadline),
    );
}

/// The retry report: every attempt, lookup and operator decision.
fn history_table(history: &[oncebox_store::ops::AttemptRow], body: &mut String) {
    body.push_str(
        "<section><h2>History</h2><table class=\"history\"><thead><tr>\
         <th scope=\"col\">#</th><th scope=\"col\">phase</th><th scope=\"col\">by</th>\
         <th scope=\"col\">started</th><th scope=\"col\">latency</th>\
         <th scope=\"col\">outcome</th><th scope=\"col\">HTTP</th><th scope=\"col\">error</th>\
         <th scope=\"col\">detail</th></tr></thead><tbody>",
    );
    if history.is_empty() {
        body.push_str("<tr><td colspan=\"9\">No attempt yet.</td></tr>");
    }
    for h in history {
        let latency = h.finished_at.map_or("—".to_owned(), |f| {
            format!("{} ms", (f - h.started_at).num_milliseconds())
        });
        let _ = write!(
            body,
            "<tr class=\"p-{}\"><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(h.phase_name()),
            h.attempt,
            esc(h.phase_name()),
            esc(&h.worker),
            esc(&html::time(h.started_at)),
            esc(&latency),
            h.outcome.map_or("—".to_owned(), |o| esc(o.as_str())),
            h.status_code.map_or("—".to_owned(), |c| c.to_string()),
            h.error_code.map_or("—".to_owned(), |c| esc(c.as_str())),
            esc(&excerpt(h.detail.as_deref().unwrap_or("—"), 300)),
        );
    }
    body.push_str("</tbody></table></section>");
}

/// The audit rows of an intent.
fn audit_table(audit: &[oncebox_store::ops::AuditRow], body: &mut String) {
    body.push_str(
        "<section><h2>Audit</h2><table class=\"audit\"><thead><tr>\
         <th scope=\"col\">when</th><th scope=\"col\">who</th><th scope=\"col\">role</th>\
         <th scope=\"col\">via</th><th scope=\"col\">decision</th><th scope=\"col\">status</th>\
         <th scope=\"col\">reason</th></tr></thead><tbody>",
    );
    if audit.is_empty() {
        body.push_str(
            "<tr><td colspan=\"7\">No operator has decided anything about this intent.</td></tr>",
        );
    }
    for a in audit {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} → {}</td><td>{}</td></tr>",
            esc(&html::time(a.at)),
            esc(&a.actor),
            esc(&a.role),
            esc(&a.via),
            esc(&a.action),
            badge(a.status_before.as_str()),
            badge(a.status_after.as_str()),
            esc(a.reason.as_deref().unwrap_or("—")),
        );
    }
    body.push_str("</tbody></table></section>");
}

/// The forms of the decisions `i`'s status allows an operator, each asking for a reason.
fn decisions(i: &Intent, s: &Session, body: &mut String) {
    let allowed = |to: Status| i.status.operator_transition(to).is_ok();
    let (retry, resolve, cancel) = (
        allowed(Status::Pending),
        allowed(Status::Succeeded) || allowed(Status::Failed),
        allowed(Status::Cancelled),
    );
    if !(retry || resolve || cancel) {
        return;
    }
    let action = |what: &str| format!("{}/{what}", esc(&intent_href(&i.idempotency_key)));
    let csrf = format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(&s.csrf)
    );
    let reason = |id: &str| {
        format!(
            "<label for=\"{id}\">Reason</label><textarea id=\"{id}\" name=\"reason\" rows=\"2\" \
             required placeholder=\"What you checked at the receiver, and why\"></textarea>"
        )
    };
    body.push_str("<section class=\"decide\"><h2>Decide</h2><div class=\"cols\">");
    if resolve {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{}\" class=\"card\"><h3>Resolve</h3>{csrf}\
             <fieldset><legend>The effect at the receiver</legend>\
             <label><input type=\"radio\" name=\"outcome\" value=\"succeeded\" required> happened (succeeded)</label>\
             <label><input type=\"radio\" name=\"outcome\" value=\"failed\"> did not and will not happen (failed)</label>\
             </fieldset>\
             <label for=\"reference\">Receiver's reference (if it happened)</label>\
             <input id=\"reference\" name=\"reference\" autocomplete=\"off\">{}\
             <button type=\"submit\">Resolve</button></form>",
            action("resolve"),
            reason("resolve-reason"),
        );
    }
    if retry {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{}\" class=\"card\"><h3>Retry</h3>{csrf}\
             <p class=\"hint\">Sends the same request again under the same key.</p>{}\
             <button type=\"submit\">Retry</button></form>",
            action("retry"),
            reason("retry-reason"),
        );
    }
    if cancel {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{}\" class=\"card\"><h3>Cancel</h3>{csrf}\
             <p class=\"hint\">Only before any attempt was dispatched.</p>{}\
             <button type=\"submit\">Cancel</button></form>",
            action("cancel"),
            reason("cancel-reason"),
        );
    }
    body.push_str("</div></section>");
}

/// Runs one decision on intent `key` for the logged-in operator: its reason is required; a
/// refusal re-shows the intent page saying why (409), a success goes back to it (303).
async fn decide(
    state: &AppState,
    headers: &HeaderMap,
    key: &str,
    body: Body,
    what: &'static str,
    f: impl AsyncFnOnce(
        &mut sqlx::PgConnection,
        i64,
        &Actor,
        &str,
        &HashMap<String, String>,
    ) -> Result<Intent, Decision>,
) -> Response {
    let (s, form) = match checked_session(state, headers, body).await {
        Ok(checked) => checked,
        Err(answer) => return answer,
    };
    let reason = form.get("reason").map(|r| r.trim()).unwrap_or_default();
    if reason.is_empty() || reason.contains('\0') {
        let why = "reason: say why (what you checked at the receiver); every decision needs one.";
        return intent_page(state, &s, key, StatusCode::BAD_REQUEST, None, Some(why)).await;
    }
    let tenant = s.caller.tenant_id.clone();
    let found = match oncebox_core::validate_key(key) {
        Err(_) => None,
        Ok(()) => match oncebox_store::intent_by_key(&state.pool, &tenant, key).await {
            Ok(found) => found,
            Err(e) => return internal(e),
        },
    };
    let Some(intent) = found else {
        return intent_page(state, &s, key, StatusCode::NOT_FOUND, None, None).await;
    };
    let actor = Actor::new(format!("token {}", s.caller.id), "ops", "console");
    let mut tx = match state.pool.begin().await {
        Ok(tx) => tx,
        Err(e) => return internal(e),
    };
    match f(&mut tx, intent.id, &actor, reason, &form).await {
        Ok(_) => {
            if let Err(e) = tx.commit().await {
                return internal(e);
            }
            tracing::info!(token = s.caller.id, tenant = %tenant, key, decision = what, "console decision");
            Redirect::to(&format!("{}?done={what}", intent_href(key))).into_response()
        }
        Err(Decision::Invalid(why)) => {
            drop(tx);
            intent_page(state, &s, key, StatusCode::BAD_REQUEST, None, Some(&why)).await
        }
        Err(Decision::Ops(OpsError::Refused(why) | OpsError::NotFound(why))) => {
            drop(tx);
            let why = format!("Refused: {why}");
            intent_page(state, &s, key, StatusCode::CONFLICT, None, Some(&why)).await
        }
        Err(Decision::Ops(OpsError::Database(e))) => internal(e),
    }
}

/// Why a decision was not made.
enum Decision {
    /// The form was incomplete (names the field).
    Invalid(String),
    /// The ops rules refused it, or the database failed.
    Ops(OpsError),
}

impl From<OpsError> for Decision {
    fn from(e: OpsError) -> Self {
        Decision::Ops(e)
    }
}

pub(crate) async fn retry(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    decide(
        &state,
        &headers,
        &key,
        body,
        "retry",
        async |tx, id, actor, why, _| Ok(oncebox_store::ops::retry(tx, id, actor, why).await?),
    )
    .await
}

pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    decide(
        &state,
        &headers,
        &key,
        body,
        "cancel",
        async |tx, id, actor, why, _| {
            Ok(oncebox_store::ops::cancel(tx, id, actor, Some(why)).await?)
        },
    )
    .await
}

pub(crate) async fn resolve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    decide(
        &state,
        &headers,
        &key,
        body,
        "resolve",
        async |tx, id, actor, why, form| {
            let reference = form
                .get("reference")
                .map(|r| r.trim())
                .filter(|r| !r.is_empty());
            if reference.is_some_and(|r| r.contains('\0')) {
                return Err(Decision::Invalid(
                    "reference: must not hold U+0000".to_owned(),
                ));
            }
            let resolution = match form.get("outcome").map(String::as_str) {
                Some("succeeded") => Resolution::Succeeded {
                    reference: reference.map(str::to_owned),
                },
                Some("failed") if reference.is_some() => {
                    return Err(Decision::Invalid(
                        "reference: a reference belongs to a succeeded resolution only".to_owned(),
                    ));
                }
                Some("failed") => Resolution::Failed {
                    reason: why.to_owned(),
                },
                _ => {
                    return Err(Decision::Invalid(
                        "outcome: choose whether the effect happened (succeeded) or not (failed)"
                            .to_owned(),
                    ));
                }
            };
            Ok(oncebox_store::ops::resolve(tx, id, &resolution, actor, Some(why)).await?)
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_cursors_parse_or_are_refused() {
        assert_eq!(older_than("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(older_than("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(older_than("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(older_than("45s"), Some(Duration::from_secs(45)));
        assert_eq!(older_than("5"), None);
        assert_eq!(older_than("m"), None);
        assert_eq!(older_than("3w"), None);
        let (at, id) = cursor("2026-12-01T10:00:00.123456Z,42").expect("a cursor");
        assert_eq!(id, 42);
        assert_eq!(at.timestamp_subsec_micros(), 123_456);
        assert_eq!(cursor("nonsense"), None);
        assert_eq!(cursor("+200000-01-01T00:00:00Z,1"), None);
        assert_eq!(cursor("1000-01-01T00:00:00Z,1"), None);
        assert_eq!(older_than("3650d"), Some(MAX_AGE));
        assert_eq!(older_than("3651d"), None);
        assert_eq!(older_than("99999999999999999h"), None);
    }
}
