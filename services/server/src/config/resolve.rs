//! `validate()`: turns a `RawConfig` into the typed `Config` the rest of the binary uses, where
//! storage and bus are enums so that invalid tier combinations cannot be built. Enforces the
//! tier rules (team needs Postgres + NATS + auth) and the loopback rule; never falls back.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use baton_bus::{NatsAuth, NatsTls, Subjects};
use baton_core::crypto::Keyring;
use baton_core::crypto::PasswordParams;
use baton_core::egress::{EgressPolicy, HostRule};
use baton_core::retention::RetentionOptions;
use baton_core::schedules::ScheduleOptions;
use baton_core::webhooks::WebhookOptions;
use secrecy::{ExposeSecret, SecretString};

use super::ConfigError;
use super::schema::{
    AuthSection, BusSection, ClusterSection, CryptoSection, EgressSection, HttpSection, LogFormat,
    RawConfig, RetentionSection, SchedulesSection, Tier, WebhooksSection,
};
use super::urls::{DatabaseUrl, check_nats_url, parse_database_url};

impl Bus {
    /// NATS at `url` with the default subject prefix and no credentials beyond the URL's.
    pub fn nats(url: SecretString) -> Bus {
        Bus::Nats {
            url,
            subjects: Subjects::default(),
            auth: NatsAuth::None,
            tls: NatsTls::default(),
        }
    }
}

/// The validated configuration of one replica.
#[derive(Debug, Clone)]
pub struct Config {
    /// The tier this replica runs in.
    pub tier: Tier,
    /// This replica's configured name (pod name); see `replica_name`.
    pub replica_name: String,
    /// Directory for local state.
    pub data_dir: PathBuf,
    /// Listener, limits and SSE settings.
    pub http: HttpConfig,
    /// Where events and projections live.
    pub storage: Storage,
    /// How events fan out between replicas.
    pub bus: Bus,
    /// Whether API requests must authenticate.
    pub auth_required: bool,
    /// Password hashing, sessions and login limits.
    pub login: LoginConfig,
    /// Log output.
    pub log: LogConfig,
    /// Leases and adoption.
    pub cluster: ClusterConfig,
    /// Where the encryption keyring comes from.
    pub crypto: Crypto,
    /// The egress policy (without the replica's own addresses, found at start-up).
    pub egress: EgressPolicy,
    /// The retention job.
    pub retention: RetentionOptions,
    /// The schedules job.
    pub schedules: ScheduleOptions,
    /// The webhook deliverer.
    pub webhooks: WebhookOptions,
    /// The quotas of runs' workspaces.
    pub workspaces: baton_core::workspace::WorkspaceLimits,
    /// The operator's switch for commands (`workspaces.code_tools`).
    pub code_tools: bool,
    /// The operator's execution environments (`workspaces.environments`).
    pub environments: std::sync::Arc<baton_core::environments::Bases>,
}

/// Id of the key the embedded tier generates when none is configured.
pub const GENERATED_KEY_ID: &str = "local";

/// Where the encryption keyring comes from. Key bytes are secrets: `Debug` redacts them.
#[derive(Debug, Clone)]
pub enum Crypto {
    /// Configured keys: those of `crypto.keys` (already checked to decode) and the files of
    /// `crypto.keys_dir` (read at start-up); `active` seals new records.
    Keys {
        keys: Vec<(String, SecretString)>,
        dir: Option<PathBuf>,
        active: String,
    },
    /// Embedded tier without configured keys: the key [`GENERATED_KEY_ID`] in `dir`
    /// (`<data_dir>/keyring`), generated on first start and read from there afterwards,
    /// like a `crypto.keys_dir`.
    Generated { dir: PathBuf },
}

/// Password hashing, login sessions and login rate limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginConfig {
    /// argon2id parameters of new password hashes.
    pub password: PasswordParams,
    /// How long a session lasts from its login.
    pub session_lifetime: Duration,
    /// How long a stream ticket may wait for its stream.
    pub stream_ticket_lifetime: Duration,
    /// Login attempts per minute per account, per replica; 0: no limit.
    pub account_rate_limit: u32,
    /// Login attempts per minute per source address, per replica; 0: no limit.
    pub address_rate_limit: u32,
}

/// Lease timing across replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterConfig {
    pub lease_ttl: Duration,
    pub renew_every: Duration,
    pub adopt_every: Duration,
    pub adopt_batch: u32,
}

