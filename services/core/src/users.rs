//! Users and their login sessions.
//!
//! A user has an email (trimmed and lower-cased, unique) and an argon2id password hash
//! ([`Passwords`]). Logging in ([`Users::login`]) checks the password and issues a session
//! token (`bs_` and 64 hex digits, [`crate::crypto::tokens`]) that expires after the
//! configured lifetime and is revoked by logging out; like an API key, only its SHA-256 is
//! stored. A failed login answers the same for an unknown email and a wrong password, and
//! takes as long: an unknown email is checked against a dummy hash of the same parameters.
//!
//! A user acts in a tenant through a membership, with the membership's role
//! ([`crate::auth::Authenticator::principal`]); a user may belong to several tenants ([`crate::members`]).

use crate::auth::{Announcer, AuthError};
use crate::crypto::{Passwords, tokens};
use crate::error::CoreError;
use crate::model::{Session, User};
use crate::ports::{Clock, Control, UserStore};
use crate::validate;
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use uuid::Uuid;

/// Longest email, in characters (the longest a mail path allows).
pub const MAX_EMAIL_CHARS: usize = 254;
/// Shortest password a new user may have, in characters.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// Longest password, in characters: longer input is refused before any hashing.
pub const MAX_PASSWORD_CHARS: usize = 1024;

/// A login as a client sends it.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Login {
    pub email: String,
    pub password: String,
    /// Keep the session in a cookie (`__Host-baton_session`: `HttpOnly`, `Secure`,
    /// `SameSite=Strict`) instead of answering its token: what a browser page on the
    /// server's own origin asks for. Requests that
    /// change anything with the cookie must send the answer's `csrf_token` as the
    /// `Baton-CSRF` header.
    #[serde(default)]
    pub cookie: bool,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").finish_non_exhaustive()
    }
}

/// A successful login: the session token, shown this once, or (with `cookie`) the
/// anti-CSRF token of the session kept in the cookie.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LoggedIn {
    /// The bearer token (`bs_` and 64 hex digits) of the new session. Only its hash is
    /// stored: it cannot be shown again. Null when the session is kept in a cookie.
    pub token: Option<String>,
    /// With `cookie`: what to send as the `Baton-CSRF` header with every `POST`, `PUT`,
    /// `PATCH` and `DELETE` made with the cookie (also answered by `GET /v1/me`). Null
    /// for a bearer token.
    pub csrf_token: Option<String>,
    /// When the session ends, unless logged out before.
    pub expires_at: DateTime<Utc>,
    pub user: User,
}

impl std::fmt::Debug for LoggedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoggedIn")
            .field("expires_at", &self.expires_at)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// An email as stored and looked up: trimmed and lower-cased.
pub fn normalize_email(email: &str) -> String {
    email.trim().to_lowercase()
}

/// Whether a normalized email could belong to an account: what [`check_email`] accepts.
fn plausible_email(email: &str) -> bool {
    check_email(email).is_ok()
}

/// A normalized email a new user may have: one `@` between a non-empty local part and a
/// domain, no spaces or control characters, at most [`MAX_EMAIL_CHARS`] characters.
pub fn check_email(email: &str) -> Result<(), CoreError> {
    validate::non_blank("email", email, MAX_EMAIL_CHARS)?;
    let shaped = email.split_once('@').is_some_and(|(local, domain)| {
        !local.is_empty() && !domain.is_empty() && !domain.contains('@')
    }) && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    if !shaped {
        return Err(CoreError::invalid("email is not an email address"));
    }
    Ok(())
}

/// A new password: [`MIN_PASSWORD_CHARS`] to [`MAX_PASSWORD_CHARS`] characters. Any
/// characters are allowed; the message never repeats the password.
pub fn check_password(password: &str) -> Result<(), CoreError> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_CHARS {
        return Err(CoreError::invalid(format!(
            "the password must be at least {MIN_PASSWORD_CHARS} characters"
        )));
    }
    if n > MAX_PASSWORD_CHARS {
        return Err(CoreError::invalid(format!(
            "the password must be at most {MAX_PASSWORD_CHARS} characters"
        )));
    }
    Ok(())
}

/// The user, login and session use cases.
#[derive(Clone)]
pub struct Users {
    pub store: Arc<dyn UserStore>,
    pub passwords: Passwords,
    pub clock: Arc<dyn Clock>,
    /// How long a session lasts from its login.
    pub session_lifetime: TimeDelta,
    /// Tells the replicas a session ended, so the streams it opened end.
    pub announcer: Announcer,
}

