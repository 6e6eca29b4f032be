//! API keys over HTTP: an admin creates a key of a role no higher than its own, whose token
//! is in the creating answer alone; the key acts with its role; listings show its prefix,
//! role and last use, never its token or hash; a revoked or expired key answers 401 from
//! the next request on; viewers and members manage no keys; another tenant's key is 404;
//! bad input is a 400 naming the field; and no token reaches the server's log.

use crate::child::DebugServer;
use crate::common::{Api, DEADLINE, TestApp, assert_problem};
use baton_core::Role;
use baton_testkit::api::Reply;
use chrono::{Duration, Utc};
use serde_json::{Value, json};

async fn create(api: &Api, body: Value) -> Reply {
    api.post("/v1/api-keys", body).await
}

async fn revoke(api: &Api, id: &str) -> Reply {
    api.send(api.req(reqwest::Method::DELETE, &format!("/v1/api-keys/{id}")))
        .await
}

/// The tenant's keys (the list must answer 200).
async fn listed(api: &Api) -> Vec<Value> {
    let r = api.get("/v1/api-keys").await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["items"].as_array().expect("items").clone()
}

/// The listed key with this id.
async fn listed_key(api: &Api, id: &str) -> Value {
    listed(api)
        .await
        .into_iter()
        .find(|k| k["id"] == id)
        .unwrap_or_else(|| panic!("key {id} is not listed"))
}

/// The id of the listed key whose token is `token` (its prefix is the token's start).
async fn id_of(api: &Api, token: &str) -> String {
    let mine: Vec<Value> = listed(api)
        .await
        .into_iter()
        .filter(|k| k["prefix"].as_str().is_some_and(|p| token.starts_with(p)))
        .collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    mine[0]["id"].as_str().expect("id").to_string()
}

