//! The document as served: what it promises about every operation and schema, checked
//! without a server.

use serde_json::{Value, json};

/// Every operation of the document: its method, path and object, with the responses it
/// references from `components.responses` resolved.
fn operations() -> Vec<(String, String, Value)> {
    let doc = crate::openapi();
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            let mut op = op.clone();
            for response in op["responses"]
                .as_object_mut()
                .expect("responses")
                .values_mut()
            {
                if let Some(name) = response["$ref"].as_str().map(str::to_owned) {
                    let name = name
                        .strip_prefix("#/components/responses/")
                        .expect("a shared response");
                    *response = doc["components"]["responses"][name].clone();
                    assert!(response.is_object(), "{method} {path}: no response {name}");
                }
            }
            ops.push((method.to_uppercase(), path.clone(), op));
        }
    }
    assert!(ops.len() > 20, "{ops:?}");
    ops
}

#[test]
fn error_answers_are_documented_as_problem_json() {
    for (method, path, op) in operations() {
        for (status, response) in op["responses"].as_object().expect("responses") {
            let Some(content) = response["content"].as_object() else {
                continue;
            };
            if status.starts_with('4') || status.starts_with('5') {
                let types: Vec<&String> = content.keys().collect();
                assert_eq!(
                    types,
                    [crate::error::PROBLEM_JSON],
                    "{method} {path} {status}"
                );
            }
        }
    }
}

#[test]
fn every_response_has_a_description() {
    for (method, path, op) in operations() {
        for (status, response) in op["responses"].as_object().expect("responses") {
            let description = response["description"].as_str().unwrap_or("");
            assert!(!description.is_empty(), "{method} {path} {status}");
        }
    }
}

#[test]
fn path_parameters_are_those_of_the_template_and_the_others_are_in_the_query() {
    for (method, path, op) in operations() {
        let mut in_template: Vec<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        let params = op["parameters"].as_array().cloned().unwrap_or_default();
        let mut in_path: Vec<&str> = params
            .iter()
            .filter(|p| p["in"] == "path")
            .map(|p| p["name"].as_str().expect("a name"))
            .collect();
        in_template.sort_unstable();
        in_path.sort_unstable();
        assert_eq!(in_path, in_template, "{method} {path}: path parameters");
        for p in &params {
            assert!(
                matches!(p["in"].as_str(), Some("path" | "query" | "header")),
                "{method} {path}: {p}"
            );
            if p["in"] == "path" {
                assert_eq!(p["required"], true, "{method} {path}: {p}");
            }
        }
    }
}

/// The bounds written into the request schemas are the ones the use cases check.
#[test]
fn documented_bounds_are_those_the_use_cases_check() {
    use baton_core::{agents, page, runs};
    let doc = crate::openapi();
    let schemas = &doc["components"]["schemas"];
    let field = |schema: &str, name: &str, bound: &str| {
        schemas[schema]["properties"][name][bound]
            .as_u64()
            .map(|n| n as usize)
    };
    let cases = [
        (
            ("CreateAgentBody", "name", "maxLength"),
            agents::MAX_NAME_CHARS,
        ),
        (
            ("CreateAgentBody", "instructions", "maxLength"),
            agents::MAX_INSTRUCTIONS_CHARS,
        ),
        (
            ("CreateAgentBody", "tools", "maxItems"),
            agents::MAX_AGENT_TOOLS,
        ),
        (
            ("CreateRunBody", "title", "maxLength"),
            runs::MAX_TITLE_CHARS,
        ),
        (
            ("CreateRunBody", "message", "maxLength"),
            runs::MAX_CONTENT_CHARS,
        ),
        (
            ("CreateRunBody", "request_id", "maxLength"),
            runs::MAX_REQUEST_ID_CHARS,
        ),
        (
            ("PostMessageBody", "content", "maxLength"),
            runs::MAX_CONTENT_CHARS,
        ),
        (
            ("PostMessageBody", "request_id", "maxLength"),
            runs::MAX_REQUEST_ID_CHARS,
        ),
        (("CancelBody", "reason", "maxLength"), runs::MAX_TITLE_CHARS),
    ];
    for ((schema, name, bound), expected) in cases {
        assert_eq!(
            field(schema, name, bound),
            Some(expected),
            "{schema}.{name} {bound}"
        );
    }
    let pages = [
        "/v1/agents",
        "/v1/tools",
        "/v1/runs",
        "/v1/runs/{run_id}/messages",
        "/v1/runs/{run_id}/events",
        "/v1/secrets",
        "/v1/api-keys",
        "/v1/audit",
    ];
    for (method, path, op) in operations() {
        if !pages.contains(&path.as_str()) || method != "GET" {
            continue;
        }
        for p in op["parameters"].as_array().cloned().unwrap_or_default() {
            if p["name"] == "limit" {
                assert_eq!(
                    p["schema"]["maximum"].as_u64(),
                    Some(u64::from(page::MAX_LIMIT)),
                    "{method} {path}"
                );
            }
        }
    }
}