impl Users {
    /// Creates a user (for `baton admin create-user`). A taken email is `AlreadyExists`.
    #[tracing::instrument(name = "users.create", skip_all)]
    pub async fn create_user(&self, email: &str, password: &str) -> Result<User, CoreError> {
        let email = normalize_email(email);
        check_email(&email)?;
        check_password(password)?;
        let hash = self.passwords.hash(password).await?;
        let user = User {
            id: Uuid::now_v7(),
            email,
            created_at: self.clock.now(),
        };
        match self.store.create_user(&user, &hash).await {
            Ok(()) => Ok(user),
            Err(crate::StoreError::Conflict { .. }) => Err(CoreError::AlreadyExists(
                "a user with this email exists already".into(),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Checks the email and password and opens a session. Every failure is
    /// [`AuthError::InvalidCredentials`]; an unknown email costs a password verification
    /// all the same.
    #[tracing::instrument(name = "users.login", skip_all)]
    pub async fn login(&self, email: &str, password: &str) -> Result<LoggedIn, AuthError> {
        let email = normalize_email(email);
        // Input no account can have fails at once: how fast says nothing about accounts.
        if !plausible_email(&email) || password.chars().count() > MAX_PASSWORD_CHARS {
            return Err(AuthError::InvalidCredentials);
        }
        let found = self
            .store
            .find_user_by_email(&email)
            .await
            .map_err(CoreError::from)?;
        let hash = found.as_ref().map(|c| c.password_hash.as_str());
        let matches = self.passwords.verify(password, hash).await?;
        let Some(found) = found.filter(|_| matches) else {
            tracing::info!("login refused");
            return Err(AuthError::InvalidCredentials);
        };
        let issued = tokens::issue_session_token();
        let now = self.clock.now();
        let session = Session {
            id: Uuid::now_v7(),
            user: found.user.id,
            created_at: now,
            expires_at: now + self.session_lifetime,
            revoked_at: None,
        };
        self.store
            .create_session(&session, &issued.hash)
            .await
            .map_err(CoreError::from)?;
        tracing::info!(user_id = %found.user.id, session_id = %session.id, "logged in");
        Ok(LoggedIn {
            token: Some(issued.token),
            csrf_token: None,
            expires_at: session.expires_at,
            user: found.user,
        })
    }

    /// Ends the session (logout). Ending it again changes nothing.
    #[tracing::instrument(name = "users.logout", skip_all)]
    pub async fn logout(&self, session: &Session) -> Result<(), CoreError> {
        self.store
            .revoke_session(session.id, self.clock.now())
            .await?;
        self.announcer
            .announce(Control::SessionEnded { id: session.id })
            .await;
        tracing::info!(user_id = %session.user, session_id = %session.id, "logged out");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_normalized_and_checked() {
        assert_eq!(normalize_email("  Ada@Example.COM "), "ada@example.com");
        for ok in ["ada@example.com", "a+b@x"] {
            assert!(check_email(ok).is_ok(), "{ok}");
        }
        let long = format!("{}@example.com", "a".repeat(MAX_EMAIL_CHARS));
        for bad in [
            "",
            "ada",
            "@example.com",
            "ada@",
            "a@b@c",
            "a b@c",
            "a\0@b",
            &long,
        ] {
            assert!(check_email(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn passwords_have_bounds_and_errors_never_repeat_them() {
        let short = "s3cret";
        let err = check_password(short).expect_err("too short").to_string();
        assert!(err.contains("at least 12") && !err.contains(short), "{err}");
        assert!(check_password(&"x".repeat(MIN_PASSWORD_CHARS)).is_ok());
        assert!(check_password(&"x".repeat(MAX_PASSWORD_CHARS + 1)).is_err());
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let login = Login {
            email: "ada@example.com".into(),
            password: "hunter2hunter2".into(),
            cookie: false,
        };
        assert!(!format!("{login:?}").contains("hunter2"));
        let token = tokens::issue_session_token().token;
        let csrf = tokens::csrf_token(&token);
        let done = LoggedIn {
            token: Some(token.clone()),
            csrf_token: Some(csrf.clone()),
            expires_at: Utc::now(),
            user: User {
                id: Uuid::now_v7(),
                email: "ada@example.com".into(),
                created_at: Utc::now(),
            },
        };
        let shown = format!("{done:?}");
        assert!(!shown.contains(&token) && !shown.contains(&csrf));
    }
}