/// The hex SHA-256 of a token: what the database holds, which no answer may show.
fn hash_hex(token: &str) -> String {
    baton_core::crypto::tokens::hash_token(token)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// No part of `text` holds the token, its random part or its hash.
fn assert_secret_absent(text: &str, token: &str) {
    assert!(!text.contains(&token[3..]), "the token leaked: {text}");
    assert!(!text.contains(&hash_hex(token)), "the hash leaked: {text}");
}

/// Creates a member key as `admin`, uses it, lists it, revokes it: the same in both tiers.
/// `creator` is what the key's `created_by` must be.
async fn lifecycle(app: &TestApp, admin: &Api, creator: &str) {
    let made = create(admin, json!({"name": "ci runner", "role": "member"})).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let token = made.body["token"].as_str().expect("token").to_string();
    assert!(
        baton_core::crypto::tokens::is_well_formed(&token),
        "{token}"
    );
    let key = made.body["key"].clone();
    let fields: Vec<&str> = key
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        [
            "created_at",
            "created_by",
            "expires_at",
            "id",
            "last_used_at",
            "name",
            "prefix",
            "revoked_at",
            "role"
        ]
    );
    assert_eq!(key["name"], "ci runner");
    assert_eq!(key["role"], "member");
    assert_eq!(key["created_by"], creator);
    assert_eq!(key["last_used_at"], Value::Null);
    assert_eq!(key["expires_at"], Value::Null);
    let prefix = key["prefix"].as_str().expect("prefix");
    assert!(prefix.len() == 11 && token.starts_with(prefix), "{prefix}");
    let id = key["id"].as_str().expect("id").to_string();

    // The key acts as a member: it drives runs, it manages nothing.
    let member = Api::new(&app.base, Some(token.clone()));
    let agent = admin.agent(&[("hi", 0, false)]).await;
    member.run(&agent, None).await;
    let r = member
        .post(
            "/v1/agents",
            json!({"name": "x", "provider": {"kind": "scripted", "replies": [{"content": "y"}]}}),
        )
        .await;
    assert_problem(&r, 403, "forbidden");
    let r = create(&member, json!({"name": "mine", "role": "viewer"})).await;
    let detail = assert_problem(&r, 403, "forbidden");
    assert!(detail.contains("manage API keys"), "{detail}");

    // The listing shows its last use (recorded off the request's path, so soon rather
    // than at once), never the token or its hash.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let shown = loop {
        let shown = listed_key(admin, &id).await;
        if !shown["last_used_at"].is_null() {
            break shown;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "last use never recorded: {shown}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(shown["prefix"], prefix);
    assert_eq!(shown["role"], "member");
    assert_eq!(shown["created_at"], key["created_at"]);
    let whole = admin.get("/v1/api-keys").await;
    assert_secret_absent(&whole.body.to_string(), &token);
    assert!(
        whole.body["items"][0].get("token").is_none(),
        "{}",
        whole.body
    );

    // Revoked: the very next request fails; revoking again changes nothing.
    let r = revoke(admin, &id).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let detail = assert_problem(&member.get("/v1/runs").await, 401, "unauthorized");
    assert!(detail.contains("revoked"), "{detail}");
    assert_secret_absent(&detail, &token);
    let revoked_at = listed_key(admin, &id).await["revoked_at"].clone();
    assert!(revoked_at.is_string(), "{revoked_at}");
    assert_eq!(revoke(admin, &id).await.status, 204);
    assert_eq!(listed_key(admin, &id).await["revoked_at"], revoked_at);
}

#[tokio::test]
async fn embedded_keys_are_created_used_listed_and_revoked() {
    let app = TestApp::embedded().await;
    lifecycle(&app, &app.anonymous(), "local").await;
    app.stop().await;
}

#[tokio::test]
async fn team_keys_are_created_used_listed_and_revoked() {
    let app = TestApp::team().await;
    let (_, admin) = app.tenant(Role::Admin).await;
    let token = admin.token.clone().expect("token");
    let admin_id = id_of(&admin, &token).await;
    lifecycle(&app, &admin, &format!("key:{admin_id}")).await;
    app.stop().await;
}

#[tokio::test]
async fn a_key_role_is_at_most_its_creators_and_only_admins_manage_keys() {
    let app = TestApp::team().await;
    let (tenant, owner) = app.tenant(Role::Owner).await;
    let admin = Api::new(
        &app.base,
        Some(app.key(tenant, Role::Admin, None, None).await),
    );
    let r = create(&admin, json!({"name": "boss", "role": "owner"})).await;
    let detail = assert_problem(&r, 403, "forbidden");
    assert!(detail.contains("owner key"), "{detail}");
    for role in ["viewer", "member", "admin"] {
        let r = create(&admin, json!({"name": role, "role": role})).await;
        assert_eq!(r.status, 201, "{role}: {}", r.body);
    }
    let boss = create(&owner, json!({"name": "boss", "role": "owner"})).await;
    assert_eq!(boss.status, 201, "{}", boss.body);
    let boss_id = boss.body["key"]["id"].as_str().expect("id");
    // Nor may an admin revoke an owner's key.
    let detail = assert_problem(&revoke(&admin, boss_id).await, 403, "forbidden");
    assert!(detail.contains("owner key"), "{detail}");

    for role in [Role::Viewer, Role::Member] {
        let api = Api::new(&app.base, Some(app.key(tenant, role, None, None).await));
        let r = create(&api, json!({"name": "x", "role": "viewer"})).await;
        let detail = assert_problem(&r, 403, "forbidden");
        assert!(detail.contains("manage API keys"), "{detail}");
        assert_problem(&api.get("/v1/api-keys").await, 403, "forbidden");
        assert_problem(&revoke(&api, boss_id).await, 403, "forbidden");
    }
    assert_eq!(
        listed(&owner).await.len(),
        8,
        "nothing was created or revoked"
    );
    assert!(
        listed(&owner)
            .await
            .iter()
            .all(|k| k["revoked_at"].is_null())
    );

    // A caller may revoke its own key; it is refused from the next request on.
    let admin_id = id_of(&owner, admin.token.as_deref().expect("token")).await;
    assert_eq!(revoke(&admin, &admin_id).await.status, 204);
    assert_problem(&admin.get("/v1/api-keys").await, 401, "unauthorized");
    app.stop().await;
}

#[tokio::test]
async fn an_expired_key_answers_401_from_its_expiry_on() {
    let app = TestApp::team().await;
    let (_, admin) = app.tenant(Role::Admin).await;
    let expires = Utc::now() + Duration::milliseconds(1500);
    let r = create(
        &admin,
        json!({"name": "short", "role": "viewer", "expires_at": expires.to_rfc3339()}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.body["key"]["expires_at"].is_string(), "{}", r.body);
    let key = Api::new(
        &app.base,
        Some(r.body["token"].as_str().expect("token").to_string()),
    );
    assert_eq!(key.get("/v1/runs").await.status, 200);
    let wait = (expires - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait + std::time::Duration::from_millis(50)).await;
    let detail = assert_problem(&key.get("/v1/runs").await, 401, "unauthorized");
    assert!(detail.contains("expired"), "{detail}");
    app.stop().await;
}

#[tokio::test]
async fn another_tenants_key_answers_404_and_keeps_working() {
    let app = TestApp::team().await;
    let (_, alice) = app.tenant(Role::Owner).await;
    let (_, mallory) = app.tenant(Role::Owner).await;
    let made = create(&alice, json!({"name": "ci", "role": "member"})).await;
    let id = made.body["key"]["id"].as_str().expect("id");
    let token = made.body["token"].as_str().expect("token").to_string();

    let detail = assert_problem(&revoke(&mallory, id).await, 404, "not_found");
    assert_eq!(detail, "API key not found");
    let unknown = uuid::Uuid::now_v7().to_string();
    assert_problem(&revoke(&alice, &unknown).await, 404, "not_found");
    assert!(
        listed(&mallory).await.iter().all(|k| k["id"] != id),
        "listed to another tenant"
    );
    let still = Api::new(&app.base, Some(token));
    assert_eq!(still.get("/v1/runs").await.status, 200);
    assert!(listed_key(&alice, id).await["revoked_at"].is_null());
    app.stop().await;
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_field() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let past = (Utc::now() - Duration::minutes(1)).to_rfc3339();
    for (body, status, code, says) in [
        (
            json!({"name": "x", "role": "superuser"}),
            400,
            "invalid_body",
            "role: unknown variant `superuser`",
        ),
        (
            json!({"name": "x"}),
            400,
            "invalid_body",
            "missing field `role`",
        ),
        (
            json!({"name": "x", "role": "viewer", "scopes": ["all"]}),
            400,
            "invalid_body",
            "unknown field `scopes`",
        ),
        (
            json!({"name": "x", "role": "viewer", "expires_at": "tomorrow"}),
            400,
            "invalid_body",
            "expires_at",
        ),
        (
            json!({"name": "x", "role": "viewer", "expires_at": past}),
            400,
            "invalid_request",
            "expires_at must be in the future",
        ),
        (
            json!({"name": "", "role": "viewer"}),
            400,
            "invalid_request",
            "name must not be empty",
        ),
        (
            json!({"name": "n".repeat(101), "role": "viewer"}),
            400,
            "invalid_request",
            "name is longer than 100 characters",
        ),
        (
            json!({"name": "a\nb", "role": "viewer"}),
            400,
            "invalid_request",
            "name must not contain control characters",
        ),
    ] {
        let r = create(&api, body.clone()).await;
        let detail = assert_problem(&r, status, code);
        assert!(
            detail.contains(says),
            "{body}: {detail:?} should say {says:?}"
        );
    }
    let r = api
        .send(
            api.req(reqwest::Method::POST, "/v1/api-keys")
                .header("content-type", "text/plain")
                .body("{}"),
        )
        .await;
    assert_problem(&r, 415, "unsupported_media_type");
    assert_problem(&revoke(&api, "not-a-uuid").await, 400, "invalid_path");
    assert_problem(
        &api.get("/v1/api-keys?cursor=nope").await,
        400,
        "invalid_cursor",
    );
    assert_problem(
        &api.get("/v1/api-keys?limit=0").await,
        400,
        "invalid_request",
    );
    assert!(listed(&api).await.is_empty(), "nothing was created");

    let doc = api.get("/openapi.json").await;
    let paths = &doc.body["paths"];
    for method in ["post", "get"] {
        assert!(paths["/v1/api-keys"][method].is_object(), "{paths}");
    }
    assert!(
        paths["/v1/api-keys/{key_id}"]["delete"].is_object(),
        "{paths}"
    );
    let schemas = &doc.body["components"]["schemas"];
    assert_eq!(
        schemas["NewApiKey"]["required"],
        json!(["name", "role"]),
        "{schemas}"
    );
    assert!(schemas["CreatedApiKey"]["properties"]["token"].is_object());
    let meta = &schemas["ApiKeyMeta"]["properties"];
    assert!(meta["prefix"].is_object() && meta["last_used_at"].is_object());
    assert!(meta.get("token").is_none() && meta.get("token_hash").is_none());
    app.stop().await;
}

/// `baton serve` at debug level, its output in a file: a key is created, used, refused
/// after revocation, and appears nowhere in what the server printed.
#[tokio::test]
async fn a_token_never_reaches_the_server_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = DebugServer::start(dir.path()).await;
    let base = server.base.clone();
    let local = Api::new(&base, None);

    let made = create(&local, json!({"name": "ci", "role": "admin"})).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let token = made.body["token"].as_str().expect("token").to_string();
    let id = made.body["key"]["id"].as_str().expect("id").to_string();
    let key = Api::new(&base, Some(token.clone()));
    assert_eq!(key.get("/v1/api-keys").await.status, 200);
    assert_eq!(revoke(&key, &id).await.status, 204);
    assert_problem(&key.get("/v1/runs").await, 401, "unauthorized");
    create(&key, json!({"name": "x", "role": "nope"})).await;

    let printed = server.stop_and_read_log();
    assert!(
        printed.contains("\"level\":\"DEBUG\"") && printed.contains("baton_api::access"),
        "debug logging and the access lines were on: {printed}"
    );
    assert_secret_absent(&printed, &token);
}
