//! Encryption at rest for secrets and checkpoints. This module owns three things:
//!
//! - the [`Keyring`] of AES-256-GCM keys, each under a key id, with one *active* key that
//!   seals new records while older keys stay readable until rotation re-encrypts them;
//! - the envelope format of a sealed record ([`Sealed`]), which names its key id so any
//!   ring holding that key can open it;
//! - the associated-data binding ([`Aad`]): every ciphertext is authenticated together
//!   with its purpose, tenant, run and record id, so a ciphertext copied to another row
//!   or tenant fails to decrypt.
//!
//! Envelope layout (format version 1):
//!
//! ```text
//! [1: version = 1][1: key id length n][n: key id][12: nonce][ciphertext ‖ 16-byte tag]
//! ```
//!
//! Key bytes are never formatted: the ring holds only ciphers, which have no `Debug`
//! output of their key, and errors name key ids, never keys.

use std::collections::BTreeMap;
use std::fmt;

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{Aead, Key, KeyInit, Nonce, Payload};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use baton_events::{CheckpointId, RunId, TenantId, WebhookId};
use rand::RngCore;
use thiserror::Error;

#[cfg(test)]
mod tests;

/// Length of an AES-256 key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of an AES-GCM nonce in bytes (96 bits).
pub const NONCE_LEN: usize = 12;
/// Length of an AES-GCM authentication tag in bytes.
pub const TAG_LEN: usize = 16;
/// Longest key id a ring accepts (it must fit the envelope's one-byte length).
pub const MAX_KEY_ID_LEN: usize = 64;
/// Id of the single key of [`Keyring::ephemeral`].
pub const EPHEMERAL_KEY_ID: &str = "ephemeral";

/// First byte of every envelope this build writes.
const ENVELOPE_VERSION: u8 = 1;
/// First bytes of every associated-data encoding, to keep it apart from other uses.
const AAD_DOMAIN: &[u8] = b"baton.aad";
/// Version of the associated-data encoding.
const AAD_VERSION: u8 = 1;
/// Purpose tag of a tenant secret's associated data.
const PURPOSE_SECRET: u8 = 1;
/// Purpose tag of a run checkpoint's associated data.
const PURPOSE_CHECKPOINT: u8 = 2;
/// A webhook endpoint's signing secret.
const PURPOSE_WEBHOOK_SECRET: u8 = 3;

/// What can go wrong configuring a keyring or sealing and opening records. No message
/// carries key bytes or plaintext.
#[derive(Debug, Error)]
pub enum CryptoError {
    #[error("the keyring has no keys")]
    NoKeys,
    #[error("invalid key id {0:?}: expected 1 to 64 characters from [A-Za-z0-9._-]")]
    InvalidKeyId(String),
    #[error("key id {0:?} appears more than once in the keyring")]
    DuplicateKeyId(String),
    #[error("the active key id {0:?} is not in the keyring")]
    ActiveKeyMissing(String),
    /// The configured key is not standard base64 (the decoder's detail is dropped: it
    /// could quote key characters).
    #[error("key {0:?} is not valid standard base64")]
    KeyEncoding(String),
    #[error("key {id:?} is {len} bytes long; AES-256 needs 32")]
    KeyLength { id: String, len: usize },
    #[error("the envelope is malformed or truncated")]
    Malformed,
    #[error("the envelope is sealed under key {0:?}, which is not in the keyring")]
    UnknownKey(String),
    #[error("encryption failed: the plaintext is too large")]
    Encrypt,
    /// Wrong key, wrong associated data or tampered bytes: deliberately not told apart.
    #[error("decryption failed")]
    Decrypt,
}

/// The associated data a record is sealed with: its purpose and the ids that place it.
/// Opening with associated data for any other purpose, tenant, run or record fails.
///
/// The encoding is a domain label, a format version and a purpose tag, then each field
/// length-prefixed, so no two different tuples share bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aad {
    bytes: Vec<u8>,
}

impl Aad {
    /// Binds a tenant secret to its tenant and name.
    pub fn secret(tenant: TenantId, secret_name: &str) -> Aad {
        Aad::build(
            PURPOSE_SECRET,
            &[tenant.as_uuid().as_bytes(), secret_name.as_bytes()],
        )
    }

    /// Binds a checkpoint to its tenant, run and checkpoint id.
    pub fn checkpoint(tenant: TenantId, run: RunId, checkpoint_id: CheckpointId) -> Aad {
        Aad::build(
            PURPOSE_CHECKPOINT,
            &[
                tenant.as_uuid().as_bytes(),
                run.as_uuid().as_bytes(),
                checkpoint_id.as_uuid().as_bytes(),
            ],
        )
    }