/// Listener, limits and SSE settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// Address to bind (port 0 in tests picks a free port).
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes.
    pub body_limit_bytes: usize,
    /// Events buffered per SSE subscriber.
    pub sse_buffer: usize,
    /// Interval of SSE keep-alive comments.
    pub sse_keepalive: Duration,
    /// How long an idle SSE stream waits before re-checking the database.
    pub sse_resync: Duration,
    /// Time given to in-flight work at shutdown.
    pub shutdown_grace: Duration,
    /// Largest total size of a request's headers.
    pub header_limit_bytes: usize,
    /// Host names (lower case, maybe with `:port`) answered; empty: any.
    pub allowed_hosts: Vec<String>,
    /// Web origins (`scheme://host[:port]`) allowed to call from a browser.
    pub allowed_origins: Vec<String>,
    /// Requests per second per API key, per replica; 0: no limit.
    pub key_rate_limit: u32,
    /// Requests per second per tenant, per replica; 0: no limit.
    pub tenant_rate_limit: u32,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a request may take to arrive and be answered.
    pub request_timeout: Duration,
    /// Open event streams per caller and per tenant, per replica; 0: no limit.
    pub sse_streams_per_key: u32,
    pub sse_streams_per_tenant: u32,
}

/// Connection pools of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pools {
    /// Request pool size.
    pub app: u32,
    /// Control pool size (lease renewal, adoption).
    pub control: u32,
    /// Checkpoint pool size.
    pub checkpoint: u32,
    /// Connection budget; the three pools together fit in it.
    pub max_connections: u32,
}

/// Where the SQLite database is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqliteLocation {
    /// A database file, created if missing (the default `<data_dir>/baton.db`).
    File(PathBuf),
    /// A `sqlite:` URL from `database.url`, passed to the driver as is.
    Url(String),
}

/// Storage backend, fixed by the tier.
#[derive(Debug, Clone)]
pub enum Storage {
    /// Embedded tier: one SQLite database.
    Sqlite {
        /// File or URL of the database.
        location: SqliteLocation,
        /// Pool sizes.
        pools: Pools,
        /// Wait for a free connection before failing.
        acquire_timeout: Duration,
        /// Apply pending migrations at start-up.
        migrate_on_start: bool,
    },
    /// Team tier: Postgres.
    Postgres {
        /// The DSN (secret).
        url: SecretString,
        /// Pool sizes.
        pools: Pools,
        /// Statement timeout set on every connection.
        statement_timeout: Duration,
        /// Wait for a free connection before failing.
        acquire_timeout: Duration,
        /// Apply pending migrations at start-up.
        migrate_on_start: bool,
    },
}

impl Storage {
    /// Pool sizes of either backend.
    pub fn pools(&self) -> Pools {
        match self {
            Storage::Sqlite { pools, .. } | Storage::Postgres { pools, .. } => *pools,
        }
    }

    /// Whether to apply pending migrations at start-up.
    pub fn migrate_on_start(&self) -> bool {
        match self {
            Storage::Sqlite {
                migrate_on_start, ..
            }
            | Storage::Postgres {
                migrate_on_start, ..
            } => *migrate_on_start,
        }
    }
}

/// Event bus, fixed by the tier.
#[derive(Debug, Clone)]
pub enum Bus {
    /// Embedded tier: in-process broadcast channels.
    InProcess,
    /// Team tier: NATS.
    Nats {
        /// Server URL(s), comma-separated (secret: may carry credentials).
        url: SecretString,
        /// The installation's subjects.
        subjects: Subjects,
        auth: NatsAuth,
        tls: NatsTls,
    },
}

/// Log output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Pretty or JSON lines.
    pub format: LogFormat,
    /// `EnvFilter` directives, already checked to parse.
    pub filter: String,
}

impl Config {
    /// An embedded-tier configuration for tests and demos: SQLite under `data_dir`, in-process
    /// bus, listening on 127.0.0.1 port 0, all other values at their defaults. Built by
    /// [`RawConfig::validate`] like every other configuration.
    pub fn embedded(data_dir: impl Into<PathBuf>) -> Config {
        let mut raw = RawConfig {
            tier: Tier::Embedded,
            data_dir: data_dir.into(),
            ..RawConfig::default()
        };
        raw.http.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        raw.validate()
            .expect("the defaults of the embedded tier validate (a unit test holds them to it)")
    }
}

impl RawConfig {
    /// The database settings alone, checked: all `baton migrate` needs. `serve` builds its
    /// storage here too (see [`RawConfig::validate`]).
    pub fn validate_storage(&self) -> Result<Storage, ConfigError> {
        let pools = validate_pools(self)?;
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        let db = &self.database;
        let acquire_timeout = positive_ms("database.acquire_timeout_ms", db.acquire_timeout_ms)?;
        // Checked in both tiers; only Postgres uses it.
        let statement_timeout =
            positive_ms("database.statement_timeout_ms", db.statement_timeout_ms)?;
        let database_url = db.url.as_ref().map(parse_database_url).transpose()?;
        match self.tier {
            Tier::Team => {
                let url = match database_url {
                    Some(DatabaseUrl::Postgres(url)) => url,
                    Some(DatabaseUrl::Sqlite(_)) => {
                        return Err(ConfigError::TeamRequirements {
                            missing: vec!["database.url (a postgres:// DSN, not sqlite:)".into()],
                        });
                    }
                    None => {
                        return Err(ConfigError::TeamRequirements {
                            missing: vec!["database.url (a postgres:// DSN)".into()],
                        });
                    }
                };
                Ok(Storage::Postgres {
                    url,
                    pools,
                    statement_timeout,
                    acquire_timeout,
                    migrate_on_start: db.migrate_on_start,
                })
            }
            Tier::Embedded => {
                let location = match database_url {
                    Some(DatabaseUrl::Postgres(_)) => {
                        return Err(ConfigError::TeamOnly {
                            key: "database.url",
                            what: "a postgres:// DSN",
                            uses: "SQLite",
                            wants: "Postgres",
                        });
                    }
                    Some(DatabaseUrl::Sqlite(url)) => SqliteLocation::Url(url),
                    None => SqliteLocation::File(self.data_dir.join("baton.db")),
                };
                Ok(Storage::Sqlite {
                    location,
                    pools,
                    acquire_timeout,
                    migrate_on_start: db.migrate_on_start,
                })
            }
        }
    }

