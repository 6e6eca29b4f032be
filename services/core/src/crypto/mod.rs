//! Baton's cryptography, in one place: the [`Keyring`] of encryption keys that seals
//! secrets and checkpoints at rest ([`keyring`]), password hashing ([`passwords`]) and the
//! bearer tokens of API keys and login sessions ([`tokens`]).

pub mod keyring;
pub mod passwords;
pub mod tokens;

pub use keyring::*;
pub use passwords::{PasswordParams, Passwords};
