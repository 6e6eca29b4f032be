//! URLs that may carry credentials (`database.url`, `bus.nats_url`): classifying and checking
//! them for `validate()`, and redacting them for `config explain`. Errors never echo a URL.

use secrecy::{ExposeSecret, SecretString};
use url::Url;

use super::ConfigError;

/// Replaces secrets in `config explain`.
pub const REDACTED: &str = "***";

/// What a `database.url` is, by scheme.
pub(crate) enum DatabaseUrl {
    Postgres(SecretString),
    Sqlite(String),
}

/// Classifies `database.url` by scheme. Errors never include the URL: it may hold a password.
pub(crate) fn parse_database_url(url: &SecretString) -> Result<DatabaseUrl, ConfigError> {
    let raw = url.expose_secret();
    let parsed = Url::parse(raw).map_err(|e| {
        ConfigError::invalid(
            "database.url",
            &format!("not a URL ({e}); expected postgres://, postgresql:// or sqlite:"),
        )
    })?;
    match parsed.scheme() {
        "postgres" | "postgresql" => Ok(DatabaseUrl::Postgres(url.clone())),
        "sqlite" => Ok(DatabaseUrl::Sqlite(raw.to_owned())),
        other => Err(ConfigError::invalid(
            "database.url",
            &format!(
                "unsupported scheme `{other}`; expected postgres://, postgresql:// or sqlite:"
            ),
        )),
    }
}

/// Checks each comma-separated NATS URL. Errors never include the URL.
pub(crate) fn check_nats_url(raw: &str) -> Result<(), ConfigError> {
    const EXPECTED: &str = "expected nats://, tls://, ws:// or wss:// URL(s), comma-separated";
    for (i, one) in raw.split(',').map(str::trim).enumerate() {
        let n = i + 1;
        let parsed = Url::parse(one).map_err(|e| {
            ConfigError::invalid(
                "bus.nats_url",
                &format!("URL {n} is not a URL ({e}); {EXPECTED}"),
            )
        })?;
        if !matches!(parsed.scheme(), "nats" | "tls" | "ws" | "wss") {
            return Err(ConfigError::invalid(
                "bus.nats_url",
                &format!(
                    "URL {n} has unsupported scheme `{}`; {EXPECTED}",
                    parsed.scheme()
                ),
            ));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(ConfigError::invalid(
                "bus.nats_url",
                &format!("URL {n} has no host; {EXPECTED}"),
            ));
        }
    }
    Ok(())
}

/// Redacts a database URL: the password (and password-like query parameters) become `***`;
/// scheme, user, host, port and path stay. A value that is not a URL becomes `***`.
pub fn redact_dsn(raw: &str) -> String {
    redact_url(raw, false)
}

/// Redacts NATS server URL(s) (comma-separated): passwords become `***`, and so does a user
/// without a password, which NATS treats as a token.
pub fn redact_nats_url(raw: &str) -> String {
    raw.split(',')
        .map(|one| redact_url(one.trim(), true))
        .collect::<Vec<_>>()
        .join(",")
}

fn redact_url(raw: &str, user_alone_is_token: bool) -> String {
    let Ok(mut url) = Url::parse(raw) else {
        return REDACTED.to_owned();
    };
    let mut changed = false;
    if url.password().is_some() {
        changed |= url.set_password(Some(REDACTED)).is_ok();
    } else if user_alone_is_token && !url.username().is_empty() {
        changed |= url.set_username(REDACTED).is_ok();
    }
    if url.query_pairs().any(|(k, _)| is_secret_param(&k)) {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret_param(&k) {
                    REDACTED.to_owned()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
        changed = true;
    }
    if changed {
        // `***` is percent-encoded in some components; show it plainly.
        url.as_str().replace("%2A%2A%2A", REDACTED)
    } else if has_credentials(&url) {
        REDACTED.to_owned()
    } else {
        raw.to_owned()
    }
}

/// A URL whose credentials could not be replaced (should not happen) is hidden entirely.
fn has_credentials(url: &Url) -> bool {
    url.password().is_some_and(|p| p != REDACTED)
}

fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["pass", "secret", "token", "key", "auth"]
        .iter()
        .any(|s| name.contains(s))
}