    /// The log settings alone, checked.
    pub fn validate_log(&self) -> Result<LogConfig, ConfigError> {
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.filter) {
            return Err(invalid("log.filter", &format!("not a valid filter: {e}")));
        }
        Ok(LogConfig {
            format: self.log.format,
            filter: self.log.filter.clone(),
        })
    }

    /// Checks every value and combination and builds the typed `Config`.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let http = validate_http(&self.http)?;
        let cluster = validate_cluster(&self.cluster)?;
        let retention = validate_retention(&self.retention)?;
        let schedules = validate_schedules(&self.schedules)?;
        let webhooks = validate_webhooks(&self.webhooks)?;
        let workspaces = validate_workspaces(&self.workspaces)?;
        let environments = validate_environments(&self.workspaces.environments)?;
        let login = validate_login(&self.auth)?;
        validate_replica_name(&self.replica_name)?;
        let log = self.validate_log()?;
        if let Some(nats) = &self.bus.nats_url {
            check_nats_url(nats.expose_secret())?;
        }
        let crypto = configured_crypto(&self.crypto)?;
        let subjects = Subjects::new(&self.bus.subject_prefix)
            .map_err(|e| invalid("bus.subject_prefix", &e.to_string()))?;
        let (nats_auth, nats_tls) = validate_nats(&self.bus)?;
        let egress = validate_egress(&self.egress, self.tier)?;
        let storage = self.validate_storage();

        let (storage, bus, crypto) = match self.tier {
            Tier::Team => {
                // Every missing requirement is named at once, the database's among them.
                let (storage, mut missing) = match storage {
                    Ok(storage) => (Some(storage), Vec::new()),
                    Err(ConfigError::TeamRequirements { missing }) => (None, missing),
                    Err(other) => return Err(other),
                };
                if self.bus.nats_url.is_none() {
                    missing.push("bus.nats_url".to_owned());
                }
                if !self.auth.required {
                    missing.push("auth.required = true".to_owned());
                }
                if !has_keys(&self.crypto) {
                    missing.push("crypto.keys or crypto.keys_dir (an encryption key)".to_owned());
                }
                if self.crypto.active_key.is_none() {
                    missing.push("crypto.active_key".to_owned());
                }
                match (storage, &self.bus.nats_url, crypto) {
                    (Some(storage), Some(nats), Some(crypto)) if missing.is_empty() => (
                        storage,
                        Bus::Nats {
                            url: nats.clone(),
                            subjects,
                            auth: nats_auth,
                            tls: nats_tls,
                        },
                        crypto,
                    ),
                    _ => return Err(ConfigError::TeamRequirements { missing }),
                }
            }
            Tier::Embedded => {
                let storage = storage?;
                if let Some(key) = nats_setting(&self.bus) {
                    return Err(ConfigError::TeamOnly {
                        key,
                        what: "set",
                        uses: "the in-process bus",
                        wants: "NATS",
                    });
                }
                let crypto = match crypto {
                    Some(crypto) => crypto,
                    None if has_keys(&self.crypto) => {
                        return Err(invalid(
                            "crypto.active_key",
                            "is required when crypto.keys or crypto.keys_dir is set: name \
                             the key that encrypts new secrets",
                        ));
                    }
                    None if self.crypto.active_key.is_some() => {
                        return Err(invalid(
                            "crypto.active_key",
                            "is set, but no key is: set crypto.keys or crypto.keys_dir",
                        ));
                    }
                    None => Crypto::Generated {
                        dir: generated_key_dir(&self.data_dir),
                    },
                };
                (storage, Bus::InProcess, crypto)
            }
        };

        if !self.auth.required && !http.listen.ip().to_canonical().is_loopback() {
            return Err(ConfigError::UnauthenticatedListener {
                listen: http.listen,
            });
        }

        Ok(Config {
            tier: self.tier,
            replica_name: self.replica_name.clone(),
            data_dir: self.data_dir.clone(),
            http,
            storage,
            bus,
            auth_required: self.auth.required,
            login,
            log,
            cluster,
            crypto,
            egress,
            retention,
            schedules,
            webhooks,
            workspaces,
            code_tools: self.workspaces.code_tools,
            environments: std::sync::Arc::new(environments),
        })
    }
}

