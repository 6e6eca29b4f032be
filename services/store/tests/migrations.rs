//! Migrations: racing migrators apply each migration exactly once, and a database that a
//! newer (or edited) binary migrated is refused with an error naming what is wrong.

use baton_core::model::Tenant;
use baton_core::ports::{AppendOutcome, AppendRequest, TenantStore};
use baton_core::ports::{Clock, EventLog, RunReader, SystemClock};
use baton_events::{AgentId, EventMeta, NewEvent, RunCreated, RunEvent, RunId, TenantId};
use baton_store::migrate::{self, MigrateError};
use baton_store::{PG_MIGRATOR, PgOptions, PgStore, SQLITE_MIGRATOR, SqliteStore};
use baton_testkit::{TestDatabase, TestSqlite};
use std::time::Duration;

const UNKNOWN: [i64; 2] = [20991231000000, 20991231000001];

/// A pool on the test database as the test server's superuser: the bookkeeping table is
/// none of the store's business (its role may not even read it).
async fn admin(url: &str) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("admin pool")
}

/// The schema works: a tenant and a run can be written and read back.
async fn smoke<S: RunReader + EventLog + TenantStore>(s: &S) {
    let tenant = Tenant {
        id: TenantId::new(),
        name: "smoke".into(),
        created_at: SystemClock.now(),
    };
    s.create_tenant(&tenant).await.expect("tenant");
    let run = RunId::new();
    let created = RunEvent::RunCreated(RunCreated {
        agent_id: AgentId::new(),
        agent_version: 1,
        title: None,
        metadata: Default::default(),
        tool_versions: Default::default(),
        parent: None,
    });
    let req = AppendRequest {
        run,
        expected_version: 0,
        events: vec![NewEvent::new(created, EventMeta::new(tenant.id))],
        at: SystemClock.now(),
        idempotency: None,
        fence: None,
        release: None,
        blobs: Vec::new(),
        base: None,
    };
    let outcome = s.append(tenant.id, req).await.expect("append");
    assert!(matches!(outcome, AppendOutcome::Appended { .. }));
    assert_eq!(
        s.read_stream(tenant.id, run, 0, 10)
            .await
            .expect("read")
            .len(),
        1
    );
}

fn known_versions(m: &sqlx::migrate::Migrator) -> Vec<i64> {
    m.iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| m.version)
        .collect()
}

fn assert_names_unknown(err: &MigrateError) {
    assert!(
        matches!(err, MigrateError::UnknownMigrations { versions } if versions == &UNKNOWN),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("20991231000000, 20991231000001") && text.contains("upgrade baton"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_racing_postgres_migrators_apply_each_migration_once() {
    let db = TestDatabase::postgres().await.expect("database");
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let url = db.url().to_string();
            tokio::spawn(async move { migrate::postgres(&url).await })
        })
        .collect();
    for racer in racers {
        racer.await.expect("task").expect("migrate");
    }
    let store = PgStore::connect(&PgOptions::new(db.url()))
        .await
        .expect("connect");
    let admin = admin(db.url()).await;
    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&admin)
            .await
            .expect("applied");
    let expected: Vec<(i64, bool)> = known_versions(&PG_MIGRATOR)
        .into_iter()
        .map(|v| (v, true))
        .collect();
    assert_eq!(applied, expected);
    smoke(&store).await;
    store.close().await;
    admin.close().await;
    db.drop_db().await.expect("drop");
}

#[tokio::test]
async fn a_postgres_database_with_unknown_migrations_is_refused_naming_them() {
    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    let admin = admin(db.url()).await;
    for version in UNKNOWN {
        sqlx::query(
            "INSERT INTO _sqlx_migrations \
             (version, description, success, checksum, execution_time) \
             VALUES ($1, 'from the future', TRUE, '\\x00', 1)",
        )
        .bind(version)
        .execute(&admin)
        .await
        .expect("insert");
    }
    // Refused every time: a refusal leaves no advisory lock behind to block the next try.
    for _ in 0..2 {
        let attempt = tokio::time::timeout(Duration::from_secs(20), migrate::postgres(db.url()));
        let err = attempt.await.expect("not blocked").expect_err("refused");
        assert_names_unknown(&err);
    }
    admin.close().await;
    db.drop_db().await.expect("drop");
}

