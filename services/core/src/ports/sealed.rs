//! Every sealed record (secrets and checkpoints) by the encryption key that sealed it:
//! what re-encrypting under a new key reads and rewrites.

use crate::crypto::{Aad, Sealed};
use crate::error::StoreError;
use async_trait::async_trait;
use baton_events::{CheckpointId, RunId, TenantId};

/// Where a sealed record lives: what addresses its row and, with the tenant, makes its
/// associated data ([`Aad`]). Orders as the rows are paged (by kind, then
/// by primary key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SealedRef {
    /// A tenant secret, by name.
    Secret { tenant: TenantId, name: String },
    /// A run checkpoint.
    Checkpoint {
        tenant: TenantId,
        run: RunId,
        id: CheckpointId,
    },
}

impl SealedRef {
    pub fn tenant(&self) -> TenantId {
        match self {
            SealedRef::Secret { tenant, .. } | SealedRef::Checkpoint { tenant, .. } => *tenant,
        }
    }

    /// The associated data the record is sealed with.
    pub fn aad(&self) -> Aad {
        match self {
            SealedRef::Secret { tenant, name } => Aad::secret(*tenant, name),
            SealedRef::Checkpoint { tenant, run, id } => Aad::checkpoint(*tenant, *run, *id),
        }
    }
}

/// Names the record without its tenant (`secret NAME`, `checkpoint RUN/ID`): ids only,
/// never contents.
impl std::fmt::Display for SealedRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SealedRef::Secret { name, .. } => write!(f, "secret {name}"),
            SealedRef::Checkpoint { run, id, .. } => write!(f, "checkpoint {run}/{id}"),
        }
    }
}

/// A sealed record as key rotation reads it: where it is, the key id its row records and
/// the envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedRecord {
    pub at: SealedRef,
    pub key_id: String,
    pub ciphertext: Vec<u8>,
}

/// A record re-sealed under another key: written only while the row still holds exactly
/// what was read (`read.key_id` and `read.ciphertext`).
#[derive(Debug, Clone)]
pub struct SealedSwap {
    pub read: SealedRecord,
    pub sealed: Sealed,
}

/// How many records one key id seals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUsage {
    pub key_id: String,
    pub secrets: u64,
    pub checkpoints: u64,
}

/// The sealed records (secrets and checkpoints) by the key that sealed them, for key
/// rotation. `tenant` scopes a call to one tenant's records; `None` means every tenant's,
/// which only the operator's command line asks for.
#[async_trait]
pub trait SealedStore: Send + Sync {
    /// Per key id, how many secrets and checkpoints its rows record, in key id order.
    async fn key_usage(&self, tenant: Option<TenantId>) -> Result<Vec<KeyUsage>, StoreError>;

    /// Secrets whose key id is not `key_id`, in (tenant, name) order after `after`, at
    /// most `limit`.
    async fn secrets_not_under(
        &self,
        tenant: Option<TenantId>,
        key_id: &str,
        after: Option<(TenantId, &str)>,
        limit: u32,
    ) -> Result<Vec<SealedRecord>, StoreError>;

    /// Checkpoints whose key id is not `key_id`, in (run, id) order after `after`, at
    /// most `limit`.
    async fn checkpoints_not_under(
        &self,
        tenant: Option<TenantId>,
        key_id: &str,
        after: Option<(RunId, CheckpointId)>,
        limit: u32,
    ) -> Result<Vec<SealedRecord>, StoreError>;

    /// Writes each swap's envelope and key id, in one transaction, to the rows that still
    /// hold what was read (a record rewritten or deleted since is left alone). Returns,
    /// per swap, whether it was written.
    async fn swap_sealed(&self, swaps: &[SealedSwap]) -> Result<Vec<bool>, StoreError>;
}