/// The egress policy: the operator's lists, and loopback allowed in the embedded tier
/// unless said otherwise.
fn validate_egress(e: &EgressSection, tier: Tier) -> Result<EgressPolicy, ConfigError> {
    let parse = |key: &'static str, texts: &[String]| {
        texts
            .iter()
            .map(|t| HostRule::parse(t).map_err(|msg| invalid(key, &msg)))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(EgressPolicy {
        allow_loopback: e.allow_loopback.unwrap_or(tier == Tier::Embedded),
        allow: parse("egress.allow", &e.allow)?,
        deny: parse("egress.deny", &e.deny)?,
        own_addresses: Vec::new(),
    })
}

/// The first NATS setting that is set, if any: the embedded tier has no NATS.
fn nats_setting(b: &BusSection) -> Option<&'static str> {
    [
        ("bus.nats_url", b.nats_url.is_some()),
        ("bus.nats_user", b.nats_user.is_some()),
        ("bus.nats_password", b.nats_password.is_some()),
        ("bus.nats_token", b.nats_token.is_some()),
        ("bus.nats_nkey_seed", b.nats_nkey_seed.is_some()),
        ("bus.nats_creds_file", b.nats_creds_file.is_some()),
        ("bus.nats_tls_required", b.nats_tls_required),
        ("bus.nats_tls_ca_file", b.nats_tls_ca_file.is_some()),
        ("bus.nats_tls_cert_file", b.nats_tls_cert_file.is_some()),
        ("bus.nats_tls_key_file", b.nats_tls_key_file.is_some()),
    ]
    .into_iter()
    .find_map(|(key, set)| set.then_some(key))
}

/// The NATS credentials and TLS settings: at most one way to authenticate, a user with its
/// password, a client certificate with its key.
fn validate_nats(b: &BusSection) -> Result<(NatsAuth, NatsTls), ConfigError> {
    let mut ways = Vec::new();
    if b.nats_user.is_some() || b.nats_password.is_some() {
        ways.push("bus.nats_user");
    }
    if b.nats_token.is_some() {
        ways.push("bus.nats_token");
    }
    if b.nats_nkey_seed.is_some() {
        ways.push("bus.nats_nkey_seed");
    }
    if b.nats_creds_file.is_some() {
        ways.push("bus.nats_creds_file");
    }
    if let [first, second, ..] = ways.as_slice() {
        return Err(invalid(
            second,
            &format!("is set together with {first}: choose one way to authenticate to NATS"),
        ));
    }
    let auth = match (&b.nats_user, &b.nats_password) {
        (Some(user), Some(password)) => NatsAuth::UserPassword {
            user: user.clone(),
            password: password.clone(),
        },
        (Some(_), None) => {
            return Err(invalid(
                "bus.nats_password",
                "is required with bus.nats_user",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "bus.nats_user",
                "is required with bus.nats_password",
            ));
        }
        (None, None) => match (&b.nats_token, &b.nats_nkey_seed, &b.nats_creds_file) {
            (Some(token), _, _) => NatsAuth::Token(token.clone()),
            (_, Some(seed), _) => NatsAuth::NKey(seed.clone()),
            (_, _, Some(path)) => NatsAuth::CredsFile(path.clone()),
            _ => NatsAuth::None,
        },
    };
    let client_cert = match (&b.nats_tls_cert_file, &b.nats_tls_key_file) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (None, None) => None,
        (Some(_), None) => {
            return Err(invalid(
                "bus.nats_tls_key_file",
                "is required with bus.nats_tls_cert_file",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "bus.nats_tls_cert_file",
                "is required with bus.nats_tls_key_file",
            ));
        }
    };
    let tls = NatsTls {
        required: b.nats_tls_required,
        ca_file: b.nats_tls_ca_file.clone(),
        client_cert,
    };
    Ok((auth, tls))
}

/// Where the embedded tier keeps the key it generates.
fn generated_key_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("keyring")
}

fn has_keys(c: &CryptoSection) -> bool {
    !c.keys.is_empty() || c.keys_dir.is_some()
}

