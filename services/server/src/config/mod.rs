//! Configuration of the `baton` binary: layering (defaults < `baton.toml` < `BATON_*`
//! variables < CLI flags), validation into a typed `Config`, `config explain`, and
//! `config reference`, the keys table of docs/configuration.md generated from the schema
//! types and their doc comments. This is the only module that reads the process environment
//! (in `Sources::from_process`).
//!
//! ```text
//! let loaded = config::load(Sources::from_process(args.config, args.overrides))?;
//! let config = loaded.validate()?;      // or print loaded.explain()
//! ```
//!
//! After changing a key, its default or its doc comment in `schema`, regenerate the page's
//! table from the workspace root (the deploy test `reference` fails until then):
//!
//! ```text
//! cargo run -q --bin baton -- config reference --update docs/configuration.md
//! ```

mod error;
mod explain;
mod layers;
mod reference;
mod resolve;
mod schema;
mod urls;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use secrecy::SecretString;

pub use error::ConfigError;
pub use explain::{ExplainRow, UNSET};
pub use reference::{
    MarkerError, REFERENCE_BEGIN, REFERENCE_END, REFERENCE_REGENERATE, ReferenceError,
    ReferenceRow, reference_markdown, reference_rows, splice_reference, update_reference,
};
pub use resolve::{
    Bus, ClusterConfig, Config, Crypto, GENERATED_KEY_ID, HttpConfig, LogConfig, Pools,
    SqliteLocation, Storage,
};
pub use schema::{
    AuthSection, BusSection, ClusterSection, CryptoSection, DatabaseSection, HttpSection,
    LogFormat, LogSection, RawConfig, Tier,
};
pub use urls::{REDACTED, redact_dsn, redact_nats_url};

/// Name of the config file used when `--config` is not given and it exists in the working
/// directory.
pub const DEFAULT_CONFIG_FILE: &str = "baton.toml";

/// The layer a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layer {
    /// The built-in default.
    Default,
    /// The config file at this path.
    File(PathBuf),
    /// This environment variable (`BATON_…`, or `HOSTNAME` for `replica_name`).
    Env(String),
    /// This command-line flag, e.g. `--listen`.
    Cli(&'static str),
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layer::Default => f.write_str("default"),
            Layer::File(path) => write!(f, "file {}", path.display()),
            Layer::Env(name) => write!(f, "env {name}"),
            Layer::Cli(flag) => write!(f, "cli {flag}"),
        }
    }
}

/// Configuration flags of the command line. Every field is optional: only flags the user
/// actually passed override the lower layers. Flatten it into the CLI with `#[command(flatten)]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CliOverrides {
    /// Deployment tier (overrides `tier`).
    #[arg(long, value_enum)]
    pub tier: Option<Tier>,
    /// Listen address, e.g. 127.0.0.1:8080 (overrides `http.listen`).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Data directory (overrides `data_dir`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Database URL (overrides `database.url`). Prefer BATON_DATABASE__URL: flags are visible
    /// to other local users.
    #[arg(long, value_parser = parse_secret)]
    pub database_url: Option<SecretString>,
    /// NATS URL (overrides `bus.nats_url`). Prefer BATON_BUS__NATS_URL.
    #[arg(long, value_parser = parse_secret)]
    pub nats_url: Option<SecretString>,
    /// Require authentication (overrides `auth.required`); `--auth-required` alone means true.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub auth_required: Option<bool>,
    /// Log format (overrides `log.format`).
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
}

fn parse_secret(value: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(value))
}

/// Everything the configuration is built from. Tests construct it directly, so they never
/// touch the process environment or the working directory.
#[derive(Clone, Default)]
pub struct Sources {
    /// The config file, if any. It must exist.
    pub config_path: Option<PathBuf>,
    /// Environment variables as (name, value); only `BATON_*` and `HOSTNAME` are read.
    pub env: Vec<(String, String)>,
    /// Flags from the command line.
    pub cli: CliOverrides,
}

