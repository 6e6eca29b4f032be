//! `ConfigError`: every way loading or validating the configuration can fail. Messages name
//! the key and the layer it came from; they never contain a secret value.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::Layer;

/// Why the configuration could not be loaded or validated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read (missing, unreadable, not UTF-8).
    #[error("cannot read config file {}: {source}", path.display())]
    ReadFile {
        /// The path as given.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid TOML.
    #[error("config file {} is not valid TOML: {message}", path.display())]
    ParseFile {
        /// The path as given.
        path: PathBuf,
        /// The parser's message (source snippets are left out: they may hold secrets).
        message: String,
    },
    /// A `BATON_*` environment variable whose name cannot be mapped to a key.
    #[error("environment variable {name}: {reason}")]
    EnvName {
        /// The variable's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A key that is not part of the schema (usually a typo).
    #[error(
        "unknown key `{key}` (from {origin}); expected one of: {expected}{}",
        unset_hint(origin)
    )]
    UnknownKey {
        /// Dotted path of the unknown key.
        key: String,
        /// Where it was set.
        origin: Layer,
        /// The keys valid at that level.
        expected: String,
    },
    /// A value of the wrong type or shape.
    #[error("invalid value for `{key}` (from {origin}): {message}")]
    InvalidValue {
        /// Dotted path of the key.
        key: String,
        /// Where it was set.
        origin: Layer,
        /// What is wrong with it.
        message: String,
    },
    /// A value that has the right type but is out of range or malformed.
    #[error("invalid {key}: {message}")]
    Invalid {
        /// Dotted path of the key.
        key: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The team tier is missing things it requires; `missing` names every one of them.
    #[error("tier team requires: {}", missing.join(", "))]
    TeamRequirements {
        /// Each missing requirement, e.g. `bus.nats_url`.
        missing: Vec<String>,
    },
    /// A key that only makes sense in the team tier was set in the embedded tier.
    #[error("{key} is {what}, but tier is embedded ({uses}); set tier = \"team\" to use {wants}")]
    TeamOnly {
        /// Dotted path of the key.
        key: &'static str,
        /// What was found, e.g. `a postgres:// DSN`.
        what: &'static str,
        /// What the embedded tier uses instead.
        uses: &'static str,
        /// What the team tier would use.
        wants: &'static str,
    },
    /// A listener reachable from other machines without authentication.
    #[error(
        "http.listen {listen} is not a loopback address and auth.required is false; \
         set auth.required = true or listen on 127.0.0.1 / ::1"
    )]
    UnauthenticatedListener {
        /// The configured address.
        listen: SocketAddr,
    },
    /// The pools together need more connections than the budget allows.
    #[error(
        "database pools need app_pool {app} + control_pool {control} + checkpoint_pool \
         {checkpoint} = {total} connections, more than database.max_connections {max}"
    )]
    PoolBudget {
        /// `database.app_pool`.
        app: u32,
        /// `database.control_pool`.
        control: u32,
        /// `database.checkpoint_pool`.
        checkpoint: u32,
        /// Their sum.
        total: u64,
        /// `database.max_connections`.
        max: u32,
    },
    /// Any other error reported by the layering library.
    #[error("configuration error: {0}")]
    Other(String),
}

impl ConfigError {
    pub(crate) fn invalid(key: &'static str, message: &str) -> ConfigError {
        ConfigError::Invalid {
            key,
            message: message.to_owned(),
        }
    }
}

/// For a key from the environment: every `BATON_*` variable is read as configuration, so
/// one meant for another program must be unset for baton.
fn unset_hint(origin: &Layer) -> String {
    match origin {
        Layer::Env(name) => format!(
            ". Every BATON_* environment variable is read as configuration: if {name} is \
             meant for something else, unset it for baton (`unset {name}`, or run \
             `env -u {name} baton ...`)"
        ),
        _ => String::new(),
    }
}
