//! Row-level security (Postgres only): the database itself keeps tenants apart, so a query
//! that forgot its tenant filter finds nothing of another tenant. Tenants A and B get rows
//! in every tenant table through the store's ports; then, in transactions exactly like the
//! store's own (same pools, same role, scope set the same way), deliberately unscoped
//! statements (`SELECT ... FROM <table>` with no tenant filter) see only A's rows when
//! scoped to A and none without a tenant, and writes of B's rows while scoped to A are
//! refused or find nothing.
//!
//! Every test first asserts that the store's connections are subject to row-level security
//! (`row_security_active`), so the suite cannot pass by running as a role that bypasses it.

use crate::support::*;
use baton_core::Role;
use baton_core::crypto::Sealed;
use baton_core::model::ApiKey;
use baton_core::model::CheckpointMeta;
use baton_core::model::{Member, User};
use baton_core::ports::{
    AgentStore, ApiKeyStore, CheckpointStore, EgressAllowlistStore, InvitationStore, SecretStore,
    StoredCheckpoint, ToolStore, UserStore,
};
use baton_events::{
    CheckpointId, ReceiptId, RunEvent, TenantId, ToolEffect, ToolId, ToolIntent, ToolKind,
};
use baton_store::{PgOptions, PgStore, PoolKind, Scope, migrate};
use baton_testkit::TestDatabase;
use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, PgConnection, Postgres, Transaction};
use uuid::Uuid;

/// Every table that holds tenant rows. `every_table_with_a_tenant_column_is_covered`
/// keeps this list complete.
const TENANT_TABLES: [&str; 28] = [
    "api_keys",
    "agents",
    "agent_versions",
    "runs",
    "events",
    "messages",
    "idempotency",
    "tools",
    "receipts",
    "secrets",
    "checkpoints",
    "memberships",
    "invitations",
    "egress_allowlists",
    "environments",
    "retention_policies",
    "schedules",
    "webhooks",
    "webhook_subscriptions",
    "webhook_deliveries",
    "webhook_attempts",
    "mcp_servers",
    "mcp_discoveries",
    "tool_versions",
    "audit_log",
    "blobs",
    "workspace_files",
    "stream_tickets",
];

/// Rows of `tenant` in every tenant table, written through the ports.
async fn populate(s: &PgStore, tenant: TenantId) {
    let key = ApiKey {
        id: Uuid::now_v7(),
        tenant,
        name: "ci".into(),
        prefix: "0123abcd".into(),
        role: Role::Member,
        created_at: now(),
        expires_at: None,
        revoked_at: None,
    };
    s.create_api_key(&key, Uuid::new_v4().as_bytes(), &audited())
        .await
        .expect("api key");
    let support = agent(tenant, "support");
    s.create_agent(tenant, &support, &audited())
        .await
        .expect("agent");
    s.create_tool(tenant, &tool(tenant, "lookup"), &audited())
        .await
        .expect("tool");
    // A run in its first turn has events and a message; a tool intent with an
    // idempotency record adds a receipt and the record.
    let (run, version) = run_in_turn(s, tenant).await;
    let receipt = ReceiptId::new();
    let intent = ToolIntent {
        receipt_id: receipt,
        turn: 1,
        call_id: format!("call-{receipt}"),
        tool_id: ToolId::new(),
        tool: "lookup".into(),
        kind: ToolKind::Http,
        effect: ToolEffect::Read,
        idempotent: true,
        arguments: json!({ "q": "order 7" }),
        idempotency_key: receipt.to_string(),
    };
    let mut req = request(
        run,
        version,
        vec![event(tenant, RunEvent::ToolIntent(intent))],
    );
    req.idempotency = Some(record("req-1", json!({ "ok": true })));
    append_ok(s, tenant, req).await;
    // A file of the run holds a blob.
    crate::workspace::put(s, tenant, run, version + 1, "uploads/rls.txt", b"rls").await;
    let sealed = Sealed {
        key_id: "k1".into(),
        bytes: vec![1, 2, 3],
    };
    s.put_secret(tenant, "openai_key", &sealed, now(), &audited())
        .await
        .expect("secret");
    let checkpoint = StoredCheckpoint {
        meta: CheckpointMeta {
            id: CheckpointId::new(),
            through_version: version,
            key_id: "k1".into(),
            size: 3,
            sha256: "0".repeat(64),
            created_at: now(),
        },
        ciphertext: vec![4, 5, 6],
    };
    s.save_checkpoint(tenant, run, &checkpoint)
        .await
        .expect("checkpoint");
    let user = User {
        id: Uuid::now_v7(),
        email: format!("{}@example.com", Uuid::new_v4().simple()),
        created_at: now(),
    };
    s.create_user(&user, "$argon2id$not-a-real-hash")
        .await
        .expect("user");
    let member = Member {
        user_id: user.id,
        email: user.email.clone(),
        role: Role::Owner,
        created_at: now(),
    };
    s.add_member(tenant, &member, &audited())
        .await
        .expect("member");
    let invitation = crate::invitations::invitation(tenant, "someone@example.com");
    s.create_invitation(tenant, &invitation, &audited())
        .await
        .expect("invitation");
    let allowlist = baton_core::model::EgressAllowlist {
        hosts: vec!["api.example.com".into()],
        updated_at: Some(now()),
    };
    s.put_egress_allowlist(tenant, &allowlist, &audited())
        .await
        .expect("egress allowlist");
    let environment = baton_core::model::TenantEnvironment {
        name: "py".into(),
        base: "default".into(),
        network: false,
        limits: Default::default(),
        execute_role: Role::Member,
        updated_at: now(),
    };
    baton_core::ports::EnvironmentStore::put_environment(s, tenant, &environment, &audited())
        .await
        .expect("environment");
    let ticket = baton_core::model::StreamTicket {
        id: Uuid::now_v7(),
        tenant,
        run: baton_events::RunId::new(),
        issued_by: baton_core::model::IssuedBy::Local,
        created_at: now(),
        expires_at: now() + chrono::TimeDelta::seconds(60),
    };
    baton_core::ports::StreamTicketStore::create_stream_ticket(
        s,
        &ticket,
        Uuid::new_v4().as_bytes(),
    )
    .await
    .expect("stream ticket");
    baton_core::ports::RetentionStore::put_retention(s, tenant, Some(30), now(), &audited())
        .await
        .expect("retention policy");
    let schedule = crate::schedules::schedule(tenant, support.id, now());
    baton_core::ports::ScheduleStore::create_schedule(s, &schedule, &audited())
        .await
        .expect("schedule");
    crate::webhooks::with_a_delivery_and_an_attempt(s, tenant).await;
    crate::mcp::with_a_discovery(s, tenant).await;
}

