//! Tenant secrets over HTTP: write-only (no answer carries a value), admins only, scoped
//! by tenant, stored encrypted; the engine reads them for model keys and tool headers, in
//! the embedded tier across a restart (its generated key is kept); and a value never
//! reaches the server's log.

use crate::child::DebugServer;
use crate::common::{Api, TestApp, assert_problem};
use baton_core::Role;
use baton_testkit::ToolServer;
use baton_testkit::api::Reply;
use baton_testkit::chat::{ChatResponse, ChatServer, ScriptedChat};
use serde_json::{Value, json};

/// A value to look for everywhere it must not be.
const VALUE: &str = "sk-live-e2e-7d1f0c93b5a24e68";
const HOOK: &str = "hook-token-e2e-3b9a51c7";

async fn put(api: &Api, name: &str, body: Value) -> Reply {
    api.send(
        api.req(reqwest::Method::PUT, &format!("/v1/secrets/{name}"))
            .json(&body),
    )
    .await
}

async fn delete(api: &Api, name: &str) -> Reply {
    api.send(api.req(reqwest::Method::DELETE, &format!("/v1/secrets/{name}")))
        .await
}

/// Asserts that no part of `r`'s body holds `value`.
fn assert_hidden(r: &Reply, value: &str) {
    assert!(
        !r.body.to_string().contains(value),
        "value leaked: {}",
        r.body
    );
}

async fn write_only_round_trip(app: &TestApp, api: &Api, key_id: &str) {
    let put1 = put(api, "openai_key", json!({"value": VALUE})).await;
    assert_eq!(put1.status, 200, "{}", put1.body);
    assert_hidden(&put1, VALUE);
    let fields: Vec<&str> = put1
        .body
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields, ["created_at", "key_id", "name", "updated_at"]);
    assert_eq!(put1.body["name"], "openai_key");
    assert_eq!(put1.body["key_id"], key_id);

    put(api, "hook", json!({"value": HOOK})).await;
    let listed = api.get("/v1/secrets").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_hidden(&listed, VALUE);
    assert_hidden(&listed, HOOK);
    let names: Vec<&str> = listed.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(names, ["hook", "openai_key"]);
    assert_eq!(listed.body["items"][1], put1.body);
    let page = api.get("/v1/secrets?limit=1").await;
    assert_eq!(page.body["next_cursor"], "hook");
    let rest = api.get("/v1/secrets?limit=1&cursor=hook").await;
    assert_eq!(rest.body["items"][0]["name"], "openai_key");

    // Replacing keeps created_at; the value still never comes back.
    let put2 = put(api, "openai_key", json!({"value": "rotated-value"})).await;
    assert_eq!(put2.status, 200, "{}", put2.body);
    assert_eq!(put2.body["created_at"], put1.body["created_at"]);
    assert_hidden(&put2, "rotated-value");
    put(api, "openai_key", json!({"value": VALUE})).await;

    // In the database: ciphertext only.
    let stored = app.stored_ciphertexts().await;
    assert_eq!(stored.len(), 2);
    for bytes in &stored {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains(VALUE) && !text.contains(HOOK),
            "plaintext stored"
        );
        assert!(
            !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
            "plaintext stored"
        );
    }

    let deleted = delete(api, "hook").await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert_problem(&delete(api, "hook").await, 404, "not_found");
    assert_eq!(app.stored_ciphertexts().await.len(), 1);
}

#[tokio::test]
async fn embedded_secrets_are_write_only_and_stored_encrypted() {
    let app = TestApp::embedded().await;
    write_only_round_trip(&app, &app.anonymous(), "local").await;
    app.stop().await;
}

#[tokio::test]
async fn team_secrets_are_write_only_and_stored_encrypted() {
    let app = TestApp::team().await;
    let (_, admin) = app.tenant(Role::Admin).await;
    write_only_round_trip(&app, &admin, "test").await;
    app.stop().await;
}

#[tokio::test]
async fn only_admins_and_owners_manage_secrets() {
    let app = TestApp::team().await;
    let (tenant, owner) = app.tenant(Role::Owner).await;
    assert_eq!(put(&owner, "k", json!({"value": VALUE})).await.status, 200);
    for role in [Role::Viewer, Role::Member] {
        let api = Api::new(&app.base, Some(app.key(tenant, role, None, None).await));
        let detail = assert_problem(
            &put(&api, "k", json!({"value": "overwrite"})).await,
            403,
            "forbidden",
        );
        assert!(detail.contains("manage secrets"), "{detail}");
        assert_problem(&api.get("/v1/secrets").await, 403, "forbidden");
        assert_problem(&delete(&api, "k").await, 403, "forbidden");
    }
    let admin = Api::new(
        &app.base,
        Some(app.key(tenant, Role::Admin, None, None).await),
    );
    assert_eq!(admin.get("/v1/secrets").await.body["items"][0]["name"], "k");
    assert_eq!(delete(&admin, "k").await.status, 204);
    app.stop().await;
}

