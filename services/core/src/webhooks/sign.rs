//! Standard Webhooks signatures: an endpoint's secret is 32 random bytes, shown once as
//! `whsec_<base64>`; an attempt carries `webhook-id`, `webhook-timestamp` (Unix seconds)
//! and `webhook-signature`, the base64 HMAC-SHA256 of `<id>.<timestamp>.<body>` under
//! each secret in force, as `v1,<signature>` entries separated by spaces, so receivers
//! verify with any Standard Webhooks library and keep working through a rotation.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// How a secret is shown.
pub const SECRET_PREFIX: &str = "whsec_";
/// Bytes of a new secret.
const SECRET_BYTES: usize = 32;

/// A new secret.
pub fn new_secret() -> Vec<u8> {
    use rand::RngCore as _;
    let mut secret = vec![0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut secret);
    secret
}

/// A secret as shown to the tenant once: `whsec_<base64>`.
pub fn show(secret: &[u8]) -> String {
    format!("{SECRET_PREFIX}{}", STANDARD.encode(secret))
}

/// One `v1,<base64>` signature of a message under `secret`.
pub fn signature(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The `webhook-signature` header: a signature under each of `secrets`.
pub fn header(secrets: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|s| signature(s, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_binds_the_id_the_time_and_the_body_under_each_secret() {
        let (a, b) = (new_secret(), new_secret());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        let sig = signature(&a, "msg_1", 1_700_000_000, b"{}");
        assert!(sig.starts_with("v1,"), "{sig}");
        assert_eq!(STANDARD.decode(&sig[3..]).map(|s| s.len()).ok(), Some(32));
        assert_eq!(sig, signature(&a, "msg_1", 1_700_000_000, b"{}"));
        for other in [
            signature(&b, "msg_1", 1_700_000_000, b"{}"),
            signature(&a, "msg_2", 1_700_000_000, b"{}"),
            signature(&a, "msg_1", 1_700_000_001, b"{}"),
            signature(&a, "msg_1", 1_700_000_000, b"{ }"),
        ] {
            assert_ne!(sig, other);
        }
        let both = header(&[a.clone(), b.clone()], "msg_1", 1_700_000_000, b"{}");
        assert_eq!(
            both,
            format!("{sig} {}", signature(&b, "msg_1", 1_700_000_000, b"{}"))
        );
        assert!(show(&a).starts_with("whsec_"));
        assert_eq!(STANDARD.decode(&show(&a)[6..]).ok(), Some(a));
    }
}
