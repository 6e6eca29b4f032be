//! Postgres-only behaviour of `PgStore`: connection settings, the pools, the role the
//! connections act as and the lifetime of their tenant scope. (What row-level security
//! shows each scope is in the contract suite's `rls` module.)

use baton_events::TenantId;
use baton_store::{PgOptions, PgStore, PoolKind, Scope, migrate};
use baton_testkit::TestDatabase;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use std::time::Duration;

#[tokio::test]
async fn every_pool_carries_the_statement_timeout() {
    let db = TestDatabase::postgres().await.expect("database");
    let mut opts = PgOptions::new(db.url());
    opts.statement_timeout = Duration::from_millis(1500);
    opts.app_pool_size = 2;
    opts.control_pool_size = 1;
    let store = PgStore::connect(&opts).await.expect("connect");
    for kind in [PoolKind::App, PoolKind::Control, PoolKind::Checkpoint] {
        let mut tx = store
            .transaction(kind, Scope::NoTenant)
            .await
            .expect("transaction");
        let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&mut *tx)
            .await
            .expect("show");
        assert_eq!(timeout, "1500ms");
    }
    let mut tx = store
        .transaction(PoolKind::App, Scope::NoTenant)
        .await
        .expect("transaction");
    let slow = sqlx::query("SELECT pg_sleep(5)").execute(&mut *tx).await;
    assert!(
        slow.is_err(),
        "the statement timeout must cancel a slow query"
    );
    drop(tx);
    let control = store.pool_stats().into_iter().find(|p| p.name == "control");
    assert_eq!(control.map(|p| p.max), Some(1));
    store.close().await;
    db.drop_db().await.expect("drop");
}

/// The test server's superuser bypasses row-level security, so the store's connections
/// act as `baton_app` (made by the migrations), which does not.
#[tokio::test]
async fn a_superuser_login_switches_to_the_role_without_bypass() {
    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    let store = PgStore::connect(&PgOptions::new(db.url()))
        .await
        .expect("connect");
    assert_eq!(store.role().name, baton_store::postgres::APP_ROLE);
    assert!(!store.role().bypasses_rls);
    for kind in [PoolKind::App, PoolKind::Control, PoolKind::Checkpoint] {
        let mut tx = store
            .transaction(kind, Scope::NoTenant)
            .await
            .expect("transaction");
        let (user, session): (String, String) =
            sqlx::query_as("SELECT current_user::text, session_user::text")
                .fetch_one(&mut *tx)
                .await
                .expect("users");
        assert_eq!(user, "baton_app", "{kind:?}");
        assert_eq!(session, "postgres", "{kind:?}");
    }
    store.close().await;
    db.drop_db().await.expect("drop");
}

