//! Run invariants read straight from the cluster's database, whatever the replicas
//! claim over HTTP. Two tables of `migrations/postgres/0001_initial.sql` are read:
//! `events` (the source of truth: one row per event, `version` 1-based per `stream_id`,
//! the writing replica in `meta->>'replica'`) and `runs` (the projection, whose `version`
//! is the stream's last). Plain SQL, nothing from Baton's crates.

use super::Cluster;
use anyhow::{Context, bail};
use sqlx::postgres::PgPoolOptions;

/// One stored event of a run, as far as the invariants need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    /// 1-based position in the run's stream.
    pub version: i64,
    /// The event type, e.g. `turn.started`.
    pub event_type: String,
    /// `meta.replica`: `<replica name>/<boot id>` of the writer, set on engine events;
    /// `None` on events appended for a client command.
    pub replica: Option<String>,
}

impl EventRow {
    /// The writer's configured name (`replica-<i>`), without its boot id.
    pub fn replica_name(&self) -> Option<&str> {
        let replica = self.replica.as_deref()?;
        Some(replica.split_once('/').map_or(replica, |(name, _)| name))
    }
}

/// The lease columns of one run's row (migration 0002), as the replicas left them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub run: uuid::Uuid,
    /// `<replica name>/<boot id>` of the holder; `None` when the lease is free.
    pub owner: Option<String>,
    /// The fencing token: grows with every acquisition.
    pub epoch: i64,
    /// When the lease lapses unless renewed, in Unix milliseconds of the holder's clock
    /// (claim or last renewal + TTL); `None` when free.
    pub expires_ms: Option<i64>,
}

impl Cluster {
    /// A small pool on the cluster's database, opened on first use.
    pub async fn pool(&self) -> anyhow::Result<&sqlx::PgPool> {
        let url = self.database_url().to_string();
        self.pool
            .get_or_try_init(|| async move {
                PgPoolOptions::new()
                    .max_connections(2)
                    .connect(&url)
                    .await
                    .context("cannot connect to the cluster's database")
            })
            .await
    }

    /// Every event of `run` in version order: (version, type, writing replica).
    pub async fn event_rows(&self, run: uuid::Uuid) -> anyhow::Result<Vec<EventRow>> {
        let rows: Vec<(i64, String, Option<String>)> = sqlx::query_as(
            "SELECT version, type, meta->>'replica' FROM events \
             WHERE stream_id = $1 ORDER BY version",
        )
        .bind(run)
        .fetch_all(self.pool().await?)
        .await
        .context("cannot read the run's events")?;
        Ok(rows
            .into_iter()
            .map(|(version, event_type, replica)| EventRow {
                version,
                event_type,
                replica,
            })
            .collect())
    }

    /// The lease (owner, epoch) of each of `runs` that exists, in no particular order:
    /// when a replica claims, renews or releases a lease, whether or not it has written
    /// `lease.acquired` yet.
    pub async fn leases(&self, runs: &[uuid::Uuid]) -> anyhow::Result<Vec<LeaseRow>> {
        let rows: Vec<(uuid::Uuid, Option<String>, i64, Option<i64>)> = sqlx::query_as(
            "SELECT id, lease_owner, lease_epoch, lease_expires_ms FROM runs WHERE id = ANY($1)",
        )
        .bind(runs)
        .fetch_all(self.pool().await?)
        .await
        .context("cannot read the runs' leases")?;
        Ok(rows
            .into_iter()
            .map(|(run, owner, epoch, expires_ms)| LeaseRow {
                run,
                owner,
                epoch,
                expires_ms,
            })
            .collect())
    }

    /// The stored versions of `run`'s events, in order.
    pub async fn event_versions(&self, run: uuid::Uuid) -> anyhow::Result<Vec<i64>> {
        let versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM events WHERE stream_id = $1 ORDER BY version")
                .bind(run)
                .fetch_all(self.pool().await?)
                .await
                .context("cannot read the run's event versions")?;
        Ok(versions)
    }

    /// Checks that `run`'s stored versions are exactly `1..=n` (no gap, no duplicate, at
    /// least one event) and that the `runs` projection is at version `n`; returns `n`.
    pub async fn check_run_invariants(&self, run: uuid::Uuid) -> anyhow::Result<i64> {
        let versions = self.event_versions(run).await?;
        let n = versions.len() as i64;
        if n == 0 {
            bail!("run {run} has no events");
        }
        if let Some((want, got)) = (1..=n).zip(&versions).find(|(want, got)| want != *got) {
            bail!("run {run}: expected version {want}, found {got}; versions {versions:?}");
        }
        let projected: Option<i64> = sqlx::query_scalar("SELECT version FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(self.pool().await?)
            .await
            .context("cannot read the run's projection")?;
        match projected {
            Some(v) if v == n => Ok(n),
            Some(v) => bail!("run {run}: the runs row is at version {v}, the events end at {n}"),
            None => bail!("run {run} has events but no runs row"),
        }
    }
}