/// Two tenants with rows everywhere, checked on a connection that bypasses row-level
/// security (the test server's superuser), so the checks below cannot pass on empty tables.
async fn two_tenants(pg: &Pg) -> (TenantId, TenantId) {
    let (a, b) = (tenant(&pg.store).await, tenant(&pg.store).await);
    populate(&pg.store, a).await;
    populate(&pg.store, b).await;
    let mut admin = admin(pg).await;
    for table in TENANT_TABLES {
        let tenants: Vec<Uuid> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT DISTINCT tenant_id FROM {table} ORDER BY tenant_id"
        )))
        .fetch_all(&mut admin)
        .await
        .expect("count as admin");
        let mut both = vec![a.as_uuid(), b.as_uuid()];
        both.sort();
        assert_eq!(tenants, both, "{table} lacks rows of both tenants");
    }
    admin.close().await.ok();
    (a, b)
}

/// A connection as the test server's superuser: row-level security does not bind it.
async fn admin(pg: &Pg) -> PgConnection {
    PgConnection::connect(pg.url()).await.expect("admin")
}

/// The tenant ids of every row `tx` sees in `table`, by a query with no tenant filter.
async fn tenants_seen(tx: &mut Transaction<'static, Postgres>, table: &str) -> Vec<Uuid> {
    sqlx::query_scalar(AssertSqlSafe(format!("SELECT tenant_id FROM {table}")))
        .fetch_all(&mut **tx)
        .await
        .expect("unscoped select")
}