#[tokio::test]
async fn an_edited_postgres_migration_is_refused() {
    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    let admin = admin(db.url()).await;
    sqlx::query("UPDATE _sqlx_migrations SET checksum = '\\x00' WHERE version = 1")
        .execute(&admin)
        .await
        .expect("update");
    let err = migrate::postgres(db.url()).await.expect_err("refused");
    assert!(
        matches!(err, MigrateError::ChecksumMismatch { version: 1 }),
        "{err:?}"
    );
    admin.close().await;
    db.drop_db().await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_racing_sqlite_migrators_apply_each_migration_once() {
    let file = TestSqlite::new().expect("file");
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let url = file.url();
            tokio::spawn(async move { migrate::sqlite(&url).await })
        })
        .collect();
    for racer in racers {
        racer.await.expect("task").expect("migrate");
    }
    let store = SqliteStore::open(file.path().to_str().expect("utf-8 path"), 2)
        .await
        .expect("open");
    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(store.pool())
            .await
            .expect("applied");
    let expected: Vec<(i64, bool)> = known_versions(&SQLITE_MIGRATOR)
        .into_iter()
        .map(|v| (v, true))
        .collect();
    assert_eq!(applied, expected);
    smoke(&store).await;
}

#[tokio::test]
async fn a_sqlite_database_with_unknown_migrations_is_refused_naming_them() {
    let file = TestSqlite::new().expect("file");
    migrate::sqlite(&file.url()).await.expect("migrate");
    let store = SqliteStore::open(&file.url(), 2).await.expect("open");
    for version in UNKNOWN {
        sqlx::query(
            "INSERT INTO _sqlx_migrations \
             (version, description, success, checksum, execution_time) \
             VALUES ($1, 'from the future', TRUE, X'00', 1)",
        )
        .bind(version)
        .execute(store.pool())
        .await
        .expect("insert");
    }
    assert_names_unknown(&migrate::sqlite(&file.url()).await.expect_err("refused"));
    assert_names_unknown(&store.migrate().await.expect_err("refused"));
}

#[tokio::test]
async fn an_edited_sqlite_migration_is_refused() {
    let file = TestSqlite::new().expect("file");
    migrate::sqlite(&file.url()).await.expect("migrate");
    let store = SqliteStore::open(&file.url(), 2).await.expect("open");
    sqlx::query("UPDATE _sqlx_migrations SET checksum = X'00' WHERE version = 1")
        .execute(store.pool())
        .await
        .expect("update");
    let err = migrate::sqlite(&file.url()).await.expect_err("refused");
    assert!(
        matches!(err, MigrateError::ChecksumMismatch { version: 1 }),
        "{err:?}"
    );
}

#[tokio::test]
async fn sqlite_creates_missing_parent_directories() {
    let file = TestSqlite::new().expect("dir");
    let nested = file.dir().join("a/b/baton.db");
    let target = nested.to_str().expect("utf-8 path");
    migrate::sqlite(target).await.expect("migrate");
    let store = SqliteStore::open(target, 2).await.expect("open");
    smoke(&store).await;
    assert!(nested.exists());
}

// The read-only checks (`serve` with `database.migrate_on_start = false`).

fn assert_pending_all(err: &MigrateError, m: &sqlx::migrate::Migrator) {
    let all = known_versions(m);
    assert!(
        matches!(err, MigrateError::Pending { versions } if versions == &all),
        "{err:?}"
    );
    let text = err.to_string();
    let named = all
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    assert!(
        text.contains(&named) && text.contains("baton migrate"),
        "{text}"
    );
}

async fn pg_has_migrations_table(url: &str) -> bool {
    let admin = admin(url).await;
    let (exists,): (bool,) = sqlx::query_as("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&admin)
        .await
        .expect("query");
    admin.close().await;
    exists
}

#[tokio::test]
async fn the_postgres_check_passes_on_a_fully_migrated_database() {
    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    migrate::check_postgres(db.url()).await.expect("check");
    // No session left behind holding anything: migrating again still works.
    migrate::postgres(db.url()).await.expect("migrate again");
    db.drop_db().await.expect("drop");
}

#[tokio::test]
async fn the_postgres_check_reports_every_migration_pending_on_a_fresh_database_writing_nothing() {
    let db = TestDatabase::postgres().await.expect("database");
    let err = migrate::check_postgres(db.url())
        .await
        .expect_err("pending");
    assert_pending_all(&err, &PG_MIGRATOR);
    assert!(
        !pg_has_migrations_table(db.url()).await,
        "the check created the bookkeeping table"
    );
    // An empty bookkeeping table (e.g. a migrator that died before its first migration)
    // is all-pending too.
    let admin = admin(db.url()).await;
    sqlx::query(
        "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
         installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, \
         checksum BYTEA NOT NULL, execution_time BIGINT NOT NULL)",
    )
    .execute(&admin)
    .await
    .expect("create");
    admin.close().await;
    let err = migrate::check_postgres(db.url())
        .await
        .expect_err("pending");
    assert_pending_all(&err, &PG_MIGRATOR);
    db.drop_db().await.expect("drop");
}