/// The configured keyring: `None` unless both keys and the active key are set (the tiers
/// decide what is missing). Each key of `crypto.keys` must decode to 32 bytes, and the
/// active key must be one of them unless `crypto.keys_dir` may hold it. Errors name key
/// ids, never keys.
fn configured_crypto(c: &CryptoSection) -> Result<Option<Crypto>, ConfigError> {
    for (id, key) in &c.keys {
        let pair = [(id.clone(), key.expose_secret().to_owned())];
        Keyring::from_config(&pair, id).map_err(|e| invalid("crypto.keys", &e.to_string()))?;
    }
    let Some(active) = &c.active_key else {
        return Ok(None);
    };
    if c.keys_dir.is_none() && !c.keys.is_empty() && !c.keys.contains_key(active) {
        let ids: Vec<&str> = c.keys.keys().map(String::as_str).collect();
        return Err(invalid(
            "crypto.active_key",
            &format!("{active:?} is not one of crypto.keys ({})", ids.join(", ")),
        ));
    }
    if !has_keys(c) {
        return Ok(None);
    }
    Ok(Some(Crypto::Keys {
        keys: c
            .keys
            .iter()
            .map(|(id, key)| (id.clone(), key.clone()))
            .collect(),
        dir: c.keys_dir.clone(),
        active: active.clone(),
    }))
}

fn validate_login(a: &AuthSection) -> Result<LoginConfig, ConfigError> {
    if !(1..=64).contains(&a.argon2_parallelism) {
        return Err(invalid(
            "auth.argon2_parallelism",
            &format!("{} is outside 1..=64", a.argon2_parallelism),
        ));
    }
    if !(1..=64).contains(&a.argon2_iterations) {
        return Err(invalid(
            "auth.argon2_iterations",
            &format!("{} is outside 1..=64", a.argon2_iterations),
        ));
    }
    let least = 8 * a.argon2_parallelism;
    if !(least..=4_194_304).contains(&a.argon2_memory_kib) {
        return Err(invalid(
            "auth.argon2_memory_kib",
            &format!(
                "{} is outside {least}..=4194304 (at least 8 KiB per lane of \
                 auth.argon2_parallelism)",
                a.argon2_memory_kib
            ),
        ));
    }
    if !(60..=31_536_000).contains(&a.session_lifetime_secs) {
        return Err(invalid(
            "auth.session_lifetime_secs",
            &format!("{} is outside 60..=31536000", a.session_lifetime_secs),
        ));
    }
    if !(1..=3_600).contains(&a.stream_ticket_lifetime_secs) {
        return Err(invalid(
            "auth.stream_ticket_lifetime_secs",
            &format!("{} is outside 1..=3600", a.stream_ticket_lifetime_secs),
        ));
    }
    let login = LoginConfig {
        password: PasswordParams {
            memory_kib: a.argon2_memory_kib,
            iterations: a.argon2_iterations,
            parallelism: a.argon2_parallelism,
        },
        session_lifetime: Duration::from_secs(a.session_lifetime_secs),
        stream_ticket_lifetime: Duration::from_secs(a.stream_ticket_lifetime_secs),
        account_rate_limit: a.login_account_rate_limit,
        address_rate_limit: a.login_address_rate_limit,
    };
    if let Err(e) = login.password.argon2() {
        return Err(invalid("auth.argon2_memory_kib", &e));
    }
    Ok(login)
}

fn validate_cluster(c: &ClusterSection) -> Result<ClusterConfig, ConfigError> {
    if c.renew_interval_ms == 0 {
        return Err(invalid(
            "cluster.renew_interval_ms",
            "must be greater than 0",
        ));
    }
    if c.adopt_interval_ms == 0 {
        return Err(invalid(
            "cluster.adopt_interval_ms",
            "must be greater than 0",
        ));
    }
    if c.lease_ttl_ms < c.renew_interval_ms.saturating_mul(2) {
        return Err(invalid(
            "cluster.lease_ttl_ms",
            &format!(
                "must be at least twice cluster.renew_interval_ms ({} ms), so one late \
                 renewal does not lose every lease",
                c.renew_interval_ms
            ),
        ));
    }
    if !(1..=10_000).contains(&c.adopt_batch) {
        return Err(invalid(
            "cluster.adopt_batch",
            "must be between 1 and 10000",
        ));
    }
    Ok(ClusterConfig {
        lease_ttl: Duration::from_millis(c.lease_ttl_ms),
        renew_every: Duration::from_millis(c.renew_interval_ms),
        adopt_every: Duration::from_millis(c.adopt_interval_ms),
        adopt_batch: c.adopt_batch,
    })
}

fn validate_workspaces(
    w: &super::schema::WorkspacesSection,
) -> Result<baton_core::workspace::WorkspaceLimits, ConfigError> {
    if !(1..=1 << 30).contains(&w.max_file_bytes) {
        return Err(invalid(
            "workspaces.max_file_bytes",
            "must be between 1 and 1073741824 (1 GiB)",
        ));
    }
    if w.max_run_files == 0 {
        return Err(invalid("workspaces.max_run_files", "must be at least 1"));
    }
    if w.max_run_bytes < w.max_file_bytes {
        return Err(invalid(
            "workspaces.max_run_bytes",
            "must be at least workspaces.max_file_bytes",
        ));
    }
    if w.max_tenant_bytes < w.max_run_bytes {
        return Err(invalid(
            "workspaces.max_tenant_bytes",
            "must be at least workspaces.max_run_bytes",
        ));
    }
    Ok(baton_core::workspace::WorkspaceLimits {
        max_file_bytes: w.max_file_bytes,
        max_run_files: w.max_run_files,
        max_run_bytes: w.max_run_bytes,
        max_tenant_bytes: w.max_tenant_bytes,
    })
}

