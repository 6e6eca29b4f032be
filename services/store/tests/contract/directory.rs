//! Contract: agents (with their versions), tools, tenants and API keys round-trip.

use crate::support::*;
use baton_core::model::{
    Agent, AgentLimits, ApiKey, OpenAiSpec, ProviderSpec, SecretHeader, Tenant, Tool, ToolKindSpec,
};
use baton_core::{Role, StoreError};
use baton_events::{RunId, TenantId, ToolEffect, ToolId};

pub async fn agents_round_trip_and_list_newest_first<S: Store>(s: &S) {
    let t = tenant(s).await;
    let mut made = Vec::new();
    for name in ["one", "two", "three"] {
        let a = agent(t, name);
        s.create_agent(t, &a, &audited()).await.expect("create");
        made.push(a);
    }
    for a in &made {
        assert_eq!(s.get_agent(t, a.id).await.expect("get").as_ref(), Some(a));
    }
    let first = s.list_agents(t, false, None, 2).await.expect("list");
    assert_eq!(first, vec![made[2].clone(), made[1].clone()]);
    let rest = s
        .list_agents(t, false, Some(made[1].id), 2)
        .await
        .expect("list");
    assert_eq!(rest, vec![made[0].clone()]);

    let again = s.create_agent(t, &made[0], &audited()).await;
    assert!(
        matches!(again, Err(StoreError::Conflict { .. })),
        "{again:?}"
    );
    let orphan = agent(TenantId::new(), "orphan");
    let unknown = s.create_agent(orphan.tenant, &orphan, &audited()).await;
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
    s.create_api_key(&key, &hash, &audited())
        .await
        .expect("create key");
    assert_eq!(
        s.lookup_api_key(&hash).await.expect("find").map(|r| r.key),
        Some(key.clone())
    );
    assert_eq!(
        s.lookup_api_key(&[8u8; 32])
            .await
            .expect("find")
            .map(|r| r.key),
        None
    );

    let revoked = ApiKey {
        id: uuid::Uuid::now_v7(),
        role: Role::Viewer,
        expires_at: None,
        revoked_at: Some(now()),
        ..key.clone()
    };
    s.create_api_key(&revoked, &[9u8; 32], &audited())
        .await
        .expect("create key");
    assert_eq!(
        s.lookup_api_key(&[9u8; 32])
            .await
            .expect("find")
            .map(|r| r.key),
        Some(revoked)
    );

    let reused = ApiKey {
        id: uuid::Uuid::now_v7(),
        ..key.clone()
    };
    let dup = s.create_api_key(&reused, &hash, &audited()).await;
    assert!(matches!(dup, Err(StoreError::Conflict { .. })), "{dup:?}");
    let orphan = ApiKey {
        id: uuid::Uuid::now_v7(),
        tenant: TenantId::new(),
        ..key
    };
    let unknown = s.create_api_key(&orphan, &[10u8; 32], &audited()).await;
    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
}

