//! Invitations: the tenant's admins invite, list and revoke; the invited user, logged in,
//! sees its pending invitations and accepts or declines one; nothing else acts on them.

use crate::support::{Anonymous, TestApp, assert_problem};
use baton_core::Role;
use serde_json::json;

const PASSWORD: &str = "a long enough password";

#[tokio::test]
async fn a_revoked_invitation_can_no_longer_be_accepted_and_is_revoked_once() {
    let (app, t) = TestApp::with_tenant().await;
    app.user("ada@example.com", PASSWORD).await;
    let invitation = app
        .post(
            "/v1/invitations",
            &t.owner,
            json!({"email": "Ada@Example.com ", "role": "member"}),
        )
        .await
        .expect_status(201);
    assert_eq!(invitation.body["email"], "ada@example.com");
    assert_eq!(invitation.body["state"], "pending");
    let id = invitation.str("/id");
    let again = app
        .post(
            "/v1/invitations",
            &t.owner,
            json!({"email": "ada@example.com", "role": "viewer"}),
        )
        .await;
    assert_problem(&again, 409, "already_exists");

    // Another tenant's admin finds no such invitation.
    let other = app.tenant().await;
    let path = format!("/v1/invitations/{id}");
    assert_problem(&app.delete(&path, &other.owner).await, 404, "not_found");
    app.delete(&path, &t.owner).await.expect_status(204);
    let detail = assert_problem(&app.delete(&path, &t.owner).await, 409, "wrong_state");
    assert!(detail.contains("revoked"), "{detail}");
    let listed = app
        .get("/v1/invitations", &t.owner)
        .await
        .expect_status(200);
    assert_eq!(listed.item_fields("state"), [json!("revoked")]);

    let session = app
        .post(
            "/v1/login",
            &Anonymous,
            json!({"email": "ada@example.com", "password": PASSWORD}),
        )
        .await
        .expect_status(200)
        .str("/token");
    let mine = app
        .get("/v1/me/invitations", &session)
        .await
        .expect_status(200);
    assert_eq!(mine.body, json!([]));
    let accept = format!("/v1/me/invitations/{id}/accept");
    assert_problem(
        &app.post(&accept, &session, json!({})).await,
        404,
        "not_found",
    );
    assert_eq!(
        app.get("/v1/members", &t.owner).await.items().len(),
        0,
        "nobody joined"
    );
}

#[tokio::test]
async fn only_admins_invite_and_only_sessions_decide() {
    let (app, t) = TestApp::with_tenant().await;
    for role in [Role::Viewer, Role::Member] {
        let key = app.key(t.id, role).await;
        let r = app
            .post(
                "/v1/invitations",
                &key,
                json!({"email": "bob@example.com", "role": "viewer"}),
            )
            .await;
        assert_problem(&r, 403, "forbidden");
        assert_problem(&app.get("/v1/invitations", &key).await, 403, "forbidden");
    }
    let id = app
        .post(
            "/v1/invitations",
            &t.owner,
            json!({"email": "bob@example.com", "role": "viewer"}),
        )
        .await
        .expect_status(201)
        .str("/id");
    // An API key belongs to a tenant already: it has no invitations.
    for r in [
        app.get("/v1/me/invitations", &t.owner).await,
        app.post(
            &format!("/v1/me/invitations/{id}/accept"),
            &t.owner,
            json!({}),
        )
        .await,
    ] {
        let detail = assert_problem(&r, 400, "invalid_request");
        assert!(detail.contains("session"), "{detail}");
    }
    assert_problem(
        &app.get("/v1/me/invitations", &Anonymous).await,
        401,
        "unauthorized",
    );
    // Bad input is refused before anything is stored.
    for body in [
        json!({"email": "not an email", "role": "viewer"}),
        json!({"email": "bob@example.com", "role": "emperor"}),
        json!({"email": "bob@example.com", "role": "viewer", "extra": 1}),
    ] {
        let r = app.post("/v1/invitations", &t.owner, body.clone()).await;
        assert!(r.status.is_client_error(), "{body}: {}", r.text);
    }
    assert_eq!(app.get("/v1/invitations", &t.owner).await.items().len(), 1);
}