#[test]
fn the_document_asks_for_a_bearer_token_but_not_on_the_probes_nor_to_log_in_and_a_ticket_opens_a_stream()
 {
    let doc = crate::openapi();
    assert_eq!(doc["security"], json!([{"bearer": []}]));
    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(
        (&scheme["type"], &scheme["scheme"]),
        (&"http".into(), &"bearer".into())
    );
    // The probes answer anyone (a kubelet has no key); logging in is how one gets a token.
    let open = [("GET", "/livez"), ("GET", "/readyz"), ("POST", "/v1/login")];
    for (method, path, op) in operations() {
        if open.contains(&(method.as_str(), path.as_str())) {
            assert_eq!(op["security"], json!([{}]), "{method} {path}");
        } else if (method.as_str(), path.as_str()) == ("GET", "/v1/runs/{run_id}/events") {
            // A browser's EventSource opens it with a stream ticket instead.
            assert_eq!(
                op["security"],
                json!([{"bearer": []}, {"ticket": []}]),
                "{method} {path}"
            );
        } else {
            assert!(
                op.get("security").is_none(),
                "{method} {path}: {}",
                op["security"]
            );
        }
    }
}

#[test]
fn operation_ids_are_unique_camel_case_and_every_operation_has_a_declared_tag() {
    let doc = crate::openapi();
    let declared: Vec<&Value> = doc["tags"]
        .as_array()
        .expect("tags")
        .iter()
        .map(|t| &t["name"])
        .collect();
    let mut ids = Vec::new();
    for (method, path, op) in operations() {
        let id = op["operationId"]
            .as_str()
            .expect("an operationId")
            .to_string();
        assert!(
            id.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && id.chars().all(|c| c.is_ascii_alphanumeric()),
            "{method} {path}: operationId {id} is not camelCase"
        );
        let tags = op["tags"].as_array().expect("tags");
        assert_eq!(tags.len(), 1, "{method} {path}: one tag");
        assert!(declared.contains(&&tags[0]), "{method} {path}: {}", tags[0]);
        ids.push(id);
    }
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "operationIds repeat: {ids:?}");
    for id in [
        "createRun",
        "postRunMessage",
        "listRunMessages",
        "listRunEvents",
        "createAgent",
    ] {
        assert!(ids.iter().any(|i| i == id), "{id} is missing: {ids:?}");
    }
}

#[test]
fn the_document_names_its_server() {
    assert_eq!(crate::openapi()["servers"][0]["url"], "/");
}

#[test]
fn every_operation_documents_rate_limits_and_server_errors_with_retry_after() {
    for (method, path, op) in operations() {
        let responses = &op["responses"];
        for status in ["503", "5XX"] {
            assert!(
                responses[status].is_object(),
                "{method} {path}: no {status}"
            );
        }
        if matches!(path.as_str(), "/livez" | "/readyz") {
            assert!(responses.get("429").is_none(), "{method} {path}");
            continue;
        }
        for status in ["429", "503"] {
            let header = &responses[status]["headers"]["Retry-After"];
            assert_eq!(header["required"], true, "{method} {path} {status}");
            assert_eq!(
                header["schema"]["type"], "integer",
                "{method} {path} {status}"
            );
        }
    }
}

/// Every `$ref` in `value`, as the component it names.
fn references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                out.push(r.to_string());
            }
            map.values().for_each(|v| references(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, out)),
        _ => {}
    }
}