pub async fn agent_versions_are_kept_and_updates_must_follow_the_current_one<S: Store>(s: &S) {
    let t = tenant(s).await;
    let v1 = Agent {
        tools: vec![ToolId::new(), ToolId::new()],
        limits: AgentLimits {
            max_steps: 3,
            max_tool_calls: 5,
            turn_timeout_ms: 60_000,
            max_output_tokens: Some(256),
            max_failed_turns: 0,
            message_strategy: baton_core::model::MessageStrategy::Enqueue,
            max_queued_messages: 7,
            retention_days: Some(9),
        },
        ..agent(t, "helper")
    };
    s.create_agent(t, &v1, &audited()).await.expect("create");
    assert_eq!(s.get_agent(t, v1.id).await.expect("get"), Some(v1.clone()));
    assert_eq!(
        s.get_agent_version(t, v1.id, 1).await.expect("version"),
        Some(v1.clone())
    );

    let v2 = Agent {
        name: "helper two".into(),
        instructions: "be thorough".into(),
        provider: ProviderSpec::Openai(OpenAiSpec {
            base_url: "http://127.0.0.1:8000/v1".into(),
            model: "small".into(),
            api_key_secret: Some("openai".into()),
            request_timeout_ms: 30_000,
            max_retries: 2,
            retry_budget_ms: 60_000,
            stream: false,
            temperature: Some(0.5),
        }),
        tools: vec![v1.tools[1]],
        limits: AgentLimits::default(),
        version: 2,
        updated_at: v1.updated_at + chrono::Duration::seconds(5),
        ..v1.clone()
    };
    s.update_agent(t, &v2, &audited()).await.expect("update");
    assert_eq!(s.get_agent(t, v1.id).await.expect("get"), Some(v2.clone()));
    assert_eq!(
        s.get_agent_version(t, v1.id, 2).await.expect("version"),
        Some(v2.clone())
    );
    assert_eq!(
        s.get_agent_version(t, v1.id, 1).await.expect("version"),
        Some(v1.clone())
    );
    assert_eq!(
        s.get_agent_version(t, v1.id, 3).await.expect("version"),
        None
    );
    assert_eq!(
        s.list_agents(t, false, None, 10).await.expect("list"),
        vec![v2.clone()]
    );

    // Another writer's version 2 lost; so does one that skips a version.
    let stale = Agent {
        name: "late".into(),
        ..v2.clone()
    };
    let lost = s.update_agent(t, &stale, &audited()).await;
    assert!(
        matches!(
            lost,
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2
            })
        ),
        "{lost:?}"
    );
    let ahead = s
        .update_agent(
            t,
            &Agent {
                version: 4,
                ..v2.clone()
            },
            &audited(),
        )
        .await;
    assert!(
        matches!(
            ahead,
            Err(StoreError::Conflict {
                expected: 3,
                actual: 2
            })
        ),
        "{ahead:?}"
    );
    assert_eq!(s.get_agent(t, v1.id).await.expect("get"), Some(v2.clone()));
    assert_eq!(
        s.get_agent_version(t, v1.id, 4).await.expect("version"),
        None
    );

    let missing = Agent {
        version: 2,
        ..agent(t, "nobody")
    };
    let unknown = s.update_agent(t, &missing, &audited()).await;
    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");

    // Another tenant can neither read nor change any version.
    let other = tenant(s).await;
    let foreign = s
        .update_agent(
            other,
            &Agent {
                tenant: other,
                version: 3,
                ..v2.clone()
            },
            &audited(),
        )
        .await;
    assert!(matches!(foreign, Err(StoreError::NotFound)), "{foreign:?}");
    assert_eq!(
        s.get_agent_version(other, v1.id, 1).await.expect("version"),
        None
    );
    assert_eq!(s.get_agent(t, v1.id).await.expect("get"), Some(v2));
}

pub async fn tools_round_trip_list_newest_first_and_are_unique_by_name<S: Store>(s: &S) {
    let t = tenant(s).await;
    let mut made = vec![tool(t, "search")];
    made.push(Tool {
        effect: ToolEffect::Mutation,
        idempotent: true,
        requires_approval: true,
        kind: ToolKindSpec::Http {
            url: "https://tools.example/deploy".into(),
            secret_headers: vec![SecretHeader {
                header: "Authorization".into(),
                secret: "deploy-token".into(),
            }],
        },
        ..tool(t, "deploy")
    });
    made.push(Tool {
        kind: ToolKindSpec::Client,
        ..tool(t, "ask_user")
    });
    for tool in &made {
        s.create_tool(t, tool, &audited()).await.expect("create");
    }
    for tool in &made {
        assert_eq!(
            s.get_tool(t, tool.id).await.expect("get").as_ref(),
            Some(tool)
        );
    }
    assert_eq!(s.get_tool(t, ToolId::new()).await.expect("get"), None);
    let first = s.list_tools(t, false, None, 2).await.expect("list");
    assert_eq!(first, vec![made[2].clone(), made[1].clone()]);
    let rest = s
        .list_tools(t, false, Some(made[1].id), 2)
        .await
        .expect("list");
    assert_eq!(rest, vec![made[0].clone()]);

    let same_name = s.create_tool(t, &tool(t, "search"), &audited()).await;
    assert!(
        matches!(
            same_name,
            Err(StoreError::Conflict {
                expected: 0,
                actual: 0
            })
        ),
        "{same_name:?}"
    );
    let same_id = s
        .create_tool(
            t,
            &Tool {
                name: "renamed".into(),
                ..made[0].clone()
            },
            &audited(),
        )
        .await;
    assert!(
        matches!(
            same_id,
            Err(StoreError::Conflict {
                expected: 0,
                actual: 0
            })
        ),
        "{same_id:?}"
    );
    assert_eq!(
        s.list_tools(t, false, None, 10).await.expect("list").len(),
        3
    );

    let orphan = tool(TenantId::new(), "orphan");
    let unknown = s.create_tool(orphan.tenant, &orphan, &audited()).await;
    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
}

