//! Password hashing with argon2id, off the async threads.

use crate::error::CoreError;
use argon2::password_hash::PasswordVerifier;
use argon2::{Algorithm, Argon2, Params, PasswordHasher, Version};
use base64::Engine;
use rand::RngCore;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// The argon2id cost parameters of new password hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PasswordParams {
    /// Memory, in KiB.
    pub memory_kib: u32,
    /// Passes over the memory.
    pub iterations: u32,
    /// Lanes.
    pub parallelism: u32,
}

impl PasswordParams {
    /// OWASP's recommendation for argon2id (Password Storage Cheat Sheet): 19 MiB,
    /// two passes, one lane.
    pub const OWASP: PasswordParams = PasswordParams {
        memory_kib: 19_456,
        iterations: 2,
        parallelism: 1,
    };

    /// The parameters as argon2 takes them; an error says what argon2 refuses.
    pub fn argon2(&self) -> Result<Params, String> {
        Params::new(self.memory_kib, self.iterations, self.parallelism, None)
            .map_err(|e| e.to_string())
    }
}

impl Default for PasswordParams {
    fn default() -> Self {
        Self::OWASP
    }
}

/// Hashes and verifies passwords with argon2id, off the async threads
/// (`spawn_blocking`), at most one per CPU at a time: each hash holds its memory cost
/// while it runs, so a burst of logins queues rather than exhausting memory.
#[derive(Clone)]
pub struct Passwords {
    params: Params,
    /// A PHC string of the same parameters that no password matches, verified instead of
    /// a real hash when the email is unknown, so both failures cost the same.
    dummy: Arc<str>,
    permits: Arc<Semaphore>,
}

impl std::fmt::Debug for Passwords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passwords")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl Passwords {
    pub fn new(params: PasswordParams) -> Result<Self, CoreError> {
        let argon2 = params
            .argon2()
            .map_err(|e| CoreError::invalid(format!("argon2 parameters: {e}")))?;
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(Passwords {
            dummy: dummy_hash(&params).into(),
            params: argon2,
            permits: Arc::new(Semaphore::new(cpus)),
        })
    }

    /// The PHC string of a new argon2id hash of `password` with a random salt.
    pub async fn hash(&self, password: &str) -> Result<String, CoreError> {
        let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, self.params.clone());
        let password = password.to_owned();
        self.blocking(move || {
            argon2
                .hash_password(password.as_bytes())
                .map(|h| h.to_string())
                .map_err(|e| CoreError::Internal(format!("hashing a password: {e}")))
        })
        .await?
    }

    /// Whether `password` matches `hash`. Without a hash (an unknown user), or with one
    /// that does not parse, the dummy hash is verified instead and the answer is false:
    /// the time spent is that of a real verification.
    pub async fn verify(&self, password: &str, hash: Option<&str>) -> Result<bool, CoreError> {
        let parsed = hash.filter(|h| argon2::PasswordHash::new(h).is_ok());
        let real = parsed.is_some();
        let hash = parsed.map_or_else(|| self.dummy.to_string(), str::to_owned);
        let password = password.to_owned();
        let matches = self
            .blocking(move || {
                // The hash names its own algorithm and parameters.
                Argon2::default()
                    .verify_password(password.as_bytes(), hash.as_str())
                    .is_ok()
            })
            .await?;
        Ok(real && matches)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, CoreError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| CoreError::Internal("the password hashing queue is closed".into()))?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| CoreError::Internal(format!("a password hashing task failed: {e}")))
    }
}

/// An argon2id PHC string of `params` with a random salt and a random output: parsing and
/// verifying it costs what a real hash of those parameters costs, and nothing matches it.
fn dummy_hash(params: &PasswordParams) -> String {
    let mut salt = [0u8; 16];
    let mut output = [0u8; 32];
    rand::rng().fill_bytes(&mut salt);
    rand::rng().fill_bytes(&mut output);
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
    format!(
        "$argon2id$v=19$m={},t={},p={}${}${}",
        params.memory_kib,
        params.iterations,
        params.parallelism,
        b64.encode(salt),
        b64.encode(output)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small parameters: these tests check behaviour, not cost.
    fn passwords() -> Passwords {
        Passwords::new(PasswordParams {
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        })
        .expect("valid parameters")
    }

    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let p = passwords();
        let hash = p.hash("correct horse battery").await.expect("hash");
        assert!(hash.starts_with("$argon2id$v=19$m=64,t=1,p=1$"), "{hash}");
        assert!(!hash.contains("correct horse"));
        assert!(
            p.verify("correct horse battery", Some(&hash))
                .await
                .expect("verify")
        );
        assert!(
            !p.verify("correct horse batterY", Some(&hash))
                .await
                .expect("verify")
        );
        assert_ne!(
            hash,
            p.hash("correct horse battery").await.expect("hash"),
            "salted"
        );
    }

    #[tokio::test]
    async fn without_a_usable_hash_the_dummy_is_verified_and_nothing_matches() {
        let p = passwords();
        assert!(argon2::PasswordHash::new(&p.dummy).is_ok(), "{}", p.dummy);
        assert!(p.dummy.starts_with("$argon2id$v=19$m=64,t=1,p=1$"));
        for hash in [None, Some("not a hash"), Some("")] {
            assert!(!p.verify("anything at all", hash).await.expect("verify"));
        }
    }

    #[test]
    fn owasp_parameters_are_the_default_and_argon2_refuses_nonsense() {
        assert_eq!(PasswordParams::default(), PasswordParams::OWASP);
        assert!(PasswordParams::OWASP.argon2().is_ok());
        let bad = PasswordParams {
            memory_kib: 4,
            iterations: 1,
            parallelism: 1,
        };
        assert!(bad.argon2().is_err());
        assert!(Passwords::new(bad).is_err());
    }
}