/// The store's connections are subject to row-level security on every pool.
async fn assert_bound(s: &PgStore) {
    assert!(
        !s.role().bypasses_rls,
        "the store's role {} bypasses row-level security",
        s.role().name
    );
    for kind in [PoolKind::App, PoolKind::Control, PoolKind::Checkpoint] {
        let mut tx = s.transaction(kind, Scope::NoTenant).await.expect("tx");
        for table in TENANT_TABLES {
            let active: bool = sqlx::query_scalar("SELECT row_security_active($1::regclass)")
                .bind(table)
                .fetch_one(&mut *tx)
                .await
                .expect("row_security_active");
            assert!(
                active,
                "row-level security is not active on {table} ({kind:?})"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unscoped_query_sees_only_the_rows_of_the_scoped_tenant() {
    let pg = pg().await;
    assert_bound(&pg.store).await;
    let (a, _b) = two_tenants(&pg).await;
    for kind in [PoolKind::App, PoolKind::Control, PoolKind::Checkpoint] {
        let mut tx = pg
            .store
            .transaction(kind, Scope::Tenant(a))
            .await
            .expect("tx");
        for table in TENANT_TABLES {
            let seen = tenants_seen(&mut tx, table).await;
            assert!(!seen.is_empty(), "{table}: A sees none of its own rows");
            assert!(
                seen.iter().all(|t| *t == a.as_uuid()),
                "{table}: scoped to A, an unscoped query saw another tenant's rows"
            );
        }
    }
    pg.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_tenant_an_unscoped_query_sees_no_rows() {
    let pg = pg().await;
    assert_bound(&pg.store).await;
    two_tenants(&pg).await;
    // The scope the store sets for tables of no tenant: both settings empty.
    let mut tx = pg
        .store
        .transaction(PoolKind::App, Scope::NoTenant)
        .await
        .expect("tx");
    for table in TENANT_TABLES {
        assert_eq!(
            tenants_seen(&mut tx, table).await,
            Vec::<Uuid>::new(),
            "{table}"
        );
    }
    drop(tx);
    // A session that never set anything, as the store's role: the settings are NULL.
    let mut conn = admin(&pg).await;
    sqlx::query(AssertSqlSafe(format!("SET ROLE {}", pg.store.role().name)))
        .execute(&mut conn)
        .await
        .expect("set role");
    for table in TENANT_TABLES {
        let n: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&mut conn)
            .await
            .expect("count");
        assert_eq!(n, 0, "{table}: rows visible with no tenant set");
    }
    conn.close().await.ok();
    pg.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cross_tenant_scope_sees_every_tenant() {
    let pg = pg().await;
    let (a, b) = two_tenants(&pg).await;
    let mut tx = pg
        .store
        .transaction(PoolKind::Control, Scope::CrossTenant)
        .await
        .expect("tx");
    for table in TENANT_TABLES {
        let seen = tenants_seen(&mut tx, table).await;
        for t in [a, b] {
            assert!(
                seen.contains(&t.as_uuid()),
                "{table}: cross-tenant misses {t}"
            );
        }
    }
    // Closing the store waits for every connection to come back.
    drop(tx);
    pg.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_of_another_tenants_rows_are_refused_or_find_nothing() {
    let pg = pg().await;
    assert_bound(&pg.store).await;
    let (a, b) = two_tenants(&pg).await;
    let scoped_to_a = || pg.store.transaction(PoolKind::App, Scope::Tenant(a));

    // An insert with B's tenant id: refused by the policy's check.
    let mut tx = scoped_to_a().await.expect("tx");
    let inserted = sqlx::query(
        "INSERT INTO secrets (tenant_id, name, key_id, ciphertext, created_at, updated_at) \
         VALUES ($1, 'planted', 'k1', '\\x00', now(), now())",
    )
    .bind(b.as_uuid())
    .execute(&mut *tx)
    .await;
    assert_policy_refused(inserted.map(drop), "insert with B's tenant id");
    drop(tx);

    // An update of every row, with no tenant filter: only A's rows change...
    let mut tx = scoped_to_a().await.expect("tx");
    let updated = sqlx::query("UPDATE agents SET name = 'renamed'")
        .execute(&mut *tx)
        .await
        .expect("update");
    assert_eq!(updated.rows_affected(), 1, "only A's one agent");
    // ...and naming B's rows finds none, to update or to delete.
    for statement in [
        "UPDATE tools SET name = 'taken' WHERE tenant_id = $1",
        "DELETE FROM secrets WHERE tenant_id = $1",
        "DELETE FROM runs WHERE tenant_id = $1",
    ] {
        let done = sqlx::query(statement)
            .bind(b.as_uuid())
            .execute(&mut *tx)
            .await
            .expect(statement);
        assert_eq!(done.rows_affected(), 0, "{statement}");
    }
    tx.commit().await.expect("commit");

    // Moving A's row to B: refused by the policy's check.
    let mut tx = scoped_to_a().await.expect("tx");
    let moved = sqlx::query("UPDATE api_keys SET tenant_id = $1")
        .bind(b.as_uuid())
        .execute(&mut *tx)
        .await;
    assert_policy_refused(moved.map(drop), "update to B's tenant id");
    drop(tx);

    // B's rows are as they were.
    let mut admin = admin(&pg).await;
    let (names, secrets): (Vec<String>, i64) = (
        sqlx::query_scalar("SELECT name FROM agents WHERE tenant_id = $1")
            .bind(b.as_uuid())
            .fetch_all(&mut admin)
            .await
            .expect("agents"),
        sqlx::query_scalar("SELECT count(*) FROM secrets WHERE tenant_id = $1")
            .bind(b.as_uuid())
            .fetch_one(&mut admin)
            .await
            .expect("secrets"),
    );
    assert_eq!((names, secrets), (vec!["support".to_string()], 1));
    admin.close().await.ok();
    pg.finish().await;
}

fn assert_policy_refused(result: Result<(), sqlx::Error>, what: &str) {
    match result {
        Err(sqlx::Error::Database(e)) => {
            assert_eq!(e.code().as_deref(), Some("42501"), "{what}: {e}");
            assert!(e.message().contains("row-level security"), "{what}: {e}");
        }
        other => panic!("{what} was not refused: {other:?}"),
    }
}

/// Every table with a `tenant_id` column forces row-level security and has the tenant
/// policy, and every one is in `TENANT_TABLES`: a new tenant table without a policy fails
/// here. Tables of no tenant have none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_table_with_a_tenant_column_is_covered() {
    let pg = pg().await;
    let mut admin = admin(&pg).await;
    let rows: Vec<(String, bool, bool, i64)> = sqlx::query_as(
        "SELECT c.relname::text, c.relrowsecurity, c.relforcerowsecurity, \
                (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid \
                   AND p.polname = 'tenant_isolation') \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.relkind = 'r' AND n.nspname = current_schema() \
           AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                         AND a.attname = 'tenant_id' AND NOT a.attisdropped) \
         ORDER BY 1",
    )
    .fetch_all(&mut admin)
    .await
    .expect("catalog");
    let mut expected: Vec<&str> = TENANT_TABLES.to_vec();
    expected.sort_unstable();
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names, expected, "tables with a tenant_id column");
    for (table, enabled, forced, policies) in &rows {
        assert!(
            *enabled && *forced && *policies == 1,
            "{table}: enabled {enabled}, forced {forced}, {policies} policy"
        );
    }
    let unscoped: Vec<(String, bool)> = sqlx::query_as(
        "SELECT relname::text, relrowsecurity FROM pg_class \
         WHERE relname IN ('tenants', 'users', 'sessions') ORDER BY 1",
    )
    .fetch_all(&mut admin)
    .await
    .expect("catalog");
    assert_eq!(
        unscoped,
        [("sessions", false), ("tenants", false), ("users", false)]
            .map(|(t, on)| (t.to_string(), on))
            .to_vec()
    );
    admin.close().await.ok();
    pg.finish().await;
}

/// A DSN whose role owns the tables and bypasses nothing needs no switch: the forced
/// policies bind the owner. The store keeps the login role, and a plain role's store works
/// as the superuser's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_owner_role_is_bound_by_the_forced_policies() {
    let db = TestDatabase::postgres().await.expect("database");
    let owner = format!("baton_test_owner_{}", Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(db.url()).await.expect("admin");
    // The role name is ours (a prefix and a UUID), not input.
    for statement in [
        format!("CREATE ROLE {owner} LOGIN"),
        format!("ALTER DATABASE \"{}\" OWNER TO {owner}", db.name()),
    ] {
        sqlx::query(AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .expect("set up the owner");
    }
    let mut url = url::Url::parse(db.url()).expect("url");
    url.set_username(&owner).expect("username");
    migrate::postgres(url.as_str()).await.expect("migrate");
    let store = PgStore::connect(&PgOptions::new(url.as_str()))
        .await
        .expect("connect");
    assert_eq!(store.role().name, owner, "no switch for a plain role");
    assert_bound(&store).await;
    let (a, b) = (tenant(&store).await, tenant(&store).await);
    populate(&store, a).await;
    populate(&store, b).await;
    let mut tx = store
        .transaction(PoolKind::App, Scope::Tenant(a))
        .await
        .expect("tx");
    for table in TENANT_TABLES {
        let seen = tenants_seen(&mut tx, table).await;
        assert!(
            !seen.is_empty() && seen.iter().all(|t| *t == a.as_uuid()),
            "{table}: {seen:?}"
        );
    }
    drop(tx);
    // The owner, outside the store, is bound too: with no tenant set it sees nothing.
    let mut own = PgConnection::connect(url.as_str()).await.expect("owner");
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
        .fetch_one(&mut own)
        .await
        .expect("count");
    assert_eq!(runs, 0);
    own.close().await.ok();
    store.close().await;
    admin.close().await.ok();
    db.drop_db().await.expect("drop");
    let mut server = PgConnection::connect(&baton_testkit::db::admin_url())
        .await
        .expect("server");
    sqlx::query(AssertSqlSafe(format!("DROP ROLE {owner}")))
        .execute(&mut server)
        .await
        .expect("drop role");
    server.close().await.ok();
}
