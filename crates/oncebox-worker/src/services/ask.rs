//! Approval requests (docs/approvals.md, "Telling people"): every intent written
//! `awaiting_approval` has an `ask` outbox row beside its deliver row. The asker claims those
//! rows and sends each intent's "approval requested" message to the destination its action's
//! policy names in `approval.notify` — over that destination's own transport, signed as it signs
//! deliveries, with the stable key `approval:<key>` — then deletes the row. A message not taken
//! is tried again with backoff while the intent still waits; a row whose intent was decided,
//! expired or whose action names no notify destination is deleted unsent. The message is an
//! announcement: it changes nothing, so a repeat (a worker that died after sending) is harmless
//! and recognisable by its key.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use oncebox_core::{DeliveryOutcome, Status};
use oncebox_delivery::DeliveryRequest;
use oncebox_store::approvals::ApprovalRequest;
use oncebox_store::{ClaimedRow, Lease, Phase};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::service::Service;
use crate::services::wakeup::{Next, sleep_or_stop};
use crate::settings::ASK_BATCH;

/// What the messages name in `X-Oncebox-Action` (HTTP) or the `action` header (AMQP). The
/// destination executes no action (the configuration refuses one that does), so nothing takes
/// the message for a request.
pub const ASK_ACTION: &str = "oncebox.approval_requested";

/// The first wait before a message not taken is tried again, and the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(300));

/// The stable key of an intent's approval request, from the intent's delivery key: unique
/// across tenants, at most 255 bytes ([`oncebox_core::delivery_key::derived_key`]).
pub fn ask_key(delivery_key: &str) -> String {
    oncebox_core::delivery_key::derived_key("approval", delivery_key)
}

/// The console page of the intent with `key`, under `console_url` when it is known: its path
/// otherwise. The key is percent-encoded as one path segment.
pub fn console_link(console_url: Option<&str>, key: &str) -> String {
    let mut path = String::from("/console/intents/");
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            path.push(char::from(b));
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    // A key of only dots would name the directory itself or its parent: encode those too.
    if key.bytes().all(|b| b == b'.') {
        path = format!("/console/intents/{}", "%2E".repeat(key.len()));
    }
    format!("{}{path}", console_url.unwrap_or(""))
}

/// The "approval requested" message of `row`, as `request` states it. Its `summary` is made of
/// the configured action, the intent's id and the window: nothing an agent chose (its key, its
/// arguments), which a chat bridge in front of approvers could render as a link or a mention;
/// the key and the arguments travel as fields of their own.
pub fn message(row: &ClaimedRow, request: &ApprovalRequest, console_url: Option<&str>) -> Value {
    let needed = request.approvals_needed.unwrap_or(1);
    let until = request
        .approval_expires_at
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let summary = format!(
        "{} intent {} awaits {needed} approval{}{}",
        row.action,
        row.intent_id(),
        if needed == 1 { "" } else { "s" },
        until
            .as_ref()
            .map(|t| format!(" before {t}"))
            .unwrap_or_default(),
    );
    json!({
        "type": "approval_requested",
        "summary": summary,
        "tenant": row.tenant_id,
        "idempotency_key": row.idempotency_key,
        "delivery_key": row.delivery_key(),
        "intent_id": row.intent_id(),
        "action": row.action,
        "arguments": row.payload.0,
        "approvals_needed": needed,
        "expires_at": until,
        "submitted_at": row.created_at,
        "console_url": console_link(console_url, &row.idempotency_key),
    })
}

/// Sends approval requests until stopped.
pub(crate) struct Asker;

impl Service for Asker {
    const NAME: &'static str = "asker";

    async fn run(self, ctx: Arc<Context>, stop: CancellationToken) {
        let mut claims = crate::context::PhaseClaims::new(Phase::Ask, ASK_BATCH);
        while !stop.is_cancelled() {
            crate::crash::panic_in(Self::NAME);
            let rows = claims.next(&ctx).await;
            if rows.is_empty() {
                if sleep_or_stop(ctx.settings.poll_interval(), &stop).await == Next::Stop {
                    break;
                }
                continue;
            }
            ask(&ctx, &rows).await;
        }
    }
}

/// What became of one row.
enum Fate {
    /// Sent, or not to be sent: delete the row.
    Done,
    /// Try again after this long.
    Later(Duration),
}