/// A login role that bypasses row-level security but may not switch to `baton_app` stays
/// itself, and the store reports the bypass (and logs a warning) rather than hiding it.
#[tokio::test]
async fn a_login_that_bypasses_and_cannot_switch_is_reported() {
    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    let login = format!("baton_test_bypass_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(db.url()).await.expect("admin");
    // The role name is ours (a prefix and a UUID), not input.
    for statement in [
        format!("CREATE ROLE {login} LOGIN BYPASSRLS"),
        format!("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {login}"),
    ] {
        sqlx::query(AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .expect("set up the login");
    }
    let mut url = url::Url::parse(db.url()).expect("url");
    url.set_username(&login).expect("username");
    let store = PgStore::connect(&PgOptions::new(url.as_str()))
        .await
        .expect("connect");
    assert_eq!(store.role().name, login);
    assert!(store.role().bypasses_rls);
    store.close().await;
    admin.close().await.ok();
    db.drop_db().await.expect("drop");
    let mut server = PgConnection::connect(&baton_testkit::db::admin_url())
        .await
        .expect("server");
    sqlx::query(AssertSqlSafe(format!("DROP ROLE {login}")))
        .execute(&mut server)
        .await
        .expect("drop role");
    server.close().await.ok();
}

/// The pools hand out connections without pinging them first; the `BEGIN` that sets a
/// transaction's scope finds a connection the server closed while it sat idle, and the
/// next one is used, so a restart of the server costs callers nothing.
#[tokio::test]
async fn connections_the_server_closed_while_idle_are_replaced_unnoticed() {
    use baton_core::ports::RunReader;
    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    let mut opts = PgOptions::new(db.url());
    opts.app_pool_size = 3;
    let store = PgStore::connect(&opts).await.expect("connect");
    // Three idle connections in the app pool.
    let held: Vec<_> = futures::future::join_all(
        (0..3).map(|_| store.transaction(PoolKind::App, Scope::NoTenant)),
    )
    .await;
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut admin = PgConnection::connect(db.url()).await.expect("admin");
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = 'baton'",
    )
    .fetch_all(&mut admin)
    .await
    .expect("terminate");
    assert!(!killed.is_empty(), "no idle connection to close");
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..5 {
        store.ping().await.expect("a live connection");
    }
    admin.close().await.ok();
    store.close().await;
    db.drop_db().await.expect("drop");
}

/// The scope is transaction-local: once the transaction ends, the pooled connection
/// carries no tenant to its next user.
#[tokio::test]
async fn the_scope_ends_with_its_transaction() {
    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    let mut opts = PgOptions::new(db.url());
    opts.app_pool_size = 1;
    let store = PgStore::connect(&opts).await.expect("connect");
    let tenant = TenantId::new();
    let mut tx = store
        .transaction(PoolKind::App, Scope::Tenant(tenant))
        .await
        .expect("transaction");
    let setting = "SELECT current_setting('baton.tenant_id', true), \
                   current_setting('baton.scope', true)";
    let inside: (Option<String>, Option<String>) = sqlx::query_as(setting)
        .fetch_one(&mut *tx)
        .await
        .expect("inside");
    assert_eq!(inside, (Some(tenant.to_string()), Some(String::new())));
    // End the transaction by hand to look at the same connection outside it, then open
    // another for sqlx to end as it expects.
    sqlx::query("COMMIT")
        .execute(&mut *tx)
        .await
        .expect("commit");
    let after: (Option<String>, Option<String>) = sqlx::query_as(setting)
        .fetch_one(&mut *tx)
        .await
        .expect("after");
    assert!(
        after.0.as_deref().unwrap_or("").is_empty() && after.1.as_deref().unwrap_or("").is_empty(),
        "the scope outlived its transaction: {after:?}"
    );
    sqlx::query("BEGIN").execute(&mut *tx).await.expect("begin");
    tx.commit().await.expect("commit");
    store.close().await;
    db.drop_db().await.expect("drop");
}

#[tokio::test]
async fn an_unreachable_server_fails_at_connect() {
    let mut opts = PgOptions::new("postgres://postgres@127.0.0.1:1/none");
    opts.acquire_timeout = Duration::from_secs(2);
    let err = PgStore::connect(&opts)
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(err, baton_core::StoreError::Unavailable(_)),
        "{err:?}"
    );
}

