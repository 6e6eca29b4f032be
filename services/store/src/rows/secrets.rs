//! The rows of `secrets`: a secret's metadata, and with it the sealed value.

use baton_core::StoreError;
use baton_core::model::SecretMeta;
use baton_core::ports::SealedSecret;
use chrono::{DateTime, Utc};

/// Expands to the metadata columns of `secrets`, in the order [`SecretMetaRow`] reads them.
macro_rules! secret_meta_columns {
    () => {
        "name, key_id, created_at, updated_at"
    };
}
pub(crate) use secret_meta_columns;

/// A secret's metadata: every column of `secrets` but its tenant and ciphertext.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SecretMetaRow {
    pub name: String,
    pub key_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<SecretMetaRow> for SecretMeta {
    type Error = StoreError;

    fn try_from(r: SecretMetaRow) -> Result<Self, StoreError> {
        Ok(SecretMeta {
            name: r.name,
            key_id: r.key_id,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// A row of `secrets` without its tenant: the metadata and the sealed value.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SecretRow {
    #[sqlx(flatten)]
    pub meta: SecretMetaRow,
    pub ciphertext: Vec<u8>,
}

impl TryFrom<SecretRow> for SealedSecret {
    type Error = StoreError;

    fn try_from(r: SecretRow) -> Result<Self, StoreError> {
        Ok(SealedSecret {
            meta: r.meta.try_into()?,
            ciphertext: r.ciphertext,
        })
    }
}
