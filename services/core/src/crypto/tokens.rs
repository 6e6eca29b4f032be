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

/// Every stream ticket (what `POST /v1/runs/{id}/stream-tickets` answers) starts with
/// this: a short-lived, single-use credential that opens one run's event stream.
pub const TICKET_PREFIX: &str = "bt_";

/// A new API key token: [`TOKEN_PREFIX`] and 64 hex digits.
pub fn issue_token() -> IssuedToken {
    issue_with(TOKEN_PREFIX)
}

/// A new session token: [`SESSION_PREFIX`] and 64 hex digits.
pub fn issue_session_token() -> IssuedToken {
    issue_with(SESSION_PREFIX)
}

/// A new stream ticket: [`TICKET_PREFIX`] and 64 hex digits.
pub fn issue_ticket() -> IssuedToken {
    issue_with(TICKET_PREFIX)
}

/// The anti-CSRF token of a session token kept in a browser's cookie: derived from the
/// token (which the page's script cannot read), so a page that can read it is one the
/// session's own origin served. The domain string keeps it apart from the stored hash.
pub fn csrf_token(session_token: &str) -> String {
    let mut digest = Sha256::new();
    digest.update(b"baton csrf\0");
    digest.update(session_token.as_bytes());
    hex::encode(digest.finalize())
}

/// Whether `presented` is the anti-CSRF token of `session_token`, compared in time that
/// does not depend on where they differ.
pub fn csrf_matches(session_token: &str, presented: &str) -> bool {
    let expected = csrf_token(session_token);
    expected.len() == presented.len()
        && expected
            .bytes()
            .zip(presented.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
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

/// [`is_well_formed`] for stream tickets.
pub fn is_well_formed_ticket(token: &str) -> bool {
    has_shape(token, TICKET_PREFIX)
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
    fn tickets_are_a_kind_of_their_own() {
        let t = issue_ticket();
        assert!(is_well_formed_ticket(&t.token));
        assert!(!is_well_formed(&t.token) && !is_well_formed_session(&t.token));
        assert!(!is_well_formed_ticket(&issue_session_token().token));
    }

    #[test]
    fn a_csrf_token_belongs_to_one_session_and_is_not_its_stored_hash() {
        let a = issue_session_token();
        let b = issue_session_token();
        let csrf = csrf_token(&a.token);
        assert!(csrf_matches(&a.token, &csrf));
        assert!(!csrf_matches(&b.token, &csrf));
        assert!(!csrf_matches(&a.token, &csrf[1..]));
        assert!(!csrf_matches(&a.token, ""));
        assert_ne!(csrf, hex::encode(&a.hash));
    }

    #[test]
    fn malformed_tokens_are_rejected_without_lookup() {
        assert!(!is_well_formed("bk_short"));
        assert!(!is_well_formed("Bearer abc"));
        assert!(!is_well_formed(&format!("bk_{}", "z".repeat(64))));
    }
}