pub async fn another_tenants_tools_are_invisible_and_their_names_free<S: Store>(s: &S) {
    let (owner, other) = (tenant(s).await, tenant(s).await);
    let mine = tool(owner, "search");
    s.create_tool(owner, &mine, &audited())
        .await
        .expect("create");
    assert_eq!(s.get_tool(other, mine.id).await.expect("get"), None);
    assert!(
        s.list_tools(other, false, None, 10)
            .await
            .expect("list")
            .is_empty()
    );

    let theirs = tool(other, "search");
    s.create_tool(other, &theirs, &audited())
        .await
        .expect("same name, other tenant");
    assert_eq!(
        s.list_tools(other, false, None, 10).await.expect("list"),
        vec![theirs]
    );
    assert_eq!(
        s.list_tools(owner, false, None, 10).await.expect("list"),
        vec![mine]
    );
}

pub async fn concurrent_agent_updates_have_exactly_one_winner<S: Store>(s: &S) {
    let t = tenant(s).await;
    let v1 = agent(t, "contested");
    s.create_agent(t, &v1, &audited()).await.expect("create");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (s, v1) = (s.clone(), v1.clone());
        tasks.push(tokio::spawn(async move {
            let v2 = Agent {
                name: format!("writer {i}"),
                version: 2,
                ..v1
            };
            s.update_agent(t, &v2, &audited()).await.map(|()| v2)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            Ok(v2) => winners.push(v2),
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2,
            }) => {}
            Err(e) => panic!("unexpected outcome {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let won = winners.pop();
    assert_eq!(s.get_agent(t, v1.id).await.expect("get"), won);
    assert_eq!(
        s.get_agent_version(t, v1.id, 2).await.expect("version"),
        won
    );
    assert_eq!(
        s.get_agent_version(t, v1.id, 1).await.expect("version"),
        Some(v1)
    );
}

/// Archiving moves an agent from one list to the other and back; a change that changes
/// nothing writes nothing, its audit entry included; versions stay readable throughout.
pub async fn an_agent_is_archived_and_restored_once_each<S: Store>(s: &S) {
    use baton_core::model::AuditAction;
    use baton_core::ports::AuditQuery;
    let t = tenant(s).await;
    let kept = agent(t, "kept");
    let retired = agent(t, "retired");
    for a in [&kept, &retired] {
        s.create_agent(t, a, &audited()).await.expect("create");
    }
    let entry =
        |action| baton_core::model::AuditEntry::operator(now(), action, "a", serde_json::json!({}));
    let at = now();
    for _ in 0..2 {
        let after = s
            .set_agent_archived(t, retired.id, Some(at), &entry(AuditAction::AgentArchived))
            .await
            .expect("archive")
            .expect("found");
        assert_eq!(
            after.archived_at,
            Some(at),
            "the first archive's time stays"
        );
    }
    let ids = |v: Vec<baton_core::model::Agent>| v.into_iter().map(|a| a.id).collect::<Vec<_>>();
    let in_use = s.list_agents(t, false, None, 10).await.expect("list");
    assert_eq!(ids(in_use), vec![kept.id]);
    let archived = s.list_agents(t, true, None, 10).await.expect("list");
    assert_eq!(ids(archived), vec![retired.id]);
    let v1 = s
        .get_agent_version(t, retired.id, 1)
        .await
        .expect("version")
        .expect("kept");
    assert_eq!(
        v1.archived_at, None,
        "versions are not archived, agents are"
    );
    // An update read before the archive does not land after it.
    let late = baton_core::model::Agent {
        version: 2,
        name: "too late".into(),
        ..retired.clone()
    };
    let refused = s.update_agent(t, &late, &audited()).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict { .. })),
        "{refused:?}"
    );
    let restored = s
        .set_agent_archived(t, retired.id, None, &entry(AuditAction::AgentRestored))
        .await
        .expect("restore")
        .expect("found");
    assert_eq!(restored.archived_at, None);
    assert_eq!(
        s.list_agents(t, true, None, 10).await.expect("list").len(),
        0
    );
    let missing = s
        .set_agent_archived(
            t,
            baton_events::AgentId::new(),
            Some(at),
            &entry(AuditAction::AgentArchived),
        )
        .await
        .expect("no error");
    assert!(missing.is_none());
    let q = AuditQuery {
        limit: 100,
        ..AuditQuery::default()
    };
    let actions: Vec<AuditAction> = s
        .list_audit(t, &q)
        .await
        .expect("audit")
        .into_iter()
        .map(|e| e.action)
        .filter(|a| matches!(a, AuditAction::AgentArchived | AuditAction::AgentRestored))
        .collect();
    assert_eq!(
        actions,
        vec![AuditAction::AgentRestored, AuditAction::AgentArchived],
        "one entry per change, newest first"
    );
}

