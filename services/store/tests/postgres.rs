//! Postgres-only behaviour of `PgStore`: connection settings and the two pools.

use baton_store::{PgOptions, PgStore};
use baton_testkit::TestDatabase;
use std::time::Duration;

#[tokio::test]
async fn both_pools_carry_the_statement_timeout() {
    let db = TestDatabase::postgres().await.expect("database");
    let mut opts = PgOptions::new(db.url());
    opts.statement_timeout = Duration::from_millis(1500);
    opts.app_pool_size = 2;
    opts.control_pool_size = 1;
    let store = PgStore::connect(&opts).await.expect("connect");
    for pool in [store.app_pool(), store.control_pool()] {
        let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(pool)
            .await
            .expect("show");
        assert_eq!(timeout, "1500ms");
    }
    let slow = sqlx::query("SELECT pg_sleep(5)")
        .execute(store.app_pool())
        .await;
    assert!(
        slow.is_err(),
        "the statement timeout must cancel a slow query"
    );
    assert_eq!(store.control_pool().options().get_max_connections(), 1);
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