    /// Binds a webhook endpoint's signing secret to its tenant and endpoint.
    pub fn webhook_secret(tenant: TenantId, webhook: WebhookId) -> Aad {
        Aad::build(
            PURPOSE_WEBHOOK_SECRET,
            &[tenant.as_uuid().as_bytes(), webhook.as_uuid().as_bytes()],
        )
    }

    /// The encoded bytes authenticated with the ciphertext.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn build(purpose: u8, fields: &[&[u8]]) -> Aad {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(AAD_DOMAIN);
        bytes.push(AAD_VERSION);
        bytes.push(purpose);
        for field in fields {
            bytes.extend_from_slice(&(field.len() as u64).to_be_bytes());
            bytes.extend_from_slice(field);
        }
        Aad { bytes }
    }
}

/// A sealed record: the id of the key that sealed it, and the self-describing envelope
/// to store (which names that key id again, so `bytes` alone can be opened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: String,
    pub bytes: Vec<u8>,
}

/// AES-256-GCM keys by key id, and the id of the active key that seals new records.
/// `Debug` shows only the ids.
#[derive(Clone)]
pub struct Keyring {
    ciphers: BTreeMap<String, Aes256Gcm>,
    active: String,
}

impl Keyring {
    /// A ring of `keys` sealing new records with `active`. Refuses an empty ring, a bad
    /// or repeated key id, and an active id that is not in the ring.
    pub fn new(
        keys: impl IntoIterator<Item = (String, [u8; KEY_LEN])>,
        active: &str,
    ) -> Result<Keyring, CryptoError> {
        let mut ciphers = BTreeMap::new();
        for (id, key) in keys {
            validate_key_id(&id)?;
            if ciphers.contains_key(&id) {
                return Err(CryptoError::DuplicateKeyId(id));
            }
            ciphers.insert(id, cipher_for(key));
        }
        if ciphers.is_empty() {
            return Err(CryptoError::NoKeys);
        }
        if !ciphers.contains_key(active) {
            return Err(CryptoError::ActiveKeyMissing(active.to_string()));
        }
        Ok(Keyring {
            ciphers,
            active: active.to_string(),
        })
    }

    /// A ring from configuration: `(key id, standard base64 of 32 key bytes)` pairs.
    /// Errors name the key id, never the key.
    pub fn from_config(keys: &[(String, String)], active: &str) -> Result<Keyring, CryptoError> {
        let decoded = keys
            .iter()
            .map(|(id, encoded)| Ok((id.clone(), decode_key(id, encoded)?)))
            .collect::<Result<Vec<_>, CryptoError>>()?;
        Keyring::new(decoded, active)
    }

    /// A ring of one fresh random key, [`EPHEMERAL_KEY_ID`], for the embedded tier and
    /// tests. Whatever it seals is unreadable once it is dropped.
    pub fn ephemeral() -> Keyring {
        let ciphers = BTreeMap::from([(
            EPHEMERAL_KEY_ID.to_string(),
            cipher_for(Self::generate_key()),
        )]);
        Keyring {
            ciphers,
            active: EPHEMERAL_KEY_ID.to_string(),
        }
    }

    /// 32 bytes from the thread-local CSPRNG (ChaCha seeded by the operating system).
    pub fn generate_key() -> [u8; KEY_LEN] {
        let mut key = [0u8; KEY_LEN];
        rand::rng().fill_bytes(&mut key);
        key
    }

    /// The id of the key that seals new records.
    pub fn active_id(&self) -> &str {
        &self.active
    }