#[test]
fn options_debug_hides_the_password() {
    let opts = PgOptions::new("postgres://baton:s3cret@db:5432/baton?sslmode=require");
    let shown = format!("{opts:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("db:5432"), "{shown}");
    let param = PgOptions::new("postgres://db/baton?password=hunter2&sslmode=disable");
    assert!(!format!("{param:?}").contains("hunter2"));
}

/// The store's futures can be spawned (compile-time check).
#[allow(dead_code)]
fn futures_are_send(store: PgStore, lite: baton_store::SqliteStore) {
    fn send<T: Send>(_: T) {}
    send(baton_store::migrate::postgres(""));
    send(baton_store::migrate::sqlite(""));
    send(async move { lite.migrate().await });
    send(async move { PgStore::connect(&PgOptions::new("")).await });
    drop(store);
}

/// Reads cut short at any point (a client that drops its stream mid-replay) under a load of
/// writes: no cancellation may hand a pooled connection back inside a transaction, where the
/// next write would find itself in a read-only one.
#[tokio::test]
async fn reads_cancelled_at_any_point_leave_no_connection_in_a_transaction() {
    use baton_core::model::Tenant;
    use baton_core::ports::{AppendRequest, Clock, EventLog, RunReader, SystemClock, TenantStore};
    use baton_events::{AgentId, EventMeta, NewEvent, RunCreated, RunEvent, RunId};
    use std::hash::BuildHasher;
    use std::sync::Arc;

    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    let mut opts = PgOptions::new(db.url());
    // Few connections, so each is handed from a cancelled read to a write again and again.
    opts.app_pool_size = 3;
    let store = Arc::new(PgStore::connect(&opts).await.expect("connect"));
    let tenant = Tenant {
        id: TenantId::new(),
        name: "t".into(),
        created_at: SystemClock.now(),
    };
    store.create_tenant(&tenant).await.expect("tenant");
    let create = |run: RunId| {
        let created = RunEvent::RunCreated(RunCreated {
            agent_id: AgentId::new(),
            agent_version: 1,
            title: None,
            metadata: Default::default(),
            tool_versions: Default::default(),
            parent: None,
        });
        AppendRequest::new(
            run,
            0,
            vec![NewEvent::new(created, EventMeta::new(tenant.id))],
            SystemClock.now(),
        )
    };
    let first = RunId::new();
    store.append(tenant.id, create(first)).await.expect("a run");

    let readers: Vec<_> = (0..6)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let random = std::collections::hash_map::RandomState::new();
                for n in 0..400u64 {
                    // Cut after 0 to 400 µs: before, during and after the BEGIN and the read.
                    let cut = Duration::from_micros(random.hash_one((i, n)) % 400);
                    let read = store.read_stream(tenant.id, first, 0, 100);
                    let _ = tokio::time::timeout(cut, read).await;
                }
            })
        })
        .collect();
    let mut failed = Vec::new();
    for _ in 0..150 {
        if let Err(e) = store.append(tenant.id, create(RunId::new())).await {
            failed.push(e.to_string());
        }
    }
    for r in readers {
        r.await.expect("reader");
    }
    assert!(
        failed.is_empty(),
        "{} of 150 writes failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    store.close().await;
    db.drop_db().await.expect("drop");
}

/// With the server down (its connections refused), operations fail at once rather than
/// after the pool's acquire timeout, and work again by themselves once it is back.
#[tokio::test]
async fn a_server_that_refuses_connections_fails_operations_at_once_and_recovers() {
    use baton_core::ports::RunReader;
    use baton_testkit::TcpProxy;

    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    let real: url::Url = db.url().parse().expect("url");
    let server = tokio::net::lookup_host((
        real.host_str().unwrap_or("127.0.0.1"),
        real.port().unwrap_or(5432),
    ))
    .await
    .expect("resolve")
    .next()
    .expect("an address");
    let mut proxy = TcpProxy::to(server).await.expect("proxy");
    let mut through = real.clone();
    through.set_host(Some("127.0.0.1")).expect("host");
    through.set_port(Some(proxy.addr().port())).expect("port");
    let mut opts = PgOptions::new(through.as_str());
    opts.acquire_timeout = Duration::from_secs(5);
    let store = PgStore::connect(&opts).await.expect("connect");
    let tenant = TenantId::new();
    store.ping().await.expect("up");
    store
        .get_run(tenant, baton_events::RunId::new())
        .await
        .expect("a read");

    proxy.stop();
    for attempt in 0..3 {
        let started = std::time::Instant::now();
        let read = store.get_run(tenant, baton_events::RunId::new()).await;
        let took = started.elapsed();
        assert!(
            matches!(read, Err(baton_core::StoreError::Unavailable(_))),
            "{read:?}"
        );
        assert!(
            took < Duration::from_millis(1000),
            "attempt {attempt} took {took:?}, against an acquire timeout of 5 s"
        );
    }

    proxy.start().await.expect("back");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.ping().await.is_err() {
        assert!(std::time::Instant::now() < deadline, "never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store
        .get_run(tenant, baton_events::RunId::new())
        .await
        .expect("a read again");
    store.close().await;
    db.drop_db().await.expect("drop");
}
