//! `SealedStore`: the secrets and checkpoints by the key that sealed them, for key
//! rotation, everything on the `app` pool. Pages walk a table's primary key order with a
//! keyset cursor, so records that stay under an old key (they do not open) are passed once,
//! not read again; a swap is an `UPDATE` whose condition is the key id and envelope that
//! were read, so a row rewritten since (a secret put again) keeps its newer value.
//!
//! Counting and paging are scoped to the tenant when one is given (a tenant admin's
//! re-seal) and cross-tenant only when none is (`baton encryption-keys`, over every tenant). A batch
//! of swaps is one write transaction, each swap scoped to its own record's tenant,
//! whichever way it was found.

use super::Result;
use super::reads::commit;
use crate::backend::Backend;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::store::Store;
use async_trait::async_trait;
use baton_core::ports::{KeyUsage, SealedRecord, SealedRef, SealedStore, SealedSwap};
use baton_events::{CheckpointId, RunId, TenantId};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Counts per key id, from `SELECT key_id, COUNT(*) ... GROUP BY key_id`.
type Counts = Vec<(String, i64)>;

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// One tenant's records when a tenant is named, else every tenant's.
fn scope(tenant: Option<TenantId>) -> Scope {
    tenant.map_or(Scope::CrossTenant, Scope::Tenant)
}

/// The tenant a swapped record belongs to.
fn tenant_of(at: &SealedRef) -> TenantId {
    match at {
        SealedRef::Secret { tenant, .. } | SealedRef::Checkpoint { tenant, .. } => *tenant,
    }
}

#[async_trait]
impl<B: Backend> SealedStore for Store<B> {
    #[tracing::instrument(name = "store.key_usage", skip_all)]
    async fn key_usage(&self, tenant: Option<TenantId>) -> Result<Vec<KeyUsage>> {
        let mut conn = self.pools.read(PoolKind::App, scope(tenant)).await?;
        let mut usage: BTreeMap<String, KeyUsage> = BTreeMap::new();
        for table in ["secrets", "checkpoints"] {
            let mut q = Query::new("SELECT key_id, COUNT(*) FROM ");
            // `table` is one of the two literals above, never input.
            q.push(table);
            if let Some(tenant) = tenant {
                q.push(" WHERE tenant_id = ").push_bind(tenant.as_uuid());
            }
            q.push(" GROUP BY key_id");
            let counts: Counts = q.fetch_all(&mut conn).await?;
            for (key_id, n) in counts {
                let u = usage.entry(key_id.clone()).or_insert_with(|| KeyUsage {
                    key_id,
                    secrets: 0,
                    checkpoints: 0,
                });
                if table == "secrets" {
                    u.secrets = count(n);
                } else {
                    u.checkpoints = count(n);
                }
            }
        }
        Ok(usage.into_values().collect())
    }

    #[tracing::instrument(name = "store.secrets_not_under", skip_all)]
    async fn secrets_not_under(
        &self,
        tenant: Option<TenantId>,
        key_id: &str,
        after: Option<(TenantId, &str)>,
        limit: u32,
    ) -> Result<Vec<SealedRecord>> {
        let mut q = Query::new(
            "SELECT tenant_id, name, key_id, ciphertext FROM secrets \
             WHERE key_id <> ",
        );
        q.push_bind(key_id.to_string());
        if let Some(tenant) = tenant {
            q.push(" AND tenant_id = ").push_bind(tenant.as_uuid());
        }
        if let Some((t, name)) = after {
            q.push(" AND (tenant_id, name) > (")
                .push_bind(t.as_uuid())
                .push(", ")
                .push_bind(name.to_string())
                .push(")");
        }
        q.push(" ORDER BY tenant_id, name LIMIT ")
            .push_bind(i64::from(limit));
        let mut conn = self.pools.read(PoolKind::App, scope(tenant)).await?;
        let rows: Vec<(Uuid, String, String, Vec<u8>)> = q.fetch_all(&mut conn).await?;
        Ok(rows
            .into_iter()
            .map(|(tenant, name, key_id, ciphertext)| SealedRecord {
                at: SealedRef::Secret {
                    tenant: tenant.into(),
                    name,
                },
                key_id,
                ciphertext,
            })
            .collect())
    }