/// The operator's environments: plain names, absolute directories that exist, limits
/// above zero, a known role.
fn validate_environments(
    all: &std::collections::BTreeMap<String, super::schema::EnvironmentSection>,
) -> Result<baton_core::environments::Bases, ConfigError> {
    use baton_core::model::{BaseEnvironment, EnvironmentLimits, Layer, Role};
    const KEY: &str = "workspaces.environments";
    let mut out = Vec::new();
    for (name, e) in all {
        let bad = |what: String| ConfigError::invalid(KEY, &format!("{name}: {what}"));
        let plain = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !plain {
            return Err(bad("names are 1 to 64 of a-z, 0-9, - and _".into()));
        }
        let directory = |field: &str, p: &str| {
            let path = std::path::Path::new(p);
            if !path.is_absolute() || !path.is_dir() {
                return Err(bad(format!(
                    "{field} {p:?} is not an absolute path to a directory"
                )));
            }
            Ok(p.to_string())
        };
        let root = e
            .root
            .as_deref()
            .map(|r| directory("root", r))
            .transpose()?;
        let mut layers = Vec::new();
        for l in &e.layers {
            let Some((host, at)) = l.split_once(':') else {
                return Err(bad(format!("layer {l:?} is not host_dir:/path/inside")));
            };
            let inside = std::path::Path::new(at);
            if !inside.is_absolute()
                || inside
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
                || ["/workspace", "/proc", "/dev", "/tmp"]
                    .iter()
                    .any(|p| inside.starts_with(p))
            {
                return Err(bad(format!(
                    "layer {l:?}: the path inside must be absolute, without `..`, and not under \
                     /workspace, /proc, /dev or /tmp"
                )));
            }
            layers.push(Layer {
                host: directory("layer", host)?,
                at: at.to_string(),
            });
        }
        let limits = EnvironmentLimits {
            wall_ms: e.wall_ms,
            memory_bytes: e.memory_bytes,
            processes: e.processes,
            open_files: e.open_files,
        };
        if [
            limits.wall_ms,
            limits.memory_bytes,
            limits.processes,
            limits.open_files,
        ]
        .contains(&Some(0))
        {
            return Err(bad("limits must be at least 1".into()));
        }
        let execute_role = match e.execute_role.as_deref() {
            None => Role::Member,
            Some(r) => Role::parse(r).ok_or_else(|| {
                bad(format!(
                    "execute_role {r:?} is not viewer, member, admin or owner"
                ))
            })?,
        };
        out.push(BaseEnvironment {
            name: name.clone(),
            root,
            layers,
            path: e.path.clone(),
            network: e.network,
            limits,
            execute_role,
        });
    }
    Ok(baton_core::environments::Bases::new(out))
}

fn validate_retention(r: &RetentionSection) -> Result<RetentionOptions, ConfigError> {
    if r.interval_ms == 0 {
        return Err(invalid("retention.interval_ms", "must be greater than 0"));
    }
    if !(1..=10_000).contains(&r.batch) {
        return Err(invalid("retention.batch", "must be between 1 and 10000"));
    }
    if !(1..=87_600).contains(&r.idempotency_window_hours) {
        return Err(invalid(
            "retention.idempotency_window_hours",
            "must be between 1 and 87600",
        ));
    }
    if !(1..=3_650).contains(&r.webhook_deliveries_days) {
        return Err(invalid(
            "retention.webhook_deliveries_days",
            "must be between 1 and 3650",
        ));
    }
    let interval = Duration::from_millis(r.interval_ms);
    Ok(RetentionOptions {
        interval,
        batch: r.batch,
        idempotency_window: Duration::from_secs(r.idempotency_window_hours * 3600),
        deliveries_window: Duration::from_secs(r.webhook_deliveries_days * 24 * 3600),
        // A round deletes a batch in well under a minute; a replica killed mid-round
        // holds the job no longer than this.
        lease_ttl: interval.max(Duration::from_secs(60)),
    })
}

fn validate_schedules(s: &SchedulesSection) -> Result<ScheduleOptions, ConfigError> {
    if !(10..=600_000).contains(&s.poll_interval_ms) {
        return Err(invalid(
            "schedules.poll_interval_ms",
            "must be between 10 and 600000",
        ));
    }
    if !(1_000..=86_400_000).contains(&s.grace_ms) {
        return Err(invalid(
            "schedules.grace_ms",
            "must be between 1000 and 86400000",
        ));
    }
    if !(1_000..=86_400_000).contains(&s.min_interval_ms) {
        return Err(invalid(
            "schedules.min_interval_ms",
            "must be between 1000 and 86400000",
        ));
    }
    if !(1..=10_000).contains(&s.batch) {
        return Err(invalid("schedules.batch", "must be between 1 and 10000"));
    }
    if !(1..=100_000).contains(&s.max_per_tenant) {
        return Err(invalid(
            "schedules.max_per_tenant",
            "must be between 1 and 100000",
        ));
    }
    Ok(ScheduleOptions {
        poll: Duration::from_millis(s.poll_interval_ms),
        grace: Duration::from_millis(s.grace_ms),
        min_interval: Duration::from_millis(s.min_interval_ms),
        batch: s.batch,
        max_per_tenant: s.max_per_tenant,
    })
}

