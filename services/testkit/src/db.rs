//! Throwaway databases for tests: a fresh, uniquely named Postgres database per test on
//! the server named by `BATON_TEST_DATABASE_URL`, dropped afterwards, and a SQLite file
//! in a temporary directory. Knows nothing of Baton's schema: callers migrate.

use anyhow::Context;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use std::path::{Path, PathBuf};

/// The environment variable naming the Postgres server tests may create databases on.
pub const DATABASE_URL_ENV: &str = "BATON_TEST_DATABASE_URL";

/// Where tests look for Postgres when [`DATABASE_URL_ENV`] is unset.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Every database this module creates has a name starting with this.
pub const NAME_PREFIX: &str = "baton_test_";

/// The URL of the Postgres server tests use (an existing database to connect to as admin).
pub fn admin_url() -> String {
    std::env::var(DATABASE_URL_ENV).unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_string())
}

/// A fresh Postgres database, dropped (with `FORCE`, ending open sessions) by
/// [`TestDatabase::drop_db`] or, failing that, when the value is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
    admin_url: String,
    dropped: bool,
}

impl TestDatabase {
    /// Creates an empty database with a unique name on the test server.
    pub async fn postgres() -> anyhow::Result<Self> {
        let admin_url = admin_url();
        let name = format!("{NAME_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let mut url = url::Url::parse(&admin_url)
            .with_context(|| format!("{DATABASE_URL_ENV} is not a URL"))?;
        url.set_path(&format!("/{name}"));
        let mut admin = PgConnection::connect(&admin_url)
            .await
            .with_context(|| format!("cannot connect to test Postgres ({DATABASE_URL_ENV})"))?;
        // The name is ours (a prefix and a UUID), not input: safe to put in the statement.
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut admin)
            .await
            .with_context(|| format!("cannot create test database {name}"))?;
        admin.close().await.ok();
        Ok(TestDatabase {
            name,
            url: url.to_string(),
            admin_url,
            dropped: false,
        })
    }

    /// The URL of the fresh database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database now, reporting failure.
    pub async fn drop_db(mut self) -> anyhow::Result<()> {
        self.dropped = true;
        drop_database(&self.admin_url, &self.name).await
    }
}

impl Drop for TestDatabase {
    /// Best effort: drops the database from a helper thread with its own runtime, so it
    /// works inside and outside an async test.
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        self.dropped = true;
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start a runtime to drop the test database")?;
            runtime.block_on(drop_database(&admin_url, &name))
        });
        match cleanup.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("leaving test database {}: {e:#}", self.name),
            Err(_) => eprintln!("leaving test database {}: cleanup panicked", self.name),
        }
    }
}

async fn drop_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    let mut admin = PgConnection::connect(admin_url).await?;
    sqlx::query(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .with_context(|| format!("cannot drop test database {name}"))?;
    admin.close().await.ok();
    Ok(())
}

/// A SQLite database file in a temporary directory, removed with the value.
#[derive(Debug)]
pub struct TestSqlite {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl TestSqlite {
    /// A path for a new database file (the file itself is created by whoever opens it).
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("baton-test-")
            .tempdir()
            .context("cannot create a temporary directory")?;
        let path = dir.path().join("baton.db");
        Ok(TestSqlite { dir, path })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory holding the file (and its WAL files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A `sqlite:` URL for the file that creates it if missing.
    pub fn url(&self) -> String {
        format!("sqlite://{}?mode=rwc", self.path.display())
    }
}
