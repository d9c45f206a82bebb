//! The OpenAPI 3.1 description of the API, generated from the handlers and the types they read
//! and write: each handler's `#[utoipa::path]` names its path, parameters, body and answers,
//! and [`routes`] registers the handler and its description in one step, so the router and the
//! document cannot list different operations. `/openapi.json` serves it with the configured
//! actions as the `action` enum.

use std::sync::Arc;

use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::problem::{ProblemBody, Refused, TooManyRequests};
use crate::{AppState, health, intents, metrics, ops};

/// The document's frame: title, description, the bearer scheme every operation needs unless it
/// says otherwise, and the reusable answers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "oncebox",
        description = "One intent, at most one business effect. Submit intents with an \
            Idempotency-Key, read their results (long-poll with ?wait=), cancel before dispatch. \
            Every error is application/problem+json naming the field."
    ),
    modifiers(&Bearer),
    security(("bearer" = [])),
    components(schemas(ProblemBody), responses(Refused, TooManyRequests))
)]
struct ApiDoc;

/// Adds the `bearer` security scheme the document's `security` names.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The API's routes, each with its description: the one list both the router and the document
/// are made from.
pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(intents::submit))
        .routes(routes!(intents::read))
        .routes(routes!(intents::cancel))
        .routes(routes!(ops::ops_list))
        .routes(routes!(ops::ops_show))
        .routes(routes!(ops::ops_retry))
        .routes(routes!(ops::ops_resolve))
        .routes(routes!(ops::ops_approve))
        .routes(routes!(ops::ops_reject))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(metrics::render))
        .routes(routes!(serve_openapi))
}

/// `GET /openapi.json`: this document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    summary = "This document",
    security(()),
    responses((status = 200, description = "OpenAPI 3.1", content_type = "application/json"))
)]
pub(crate) async fn serve_openapi(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
) -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        state.openapi.to_string(),
    )
}

/// The document this server serves: [`routes`]' description with `actions` as the enum of
/// `NewIntent.action`, so that it says exactly which requests this server accepts.
pub fn document<'a>(actions: impl Iterator<Item = &'a str>) -> Arc<str> {
    let mut doc = serde_json::to_value(routes().into_openapi()).unwrap_or_default();
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
        let doc: Value = serde_json::from_str(&document(["a", "b"].into_iter())).expect("json");
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(
            doc.pointer("/components/schemas/NewIntent/properties/action/enum"),
            Some(&json!(["a", "b"]))
        );
    }
}
