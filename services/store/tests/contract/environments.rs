//! Contract: a tenant's environments round-trip by name, are replaced whole, stay within
//! their tenant, and change with their audit entries; deleting one that is not there
//! changes and records nothing.

use crate::support::*;
use baton_core::model::{AuditAction, AuditEntry, EnvironmentLimits, Role, TenantEnvironment};
use baton_core::ports::{AuditQuery, AuditStore, EnvironmentStore};
use baton_events::TenantId;

fn environment(name: &str, network: bool) -> TenantEnvironment {
    TenantEnvironment {
        name: name.into(),
        base: "default".into(),
        network,
        limits: EnvironmentLimits {
            wall_ms: Some(5_000),
            ..Default::default()
        },
        execute_role: Role::Admin,
        updated_at: now(),
    }
}

fn entry(action: AuditAction) -> AuditEntry {
    AuditEntry::operator(now(), action, "environment", serde_json::json!({}))
}

async fn entries<S: AuditStore>(s: &S, tenant: TenantId) -> usize {
    s.list_audit(
        tenant,
        &AuditQuery {
            limit: 100,
            ..AuditQuery::default()
        },
    )
    .await
    .expect("audit")
    .into_iter()
    .filter(|e| {
        matches!(
            e.action,
            AuditAction::EnvironmentSet | AuditAction::EnvironmentDeleted
        )
    })
    .count()
}

pub async fn environments_are_kept_by_name_within_their_tenant<S: Store + EnvironmentStore>(s: &S) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let set = || entry(AuditAction::EnvironmentSet);
    let deleted = || entry(AuditAction::EnvironmentDeleted);
    let py = environment("py", false);
    s.put_environment(a, &py, &set()).await.expect("put");
    s.put_environment(a, &environment("net", true), &set())
        .await
        .expect("put");
    let got = s.get_environment(a, "py").await.expect("get");
    assert_eq!(got, Some(py.clone()));
    let names: Vec<String> = s
        .list_environments(a)
        .await
        .expect("list")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["net", "py"], "in name order");
    // Replaced whole.
    let mut changed = py;
    changed.execute_role = Role::Member;
    changed.limits = EnvironmentLimits::default();
    s.put_environment(a, &changed, &set())
        .await
        .expect("replace");
    assert_eq!(
        s.get_environment(a, "py").await.expect("get"),
        Some(changed)
    );
    // B sees none of A's, and A's name is free in B.
    assert_eq!(s.get_environment(b, "py").await.expect("get"), None);
    assert!(s.list_environments(b).await.expect("list").is_empty());
    assert!(
        !s.delete_environment(b, "py", &deleted())
            .await
            .expect("delete")
    );
    assert!(s.get_environment(a, "py").await.expect("get").is_some());
    assert!(
        s.delete_environment(a, "py", &deleted())
            .await
            .expect("delete")
    );
    assert_eq!(s.get_environment(a, "py").await.expect("get"), None);
    assert_eq!(entries(s, a).await, 4, "three sets and a delete");
    assert_eq!(
        entries(s, b).await,
        0,
        "a delete of nothing is not recorded"
    );
}