fn validate_webhooks(w: &WebhooksSection) -> Result<WebhookOptions, ConfigError> {
    let within = |key: &'static str, v: u64, lo: u64, hi: u64| {
        if (lo..=hi).contains(&v) {
            Ok(())
        } else {
            Err(invalid(key, &format!("must be between {lo} and {hi}")))
        }
    };
    within("webhooks.poll_interval_ms", w.poll_interval_ms, 10, 600_000)?;
    within("webhooks.batch", u64::from(w.batch), 1, 1_000)?;
    within("webhooks.timeout_ms", w.timeout_ms, 100, 120_000)?;
    within("webhooks.retry_base_ms", w.retry_base_ms, 10, 3_600_000)?;
    within(
        "webhooks.retry_max_ms",
        w.retry_max_ms,
        w.retry_base_ms,
        86_400_000,
    )?;
    within("webhooks.retry_for_secs", w.retry_for_secs, 1, 2_592_000)?;
    within(
        "webhooks.disable_after_failures",
        u64::from(w.disable_after_failures),
        1,
        100_000,
    )?;
    Ok(WebhookOptions {
        poll: Duration::from_millis(w.poll_interval_ms),
        batch: w.batch,
        timeout: Duration::from_millis(w.timeout_ms),
        retry_base: Duration::from_millis(w.retry_base_ms),
        retry_max: Duration::from_millis(w.retry_max_ms),
        retry_for: Duration::from_secs(w.retry_for_secs),
        disable_after: w.disable_after_failures,
    })
}

fn invalid(key: &'static str, message: &str) -> ConfigError {
    ConfigError::invalid(key, message)
}

fn validate_http(http: &HttpSection) -> Result<HttpConfig, ConfigError> {
    if http.body_limit_bytes < 1024 {
        return Err(invalid(
            "http.body_limit_bytes",
            &format!("{} is below the minimum of 1024", http.body_limit_bytes),
        ));
    }
    let body_limit_bytes = usize::try_from(http.body_limit_bytes)
        .map_err(|_| invalid("http.body_limit_bytes", "too large for this platform"))?;
    if !(1..=65_536).contains(&http.sse_buffer) {
        return Err(invalid(
            "http.sse_buffer",
            &format!("{} is outside 1..=65536", http.sse_buffer),
        ));
    }
    if http.sse_keepalive_secs == 0 {
        return Err(invalid("http.sse_keepalive_secs", "must be at least 1"));
    }
    if http.header_limit_bytes < 1024 {
        return Err(invalid(
            "http.header_limit_bytes",
            &format!("{} is below the minimum of 1024", http.header_limit_bytes),
        ));
    }
    let header_limit_bytes = usize::try_from(http.header_limit_bytes)
        .map_err(|_| invalid("http.header_limit_bytes", "too large for this platform"))?;
    let allowed_hosts = http
        .allowed_hosts
        .iter()
        .map(|h| allowed_host(h))
        .collect::<Result<_, _>>()?;
    let allowed_origins = http
        .allowed_origins
        .iter()
        .map(|o| allowed_origin(o))
        .collect::<Result<_, _>>()?;
    Ok(HttpConfig {
        listen: http.listen,
        body_limit_bytes,
        sse_buffer: http.sse_buffer as usize,
        sse_keepalive: Duration::from_secs(http.sse_keepalive_secs),
        sse_resync: positive_ms("http.sse_resync_ms", http.sse_resync_ms)?,
        shutdown_grace: Duration::from_secs(http.shutdown_grace_secs),
        header_limit_bytes,
        allowed_hosts,
        allowed_origins,
        key_rate_limit: http.key_rate_limit,
        tenant_rate_limit: http.tenant_rate_limit,
        header_read_timeout: positive_ms(
            "http.header_read_timeout_ms",
            http.header_read_timeout_ms,
        )?,
        request_timeout: positive_ms("http.request_timeout_ms", http.request_timeout_ms)?,
        sse_streams_per_key: http.sse_streams_per_key,
        sse_streams_per_tenant: http.sse_streams_per_tenant,
    })
}