    /// Every key id in the ring, in sorted order.
    pub fn ids(&self) -> impl Iterator<Item = &str> + '_ {
        self.ciphers.keys().map(String::as_str)
    }

    /// Whether the ring holds a key under `id`.
    pub fn contains(&self, id: &str) -> bool {
        self.ciphers.contains_key(id)
    }

    /// Encrypts `plaintext` under the active key and a fresh random nonce, bound to `aad`.
    pub fn seal(&self, aad: &Aad, plaintext: &[u8]) -> Result<Sealed, CryptoError> {
        let cipher = self.cipher(&self.active)?;
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let payload = Payload {
            msg: plaintext,
            aad: aad.as_bytes(),
        };
        let ciphertext = cipher
            .encrypt(&Nonce::<Aes256Gcm>::from(nonce), payload)
            .map_err(|_| CryptoError::Encrypt)?;
        Ok(Sealed {
            key_id: self.active.clone(),
            bytes: encode_envelope(&self.active, &nonce, &ciphertext),
        })
    }

    /// Decrypts an envelope made by [`Keyring::seal`] with the same `aad`, under whichever
    /// key of the ring it names.
    pub fn open(&self, aad: &Aad, sealed: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let envelope = Envelope::parse(sealed)?;
        let cipher = self.cipher(envelope.key_id)?;
        let payload = Payload {
            msg: envelope.ciphertext,
            aad: aad.as_bytes(),
        };
        cipher
            .decrypt(&Nonce::<Aes256Gcm>::from(envelope.nonce), payload)
            .map_err(|_| CryptoError::Decrypt)
    }

    /// For key rotation: `Some` envelope re-sealed under the active key when `sealed` is
    /// under another key, `None` when it already is under the active key (then it is not
    /// decrypted, only its header is read).
    pub fn reseal(&self, aad: &Aad, sealed: &[u8]) -> Result<Option<Sealed>, CryptoError> {
        if key_id_of(sealed)? == self.active {
            return Ok(None);
        }
        let plaintext = self.open(aad, sealed)?;
        self.seal(aad, &plaintext).map(Some)
    }

    fn cipher(&self, id: &str) -> Result<&Aes256Gcm, CryptoError> {
        self.ciphers
            .get(id)
            .ok_or_else(|| CryptoError::UnknownKey(id.to_string()))
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("active", &self.active)
            .field("ids", &self.ids().collect::<Vec<_>>())
            .finish()
    }
}

/// The key id an envelope names, read without decrypting (key rotation uses it to find
/// the records still under an old key).
pub fn key_id_of(sealed: &[u8]) -> Result<&str, CryptoError> {
    Envelope::parse(sealed).map(|envelope| envelope.key_id)
}

/// Whether `id` is 1 to 64 characters from `[A-Za-z0-9._-]`.
fn is_valid_key_id(id: &str) -> bool {
    (1..=MAX_KEY_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Checks that `id` is a key id a ring accepts (1 to 64 characters from
/// `[A-Za-z0-9._-]`), which also makes it safe as a file name in a key directory.
pub fn validate_key_id(id: &str) -> Result<(), CryptoError> {
    if is_valid_key_id(id) {
        Ok(())
    } else {
        Err(CryptoError::InvalidKeyId(id.to_string()))
    }
}

/// Decodes one configured key, checking its id first so errors name a valid id.
fn decode_key(id: &str, encoded: &str) -> Result<[u8; KEY_LEN], CryptoError> {
    validate_key_id(id)?;
    let bytes = BASE64
        .decode(encoded.trim())
        .map_err(|_| CryptoError::KeyEncoding(id.to_string()))?;
    let len = bytes.len();
    bytes.try_into().map_err(|_| CryptoError::KeyLength {
        id: id.to_string(),
        len,
    })
}

fn cipher_for(key: [u8; KEY_LEN]) -> Aes256Gcm {
    Aes256Gcm::new(&Key::<Aes256Gcm>::from(key))
}

/// Writes the envelope; `key_id` is a validated ring id, so its length fits one byte.
fn encode_envelope(key_id: &str, nonce: &[u8; NONCE_LEN], ciphertext: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(2 + key_id.len() + NONCE_LEN + ciphertext.len());
    bytes.push(ENVELOPE_VERSION);
    bytes.push(key_id.len() as u8);
    bytes.extend_from_slice(key_id.as_bytes());
    bytes.extend_from_slice(nonce);
    bytes.extend_from_slice(ciphertext);
    bytes
}

/// A parsed envelope, borrowing from its bytes.
struct Envelope<'a> {
    key_id: &'a str,
    nonce: [u8; NONCE_LEN],
    /// Ciphertext followed by the tag.
    ciphertext: &'a [u8],
}

impl<'a> Envelope<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Envelope<'a>, CryptoError> {
        let (&version, rest) = bytes.split_first().ok_or(CryptoError::Malformed)?;
        if version != ENVELOPE_VERSION {
            return Err(CryptoError::Malformed);
        }
        let (&id_len, rest) = rest.split_first().ok_or(CryptoError::Malformed)?;
        let (id, rest) = rest
            .split_at_checked(usize::from(id_len))
            .ok_or(CryptoError::Malformed)?;
        let key_id = std::str::from_utf8(id).map_err(|_| CryptoError::Malformed)?;
        if !is_valid_key_id(key_id) {
            return Err(CryptoError::Malformed);
        }
        let (nonce, ciphertext) = rest
            .split_first_chunk::<NONCE_LEN>()
            .ok_or(CryptoError::Malformed)?;
        if ciphertext.len() < TAG_LEN {
            return Err(CryptoError::Malformed);
        }
        Ok(Envelope {
            key_id,
            nonce: *nonce,
            ciphertext,
        })
    }
}
