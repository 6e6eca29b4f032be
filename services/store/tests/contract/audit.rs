//! Contract: an audited change and its entry commit together; a change refused or with
//! nothing to do (a conflict, a stale role, the last owner, a secret or key already gone)
//! writes no entry; entries round-trip whole, list newest first, page, filter by action,
//! stay within their tenant, and cannot be rewritten or deleted.

use crate::support::*;
use baton_core::crypto::Sealed;
use baton_core::model::ApiKey;
use baton_core::model::{AuditAction, AuditEntry};
use baton_core::model::{Member, User};
use baton_core::ports::AuditQuery;
use baton_core::ports::{AuditStore, MemberChange, UserStore};
use baton_core::{Role, StoreError};
use baton_events::TenantId;
use serde_json::json;
use uuid::Uuid;

/// An entry of `action` on `target`, by a key from the loopback address.
fn entry(action: AuditAction, target: &str) -> AuditEntry {
    AuditEntry {
        actor: "key:0196f3a0-0000-7000-8000-000000000001".into(),
        source: Some("127.0.0.1".parse().expect("address")),
        details: json!({"target": target, "n": 1}),
        ..AuditEntry::operator(now(), action, target, json!({}))
    }
}

async fn stream<S: AuditStore>(s: &S, tenant: TenantId) -> Vec<AuditEntry> {
    s.list_audit(
        tenant,
        &AuditQuery {
            limit: 500,
            ..AuditQuery::default()
        },
    )
    .await
    .expect("list audit")
}

fn key(tenant: TenantId) -> ApiKey {
    ApiKey {
        id: Uuid::now_v7(),
        tenant,
        name: "audited".into(),
        prefix: "0123abcd".into(),
        role: Role::Viewer,
        created_at: now(),
        expires_at: None,
        revoked_at: None,
    }
}

async fn member<S: UserStore>(s: &S, tenant: TenantId, role: Role) -> Member {
    let user = User {
        id: Uuid::now_v7(),
        email: format!("{}@example.com", Uuid::new_v4().simple()),
        created_at: now(),
    };
    s.create_user(&user, "$argon2id$hash").await.expect("user");
    let m = Member {
        user_id: user.id,
        email: user.email,
        role,
        created_at: now(),
    };
    s.add_member(
        tenant,
        &m,
        &entry(AuditAction::MemberAdded, &user.id.to_string()),
    )
    .await
    .expect("member");
    m
}

