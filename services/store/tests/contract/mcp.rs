//! Contract: MCP servers are named once per tenant and changed only from the version
//! read; discoveries are numbered per server, one per number, stored only for a server
//! that exists, and deleted with it; nothing crosses tenants.

use crate::support::*;
use baton_core::StoreError;
use baton_core::model::{
    AuditAction, AuditEntry, McpDiscovery, McpImplementation, McpServer, McpToolInfo,
};
use baton_events::{McpServerId, TenantId};

fn entry() -> AuditEntry {
    AuditEntry::operator(
        now(),
        AuditAction::McpServerCreated,
        "mcp",
        serde_json::json!({}),
    )
}

fn server(tenant: TenantId, name: &str) -> McpServer {
    McpServer {
        id: McpServerId::new(),
        tenant,
        name: name.into(),
        url: "https://mcp.example.com/mcp".into(),
        secret_headers: vec![baton_core::model::SecretHeader {
            header: "Authorization".into(),
            secret: "mcp_token".into(),
        }],
        oauth: Some(baton_core::model::McpOAuth {
            client_id: "baton".into(),
            client_secret: "mcp_client".into(),
            scope: Some("tools".into()),
            issuer: Some("https://auth.example.com".into()),
        }),
        timeout_ms: 5_000,
        version: 1,
        created_at: now(),
        updated_at: now(),
    }
}

fn discovery(number: i64, tools: &[&str]) -> McpDiscovery {
    McpDiscovery {
        number,
        discovered_at: now(),
        protocol_version: "2025-11-25".into(),
        server_info: Some(McpImplementation {
            name: "srv".into(),
            version: "1".into(),
        }),
        tools: tools
            .iter()
            .map(|n| McpToolInfo {
                name: (*n).into(),
                title: None,
                description: format!("{n} things"),
                input_schema: serde_json::json!({"type": "object"}),
                annotations: Some(serde_json::json!({"readOnlyHint": true})),
            })
            .collect(),
    }
}

/// A server of `tenant` with one discovery (for the row-level security checks).
pub async fn with_a_discovery<S: Store>(s: &S, tenant: TenantId) {
    let srv = server(tenant, "populated");
    s.create_mcp_server(&srv, &entry()).await.expect("server");
    s.add_mcp_discovery(tenant, srv.id, &discovery(1, &["a"]), &entry())
        .await
        .expect("discovery");
}

pub async fn servers_are_named_once_per_tenant_and_changed_by_version<S: Store>(s: &S) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let one = server(a, "tools");
    s.create_mcp_server(&one, &entry()).await.expect("create");
    assert_eq!(
        s.get_mcp_server(a, one.id).await.expect("read"),
        Some(one.clone())
    );
    let again = s.create_mcp_server(&server(a, "tools"), &entry()).await;
    assert!(
        matches!(again, Err(StoreError::Conflict { .. })),
        "{again:?}"
    );
    // Another tenant may use the name, and sees nothing of the first.
    s.create_mcp_server(&server(b, "tools"), &entry())
        .await
        .expect("another tenant's");
    assert_eq!(s.get_mcp_server(b, one.id).await.expect("read"), None);
    assert_eq!(
        s.list_mcp_servers(b, None, 10).await.expect("list").len(),
        1
    );

    let changed = McpServer {
        url: "https://other.example.com/mcp".into(),
        version: 2,
        ..one.clone()
    };
    assert!(
        s.update_mcp_server(&changed, 1, &entry())
            .await
            .expect("update")
    );
    assert!(
        !s.update_mcp_server(&changed, 1, &entry())
            .await
            .expect("stale"),
        "a stale version writes nothing"
    );
    let other = McpServer {
        version: 2,
        ..changed.clone()
    };
    assert!(
        !s.update_mcp_server(&McpServer { tenant: b, ..other }, 1, &entry())
            .await
            .expect("cross-tenant"),
        "another tenant's update finds nothing"
    );
    let read = s
        .get_mcp_server(a, one.id)
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(read.url, "https://other.example.com/mcp");
    assert_eq!(read.version, 2);
    let second = server(a, "second");
    s.create_mcp_server(&second, &entry())
        .await
        .expect("create");
    let listed = s.list_mcp_servers(a, None, 10).await.expect("list");
    let ids: Vec<McpServerId> = listed.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![second.id, one.id], "newest first");
    let page = s
        .list_mcp_servers(a, Some(second.id), 10)
        .await
        .expect("page");
    assert_eq!(page.len(), 1);
}

pub async fn discoveries_are_numbered_and_go_with_their_server<S: Store>(s: &S) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let srv = server(a, "tools");
    s.create_mcp_server(&srv, &entry()).await.expect("create");
    assert_eq!(s.latest_mcp_discovery(a, srv.id).await.expect("read"), None);
    let first = discovery(1, &["a", "b"]);
    s.add_mcp_discovery(a, srv.id, &first, &entry())
        .await
        .expect("first");
    let taken = s.add_mcp_discovery(a, srv.id, &first, &entry()).await;
    assert!(
        matches!(taken, Err(StoreError::Conflict { .. })),
        "{taken:?}"
    );
    let second = discovery(2, &["a"]);
    s.add_mcp_discovery(a, srv.id, &second, &entry())
        .await
        .expect("second");
    assert_eq!(
        s.latest_mcp_discovery(a, srv.id).await.expect("read"),
        Some(second)
    );
    // Only the last ones are kept: once a newer number is stored, an old number is free
    // again (deleted), while one still kept is taken.
    let kept = baton_core::ports::MCP_DISCOVERIES_KEPT;
    for n in 3..=kept + 2 {
        s.add_mcp_discovery(a, srv.id, &discovery(n, &["a"]), &entry())
            .await
            .expect("next");
    }
    let still = s
        .add_mcp_discovery(a, srv.id, &discovery(3, &[]), &entry())
        .await;
    assert!(
        matches!(still, Err(StoreError::Conflict { .. })),
        "{still:?}"
    );
    s.add_mcp_discovery(a, srv.id, &discovery(2, &[]), &entry())
        .await
        .expect("number 2 was deleted");
    assert_eq!(
        s.latest_mcp_discovery(a, srv.id)
            .await
            .expect("read")
            .map(|d| d.number),
        Some(kept + 2)
    );
    // Another tenant can neither read nor add to it.
    assert_eq!(s.latest_mcp_discovery(b, srv.id).await.expect("read"), None);
    let foreign = s
        .add_mcp_discovery(b, srv.id, &discovery(3, &[]), &entry())
        .await;
    assert!(matches!(foreign, Err(StoreError::NotFound)), "{foreign:?}");
    assert!(
        !s.delete_mcp_server(b, srv.id, &entry())
            .await
            .expect("cross-tenant delete")
    );
    assert!(
        s.delete_mcp_server(a, srv.id, &entry())
            .await
            .expect("delete")
    );
    assert_eq!(s.latest_mcp_discovery(a, srv.id).await.expect("read"), None);
    let gone = s
        .add_mcp_discovery(a, srv.id, &discovery(1, &[]), &entry())
        .await;
    assert!(matches!(gone, Err(StoreError::NotFound)), "{gone:?}");
}
