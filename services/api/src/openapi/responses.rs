//! The error answers any operation may give whatever it does, described once under
//! `components.responses` and referenced by every operation: `429 rate_limited` and
//! `503 unavailable` (both with `Retry-After`), and any other `5XX`. Routes document only
//! their own answers (`2XX`, and `4XX` as problem+json).

use super::operations_mut;
use crate::error::PROBLEM_JSON;
use serde_json::{Value, json};

/// The probes answer anyone and are never rate-limited; `/readyz` documents its own `503`.
const PROBES: &[&str] = &["/livez", "/readyz"];

/// Adds the shared responses to `components` and references them from every operation
/// (keeping an operation's own answer for a status it documents itself).
pub(super) fn add_shared(doc: &mut Value) {
    let problem =
        || json!({ PROBLEM_JSON: { "schema": { "$ref": "#/components/schemas/Problem" } } });
    let retry_after = |description: &str| {
        json!({
            "description": description,
            "required": true,
            "schema": { "type": "integer", "minimum": 1 },
        })
    };
    doc["components"]["responses"] = json!({
        "RateLimited": {
            "description": "`429 rate_limited`: the API key or its tenant made too many \
                requests or holds too many open event streams on this replica (for \
                `POST /v1/login`: the account or the client address tried too often)",
            "headers": { "Retry-After": retry_after("Seconds to wait before trying again") },
            "content": problem(),
        },
        "Unavailable": {
            "description": "`503 unavailable`: the database or the bus is unreachable; \
                nothing was done",
            "headers": { "Retry-After": retry_after("Seconds to wait before trying again") },
            "content": problem(),
        },
        "ServerError": {
            "description": "`500 internal`: the server failed. The body tells nothing \
                more; the server log has the cause under the same `request_id`",
            "content": problem(),
        },
    });
    for (path, _, op) in operations_mut(doc) {
        let Some(responses) = op["responses"].as_object_mut() else {
            continue;
        };
        let mut shared = vec![("503", "Unavailable"), ("5XX", "ServerError")];
        if !PROBES.contains(&path.as_str()) {
            shared.push(("429", "RateLimited"));
        }
        for (status, name) in shared {
            responses
                .entry(status)
                .or_insert_with(|| json!({ "$ref": format!("#/components/responses/{name}") }));
        }
    }
}