#[tokio::test]
async fn the_postgres_check_refuses_unknown_edited_and_failed_migrations() {
    let db = TestDatabase::postgres().await.expect("database");
    migrate::postgres(db.url()).await.expect("migrate");
    let admin = admin(db.url()).await;
    let pool = &admin;
    for version in UNKNOWN {
        sqlx::query(
            "INSERT INTO _sqlx_migrations \
             (version, description, success, checksum, execution_time) \
             VALUES ($1, 'from the future', TRUE, '\\x00', 1)",
        )
        .bind(version)
        .execute(pool)
        .await
        .expect("insert");
    }
    assert_names_unknown(
        &migrate::check_postgres(db.url())
            .await
            .expect_err("unknown"),
    );
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version > 20000000000000")
        .execute(pool)
        .await
        .expect("delete");
    migrate::check_postgres(db.url())
        .await
        .expect("known again");

    sqlx::query("UPDATE _sqlx_migrations SET checksum = '\\x00' WHERE version = 1")
        .execute(pool)
        .await
        .expect("edit");
    let err = migrate::check_postgres(db.url()).await.expect_err("edited");
    assert!(
        matches!(err, MigrateError::ChecksumMismatch { version: 1 }),
        "{err:?}"
    );
    sqlx::query("UPDATE _sqlx_migrations SET success = FALSE WHERE version = 1")
        .execute(pool)
        .await
        .expect("fail");
    let err = migrate::check_postgres(db.url()).await.expect_err("dirty");
    assert!(matches!(err, MigrateError::Dirty { version: 1 }), "{err:?}");
    admin.close().await;
    db.drop_db().await.expect("drop");
}

#[tokio::test]
async fn the_sqlite_check_passes_on_a_fully_migrated_database() {
    let file = TestSqlite::new().expect("file");
    migrate::sqlite(&file.url()).await.expect("migrate");
    migrate::check_sqlite(&file.url()).await.expect("check url");
    migrate::check_sqlite(file.path().to_str().expect("utf-8 path"))
        .await
        .expect("check path");
}

#[tokio::test]
async fn the_sqlite_check_reports_every_migration_pending_on_a_fresh_database_writing_nothing() {
    let file = TestSqlite::new().expect("file");
    // No file at all: pending, and the check does not create it (even given `mode=rwc`).
    let err = migrate::check_sqlite(&file.url())
        .await
        .expect_err("pending");
    assert_pending_all(&err, &SQLITE_MIGRATOR);
    assert!(!file.path().exists(), "the check created the database file");
    // An existing database without the bookkeeping table: pending, and still no table.
    let store = SqliteStore::open(&file.url(), 2).await.expect("open");
    let err = migrate::check_sqlite(&file.url())
        .await
        .expect_err("pending");
    assert_pending_all(&err, &SQLITE_MIGRATOR);
    let (tables,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_one(store.pool())
    .await
    .expect("query");
    assert_eq!(tables, 0, "the check created the bookkeeping table");
}

#[tokio::test]
async fn the_sqlite_check_refuses_unknown_edited_and_failed_migrations() {
    let file = TestSqlite::new().expect("file");
    migrate::sqlite(&file.url()).await.expect("migrate");
    let store = SqliteStore::open(&file.url(), 2).await.expect("open");
    let pool = store.pool();
    for version in UNKNOWN {
        sqlx::query(
            "INSERT INTO _sqlx_migrations \
             (version, description, success, checksum, execution_time) \
             VALUES ($1, 'from the future', TRUE, X'00', 1)",
        )
        .bind(version)
        .execute(pool)
        .await
        .expect("insert");
    }
    assert_names_unknown(
        &migrate::check_sqlite(&file.url())
            .await
            .expect_err("unknown"),
    );
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version > 20000000000000")
        .execute(pool)
        .await
        .expect("delete");
    migrate::check_sqlite(&file.url())
        .await
        .expect("known again");

    sqlx::query("UPDATE _sqlx_migrations SET checksum = X'00' WHERE version = 1")
        .execute(pool)
        .await
        .expect("edit");
    let err = migrate::check_sqlite(&file.url())
        .await
        .expect_err("edited");
    assert!(
        matches!(err, MigrateError::ChecksumMismatch { version: 1 }),
        "{err:?}"
    );
    sqlx::query("UPDATE _sqlx_migrations SET success = FALSE WHERE version = 1")
        .execute(pool)
        .await
        .expect("fail");
    let err = migrate::check_sqlite(&file.url()).await.expect_err("dirty");
    assert!(matches!(err, MigrateError::Dirty { version: 1 }), "{err:?}");
}