/// A tool moves to the archived list and back; archiving it twice keeps the first time.
pub async fn a_tool_is_archived_and_restored<S: Store>(s: &S) {
    use baton_core::model::AuditAction;
    let t = tenant(s).await;
    let (kept, retired) = (tool(t, "kept"), tool(t, "retired"));
    for x in [&kept, &retired] {
        s.create_tool(t, x, &audited()).await.expect("create");
    }
    let entry =
        |action| baton_core::model::AuditEntry::operator(now(), action, "t", serde_json::json!({}));
    let at = now();
    for _ in 0..2 {
        let after = s
            .set_tool_archived(t, retired.id, Some(at), &entry(AuditAction::ToolArchived))
            .await
            .expect("archive")
            .expect("found");
        assert_eq!(after.archived_at, Some(at));
    }
    let names = |v: Vec<baton_core::model::Tool>| v.into_iter().map(|x| x.name).collect::<Vec<_>>();
    let listed = s.list_tools(t, false, None, 10).await.expect("list");
    assert_eq!(names(listed), vec!["kept"]);
    let listed = s.list_tools(t, true, None, 10).await.expect("list");
    assert_eq!(names(listed), vec!["retired"]);
    let restored = s
        .set_tool_archived(t, retired.id, None, &entry(AuditAction::ToolRestored))
        .await
        .expect("restore")
        .expect("found");
    assert_eq!(restored.archived_at, None);
    assert_eq!(
        s.list_tools(t, false, None, 10).await.expect("list").len(),
        2
    );
}

pub async fn tool_versions_are_kept_and_updates_must_follow_the_current_one<S: Store>(s: &S) {
    let t = tenant(s).await;
    let v1 = tool(t, "lookup");
    s.create_tool(t, &v1, &audited()).await.expect("create");
    let v2 = Tool {
        name: "search".into(),
        description: "the second".into(),
        version: 2,
        updated_at: now(),
        ..v1.clone()
    };
    s.update_tool(t, &v2, &audited()).await.expect("update");
    let current = s.get_tool(t, v1.id).await.expect("get").expect("found");
    assert_eq!((current.version, current.name.as_str()), (2, "search"));
    let first = s
        .get_tool_version(t, v1.id, 1)
        .await
        .expect("get")
        .expect("version 1 kept");
    assert_eq!((first.version, first.name.as_str()), (1, "lookup"));
    assert_eq!(first.description, v1.description);
    let second = s.get_tool_version(t, v1.id, 2).await.expect("get");
    assert_eq!(second.map(|x| x.description), Some("the second".into()));
    assert_eq!(s.get_tool_version(t, v1.id, 3).await.expect("get"), None);

    // Not after the current version: a conflict naming it; nothing written.
    let stale = Tool {
        version: 2,
        ..v2.clone()
    };
    let r = s.update_tool(t, &stale, &audited()).await;
    assert!(
        matches!(
            r,
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2
            })
        ),
        "{r:?}"
    );
    // Another tool's name: the unique key.
    let other = tool(t, "other");
    s.create_tool(t, &other, &audited()).await.expect("create");
    let taken = Tool {
        name: "other".into(),
        version: 3,
        ..v2.clone()
    };
    let r = s.update_tool(t, &taken, &audited()).await;
    assert!(
        matches!(
            r,
            Err(StoreError::Conflict {
                expected: 0,
                actual: 0
            })
        ),
        "{r:?}"
    );
    // Another tenant's tool is not found, by id or by version.
    let elsewhere = tenant(s).await;
    let r = s.update_tool(elsewhere, &taken, &audited()).await;
    assert!(matches!(r, Err(StoreError::NotFound)), "{r:?}");
    assert_eq!(
        s.get_tool_version(elsewhere, v1.id, 1).await.expect("get"),
        None
    );
    // An archived tool takes no new version.
    s.set_tool_archived(t, v1.id, Some(now()), &audited())
        .await
        .expect("archive");
    let next = Tool {
        version: 3,
        ..v2.clone()
    };
    let r = s.update_tool(t, &next, &audited()).await;
    assert!(matches!(r, Err(StoreError::Conflict { .. })), "{r:?}");
    assert_eq!(
        s.get_tool(t, v1.id).await.expect("get").map(|x| x.version),
        Some(2)
    );
}

