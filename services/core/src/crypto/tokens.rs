//! Bearer tokens (API keys and login sessions): generation and hashing. A token is shown
//! once; only its SHA-256 is stored (tokens carry 256 bits of randomness, so a fast hash is
//! enough; passwords, which do not, get argon2id in [`super::passwords`]).

use rand::RngCore;
use sha2::{Digest, Sha256};

/// Every API key token starts with this, so leaked keys are easy to scan for.
pub const TOKEN_PREFIX: &str = "bk_";

/// A freshly issued key: the token to show once, and what to store.
pub struct IssuedToken {
    pub token: String,
    /// The first characters after [`TOKEN_PREFIX`], shown in listings to tell keys apart.
    pub prefix: String,
    pub hash: Vec<u8>,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Every session token (what `POST /v1/login` answers) starts with this: distinct from
/// [`TOKEN_PREFIX`], so authentication tells the two kinds apart before any lookup.
pub const SESSION_PREFIX: &str = "bs_";

/// A new API key token: [`TOKEN_PREFIX`] and 64 hex digits.
pub fn issue_token() -> IssuedToken {
    issue_with(TOKEN_PREFIX)
}

/// A new session token: [`SESSION_PREFIX`] and 64 hex digits.
pub fn issue_session_token() -> IssuedToken {
    issue_with(SESSION_PREFIX)
}

fn issue_with(kind: &str) -> IssuedToken {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token = format!("{kind}{}", hex::encode(bytes));
    let prefix = token[kind.len()..kind.len() + 8].to_string();
    let hash = hash_token(&token);
    IssuedToken {
        token,
        prefix,
        hash,
    }
}

/// How a key's stored [`IssuedToken::prefix`] is shown: the first characters of its
/// token (`bk_` and 8 hex digits), so a listing can be matched against the start of a
/// token. 32 of the token's 256 random bits: enough to tell keys apart, useless to guess
/// the rest.
pub fn shown_prefix(prefix: &str) -> String {
    format!("{TOKEN_PREFIX}{prefix}")
}

pub fn hash_token(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Cheap shape check before any lookup: a malformed token is rejected without I/O.
pub fn is_well_formed(token: &str) -> bool {
    has_shape(token, TOKEN_PREFIX)
}

/// [`is_well_formed`] for session tokens.
pub fn is_well_formed_session(token: &str) -> bool {
    has_shape(token, SESSION_PREFIX)
}

fn has_shape(token: &str, kind: &str) -> bool {
    token
        .strip_prefix(kind)
        .is_some_and(|rest| rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_are_well_formed_unique_and_hash_stably() {
        let a = issue_token();
        let b = issue_token();
        assert!(is_well_formed(&a.token));
        assert_ne!(a.token, b.token);
        assert_eq!(hash_token(&a.token), a.hash);
        assert!(a.token[3..].starts_with(&a.prefix));
        let shown = shown_prefix(&a.prefix);
        assert!(a.token.starts_with(&shown) && shown.len() == 11, "{shown}");
        assert!(
            !format!("{a:?}").contains(&a.token),
            "Debug must not leak the token"
        );
    }

    #[test]
    fn session_tokens_are_told_apart_from_api_keys() {
        let s = issue_session_token();
        assert!(s.token.starts_with(SESSION_PREFIX));
        assert!(is_well_formed_session(&s.token));
        assert!(!is_well_formed(&s.token));
        assert!(!is_well_formed_session(&issue_token().token));
        assert_eq!(hash_token(&s.token), s.hash);
        assert!(!format!("{s:?}").contains(&s.token));
    }

    #[test]
    fn malformed_tokens_are_rejected_without_lookup() {
        assert!(!is_well_formed("bk_short"));
        assert!(!is_well_formed("Bearer abc"));
        assert!(!is_well_formed(&format!("bk_{}", "z".repeat(64))));
    }
}