pub async fn changes_and_their_entries_commit_together<S: Store + UserStore>(s: &S) {
    let t = tenant(s).await;
    let mut written = Vec::new();
    let expect_written = |e: AuditEntry, written: &mut Vec<AuditEntry>| {
        written.push(e.clone());
        e
    };

    // Agents: a create is audited; an update at a stale version is not.
    let a = agent(t, "audited");
    let e = expect_written(
        entry(AuditAction::AgentCreated, &a.id.to_string()),
        &mut written,
    );
    s.create_agent(t, &a, &e).await.expect("create agent");
    let stale = baton_core::model::Agent {
        version: 3,
        ..a.clone()
    };
    let refused = s
        .update_agent(t, &stale, &entry(AuditAction::AgentUpdated, "stale"))
        .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict { .. })),
        "{refused:?}"
    );

    // Tools: a duplicate name writes nothing.
    let tool_a = tool(t, "lookup");
    let e = expect_written(
        entry(AuditAction::ToolCreated, &tool_a.id.to_string()),
        &mut written,
    );
    s.create_tool(t, &tool_a, &e).await.expect("create tool");
    let twin = s
        .create_tool(
            t,
            &tool(t, "lookup"),
            &entry(AuditAction::ToolCreated, "twin"),
        )
        .await;
    assert!(matches!(twin, Err(StoreError::Conflict { .. })), "{twin:?}");

    // Secrets: deleting a missing one writes nothing.
    let sealed = Sealed {
        key_id: "k1".into(),
        bytes: vec![1, 2, 3],
    };
    let e = expect_written(entry(AuditAction::SecretPut, "token"), &mut written);
    s.put_secret(t, "token", &sealed, now(), &e)
        .await
        .expect("put");
    let e = expect_written(entry(AuditAction::SecretDeleted, "token"), &mut written);
    assert!(s.delete_secret(t, "token", &e).await.expect("delete"));
    let gone = entry(AuditAction::SecretDeleted, "gone");
    assert!(
        !s.delete_secret(t, "token", &gone)
            .await
            .expect("delete again")
    );

    // Keys: revoking a revoked key writes nothing; a reused hash writes nothing.
    let k = key(t);
    let hash = Uuid::new_v4().as_bytes().to_vec();
    let e = expect_written(
        entry(AuditAction::ApiKeyCreated, &k.id.to_string()),
        &mut written,
    );
    s.create_api_key_by(&k, &hash, &e)
        .await
        .expect("create key");
    let reused = s
        .create_api_key_by(&key(t), &hash, &entry(AuditAction::ApiKeyCreated, "reused"))
        .await;
    assert!(
        matches!(reused, Err(StoreError::Conflict { .. })),
        "{reused:?}"
    );
    let e = expect_written(
        entry(AuditAction::ApiKeyRevoked, &k.id.to_string()),
        &mut written,
    );
    assert!(s.revoke_api_key(t, k.id, now(), &e).await.expect("revoke"));
    let again = entry(AuditAction::ApiKeyRevoked, "again");
    assert!(
        !s.revoke_api_key(t, k.id, now(), &again)
            .await
            .expect("revoke again")
    );

    // Members: a duplicate, a stale role and the last owner write nothing.
    let owner = member(s, t, Role::Owner).await;
    written.push(stream(s, t).await.remove(0));
    let dup = s
        .add_member(t, &owner, &entry(AuditAction::MemberAdded, "dup"))
        .await;
    assert!(matches!(dup, Err(StoreError::Conflict { .. })), "{dup:?}");
    let user = owner.user_id;
    let stale_role = s
        .change_member_role(
            t,
            user,
            Role::Admin,
            Role::Viewer,
            &entry(AuditAction::MemberRoleChanged, "stale"),
        )
        .await
        .expect("change");
    assert_eq!(stale_role, MemberChange::Stale);
    let last = s
        .remove_member(
            t,
            user,
            Role::Owner,
            &entry(AuditAction::MemberRemoved, "last"),
        )
        .await
        .expect("remove");
    assert_eq!(last, MemberChange::LastOwner);
    let viewer = member(s, t, Role::Viewer).await;
    written.push(stream(s, t).await.remove(0));
    let e = expect_written(
        entry(AuditAction::MemberRoleChanged, &viewer.user_id.to_string()),
        &mut written,
    );
    let done = s
        .change_member_role(t, viewer.user_id, Role::Viewer, Role::Member, &e)
        .await
        .expect("change");
    assert_eq!(done, MemberChange::Done);
    let e = expect_written(
        entry(AuditAction::MemberRemoved, &viewer.user_id.to_string()),
        &mut written,
    );
    let done = s
        .remove_member(t, viewer.user_id, Role::Member, &e)
        .await
        .expect("remove");
    assert_eq!(done, MemberChange::Done);

    // Exactly the written changes' entries, whole, newest first.
    written.reverse();
    assert_eq!(stream(s, t).await, written);
}

pub async fn the_stream_pages_filters_and_stays_in_its_tenant<S: Store>(s: &S) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let actions = [
        AuditAction::AgentCreated,
        AuditAction::SecretPut,
        AuditAction::AgentUpdated,
        AuditAction::SecretPut,
        AuditAction::ResealStarted,
    ];
    let mut made = Vec::new();
    for (i, action) in actions.into_iter().enumerate() {
        let e = entry(action, &format!("target-{i}"));
        s.append_audit(a, &e).await.expect("append");
        made.push(e);
    }
    let other = AuditEntry {
        source: None,
        ..entry(AuditAction::SecretPut, "b's")
    };
    s.append_audit(b, &other).await.expect("append");
    made.reverse();

    let page = |before, action, limit| AuditQuery {
        before,
        action,
        limit,
    };
    let first = s.list_audit(a, &page(None, None, 2)).await.expect("page");
    assert_eq!(first, made[..2]);
    let second = s
        .list_audit(a, &page(Some(first[1].id), None, 2))
        .await
        .expect("page");
    assert_eq!(second, made[2..4]);
    let puts = s
        .list_audit(a, &page(None, Some(AuditAction::SecretPut), 10))
        .await
        .expect("filter");
    assert_eq!(puts, [made[1].clone(), made[3].clone()]);
    assert_eq!(stream(s, b).await, [other]);
    assert!(stream(s, tenant(s).await).await.is_empty());

    let reused = s.append_audit(a, &made[0]).await;
    assert!(
        matches!(reused, Err(StoreError::Conflict { .. })),
        "{reused:?}"
    );
    let unknown = s
        .append_audit(TenantId::new(), &entry(AuditAction::SecretPut, "x"))
        .await;
    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
}

pub async fn entries_are_never_rewritten_or_deleted<S: Store>(s: &S) {
    let t = tenant(s).await;
    let e = entry(AuditAction::SecretDeleted, "token");
    s.append_audit(t, &e).await.expect("append");
    for (i, outcome) in s.tamper_with_audit(t).await.into_iter().enumerate() {
        assert!(
            !matches!(outcome, Ok(n) if n > 0),
            "statement {i} changed {outcome:?} audit rows"
        );
    }
    assert_eq!(stream(s, t).await, [e]);
}