/// Sends the messages of `rows` and records what became of each.
async fn ask(ctx: &Context, rows: &[ClaimedRow]) {
    let ids: Vec<i64> = rows
        .iter()
        .filter(|r| r.status == Status::AwaitingApproval)
        .map(ClaimedRow::intent_id)
        .collect();
    let requests: HashMap<i64, ApprovalRequest> = match oncebox_store::approvals::approval_requests(
        &ctx.pool, &ids,
    )
    .await
    {
        Ok(found) => found.into_iter().map(|r| (r.id, r)).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "approval requests not read; their rows wait for their lease");
            return;
        }
    };
    let mut fates: Vec<(Lease, Fate)> = Vec::with_capacity(rows.len());
    for row in rows {
        let fate = match requests.get(&row.intent_id()) {
            // Decided, expired or gone meanwhile: nobody needs asking.
            None => Fate::Done,
            Some(request) => send(ctx, row, request).await,
        };
        fates.push((row.lease, fate));
    }
    record(ctx, fates).await;
}

/// Sends one message; [`Fate::Done`] when its action names no notify destination.
async fn send(ctx: &Context, row: &ClaimedRow, request: &ApprovalRequest) -> Fate {
    let Some(route) = ctx.routes.ask(&row.action) else {
        return Fate::Done;
    };
    let body = message(row, request, ctx.settings.console_url.as_deref());
    let key = ask_key(&row.delivery_key());
    let hash = oncebox_core::request_hash(ASK_ACTION, &body);
    let attempt = u32::try_from(row.attempt).unwrap_or(0).saturating_add(1);
    let req = DeliveryRequest {
        tenant_id: &row.tenant_id,
        delivery_key: &key,
        action: ASK_ACTION,
        attempt,
        request_hash: &hash,
        arguments: &body,
    };
    let destination = route.destination.name();
    let outcome = route
        .destination
        .deliver(&req, route.destination.timeout())
        .await;
    ctx.metrics.asked(outcome.class().as_str());
    match outcome {
        DeliveryOutcome::Succeeded { .. } => Fate::Done,
        DeliveryOutcome::Permanent { error } => {
            tracing::warn!(%destination, key = %row.idempotency_key, error = %error.detail, "the notify destination refused the approval request; not sent again");
            Fate::Done
        }
        DeliveryOutcome::RetryBeforeExecution { error, .. }
        | DeliveryOutcome::Unknown { error } => {
            let wait = BACKOFF
                .0
                .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1).min(16)))
                .min(BACKOFF.1);
            tracing::warn!(%destination, key = %row.idempotency_key, error = %error.detail, retry_in = ?wait, "approval request not taken; will try again");
            Fate::Later(wait)
        }
    }
}

/// Deletes the rows done and reschedules the others (fenced: a row taken over meanwhile is
/// left to its new holder).
async fn record(ctx: &Context, fates: Vec<(Lease, Fate)>) {
    let worker = &ctx.settings.id;
    let done: Vec<Lease> = fates
        .iter()
        .filter(|(_, f)| matches!(f, Fate::Done))
        .map(|(l, _)| *l)
        .collect();
    if !done.is_empty()
        && let Err(e) = oncebox_store::messages_sent(&ctx.pool, worker, Phase::Ask, &done).await
    {
        tracing::warn!(error = %e, n = done.len(), "approval requests sent but not marked; they may be sent again (same key)");
    }
    for (lease, fate) in fates {
        if let Fate::Later(wait) = fate
            && let Err(e) =
                oncebox_store::messages_later(&ctx.pool, worker, Phase::Ask, &[lease], wait).await
        {
            tracing::warn!(error = %e, "approval request not rescheduled; it waits for its lease");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_link_encodes_the_key_as_one_segment() {
        let base = Some("https://ops.example");
        assert_eq!(
            console_link(base, "r-17"),
            "https://ops.example/console/intents/r-17"
        );
        assert_eq!(console_link(None, "a/b"), "/console/intents/a%2Fb");
        assert_eq!(console_link(None, "50%"), "/console/intents/50%25");
        assert_eq!(console_link(None, "x\0y"), "/console/intents/x%00y");
        assert_eq!(console_link(None, "é"), "/console/intents/%C3%A9");
        assert_eq!(console_link(None, "."), "/console/intents/%2E");
        assert_eq!(console_link(None, ".."), "/console/intents/%2E%2E");
        assert_eq!(console_link(None, "a..b"), "/console/intents/a..b");
        let huge = "k".repeat(4096);
        assert!(console_link(base, &huge).ends_with(&huge));
    }

    /// An agent's key shaped as chat markup stays out of the summary.
    #[test]
    fn the_summary_carries_no_text_an_agent_chose() {
        for key in [
            "<https://evil.example/|Click to approve>",
            "[approve](https://evil.example/)",
            "<!channel>",
            "@here",
        ] {
            let row = crate::testing::claimed_row(key, Status::AwaitingApproval);
            let request = ApprovalRequest {
                id: 7,
                approvals_needed: Some(2),
                approval_expires_at: None,
            };
            let m = message(&row, &request, None);
            assert_eq!(m["summary"], "refund intent 7 awaits 2 approvals", "{key}");
            assert_eq!(m["idempotency_key"], key, "the key travels as a field");
        }
    }
}
