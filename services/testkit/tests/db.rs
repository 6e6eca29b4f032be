//! The throwaway databases really are created and really go away.

use baton_testkit::{TestDatabase, TestSqlite, db};
use sqlx::{Connection, PgConnection};

async fn exists(name: &str) -> bool {
    let mut admin = PgConnection::connect(&db::admin_url())
        .await
        .expect("admin");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(&mut admin)
        .await
        .expect("count");
    n == 1
}

#[tokio::test]
async fn a_test_database_is_fresh_and_dropped_explicitly_or_on_drop() {
    let first = TestDatabase::postgres().await.expect("create");
    let second = TestDatabase::postgres().await.expect("create");
    assert_ne!(first.url(), second.url());
    let mut conn = PgConnection::connect(first.url()).await.expect("connect");
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut conn)
        .await
        .expect("name");
    assert_eq!(name, first.name());
    let (a, b) = (first.name().to_string(), second.name().to_string());
    // An open session does not stop the drop.
    first.drop_db().await.expect("drop");
    assert!(!exists(&a).await);
    drop(second);
    assert!(!exists(&b).await);
}

#[test]
fn a_test_sqlite_file_lives_in_a_removed_directory() {
    let file = TestSqlite::new().expect("temp");
    let dir = file.dir().to_path_buf();
    assert!(file.url().starts_with("sqlite://") && file.url().ends_with("?mode=rwc"));
    assert!(file.path().starts_with(&dir));
    drop(file);
    assert!(!dir.exists());
}