#[tokio::test]
async fn another_tenants_secret_is_invisible_and_cannot_be_deleted() {
    let app = TestApp::team().await;
    let (_, alice) = app.tenant(Role::Owner).await;
    let (_, mallory) = app.tenant(Role::Owner).await;
    assert_eq!(
        put(&alice, "shared", json!({"value": VALUE})).await.status,
        200
    );

    assert_problem(&delete(&mallory, "shared").await, 404, "not_found");
    assert_eq!(mallory.get("/v1/secrets").await.body["items"], json!([]));
    // Her own secret of that name is hers alone.
    let hers = put(&mallory, "shared", json!({"value": "mallory's"})).await;
    assert_eq!(hers.status, 200, "{}", hers.body);
    assert_eq!(delete(&mallory, "shared").await.status, 204);
    let alices = alice.get("/v1/secrets").await;
    assert_eq!(alices.body["items"][0]["name"], "shared");
    assert_eq!(app.stored_ciphertexts().await.len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn bad_names_and_values_get_400_naming_the_field() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let long = "n".repeat(65);
    for name in ["has%20space", "dot.ted", long.as_str()] {
        let detail = assert_problem(
            &put(&api, name, json!({"value": VALUE})).await,
            400,
            "invalid_request",
        );
        assert!(detail.starts_with("name must be"), "{name}: {detail}");
        let detail = assert_problem(&delete(&api, name).await, 400, "invalid_request");
        assert!(detail.starts_with("name must be"), "{name}: {detail}");
    }
    let big = "v".repeat(64 * 1024 + 1);
    for (body, says) in [
        (json!({"value": ""}), "value must not be empty"),
        (json!({"value": big}), "value is larger than 65536 bytes"),
        (
            json!({"value": "a\u{0}b"}),
            "value must not contain NUL characters",
        ),
    ] {
        let detail = assert_problem(&put(&api, "k", body).await, 400, "invalid_request");
        assert_eq!(detail, says);
    }
    for (body, says) in [
        (json!({}), "value"),
        (json!({"value": 5}), "expected a string"),
        (json!({"value": VALUE, "extra": 1}), "extra"),
    ] {
        let r = put(&api, "k", body).await;
        let detail = assert_problem(&r, 400, "invalid_body");
        assert!(detail.contains(says), "{detail}");
        assert_hidden(&r, VALUE);
    }
    assert_problem(
        &api.get("/v1/secrets?cursor=bad%20cursor").await,
        400,
        "invalid_request",
    );
    assert_eq!(api.get("/v1/secrets").await.body["items"], json!([]));

    let doc = api.get("/openapi.json").await;
    let paths = &doc.body["paths"];
    assert!(paths["/v1/secrets"]["get"].is_object(), "{paths}");
    for method in ["put", "delete"] {
        assert!(paths["/v1/secrets/{name}"][method].is_object(), "{paths}");
    }
    let body = &doc.body["components"]["schemas"]["PutSecretBody"];
    assert_eq!(body["required"], json!(["value"]), "{body}");
    let meta = &doc.body["components"]["schemas"]["SecretMeta"]["properties"];
    assert!(
        meta.get("value").is_none() && meta["key_id"].is_object(),
        "{meta}"
    );
    app.stop().await;
}

/// An `openai` agent whose key is the secret `openai_key`, with an `http` tool sending the
/// secret `hook` as `X-Hook-Token`.
async fn agent_using_secrets(api: &Api, chat: &ChatServer, tools: &ToolServer) -> String {
    let tool = api
        .post(
            "/v1/tools",
            json!({
                "name": "lookup",
                "input_schema": {"type": "object"},
                "effect": "read",
                "kind": {"kind": "http", "url": tools.url("lookup"),
                         "secret_headers": [{"header": "X-Hook-Token", "secret": "hook"}]},
            }),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let agent = api
        .post(
            "/v1/agents",
            json!({
                "name": "keyed",
                "provider": {"kind": "openai", "base_url": chat.base_url(), "model": "m",
                             "api_key_secret": "openai_key", "max_retries": 0},
                "tools": [tool.body["id"]],
            }),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    agent.body["id"].as_str().expect("agent id").to_string()
}

/// Runs one turn that calls the tool once and answers; returns the run's events.
async fn turn_with_tool(api: &Api, chat: &ChatServer, agent: &str) -> Vec<Value> {
    chat.push(ChatResponse::Reply(ScriptedChat::tool_calls(vec![(
        "c1", "lookup", "{}",
    )])));
    chat.push(ChatResponse::text("done"));
    let run = api.run(agent, Some("go")).await;
    let summary = api.wait_status(&run, "waiting").await;
    assert!(summary.get("last_error").is_none(), "{summary}");
    api.events(&run).await
}

#[tokio::test]
async fn the_engine_reads_secrets_and_the_embedded_key_survives_a_restart() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let chat = ChatServer::start().await;
    let tools = ToolServer::start().await;
    put(&api, "openai_key", json!({"value": VALUE})).await;
    put(&api, "hook", json!({"value": HOOK})).await;
    let agent = agent_using_secrets(&api, &chat, &tools).await;

    let events = turn_with_tool(&api, &chat, &agent).await;
    let bearer = format!("Bearer {VALUE}");
    let sent: Vec<Option<String>> = chat
        .requests()
        .into_iter()
        .map(|r| r.authorization)
        .collect();
    assert_eq!(sent, [Some(bearer.clone()), Some(bearer.clone())]);
    let received = tools.received("lookup");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].headers["x-hook-token"], HOOK);
    let text = serde_json::to_string(&events).expect("json");
    assert!(!text.contains(VALUE) && !text.contains(HOOK), "{text}");

    // After a restart, the key generated on first start opens the same secrets.
    let app = app.restart().await;
    let api = app.anonymous();
    turn_with_tool(&api, &chat, &agent).await;
    assert_eq!(
        chat.requests().last().and_then(|r| r.authorization.clone()),
        Some(bearer)
    );
    assert_eq!(tools.received("lookup")[1].headers["x-hook-token"], HOOK);

    // A secret deleted is missing: the turn fails, naming it.
    assert_eq!(delete(&api, "hook").await.status, 204);
    chat.push(ChatResponse::Reply(ScriptedChat::tool_calls(vec![(
        "c2", "lookup", "{}",
    )])));
    let run = api.run(&agent, Some("again")).await;
    let failed = api
        .wait_run(&run, "failed its turn", |r| r.get("last_error").is_some())
        .await;
    assert_eq!(failed["last_error"]["code"], "secret_missing", "{failed}");
    assert_eq!(failed["status"], "waiting", "{failed}");
    let message = failed["last_error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("\"hook\""), "{message}");
    assert_eq!(tools.calls("lookup"), 2, "the call did not go out");
    app.stop().await;
}

