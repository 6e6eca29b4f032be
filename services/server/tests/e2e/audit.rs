//! The audit stream over HTTP, in both tiers: every change to a tenant's agents, tools,
//! secrets, API keys, invitations and members made through the API is in `GET
//! /v1/audit`, newest first, with who made it (the caller's actor, or the invited user for
//! its acceptance), from where (the loopback address) and what it changed; never a
//! secret's value or a key's token. Only admins and owners read it, a tenant sees only its
//! own entries, and the `action` filter and the cursor work.

use crate::common::{Api, TestApp, assert_problem};
use baton_core::Role;
use baton_core::crypto::{PasswordParams, Passwords};
use baton_core::model::User;
use baton_core::ports::{Clock, SystemClock};
use serde_json::{Value, json};

/// The secret value the test stores: no answer may hold it.
const VALUE: &str = "sk-audit-value-never-shown-4b1d";

async fn audit(api: &Api, query: &str) -> (Vec<Value>, Option<String>) {
    let r = api.get(&format!("/v1/audit{query}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let text = r.body.to_string();
    assert!(!text.contains(VALUE), "a secret value leaked: {text}");
    let items = r.body["items"].as_array().expect("items").clone();
    (items, r.body["next_cursor"].as_str().map(str::to_string))
}

const PASSWORD: &str = "correct horse battery staple";

/// A user the tenant can invite, stored directly with a cheap hash of [`PASSWORD`] (a
/// login verifies with the hash's own parameters), and a client of its session.
async fn user(app: &TestApp) -> (User, Api) {
    let user = User {
        id: uuid::Uuid::now_v7(),
        email: format!("audited-{}@example.com", uuid::Uuid::new_v4().simple()),
        created_at: SystemClock.now(),
    };
    let cheap = PasswordParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    };
    let hash = Passwords::new(cheap)
        .expect("parameters")
        .hash(PASSWORD)
        .await
        .expect("hash");
    app.stores()
        .users
        .create_user(&user, &hash)
        .await
        .expect("user");
    let login = Api::new(&app.base, None)
        .post(
            "/v1/login",
            json!({"email": user.email, "password": PASSWORD}),
        )
        .await;
    let token = ok(&login, 200)["token"].as_str().map(str::to_string);
    (user, Api::new(&app.base, token))
}

fn ok(r: &baton_testkit::api::Reply, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.body);
    r.body.clone()
}