/// An `http.allowed_hosts` entry, lower-cased: a host name or address, maybe with a port;
/// never a URL.
fn allowed_host(host: &str) -> Result<String, ConfigError> {
    let h = host.trim().to_ascii_lowercase();
    let parsed = url::Url::parse(&format!("http://{h}/"));
    let bare = parsed.as_ref().is_ok_and(|u| {
        u.host_str().is_some()
            && u.username().is_empty()
            && u.password().is_none()
            && format!(
                "{}{}",
                u.host_str().unwrap_or_default(),
                u.port().map(|p| format!(":{p}")).unwrap_or_default()
            ) == h
    });
    if !bare {
        return Err(invalid(
            "http.allowed_hosts",
            &format!("{host:?} is not a host name or address (with an optional :port)"),
        ));
    }
    Ok(h)
}

/// An `http.allowed_origins` entry as browsers send it: `scheme://host[:port]`, without
/// a path; the default port is dropped.
fn allowed_origin(origin: &str) -> Result<String, ConfigError> {
    let bad = |why: &str| {
        invalid(
            "http.allowed_origins",
            &format!("{origin:?} is not a web origin ({why}); write it as https://host[:port]"),
        )
    };
    let url = url::Url::parse(origin.trim()).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(bad("it has a path, query or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("it has credentials"));
    }
    match url.origin() {
        origin @ url::Origin::Tuple(..) => Ok(origin.ascii_serialization()),
        url::Origin::Opaque(_) => Err(bad("it has no host")),
    }
}

fn validate_pools(raw: &RawConfig) -> Result<Pools, ConfigError> {
    let p = Pools {
        app: raw.database.app_pool,
        control: raw.database.control_pool,
        checkpoint: raw.database.checkpoint_pool,
        max_connections: raw.database.max_connections,
    };
    for (key, size) in [
        ("database.app_pool", p.app),
        ("database.control_pool", p.control),
        ("database.checkpoint_pool", p.checkpoint),
    ] {
        if size == 0 {
            return Err(invalid(key, "must be at least 1"));
        }
    }
    let total = u64::from(p.app) + u64::from(p.control) + u64::from(p.checkpoint);
    if total > u64::from(p.max_connections) {
        return Err(ConfigError::PoolBudget {
            app: p.app,
            control: p.control,
            checkpoint: p.checkpoint,
            total,
            max: p.max_connections,
        });
    }
    Ok(p)
}

fn validate_replica_name(name: &str) -> Result<(), ConfigError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > 253 || !name.chars().all(allowed) {
        return Err(invalid(
            "replica_name",
            &format!("{name:?} must be 1 to 253 letters, digits, `-`, `_` or `.`"),
        ));
    }
    Ok(())
}

fn positive_ms(key: &'static str, ms: u64) -> Result<Duration, ConfigError> {
    if ms == 0 {
        return Err(invalid(key, "must be greater than 0"));
    }
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod login_tests {
    use super::*;

    fn with_auth(tweak: impl FnOnce(&mut AuthSection)) -> Result<Config, ConfigError> {
        let mut raw = RawConfig::default();
        tweak(&mut raw.auth);
        raw.validate()
    }

    fn refused_key(r: Result<Config, ConfigError>) -> &'static str {
        match r {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    #[test]
    fn login_defaults_are_owasps_argon2id_and_twelve_hour_sessions() {
        let config = with_auth(|_| {}).expect("defaults validate");
        assert_eq!(config.login.password, PasswordParams::OWASP);
        assert_eq!(config.login.session_lifetime, Duration::from_secs(43_200));
        assert_eq!(config.login, Config::embedded("d").login);
    }

    /// A change to the `[auth]` section and the key it must be refused for.
    type Case = (fn(&mut AuthSection), &'static str);

    #[test]
    fn login_settings_out_of_range_are_refused_naming_the_key() {
        let cases: [Case; 8] = [
            (|a| a.argon2_parallelism = 0, "auth.argon2_parallelism"),
            (|a| a.argon2_iterations = 0, "auth.argon2_iterations"),
            (|a| a.argon2_iterations = 65, "auth.argon2_iterations"),
            (|a| a.argon2_memory_kib = 7, "auth.argon2_memory_kib"),
            (
                |a| {
                    a.argon2_parallelism = 4;
                    a.argon2_memory_kib = 31;
                },
                "auth.argon2_memory_kib",
            ),
            (
                |a| a.session_lifetime_secs = 59,
                "auth.session_lifetime_secs",
            ),
            (
                |a| a.stream_ticket_lifetime_secs = 0,
                "auth.stream_ticket_lifetime_secs",
            ),
            (
                |a| a.stream_ticket_lifetime_secs = 3_601,
                "auth.stream_ticket_lifetime_secs",
            ),
        ];
        for (tweak, key) in cases {
            assert_eq!(refused_key(with_auth(tweak)), key);
        }
        let small = with_auth(|a| {
            a.argon2_memory_kib = 8;
            a.argon2_iterations = 1;
            a.login_account_rate_limit = 0;
        })
        .expect("argon2's own minimum is allowed");
        assert_eq!(small.login.password.memory_kib, 8);
        assert_eq!(small.login.account_rate_limit, 0);
    }
}