#[tokio::test]
async fn a_ciphertext_moved_to_another_secret_fails_the_turn_as_unreadable() {
    let app = TestApp::team().await;
    let (_, api) = app.tenant(Role::Admin).await;
    let chat = ChatServer::start().await;
    let tools = ToolServer::start().await;
    put(&api, "openai_key", json!({"value": VALUE})).await;
    put(&api, "hook", json!({"value": HOOK})).await;
    let agent = agent_using_secrets(&api, &chat, &tools).await;
    // Whoever can write the database copies the hook's ciphertext over the model key: it
    // was sealed for another name, so it does not open.
    app.execute_sql(
        "UPDATE secrets SET ciphertext = \
         (SELECT ciphertext FROM secrets WHERE name = 'hook') WHERE name = 'openai_key'",
    )
    .await;
    let run = api.run(&agent, Some("go")).await;
    let failed = api
        .wait_run(&run, "failed its turn", |r| r.get("last_error").is_some())
        .await;
    assert_eq!(
        failed["last_error"]["code"], "secret_unreadable",
        "{failed}"
    );
    let message = failed["last_error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"openai_key\"") && message.contains("\"test\""),
        "names the secret and its key: {message}"
    );
    assert!(
        !message.contains(VALUE) && !message.contains(HOOK),
        "{message}"
    );
    assert_eq!(chat.request_count(), 0, "no model call without its key");
    app.stop().await;
}

/// `baton serve` at debug level with its output in a file; the value is stored, used by
/// the engine and its absence reported, and appears nowhere in what the server printed.
#[tokio::test]
async fn a_secret_value_never_reaches_the_server_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = DebugServer::start(dir.path()).await;
    let base = server.base.clone();
    let api = Api::new(&base, None);
    let chat = ChatServer::start().await;
    let tools = ToolServer::start().await;

    put(&api, "openai_key", json!({"value": VALUE})).await;
    put(&api, "hook", json!({"value": HOOK})).await;
    let agent = agent_using_secrets(&api, &chat, &tools).await;
    turn_with_tool(&api, &chat, &agent).await;
    // A model that refuses the key, and a bad request quoting nothing.
    chat.push(ChatResponse::status(401, "invalid api key"));
    let run = api.run(&agent, Some("again")).await;
    api.wait_run(&run, "failed its turn", |r| r.get("last_error").is_some())
        .await;
    put(&api, "bad name", json!({"value": VALUE})).await;
    put(&api, "k", json!({"value": VALUE, "unknown": true})).await;

    let printed = server.stop_and_read_log();
    assert!(printed.contains("encryption keyring loaded"), "{printed}");
    assert!(
        printed.contains("\"level\":\"DEBUG\"") && printed.contains("baton_api::access"),
        "debug logging and the access lines were on: {printed}"
    );
    assert!(
        !printed.contains(VALUE),
        "the value reached the log: {printed}"
    );
    assert!(!printed.contains(HOOK), "the header value reached the log");
    let key_file = dir.path().join("data/keyring/local");
    let key = std::fs::read_to_string(&key_file).expect("generated key");
    assert!(!printed.contains(key.trim()), "the key reached the log");
}
