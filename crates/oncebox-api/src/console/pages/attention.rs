//! "Needs a person": the tenant's intents that wait for an operator, filtered and paged.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use oncebox_core::Status;
use oncebox_store::Intent;
use oncebox_store::console::{AttentionFilter, NEEDS_A_PERSON};

use super::{PAGE, intent_table, respond};
use crate::AppState;
use crate::console::html::{Nav, url_part};
use crate::console::{Signed, internal};

/// Parses a page cursor `2026-12-01T10:00:00.123456Z,42`; a time outside the years 1970–9999
/// (which no intent has, and Postgres may not hold) is no cursor.
pub(super) fn cursor(s: &str) -> Option<(DateTime<Utc>, i64)> {
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

/// `/console/attention`: the intents that wait for a person, filtered by the query.
pub(crate) async fn attention(
    State(state): State<Arc<AppState>>,
    Signed(s): Signed,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let (filter, problems) = attention_filter(&state, &s.tenant_id, &q);
    let mut rows = match oncebox_store::console::attention(&state.pool, &filter).await {
        Ok(rows) => rows,
        Err(e) => return internal(e),
    };
    let more = rows.len() > PAGE as usize;
    rows.truncate(PAGE as usize);

    let body = html! {
        @for p in &problems {
            p.error role="alert" { (p) }
        }
        (filter_form(&state, &q, filter.newest_first))
        @if rows.is_empty() {
            p.empty { "Nothing needs a person here." }
        } @else {
            (intent_table(&state, &rows))
        }
        @if more && let Some(last) = rows.last() {
            (pager(&q, last))
        }
    };
    respond(&s, "Needs a person", Nav::Attention, body)
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
fn filter_form(state: &AppState, q: &HashMap<String, String>, newest_first: bool) -> Markup {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let select = |name: &str, label: &str, options: &[String], current: Option<&str>| {
        html! {
            label {
                (label) " "
                select name=(name) {
                    option value="" { "all" }
                    @for o in options {
                        option selected[Some(o.as_str()) == current] { (o) }
                    }
                }
            }
        }
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
    html! {
        form.filters method="get" action="/console/attention" {
            (select("status", "Status", &status_options, get("status")))
            (select("destination", "Destination", &dest_options, get("destination")))
            (select("action", "Action", &action_options, get("action")))
            label {
                "Unchanged for "
                input name="older_than" size="5" placeholder="30m"
                    value=(get("older_than").unwrap_or_default());
            }
            label {
                "Order "
                select name="order" {
                    option value="newest" selected[newest_first] { "newest first" }
                    option value="oldest" selected[!newest_first] { "oldest first" }
                }
            }
            button type="submit" { "Filter" }
        }
    }
}

/// The link to the next page: the same query, after `last`.
fn pager(q: &HashMap<String, String>, last: &Intent) -> Markup {
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
    html! {
        p.pager {
            a href={ "/console/attention?" (query.join("&")) } { "Next " (PAGE) " →" }
        }
    }
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
