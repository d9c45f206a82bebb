//! The OpenAPI 3.0 description of the API, served at `/openapi.json` with the configured
//! actions as the `action` enum.

use std::sync::Arc;

use serde_json::Value;

/// The OpenAPI 3.0 description of this API; `/openapi.json` serves it with the configured
/// actions filled in as the `action` enum.
pub const OPENAPI: &str = include_str!("openapi.json");

/// [`OPENAPI`] with `actions` as the enum of `NewIntent.action`: the document says exactly which
/// requests this server accepts.
pub(crate) fn openapi_for<'a>(actions: impl Iterator<Item = &'a str>) -> Arc<str> {
    let mut doc: Value = serde_json::from_str(OPENAPI).unwrap_or_default();
    if let Some(action) = doc.pointer_mut("/components/schemas/NewIntent/properties/action") {
        action["enum"] = Value::Array(actions.map(|a| Value::String(a.to_owned())).collect());
    }
    doc.to_string().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_served_document_lists_the_configured_actions() {
        let doc: Value = serde_json::from_str(&openapi_for(["a", "b"].into_iter())).expect("json");
        assert_eq!(doc["openapi"], "3.0.3");
        assert_eq!(
            doc.pointer("/components/schemas/NewIntent/properties/action/enum"),
            Some(&json!(["a", "b"]))
        );
    }
}