    #[tracing::instrument(name = "store.checkpoints_not_under", skip_all)]
    async fn checkpoints_not_under(
        &self,
        tenant: Option<TenantId>,
        key_id: &str,
        after: Option<(RunId, CheckpointId)>,
        limit: u32,
    ) -> Result<Vec<SealedRecord>> {
        let mut q = Query::new(
            "SELECT tenant_id, run_id, id, key_id, ciphertext FROM checkpoints \
             WHERE key_id <> ",
        );
        q.push_bind(key_id.to_string());
        if let Some(tenant) = tenant {
            q.push(" AND tenant_id = ").push_bind(tenant.as_uuid());
        }
        if let Some((run, id)) = after {
            q.push(" AND (run_id, id) > (")
                .push_bind(run.as_uuid())
                .push(", ")
                .push_bind(id.as_uuid())
                .push(")");
        }
        q.push(" ORDER BY run_id, id LIMIT ")
            .push_bind(i64::from(limit));
        let mut conn = self.pools.read(PoolKind::App, scope(tenant)).await?;
        let rows: Vec<(Uuid, Uuid, Uuid, String, Vec<u8>)> = q.fetch_all(&mut conn).await?;
        Ok(rows
            .into_iter()
            .map(|(tenant, run, id, key_id, ciphertext)| SealedRecord {
                at: SealedRef::Checkpoint {
                    tenant: tenant.into(),
                    run: run.into(),
                    id: id.into(),
                },
                key_id,
                ciphertext,
            })
            .collect())
    }

    /// Each row is matched by its primary key and tenant, and by the key id and envelope
    /// that were read: the comparison is the whole envelope, so any rewrite (each seal has
    /// a fresh nonce) makes it miss.
    #[tracing::instrument(name = "store.swap_sealed", skip_all, fields(n = swaps.len()))]
    async fn swap_sealed(&self, swaps: &[SealedSwap]) -> Result<Vec<bool>> {
        let Some(first) = swaps.first() else {
            return Ok(Vec::new());
        };
        // Scoped to the first record's tenant, and to each next one's as the batch moves
        // on (a batch over every tenant may hold several).
        let mut scoped_to = tenant_of(&first.read.at);
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(scoped_to))
            .await?;
        let mut written = Vec::with_capacity(swaps.len());
        for s in swaps {
            let tenant = tenant_of(&s.read.at);
            if scoped_to != tenant {
                self.pools.rescope(&mut tx, Scope::Tenant(tenant)).await?;
                scoped_to = tenant;
            }
            let new = &s.sealed;
            let q = match &s.read.at {
                SealedRef::Secret { tenant, name } => Query::new(
                    "UPDATE secrets SET key_id = $1, ciphertext = $2 \
                     WHERE tenant_id = $3 AND name = $4 \
                     AND key_id = $5 AND ciphertext = $6",
                )
                .bind(&new.key_id)
                .bind(new.bytes.as_slice())
                .bind(tenant.as_uuid())
                .bind(name.as_str()),
                SealedRef::Checkpoint { tenant, run, id } => Query::new(
                    "UPDATE checkpoints SET key_id = $1, ciphertext = $2 \
                     WHERE tenant_id = $3 AND run_id = $4 AND id = $5 \
                     AND key_id = $6 AND ciphertext = $7",
                )
                .bind(&new.key_id)
                .bind(new.bytes.as_slice())
                .bind(tenant.as_uuid())
                .bind(run.as_uuid())
                .bind(id.as_uuid()),
            };
            let done = q
                .bind(&s.read.key_id)
                .bind(s.read.ciphertext.as_slice())
                .execute(&mut tx)
                .await?;
            written.push(done == 1);
        }
        commit(tx).await?;
        Ok(written)
    }
}
