//! Contract: agents, tenants and API keys round-trip.

use crate::support::*;
use baton_core::model::{ApiKey, Tenant};
use baton_core::{Role, StoreError};
use baton_events::TenantId;

pub async fn agents_round_trip_and_list_newest_first<S: Store>(s: &S) {
    let t = tenant(s).await;
    let mut made = Vec::new();
    for name in ["one", "two", "three"] {
        let a = agent(t, name);
        s.create_agent(t, &a).await.expect("create");
        made.push(a);
    }
    for a in &made {
        assert_eq!(s.get_agent(t, a.id).await.expect("get").as_ref(), Some(a));
    }
    let first = s.list_agents(t, None, 2).await.expect("list");
    assert_eq!(first, vec![made[2].clone(), made[1].clone()]);
    let rest = s.list_agents(t, Some(made[1].id), 2).await.expect("list");
    assert_eq!(rest, vec![made[0].clone()]);

    let again = s.create_agent(t, &made[0]).await;
    assert!(
        matches!(again, Err(StoreError::Conflict { .. })),
        "{again:?}"
    );
    let orphan = agent(TenantId::new(), "orphan");
    let unknown = s.create_agent(orphan.tenant, &orphan).await;
    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
}

pub async fn tenants_and_api_keys_round_trip<S: Store>(s: &S) {
    let tenant = Tenant {
        id: TenantId::new(),
        name: format!("acme-{}", uuid::Uuid::new_v4()),
        created_at: now(),
    };
    s.create_tenant(&tenant).await.expect("create");
    assert_eq!(
        s.get_tenant(tenant.id).await.expect("get"),
        Some(tenant.clone())
    );
    let by_name = s.find_tenant_by_name(&tenant.name).await.expect("find");
    assert_eq!(by_name, Some(tenant.clone()));
    assert_eq!(s.find_tenant_by_name("nobody").await.expect("find"), None);
    assert_eq!(s.get_tenant(TenantId::new()).await.expect("get"), None);
    let twin = Tenant {
        id: TenantId::new(),
        ..tenant.clone()
    };
    let taken = s.create_tenant(&twin).await;
    assert!(
        matches!(taken, Err(StoreError::Conflict { .. })),
        "{taken:?}"
    );

    let key = ApiKey {
        id: uuid::Uuid::now_v7(),
        tenant: tenant.id,
        name: "ci".into(),
        prefix: "0123abcd".into(),
        role: Role::Admin,
        created_at: now(),
        expires_at: Some(now() + chrono::Duration::days(30)),
        revoked_at: None,
    };
    let hash = vec![7u8; 32];
    s.create_api_key(&key, &hash).await.expect("create key");
    assert_eq!(
        s.find_api_key(&hash).await.expect("find"),
        Some(key.clone())
    );
    assert_eq!(s.find_api_key(&[8u8; 32]).await.expect("find"), None);

    let revoked = ApiKey {
        id: uuid::Uuid::now_v7(),
        role: Role::Viewer,
        expires_at: None,
        revoked_at: Some(now()),
        ..key.clone()
    };
    s.create_api_key(&revoked, &[9u8; 32])
        .await
        .expect("create key");
    assert_eq!(
        s.find_api_key(&[9u8; 32]).await.expect("find"),
        Some(revoked)
    );

    let reused = ApiKey {
        id: uuid::Uuid::now_v7(),
        ..key.clone()
    };
    let dup = s.create_api_key(&reused, &hash).await;
    assert!(matches!(dup, Err(StoreError::Conflict { .. })), "{dup:?}");
    let orphan = ApiKey {
        id: uuid::Uuid::now_v7(),
        tenant: TenantId::new(),
        ..key
    };
    let unknown = s.create_api_key(&orphan, &[10u8; 32]).await;
    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
}