/// Makes one change of every audited kind as `admin`, whose actor label is `actor`, and
/// checks the stream shows exactly them, in order, with their facts.
async fn every_change_is_audited(app: &TestApp, admin: &Api, actor: &str) {
    let (before, _) = audit(admin, "?limit=500").await;
    let agent = ok(
        &admin
            .post(
                "/v1/agents",
                json!({
                    "name": "audited agent",
                    "provider": {"kind": "scripted", "replies": [{"content": "hi"}]}
                }),
            )
            .await,
        201,
    );
    let agent_id = agent["id"].as_str().expect("agent id");
    let updated = admin
        .send(
            admin
                .req(reqwest::Method::PUT, &format!("/v1/agents/{agent_id}"))
                .json(&json!({
                    "name": "audited agent, v2",
                    "provider": {"kind": "scripted", "replies": [{"content": "hello"}]}
                })),
        )
        .await;
    ok(&updated, 200);
    let tool = ok(
        &admin
            .post(
                "/v1/tools",
                json!({
                    "name": "audited_lookup",
                    "input_schema": {"type": "object"},
                    "effect": "read",
                    "kind": {"kind": "client"}
                }),
            )
            .await,
        201,
    );
    let tool_id = tool["id"].as_str().expect("tool id");
    let put = admin
        .send(
            admin
                .req(reqwest::Method::PUT, "/v1/secrets/audited_token")
                .json(&json!({"value": VALUE})),
        )
        .await;
    let key_id = ok(&put, 200)["key_id"]
        .as_str()
        .expect("key id")
        .to_string();
    let deleted = admin
        .send(admin.req(reqwest::Method::DELETE, "/v1/secrets/audited_token"))
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    // Deleting it again changes nothing and records nothing.
    let again = admin
        .send(admin.req(reqwest::Method::DELETE, "/v1/secrets/audited_token"))
        .await;
    assert_problem(&again, 404, "not_found");
    let made = ok(
        &admin
            .post(
                "/v1/api-keys",
                json!({"name": "audited key", "role": "viewer"}),
            )
            .await,
        201,
    );
    let token = made["token"].as_str().expect("token").to_string();
    let api_key = made["key"]["id"].as_str().expect("key id").to_string();
    for _ in 0..2 {
        // The second revocation changes nothing and records nothing.
        let r = admin
            .send(admin.req(reqwest::Method::DELETE, &format!("/v1/api-keys/{api_key}")))
            .await;
        assert_eq!(r.status, 204, "{}", r.body);
    }
    let (newcomer, session) = user(app).await;
    let invite = |role: &'static str| {
        let body = json!({"email": newcomer.email, "role": role});
        async move { ok(&admin.post("/v1/invitations", body).await, 201) }
    };
    let revoked = invite("admin").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    let r = admin
        .send(admin.req(
            reqwest::Method::DELETE,
            &format!("/v1/invitations/{revoked}"),
        ))
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let invitation = invite("viewer").await["id"]
        .as_str()
        .expect("id")
        .to_string();
    // The newcomer accepts: that entry is the user's own.
    ok(
        &session
            .post(
                &format!("/v1/me/invitations/{invitation}/accept"),
                json!({}),
            )
            .await,
        200,
    );
    let member_path = format!("/v1/members/{}", newcomer.id);
    let role = admin
        .send(
            admin
                .req(reqwest::Method::PUT, &member_path)
                .json(&json!({"role": "member"})),
        )
        .await;
    ok(&role, 200);
    let removed = admin
        .send(admin.req(reqwest::Method::DELETE, &member_path))
        .await;
    assert_eq!(removed.status, 204, "{}", removed.body);

    let (after, _) = audit(admin, "?limit=500").await;
    assert!(
        !Value::from(after.clone()).to_string().contains(&token[3..]),
        "a token leaked"
    );
    let new: Vec<&Value> = after.iter().take(after.len() - before.len()).collect();
    let user_id = newcomer.id.to_string();
    let expected: [(&str, &str, Value); 13] = [
        (
            "member.removed",
            &user_id,
            json!({"email": newcomer.email, "role": "member"}),
        ),
        (
            "member.role_changed",
            &user_id,
            json!({"email": newcomer.email, "from": "viewer", "to": "member"}),
        ),
        (
            "member.added",
            &user_id,
            json!({"email": newcomer.email, "role": "viewer", "invitation": invitation}),
        ),
        (
            "member.invited",
            &invitation,
            json!({"email": newcomer.email, "role": "viewer"}),
        ),
        ("member.invitation_revoked", &revoked, json!({})),
        (
            "member.invited",
            &revoked,
            json!({"email": newcomer.email, "role": "admin"}),
        ),
        (
            "api_key.revoked",
            &api_key,
            json!({"name": "audited key", "role": "viewer"}),
        ),
        (
            "api_key.created",
            &api_key,
            json!({
                "name": "audited key", "role": "viewer", "prefix": made["key"]["prefix"], "expires_at": null
            }),
        ),
        ("secret.deleted", "audited_token", json!({})),
        ("secret.put", "audited_token", json!({"key_id": key_id})),
        (
            "tool.created",
            tool_id,
            json!({"name": "audited_lookup", "effect": "read"}),
        ),
        (
            "agent.updated",
            agent_id,
            json!({"name": "audited agent, v2", "version": 2}),
        ),
        (
            "agent.created",
            agent_id,
            json!({"name": "audited agent", "version": 1}),
        ),
    ];
    let seen: Vec<(&str, &str, &Value)> = new
        .iter()
        .map(|e| {
            (
                e["action"].as_str().expect("action"),
                e["target"].as_str().expect("target"),
                &e["details"],
            )
        })
        .collect();
    let want: Vec<(&str, &str, &Value)> = expected.iter().map(|(a, t, d)| (*a, *t, d)).collect();
    assert_eq!(seen, want);
    let newcomers = format!("user:{user_id}");
    for e in &new {
        let by = if e["action"] == "member.added" {
            newcomers.as_str()
        } else {
            actor
        };
        assert_eq!(e["actor"], by, "{e}");
        assert_eq!(e["source"], "127.0.0.1", "{e}");
        assert!(
            e["at"].as_str().is_some() && e["id"].as_str().is_some(),
            "{e}"
        );
    }

    // One action, and pages of two.
    let (puts, _) = audit(admin, "?action=secret.put").await;
    assert!(!puts.is_empty() && puts.iter().all(|e| e["action"] == "secret.put"));
    let (first, cursor) = audit(admin, "?limit=2").await;
    let cursor = cursor.expect("a next page");
    let (second, _) = audit(admin, &format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(
        [&first[..], &second[..]]
            .concat()
            .iter()
            .map(|e| &e["id"])
            .collect::<Vec<_>>(),
        after.iter().take(4).map(|e| &e["id"]).collect::<Vec<_>>()
    );
    let bad = admin.get("/v1/audit?action=secret.value").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let bad = admin.get("/v1/audit?cursor=yesterday").await;
    assert_problem(&bad, 400, "invalid_cursor");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn team_changes_are_audited_and_only_admins_read_them() {
    let app = TestApp::team().await;
    let (tenant, owner) = app.tenant(Role::Owner).await;
    let (_, admin) = app.tenant(Role::Admin).await;
    // The admin of the first tenant: a key made by its owner.
    let made = ok(
        &owner
            .post("/v1/api-keys", json!({"name": "admin", "role": "admin"}))
            .await,
        201,
    );
    let admin_of_tenant = Api::new(&app.base, made["token"].as_str().map(str::to_string));
    let actor = format!("key:{}", made["key"]["id"].as_str().expect("id"));
    every_change_is_audited(&app, &admin_of_tenant, &actor).await;

    // The owner's key creation is there too, by the owner's key.
    let (created, _) = audit(&owner, "?action=api_key.created").await;
    assert!(created.iter().any(|e| e["target"] == made["key"]["id"]));

    // Another tenant's admin sees only its own stream: none of the first tenant's entries.
    let (others, _) = audit(&admin, "?limit=500").await;
    let text = Value::from(others).to_string();
    assert!(
        !text.contains(&actor) && !text.contains(&tenant.to_string()),
        "{text}"
    );

    for role in [Role::Viewer, Role::Member] {
        let token = app.key(tenant, role, None, None).await;
        let api = Api::new(&app.base, Some(token));
        assert_problem(&api.get("/v1/audit").await, 403, "forbidden");
    }
    assert_problem(&app.anonymous().get("/v1/audit").await, 401, "unauthorized");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_changes_are_audited_as_the_local_owner() {
    let app = TestApp::embedded().await;
    let local = app.anonymous();
    every_change_is_audited(&app, &local, "local").await;
    app.stop().await;
}
