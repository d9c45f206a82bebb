//! How results are printed: aligned text for people, one JSON document with `--json`.

use oncebox_store::{Intent, Submitted};

pub(crate) fn submitted(s: &Submitted, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({"created": s.created, "intent": intent_json(&s.intent)})
        );
    } else {
        println!(
            "{}",
            if s.created {
                "created"
            } else {
                "replayed (same key, same request)"
            }
        );
        print_intent(&s.intent);
    }
}

pub(crate) fn intent(i: &Intent, json: bool) {
    if json {
        println!("{}", intent_json(i));
    } else {
        print_intent(i);
    }
}

/// The intent as `--json` prints it: its journal row and the delivery key every destination
/// sees.
pub(crate) fn intent_json(i: &Intent) -> serde_json::Value {
    let mut doc = serde_json::json!(i);
    doc["delivery_key"] = serde_json::Value::from(i.delivery_key());
    doc
}

fn print_intent(i: &Intent) {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let rows = [
        ("id", i.id.to_string()),
        ("tenant", i.tenant_id.clone()),
        ("key", i.idempotency_key.clone()),
        ("delivery key", i.delivery_key()),
        ("action", i.action.clone()),
        ("status", i.status.to_string()),
        ("attempts", i.attempt_count.to_string()),
        ("request hash", i.request_hash.clone()),
        ("payload", i.payload.to_string()),
        ("external ref", opt(&i.external_reference)),
        (
            "last error",
            i.last_error
                .as_ref()
                .map_or("-".into(), |e| serde_json::json!(e).to_string()),
        ),
        ("submitted by", opt(&i.submitted_by)),
        ("business ref", opt(&i.business_ref)),
        ("ordering key", opt(&i.ordering_key)),
        (
            "run / step",
            format!("{} / {}", opt(&i.run_id), opt(&i.step)),
        ),
        (
            "deadline",
            i.deadline.map_or("-".into(), |d| d.to_rfc3339()),
        ),
        ("created", i.created_at.to_rfc3339()),
        ("updated", i.updated_at.to_rfc3339()),
        (
            "completed",
            i.completed_at.map_or("-".into(), |d| d.to_rfc3339()),
        ),
    ];
    for (k, v) in rows {
        println!("  {k:<13} {v}");
    }
}