/// The objects described inline somewhere below the top of a component or an operation:
/// each is a type a generator names after where it found it.
fn inline_objects(value: &Value, at: String, top: bool, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if !top && map.contains_key("properties") {
                out.push(at.clone());
            }
            for (k, v) in map {
                inline_objects(v, format!("{at}/{k}"), false, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                inline_objects(v, format!("{at}/{i}"), false, out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_object_is_a_named_component_and_every_reference_resolves() {
    let doc = crate::openapi();
    let mut inline = Vec::new();
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        inline_objects(
            schema,
            format!("#/components/schemas/{name}"),
            true,
            &mut inline,
        );
    }
    inline_objects(&doc["paths"], "#/paths".into(), false, &mut inline);
    assert_eq!(inline, Vec::<String>::new(), "objects described inline");
    let mut refs = Vec::new();
    references(&doc, &mut refs);
    for r in refs {
        let pointer = r.strip_prefix('#').expect("a local reference");
        assert!(doc.pointer(pointer).is_some(), "{r} resolves to nothing");
    }
}

#[test]
fn every_union_is_of_named_variants_told_apart_by_a_const_tag() {
    let doc = crate::openapi();
    let schemas = &doc["components"]["schemas"];
    let mut unions = 0;
    for (name, schema) in schemas.as_object().expect("schemas") {
        let Some(items) = schema["oneOf"].as_array() else {
            continue;
        };
        unions += 1;
        let variants: Vec<&str> = items
            .iter()
            .map(|i| {
                let r = i["$ref"].as_str().unwrap_or_else(|| panic!("{name}: {i}"));
                r.strip_prefix("#/components/schemas/").expect("a schema")
            })
            .collect();
        let discriminator = &schema["discriminator"];
        let tag = match discriminator["propertyName"].as_str() {
            Some(tag) => tag,
            // The open union of events: an envelope of any type it does not list.
            None if name == "RunEvent" => "type",
            // A frame of the event stream is told apart by its SSE `event` name.
            None if name == "StreamData" => continue,
            None => panic!("{name} has no discriminator"),
        };
        for variant in variants {
            let tag_schema = &schemas[variant]["properties"][tag];
            let required = schemas[variant]["required"].as_array().expect("required");
            assert!(
                required.contains(&json!(tag)),
                "{variant}.{tag} is required"
            );
            if variant == "UnknownEvent" {
                assert!(tag_schema["not"]["enum"].is_array(), "{tag_schema}");
                continue;
            }
            let value = tag_schema["const"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: {variant}.{tag} is not a const: {tag_schema}"));
            if discriminator.is_object() {
                assert_eq!(
                    discriminator["mapping"][value],
                    format!("#/components/schemas/{variant}"),
                    "{name}: {value}"
                );
            }
        }
    }
    assert!(unions >= 3, "{unions} unions");
}

#[test]
fn every_provider_and_tool_kind_is_a_named_variant() {
    let doc = crate::openapi();
    let schemas = &doc["components"]["schemas"];
    for (union, variants) in [
        ("ProviderSpec", &["ScriptedProvider", "OpenAiProvider"][..]),
        (
            "ToolKindSpec",
            &[
                "HttpToolKind",
                "ClientToolKind",
                "DelegateToolKind",
                "McpToolKind",
                "WorkspaceToolKind",
            ][..],
        ),
    ] {
        let mapping = &schemas[union]["discriminator"]["mapping"];
        assert_eq!(
            mapping.as_object().map(|m| m.len()),
            Some(variants.len()),
            "{union}"
        );
        for variant in variants {
            assert!(
                schemas[*variant]["properties"]["kind"]["const"].is_string(),
                "{variant}"
            );
        }
    }
    // The inner type of a newtype variant is not a second name for it.
    assert!(schemas.get("OpenAiSpec").is_none());
    let openai = &schemas["OpenAiProvider"];
    assert!(openai["properties"]["base_url"].is_object(), "{openai}");
    assert!(
        openai["required"]
            .as_array()
            .is_some_and(|r| r.contains(&json!("model")))
    );
}

#[test]
fn every_event_type_has_a_typed_envelope_and_the_pages_and_the_stream_use_them() {
    let doc = crate::openapi();
    let schemas = &doc["components"]["schemas"];
    let events: Vec<&str> = schemas["RunEvent"]["oneOf"]
        .as_array()
        .expect("RunEvent is a union")
        .iter()
        .filter_map(|r| r["$ref"].as_str()?.strip_prefix("#/components/schemas/"))
        .collect();
    for (event_type, payload) in [
        ("run.created", "RunCreated"),
        ("message.appended", "MessageAppended"),
        ("model.completed", "ModelCompleted"),
        ("tool.intent", "ToolIntent"),
        ("lease.acquired", "LeaseAcquired"),
        ("checkpoint.saved", "CheckpointSaved"),
        ("run.completed", "RunCompleted"),
    ] {
        let name = format!("{payload}Event");
        assert!(events.contains(&name.as_str()), "{name}: {events:?}");
        let typed = &schemas[&name]["properties"];
        assert_eq!(typed["type"]["const"], event_type, "{name}");
        assert_eq!(
            typed["data"]["$ref"],
            format!("#/components/schemas/{payload}")
        );
        assert!(
            typed["version"].is_object() && typed["meta"].is_object(),
            "{name}"
        );
        assert!(schemas[payload].is_object(), "{payload}");
    }
    assert!(events.contains(&"UnknownEvent"), "{events:?}");
    // One typed envelope per event type the catalogue knows, and the unknown one.
    let known = schemas["UnknownEvent"]["properties"]["type"]["not"]["enum"]
        .as_array()
        .expect("the known types")
        .len();
    assert_eq!(known + 1, events.len());
    assert!(
        schemas.get("Envelope").is_none(),
        "UnknownEvent is its name"
    );
    assert_eq!(
        schemas["EventsPage"]["properties"]["events"]["items"]["$ref"],
        "#/components/schemas/RunEvent"
    );
    let content = &doc["paths"]["/v1/runs/{run_id}/events"]["get"]["responses"]["200"]["content"];
    assert_eq!(
        content["text/event-stream"]["schema"]["$ref"],
        "#/components/schemas/StreamData"
    );
    let frames: Vec<&Value> = schemas["StreamData"]["oneOf"]
        .as_array()
        .expect("StreamData is a union")
        .iter()
        .map(|r| &r["$ref"])
        .collect();
    assert_eq!(
        frames,
        [
            "#/components/schemas/RunEvent",
            "#/components/schemas/StreamDelta",
            "#/components/schemas/StreamProgress",
            "#/components/schemas/StreamError"
        ]
    );
}

/// Every event shape ever written (the catalogue's golden fixtures, whole envelopes) is
/// exactly one `RunEvent` of the document: the typed envelope of its type, or
/// `UnknownEvent` for a type this build does not know.
#[test]
fn every_golden_event_fixture_is_the_documented_event_of_its_type() {
    let doc = crate::openapi();
    let of = |name: &str| {
        let schema = json!({
            "$ref": format!("#/components/schemas/{name}"),
            "components": doc["components"],
        });
        jsonschema::validator_for(&schema).expect("a schema")
    };
    let any_event = of("RunEvent");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/tests/fixtures");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("the fixtures") {
        let path = entry.expect("a fixture").path();
        let text = std::fs::read_to_string(&path).expect("a readable fixture");
        let event: Value = serde_json::from_str(&text).expect("a JSON fixture");
        let errors: Vec<String> = any_event
            .iter_errors(&event)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        let event_type = event["type"].as_str().expect("a type");
        let typed = doc["components"]["schemas"]["RunEvent"]["oneOf"]
            .as_array()
            .expect("RunEvent's variants")
            .iter()
            .filter_map(|r| r["$ref"].as_str()?.strip_prefix("#/components/schemas/"))
            .find(|name| {
                doc["components"]["schemas"][*name]["properties"]["type"]["const"] == event_type
            })
            .unwrap_or("UnknownEvent");
        assert!(
            of(typed).is_valid(&event),
            "{}: not a {typed}",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 20, "{seen} fixtures in {}", dir.display());
    // A known type whose data is not its payload is no event at all.
    let text = std::fs::read_to_string(dir.join("model.completed.v1.json")).expect("a fixture");
    let mut broken: Value = serde_json::from_str(&text).expect("JSON");
    broken["data"]
        .as_object_mut()
        .expect("data")
        .remove("finish_reason");
    assert!(!any_event.is_valid(&broken), "{broken}");
}