pub async fn archived_agents_and_tools_are_deleted_with_their_versions_unless_a_live_run_uses_them<
    S: Store,
>(
    s: &S,
) {
    let t = tenant(s).await;
    let x = tool(t, "lookup");
    s.create_tool(t, &x, &audited()).await.expect("tool");
    let a = agent(t, "helper");
    s.create_agent(t, &a, &audited()).await.expect("agent");
    let run = RunId::new();
    let mut first = created(t);
    if let baton_events::RunEvent::RunCreated(c) = &mut first.event {
        c.agent_id = a.id;
    }
    append_ok(s, t, request(run, 0, vec![first])).await;
    assert_eq!(
        s.versions_in_use(t).await.expect("in use"),
        vec![(a.id, 1, 1)]
    );

    // Not archived: nothing goes.
    assert!(!s.delete_tool(t, x.id, &audited()).await.expect("delete"));
    assert!(!s.delete_agent(t, a.id, &audited()).await.expect("delete"));
    s.set_tool_archived(t, x.id, Some(now()), &audited())
        .await
        .expect("archive");
    s.set_agent_archived(t, a.id, Some(now()), &audited())
        .await
        .expect("archive");
    // The run has not ended: the agent stays.
    assert!(!s.delete_agent(t, a.id, &audited()).await.expect("delete"));
    assert!(s.get_agent(t, a.id).await.expect("get").is_some());
    // Another tenant deletes nothing.
    let elsewhere = tenant(s).await;
    assert!(
        !s.delete_tool(elsewhere, x.id, &audited())
            .await
            .expect("delete")
    );

    append_ok(
        s,
        t,
        request(
            run,
            1,
            vec![event(
                t,
                baton_events::RunEvent::RunCompleted(baton_events::RunCompleted {}),
            )],
        ),
    )
    .await;
    assert_eq!(s.versions_in_use(t).await.expect("in use"), vec![]);
    assert!(s.delete_agent(t, a.id, &audited()).await.expect("delete"));
    assert!(s.delete_tool(t, x.id, &audited()).await.expect("delete"));
    assert!(s.get_agent(t, a.id).await.expect("get").is_none());
    assert!(
        s.get_agent_version(t, a.id, 1)
            .await
            .expect("get")
            .is_none()
    );
    assert!(s.get_tool(t, x.id).await.expect("get").is_none());
    assert!(s.get_tool_version(t, x.id, 1).await.expect("get").is_none());
    // Once only, and the ended run stays.
    assert!(!s.delete_agent(t, a.id, &audited()).await.expect("delete"));
    assert!(s.get_run(t, run).await.expect("get").is_some());
}

pub async fn a_tool_an_older_replica_wrote_is_found_at_its_version_and_kept_on_update<S: Store>(
    s: &S,
) {
    let t = tenant(s).await;
    let old = tool(t, "lookup");
    s.create_tool(t, &old, &audited()).await.expect("create");
    // As a replica older than tool versions left it: the current row alone.
    let dropped = s
        .raw_write(
            t,
            "DELETE FROM tool_versions WHERE tenant_id = $1 AND tool_id = $2",
            old.id.as_uuid(),
        )
        .await;
    assert_eq!(dropped, 1);
    let found = s.get_tool_version(t, old.id, 1).await.expect("get");
    assert_eq!(found.map(|x| x.name), Some("lookup".to_string()));
    let next = Tool {
        name: "search".into(),
        version: 2,
        updated_at: now(),
        ..old.clone()
    };
    s.update_tool(t, &next, &audited()).await.expect("update");
    let first = s.get_tool_version(t, old.id, 1).await.expect("get");
    assert_eq!(first.map(|x| x.name), Some("lookup".to_string()), "kept");
    let second = s.get_tool_version(t, old.id, 2).await.expect("get");
    assert_eq!(second.map(|x| x.name), Some("search".to_string()));
}
