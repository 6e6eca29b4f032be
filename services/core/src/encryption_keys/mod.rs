//! Encryption keys: which keys seal a tenant's records, and re-sealing secrets and run
//! checkpoints under the keyring's active key so that older keys can leave the keyring.
//!
//! [`Resealer::reseal`] pages through the records whose row names another key (every
//! tenant's for the operator's `baton encryption-keys rotate`, one tenant's for the admin
//! endpoint), opens each under the key it names and seals it again under the active key
//! with the same associated data, and writes each batch in one transaction that replaces a
//! row only while it still holds what was read. So a crash loses at most the batch in
//! flight, running again continues with what is left, and a secret written meanwhile is
//! never overwritten with its older value. A record that opens under no key of the ring is
//! reported (where it is and its key id, never what it holds) and left as it is.
//!
//! [`EncryptionKeys`] (`admin.rs`) is the tenant admin's side: the tenant's records per
//! key, and a reseal of the tenant's records run in the background on one replica.

mod admin;
mod reseal;
#[cfg(test)]
mod tests;

pub use admin::{EncryptionKeys, ResealJob, ResealState, ResealTask, TenantKeys};
pub use reseal::*;
