//! Contract: a tenant's egress allowlist round-trips, is replaced whole, stays within its
//! tenant, and commits with its audit entry; an unknown tenant has none to set.

use crate::support::*;
use baton_core::StoreError;
use baton_core::model::{AuditAction, AuditEntry, EgressAllowlist};
use baton_core::ports::{AuditQuery, AuditStore, EgressAllowlistStore};
use baton_events::TenantId;

fn allowlist(hosts: &[&str]) -> EgressAllowlist {
    EgressAllowlist {
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        updated_at: Some(now()),
    }
}

fn entry() -> AuditEntry {
    AuditEntry::operator(
        now(),
        AuditAction::EgressAllowlistSet,
        "allowlist",
        serde_json::json!({}),
    )
}

async fn entries<S: AuditStore>(s: &S, tenant: TenantId) -> usize {
    s.list_audit(
        tenant,
        &AuditQuery {
            action: Some(AuditAction::EgressAllowlistSet),
            limit: 100,
            ..AuditQuery::default()
        },
    )
    .await
    .expect("audit")
    .len()
}

pub async fn an_allowlist_is_replaced_whole_and_stays_in_its_tenant<
    S: Store + EgressAllowlistStore,
>(
    s: &S,
) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    assert_eq!(s.get_egress_allowlist(a).await.expect("get"), None);
    let first = allowlist(&["api.example.com", "*.example.org", "203.0.113.0/24"]);
    s.put_egress_allowlist(a, &first, &entry())
        .await
        .expect("put");
    let got = s.get_egress_allowlist(a).await.expect("get").expect("set");
    assert_eq!(got.hosts, first.hosts, "in order");
    assert_eq!(got.rules().expect("rules").len(), 3);
    let second = allowlist(&["only.example.com"]);
    s.put_egress_allowlist(a, &second, &entry())
        .await
        .expect("replace");
    let got = s.get_egress_allowlist(a).await.expect("get").expect("set");
    assert_eq!(got.hosts, second.hosts);
    assert_eq!(entries(s, a).await, 2, "each change is audited");
    // B sees none of A's, and its own change leaves A's alone.
    assert_eq!(s.get_egress_allowlist(b).await.expect("get"), None);
    s.put_egress_allowlist(b, &allowlist(&[]), &entry())
        .await
        .expect("B's");
    assert_eq!(
        s.get_egress_allowlist(b)
            .await
            .expect("get")
            .map(|l| l.hosts),
        Some(vec![])
    );
    assert_eq!(
        s.get_egress_allowlist(a)
            .await
            .expect("get")
            .map(|l| l.hosts),
        Some(second.hosts)
    );
    assert_eq!(entries(s, b).await, 1);

    let unknown = TenantId::new();
    let r = s.put_egress_allowlist(unknown, &first, &entry()).await;
    assert!(matches!(r, Err(StoreError::NotFound)), "{r:?}");
    assert_eq!(s.get_egress_allowlist(unknown).await.expect("get"), None);
}