impl Sources {
    /// Sources of a real start: `config_path` from `--config`, else `./baton.toml` if that
    /// file exists; the process's `BATON_*` and `HOSTNAME` variables; and `cli`.
    pub fn from_process(config_path: Option<PathBuf>, cli: CliOverrides) -> Sources {
        let config_path = config_path.or_else(|| {
            let default = Path::new(DEFAULT_CONFIG_FILE);
            default.is_file().then(|| default.to_path_buf())
        });
        let env = std::env::vars_os()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .filter(|(k, _)| {
                k == layers::HOSTNAME_VAR
                    || k.get(..layers::ENV_PREFIX.len())
                        .is_some_and(|p| p.eq_ignore_ascii_case(layers::ENV_PREFIX))
            })
            .collect();
        Sources {
            config_path,
            env,
            cli,
        }
    }
}

/// Values are left out: environment variables may hold secrets.
impl fmt::Debug for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Sources")
            .field("config_path", &self.config_path)
            .field("env", &names)
            .field("cli", &self.cli)
            .finish()
    }
}

/// The layered configuration before validation, with the layer of every key.
#[derive(Debug, Clone)]
pub struct Loaded {
    raw: RawConfig,
    rows: Vec<ExplainRow>,
}

impl Loaded {
    /// The layered values.
    pub fn raw(&self) -> &RawConfig {
        &self.raw
    }

    /// Checks the values and combinations and builds the typed `Config`.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        self.raw.validate()
    }

    /// Checks the database settings only (for `baton migrate`); see
    /// [`RawConfig::validate_storage`].
    pub fn validate_storage(&self) -> Result<Storage, ConfigError> {
        self.raw.validate_storage()
    }

    /// The layer that set `key` (dotted, e.g. `http.listen`); `None` for an unknown key.
    pub fn source_of(&self, key: &str) -> Option<&Layer> {
        self.rows.iter().find(|r| r.key == key).map(|r| &r.source)
    }

    /// Every effective key with its (redacted) value and layer, in schema order.
    pub fn explain_rows(&self) -> &[ExplainRow] {
        &self.rows
    }

    /// The text `baton config explain` prints: aligned columns KEY, VALUE, SOURCE.
    pub fn explain(&self) -> String {
        explain::render(&self.rows)
    }
}

/// Layers defaults, the config file, `BATON_*` variables and CLI flags. Unknown keys and values
/// of the wrong type are errors naming the key and its layer. Does not validate ranges or
/// combinations: call `Loaded::validate`.
pub fn load(sources: Sources) -> Result<Loaded, ConfigError> {
    let Sources {
        config_path,
        env,
        cli,
    } = sources;
    let mut figment = Figment::new();
    if let Some(hostname) = layers::hostname_layer(&env) {
        figment = figment.merge(hostname);
    }
    if let Some(path) = &config_path {
        figment = figment.merge(layers::file_layer(path)?);
    }
    figment = figment.merge(layers::env_layer(&env)?);
    let mut raw: RawConfig = figment.extract_lossy().map_err(layers::translate)?;

    let flags = apply_cli(&mut raw, cli);
    let rows = explain::rows(&raw, |key| match flags.iter().find(|(k, _)| *k == key) {
        Some((_, flag)) => Layer::Cli(flag),
        None => layers::layer_of_key(&figment, key),
    });
    Ok(Loaded { raw, rows })
}

/// Applies the flags that were passed; returns (key, flag) for each.
fn apply_cli(raw: &mut RawConfig, cli: CliOverrides) -> Vec<(&'static str, &'static str)> {
    let mut set = Vec::new();
    if let Some(tier) = cli.tier {
        raw.tier = tier;
        set.push(("tier", "--tier"));
    }
    if let Some(listen) = cli.listen {
        raw.http.listen = listen;
        set.push(("http.listen", "--listen"));
    }
    if let Some(dir) = cli.data_dir {
        raw.data_dir = dir;
        set.push(("data_dir", "--data-dir"));
    }
    if let Some(url) = cli.database_url {
        raw.database.url = non_empty(url);
        set.push(("database.url", "--database-url"));
    }
    if let Some(url) = cli.nats_url {
        raw.bus.nats_url = non_empty(url);
        set.push(("bus.nats_url", "--nats-url"));
    }
    if let Some(required) = cli.auth_required {
        raw.auth.required = required;
        set.push(("auth.required", "--auth-required"));
    }
    if let Some(format) = cli.log_format {
        raw.log.format = format;
        set.push(("log.format", "--log-format"));
    }
    set
}

/// An empty or blank secret counts as unset, as in the other layers.
fn non_empty(secret: SecretString) -> Option<SecretString> {
    use secrecy::ExposeSecret;
    (!secret.expose_secret().trim().is_empty()).then_some(secret)
}
