//! The raw configuration schema: every key `baton.toml`, `BATON_*` variables and CLI flags may
//! set, with its default. The doc comment on each field is that key's reference documentation:
//! `baton config reference` (see `reference`) prints it as the key's meaning in the keys table
//! of docs/configuration.md, so write it for operators, and leave the default out of it (the
//! table shows the one `Default` produces). Nothing here checks combinations or ranges;
//! `resolve` does that.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use secrecy::SecretString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::urls::{REDACTED, redact_dsn, redact_nats_url};

/// Deployment tier: which storage and bus the replica uses and how strict start-up is.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// One process: SQLite under `data_dir`, in-process bus, loopback only unless auth is on.
    #[default]
    Embedded,
    /// Several replicas: Postgres, NATS and authentication are all required.
    Team,
}

impl Tier {
    /// The name used in `baton.toml`, `BATON_TIER` and `--tier`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Embedded => "embedded",
            Tier::Team => "team",
        }
    }
}

/// Log output format.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable, coloured when the output is a terminal.
    #[default]
    Pretty,
    /// One JSON object per line, for log collectors.
    Json,
}

impl LogFormat {
    /// The name used in `baton.toml`, `BATON_LOG__FORMAT` and `--log-format`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Pretty => "pretty",
            LogFormat::Json => "json",
        }
    }
}

/// The configuration as layered from defaults, file, environment and flags, before
/// `validate()`. `Serialize` exists for `config explain`; it redacts secrets. `JsonSchema`
/// exists for `config reference`, which reads each field's doc comment from it.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawConfig {
    /// Deployment tier: `embedded` (SQLite and an in-process bus) or `team` (Postgres, NATS
    /// and authentication, all required; start-up refuses if any is missing). See
    /// [Tiers](#tiers).
    pub tier: Tier,
    /// Directory for local state, created readable by Baton's user alone (0700, its files
    /// 0600). The embedded tier keeps its SQLite database at `<data_dir>/baton.db` unless
    /// `database.url` is a `sqlite:` URL, and, when no keys are configured, the encryption
    /// key it generates at `<data_dir>/keyring/local`.
    #[serde(serialize_with = "serialize_path")]
    pub data_dir: PathBuf,
    /// This replica's name (the pod name on Kubernetes), recorded in the events it writes and
    /// combined with a boot UUID to form the replica identity that owns leases. Letters,
    /// digits, `-`, `_` and `.` only. When the `HOSTNAME` environment variable is set, its
    /// value replaces the default.
    pub replica_name: String,
    /// HTTP listener, request limits and SSE streaming.
    pub http: HttpSection,
    /// Database connection and pool sizing.
    pub database: DatabaseSection,
    /// Event bus used for fan-out between replicas.
    pub bus: BusSection,
    /// Authentication.
    pub auth: AuthSection,
    /// Logging.
    pub log: LogSection,
    /// Run leases, renewal and adoption across replicas.
    pub cluster: ClusterSection,
    /// The keyring that encrypts tenant secrets at rest.
    pub crypto: CryptoSection,
    /// Where outbound calls to URLs tenants choose (tools, model providers) may go.
    pub egress: EgressSection,
    /// The background job that deletes ended runs past their tenant's or agent's
    /// retention and prunes old idempotency records.
    pub retention: RetentionSection,
    /// `[schedules]`: the job, on every replica, that starts the runs of due schedules.
    pub schedules: SchedulesSection,
    /// `[webhooks]`: how every replica attempts the deliveries of webhook events.
    pub webhooks: WebhooksSection,
    /// `[workspaces]`: how much runs' files may hold.
    pub workspaces: WorkspacesSection,
}

impl Default for RawConfig {
    fn default() -> Self {
        Self {
            tier: Tier::default(),
            data_dir: PathBuf::from("./baton-data"),
            replica_name: "baton".to_owned(),
            http: HttpSection::default(),
            database: DatabaseSection::default(),
            bus: BusSection::default(),
            auth: AuthSection::default(),
            log: LogSection::default(),
            cluster: ClusterSection::default(),
            crypto: CryptoSection::default(),
            egress: EgressSection::default(),
            retention: RetentionSection::default(),
            schedules: SchedulesSection::default(),
            webhooks: WebhooksSection::default(),
            workspaces: WorkspacesSection::default(),
        }
    }
}

/// `[http]`: the listener, request limits and SSE streaming.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSection {
    /// Socket address the API listens on. An address outside 127.0.0.0/8 and `::1` requires
    /// `auth.required = true`.
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes; larger requests get `413 payload_too_large`.
    /// At least 1024.
    pub body_limit_bytes: u64,
    /// Events buffered per SSE subscriber; a subscriber that falls this far behind is
    /// disconnected and resumes from its cursor. 1 to 65536.
    pub sse_buffer: u32,
    /// Seconds between SSE keep-alive comments on an idle stream. At least 1.
    pub sse_keepalive_secs: u64,
    /// Milliseconds an idle SSE stream waits before re-checking the database for events the
    /// bus may have missed. At least 1.
    pub sse_resync_ms: u64,
    /// Seconds a shutting-down replica gives in-flight requests and owned runs to finish before
    /// it exits anyway.
    pub shutdown_grace_secs: u64,
    /// Largest total size of a request's headers, in bytes; larger requests get `431
    /// headers_too_large`. At least 1024.
    pub header_limit_bytes: u64,
    /// Host names this API answers to (`api.example.com`, or `host:port` to require that
    /// port); a request with another `Host` gets `403 host_not_allowed`. Empty: any host.
    /// Without authentication (embedded tier) only loopback names are answered anyway. In
    /// the environment, a comma-separated list.
    #[serde(deserialize_with = "deserialize_list")]
    pub allowed_hosts: Vec<String>,
    /// Web origins (`https://app.example.com`) whose pages may call this API from a browser:
    /// they get CORS headers, and only they (and the API's own origin) may send it
    /// state-changing requests (`POST`, `PUT`, `DELETE`); another site's `Origin` gets `403
    /// origin_not_allowed`. Empty: no other site. In the environment, a comma-separated
    /// list.
    #[serde(deserialize_with = "deserialize_list")]
    pub allowed_origins: Vec<String>,
    /// Requests per second one API key may make on one replica, with bursts of twice as
    /// many; beyond it, `429 rate_limited` with `Retry-After`. 0: no limit.
    pub key_rate_limit: u32,
    /// Requests per second one tenant's keys together may make on one replica, with bursts
    /// of twice as many; beyond it, `429 rate_limited` with `Retry-After`. 0: no limit.
    pub tenant_rate_limit: u32,
    /// Milliseconds a client may take to send a request's headers once it starts; a slower
    /// one is disconnected. At least 1.
    pub header_read_timeout_ms: u64,
    /// Milliseconds a request may take to arrive (its body included) and be answered; beyond
    /// it, `408 request_timeout`. An event stream counts until it opens. At least 1.
    pub request_timeout_ms: u64,
    /// Event streams one API key or login session (or the local owner) may hold open on one
    /// replica; one more gets `429 rate_limited` with `Retry-After`. 0: no limit.
    pub sse_streams_per_key: u32,
    /// Event streams one tenant's callers together may hold open on one replica; one more
    /// gets `429 rate_limited` with `Retry-After`. 0: no limit.
    pub sse_streams_per_tenant: u32,
}

impl Default for HttpSection {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 8080)),
            body_limit_bytes: 1024 * 1024,
            sse_buffer: 256,
            sse_keepalive_secs: 15,
            sse_resync_ms: 2000,
            shutdown_grace_secs: 30,
            header_limit_bytes: 16 * 1024,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            key_rate_limit: 100,
            tenant_rate_limit: 500,
            header_read_timeout_ms: 10_000,
            request_timeout_ms: 30_000,
            sse_streams_per_key: 100,
            sse_streams_per_tenant: 1_000,
        }
    }
}

/// `[database]`: where events and projections live, and how many connections to use.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSection {
    /// Database URL: `postgres://…` or `postgresql://…` (team tier; required there) or
    /// `sqlite:…` (embedded tier; replaces `<data_dir>/baton.db`). Secret: redacted in logs
    /// and in `config explain`. An empty value counts as unset.
    #[serde(
        deserialize_with = "deserialize_secret",
        serialize_with = "serialize_dsn"
    )]
    #[schemars(with = "Option<String>")]
    pub url: Option<SecretString>,
    /// Connections serving requests (in the embedded tier, the size of the SQLite pool for
    /// reads; its writes take turns on one connection of their own). At least 1.
    pub app_pool: u32,
    /// Postgres connections kept for lease renewal and adoption, apart from the others so
    /// request load never starves them. At least 1.
    pub control_pool: u32,
    /// Postgres connections for checkpoint writes, kept apart so a burst of checkpoints never
    /// delays requests; counted in `max_connections` like the others. At least 1.
    pub checkpoint_pool: u32,
    /// Connection budget of one replica: `app_pool + control_pool + checkpoint_pool` must not
    /// exceed it.
    pub max_connections: u32,
    /// Statement timeout in milliseconds, set on every Postgres connection; it also bounds
    /// how long a transaction may sit idle between statements (Postgres then ends the
    /// session and frees its locks, so a frozen replica cannot keep its runs from being
    /// adopted: keep it below `cluster.lease_ttl_ms`). Greater than 0.
    pub statement_timeout_ms: u64,
    /// Milliseconds a request waits for a free pooled connection before it fails with
    /// `503 unavailable`. Greater than 0.
    pub acquire_timeout_ms: u64,
    /// Whether `baton serve` applies pending migrations before it starts serving. Turn it off
    /// when migrations run as a separate step (`baton migrate`, or the Helm chart's migration
    /// Job).
    pub migrate_on_start: bool,
}

impl Default for DatabaseSection {
    fn default() -> Self {
        Self {
            url: None,
            app_pool: 16,
            control_pool: 2,
            checkpoint_pool: 2,
            max_connections: 32,
            statement_timeout_ms: 10_000,
            acquire_timeout_ms: 5_000,
            migrate_on_start: true,
        }
    }
}

/// `[bus]`: fan-out between replicas.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BusSection {
    /// NATS server URL(s), comma-separated: `nats://`, `tls://`, `ws://` or `wss://`; may carry
    /// `user:password@` or a token. Required in the team tier; refused in the embedded tier.
    /// Secret: redacted in `config explain`. An empty value counts as unset.
    #[serde(
        deserialize_with = "deserialize_secret",
        serialize_with = "serialize_nats_url"
    )]
    #[schemars(with = "Option<String>")]
    pub nats_url: Option<SecretString>,
    /// The first token(s) of every NATS subject this installation uses
    /// (`<prefix>.ev.<tenant>.<run>`, `<prefix>.ctl.cluster`, …). Installations sharing one
    /// NATS must each have their own, and an account allowed to publish and subscribe on
    /// `<prefix>.>` is all one needs. Letters, digits, `-` and `_`, tokens separated by `.`.
    pub subject_prefix: String,
    /// NATS user name, with `bus.nats_password`. At most one of user and password, token,
    /// NKey seed and credentials file is set.
    #[serde(deserialize_with = "deserialize_text")]
    pub nats_user: Option<String>,
    /// Password of `bus.nats_user`. Secret: redacted in `config explain`.
    #[serde(
        deserialize_with = "deserialize_secret",
        serialize_with = "serialize_redacted"
    )]
    #[schemars(with = "Option<String>")]
    pub nats_password: Option<SecretString>,
    /// NATS authentication token. Secret: redacted in `config explain`.
    #[serde(
        deserialize_with = "deserialize_secret",
        serialize_with = "serialize_redacted"
    )]
    #[schemars(with = "Option<String>")]
    pub nats_token: Option<SecretString>,
    /// Seed of an NKey user (`SU…`) whose public key the server knows. Secret: redacted in
    /// `config explain`.
    #[serde(
        deserialize_with = "deserialize_secret",
        serialize_with = "serialize_redacted"
    )]
    #[schemars(with = "Option<String>")]
    pub nats_nkey_seed: Option<SecretString>,
    /// A NATS credentials file (`.creds`: a user JWT and its NKey seed, as `nsc` writes
    /// it), read at start-up.
    #[serde(
        deserialize_with = "deserialize_path",
        serialize_with = "serialize_opt_path"
    )]
    pub nats_creds_file: Option<PathBuf>,
    /// Refuse a NATS connection without TLS (a `tls://` URL asks for TLS as well).
    pub nats_tls_required: bool,
    /// PEM file of the CA that signs the NATS server's certificate; the system's roots when
    /// unset.
    #[serde(
        deserialize_with = "deserialize_path",
        serialize_with = "serialize_opt_path"
    )]
    pub nats_tls_ca_file: Option<PathBuf>,
    /// PEM file of a client certificate for NATS servers that verify clients, with
    /// `bus.nats_tls_key_file`.
    #[serde(
        deserialize_with = "deserialize_path",
        serialize_with = "serialize_opt_path"
    )]
    pub nats_tls_cert_file: Option<PathBuf>,
    /// PEM file of the key of `bus.nats_tls_cert_file`.
    #[serde(
        deserialize_with = "deserialize_path",
        serialize_with = "serialize_opt_path"
    )]
    pub nats_tls_key_file: Option<PathBuf>,
}

impl Default for BusSection {
    fn default() -> Self {
        Self {
            nats_url: None,
            subject_prefix: baton_bus::subjects::DEFAULT_PREFIX.to_owned(),
            nats_user: None,
            nats_password: None,
            nats_token: None,
            nats_nkey_seed: None,
            nats_creds_file: None,
            nats_tls_required: false,
            nats_tls_ca_file: None,
            nats_tls_cert_file: None,
            nats_tls_key_file: None,
        }
    }
}

/// `[auth]`: authentication of API requests, user passwords and login sessions.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSection {
    /// Require an API key or login token on every API request. Must be true in the team tier
    /// and for any listener outside loopback.
    pub required: bool,
    /// Memory one argon2id password hash uses, in KiB. The default is OWASP's
    /// recommendation; lower values make stolen hashes cheaper to crack. Applies to
    /// passwords set from now on (a hash keeps the parameters it was made with). At least 8
    /// times `argon2_parallelism`, at most 4194304 (4 GiB).
    pub argon2_memory_kib: u32,
    /// Passes of one argon2id password hash over its memory. 1 to 64.
    pub argon2_iterations: u32,
    /// Lanes of one argon2id password hash. 1 to 64.
    pub argon2_parallelism: u32,
    /// Seconds a login session lasts; after that its token answers `401` and the user logs
    /// in again. 60 to 31536000 (a year).
    pub session_lifetime_secs: u64,
    /// Seconds a stream ticket (`POST /v1/runs/{run_id}/stream-tickets`) may wait for the
    /// event stream it opens; a stream already open goes on. 1 to 3600.
    pub stream_ticket_lifetime_secs: u64,
    /// Login attempts per minute one account (email) may get on one replica, whether they
    /// succeed or not; beyond it, `429 rate_limited` with `Retry-After`. 0: no limit.
    pub login_account_rate_limit: u32,
    /// Login attempts per minute one source address (an IPv6 /64) may make on one replica;
    /// beyond it, `429 rate_limited` with `Retry-After`. Behind a proxy every login comes
    /// from the proxy's address: raise it or set 0 there. 0: no limit.
    pub login_address_rate_limit: u32,
}

impl Default for AuthSection {
    fn default() -> Self {
        Self {
            required: false,
            argon2_memory_kib: 19_456,
            argon2_iterations: 2,
            argon2_parallelism: 1,
            session_lifetime_secs: 12 * 3600,
            stream_ticket_lifetime_secs: 60,
            login_account_rate_limit: 10,
            login_address_rate_limit: 30,
        }
    }
}

/// `[cluster]`: how replicas share runs.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    /// Milliseconds a run's lease lasts without renewal: how long a crashed replica's
    /// runs wait before another replica adopts them. At least twice `renew_interval_ms`.
    pub lease_ttl_ms: u64,
    /// Milliseconds between lease renewals (one statement per replica for all its leases).
    /// Greater than 0.
    pub renew_interval_ms: u64,
    /// Milliseconds between adoption rounds, which claim runs with work and no live lease
    /// (left by a crashed or draining replica). Greater than 0.
    pub adopt_interval_ms: u64,
    /// Most runs one adoption round claims. 1 to 10000.
    pub adopt_batch: u32,
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            lease_ttl_ms: 15_000,
            renew_interval_ms: 5_000,
            adopt_interval_ms: 2_000,
            adopt_batch: 100,
        }
    }
}

/// `[workspaces]`: the quotas of runs' workspaces (their files, kept in the database).
/// A write past one is refused whole with `409 quota_exceeded` (`413` for one file too
/// large).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspacesSection {
    /// Whether agents may run commands (`shell` and `python` workspace tools). `false`
    /// hides and refuses them on this replica whatever agents enable: set it on every
    /// replica.
    pub code_tools: bool,
    /// The largest file, in bytes (an upload, or a file a command writes). 1 to 1 GiB.
    pub max_file_bytes: u64,
    /// The most bytes one run's files add up to. At least `max_file_bytes`.
    pub max_run_bytes: u64,
    /// The most files one run's workspace holds. At least 1.
    pub max_run_files: u64,
    /// The most bytes a tenant stores across its runs, each distinct content counted
    /// once. At least `max_run_bytes`.
    pub max_tenant_bytes: u64,
    /// Execution environments by name (`[a-z0-9_-]`, up to 64 characters), which
    /// `shell` and `python` tools name and tenants' own environments narrow; `default`
    /// (the host's system directories, no network, members) is built in unless defined
    /// here. See [Execution environments](#execution-environments).
    #[serde(serialize_with = "serialize_environments")]
    // One field of one entry per variable: `BATON_WORKSPACES__ENVIRONMENTS__PY__NETWORK`.
    #[schemars(extend("x-entry-name" = "NAME__FIELD"))]
    pub environments: BTreeMap<String, EnvironmentSection>,
}

/// `[workspaces.environments.<name>]`: where commands run.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EnvironmentSection {
    /// A directory holding a whole root filesystem (its `/usr`, `/bin`, `/lib`, `/etc`),
    /// shown read-only instead of the host's system directories.
    pub root: Option<String>,
    /// Read-only host directories shown to commands, as `host_dir:/path/inside`
    /// (e.g. a Python environment: `/opt/envs/data:/opt/venv`); in a variable,
    /// comma-separated.
    #[serde(deserialize_with = "deserialize_list")]
    pub layers: Vec<String>,
    /// `PATH` inside the sandbox (e.g. `/opt/venv/bin:/usr/bin:/bin`).
    pub path: Option<String>,
    /// Whether commands may reach hosts, through the egress policy (and each tenant's
    /// allowlist) alone. Such commands are mutations: one cut off by a crash is held
    /// `uncertain`.
    pub network: bool,
    /// The longest a command may run, in milliseconds.
    pub wall_ms: Option<u64>,
    /// Address space of each process, in bytes.
    pub memory_bytes: Option<u64>,
    /// Processes (and threads) at once.
    pub processes: Option<u64>,
    /// Open files of each process.
    pub open_files: Option<u64>,
    /// The least role of whoever asked for a turn for its commands to run here:
    /// `viewer`, `member`, `admin` or `owner`; unset, `member`.
    pub execute_role: Option<String>,
}

impl Default for WorkspacesSection {
    fn default() -> Self {
        let d = baton_core::workspace::WorkspaceLimits::default();
        Self {
            code_tools: true,
            max_file_bytes: d.max_file_bytes,
            max_run_files: d.max_run_files,
            max_run_bytes: d.max_run_bytes,
            max_tenant_bytes: d.max_tenant_bytes,
            environments: BTreeMap::new(),
        }
    }
}

/// `[retention]`: the job that deletes what tenants' retention policies no longer keep.
/// Every replica offers to run it; one at a time does, under a lease in the database.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSection {
    /// Milliseconds between rounds across the installation (a round that hit `batch` is
    /// followed by the next at once). Greater than 0.
    pub interval_ms: u64,
    /// Most runs one round deletes, and most idempotency records it prunes. 1 to 10000.
    pub batch: u32,
    /// Hours a `request_id` is remembered: a retried request within it gets the original
    /// answer, and its record is pruned after it. 1 to 87600.
    pub idempotency_window_hours: u64,
    /// Days a webhook delivery that is over (delivered or failed) is kept, with its
    /// attempts, after its last change. 1 to 3650.
    pub webhook_deliveries_days: u64,
}

impl Default for RetentionSection {
    fn default() -> Self {
        Self {
            interval_ms: 60_000,
            batch: 100,
            idempotency_window_hours: 168,
            webhook_deliveries_days: 30,
        }
    }
}

/// `[schedules]`: the job that starts the runs of due schedules. Every replica runs it;
/// the database's version checks decide each fire once.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulesSection {
    /// The longest the job waits before looking for due schedules again, in
    /// milliseconds (it wakes sooner for the soonest fire time it knows of, and at once
    /// for a change made on its replica). 10 to 600000.
    pub poll_interval_ms: u64,
    /// A fire time older than this, in milliseconds, when a replica gets to it (all were
    /// down, or the database was away) counts as missed: skipped, or run once for all
    /// missed, as each schedule says. 1000 to 86400000.
    pub grace_ms: u64,
    /// The least time between two fire times of one schedule, in milliseconds: a cron
    /// expression firing more often is refused. 1000 to 86400000.
    pub min_interval_ms: u64,
    /// Most due schedules one look takes. 1 to 10000.
    pub batch: u32,
    /// Most schedules one tenant may have. 1 to 100000.
    pub max_per_tenant: u32,
}

impl Default for SchedulesSection {
    fn default() -> Self {
        Self {
            poll_interval_ms: 5_000,
            grace_ms: 60_000,
            min_interval_ms: 60_000,
            batch: 100,
            max_per_tenant: 100,
        }
    }
}

/// `[webhooks]`: how deliveries of webhook events are attempted. Every replica attempts
/// due deliveries, each leased to one replica at a time.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksSection {
    /// The longest a new delivery waits before a replica looks for it, in milliseconds.
    /// 10 to 600000.
    pub poll_interval_ms: u64,
    /// Most deliveries a replica attempts at once. 1 to 1000.
    pub batch: u32,
    /// How long one attempt may take, in milliseconds. 100 to 120000.
    pub timeout_ms: u64,
    /// The pause after a first failed attempt, in milliseconds; it doubles with each
    /// failure (with 20% jitter either way) up to `retry_max_ms`. 10 to 3600000.
    pub retry_base_ms: u64,
    /// The longest pause between attempts, in milliseconds. At least `retry_base_ms`, at
    /// most 86400000.
    pub retry_max_ms: u64,
    /// How long after its event a delivery is retried before it is marked failed, in
    /// seconds. 1 to 2592000 (30 days).
    pub retry_for_secs: u64,
    /// Failed attempts in a row, across an endpoint's deliveries, that disable it. 1 to
    /// 100000.
    pub disable_after_failures: u32,
}

impl Default for WebhooksSection {
    fn default() -> Self {
        Self {
            poll_interval_ms: 2_000,
            batch: 32,
            timeout_ms: 10_000,
            retry_base_ms: 5_000,
            retry_max_ms: 3_600_000,
            retry_for_secs: 86_400,
            disable_after_failures: 100,
        }
    }
}

/// `[crypto]`: the AES-256-GCM keyring that encrypts tenant secrets at rest. Every key has an
/// id, stored with each record it seals; new records are sealed with the active key, and
/// older keys stay readable while they are in the keyring.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CryptoSection {
    /// Encryption keys by key id (`[A-Za-z0-9._-]`, up to 64 characters): standard base64 of
    /// 32 random bytes each (`openssl rand -base64 32`). A table in `baton.toml`
    /// (`[crypto.keys]`), or `BATON_CRYPTO__KEYS__<ID>` variables (the id then in lower case).
    /// Secret: `config explain` shows the ids only. An empty value counts as unset. See
    /// [Encryption keys](#encryption-keys).
    #[serde(
        deserialize_with = "deserialize_keys",
        serialize_with = "serialize_key_ids"
    )]
    // `x-entry-name` names an entry for `config reference`: `BATON_CRYPTO__KEYS__<ID>`.
    #[schemars(with = "BTreeMap<String, String>", extend("x-entry-name" = "ID"))]
    pub keys: BTreeMap<String, SecretString>,
    /// A directory holding one key per file: the file name is the key id, the content the
    /// base64 key (a mounted Kubernetes Secret). Names starting with `.` are skipped. Read at
    /// start-up, together with `keys`.
    #[serde(
        deserialize_with = "deserialize_path",
        serialize_with = "serialize_opt_path"
    )]
    pub keys_dir: Option<PathBuf>,
    /// The id of the key that seals new records; required when keys are configured.
    #[serde(deserialize_with = "deserialize_text")]
    pub active_key: Option<String>,
}

/// `[egress]`: the policy of outbound calls to URLs tenants choose. Loopback, link-local
/// (cloud metadata among it), private, shared (CGNAT), multicast, unspecified and reserved
/// addresses, and the replica's own, are refused unless allowed here.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EgressSection {
    /// Addresses, ranges (`10.20.0.0/16`) and host names (`*.svc.example` for every name
    /// under a domain) outbound calls may reach although a built-in rule refuses them (an
    /// internal service tools use). In the environment, a comma-separated list.
    #[serde(deserialize_with = "deserialize_list")]
    pub allow: Vec<String>,
    /// Addresses, ranges and host names outbound calls never reach, whatever else says.
    /// In the environment, a comma-separated list.
    #[serde(deserialize_with = "deserialize_list")]
    pub deny: Vec<String>,
    /// Whether loopback addresses may be called. Unset: yes in the embedded tier (its owner
    /// is its only tenant), no in the team tier.
    pub allow_loopback: Option<bool>,
}

/// `[log]`: log output.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LogSection {
    /// Output format: `pretty` (human-readable, coloured when the output is a terminal) or
    /// `json` (one JSON object per line, for log collectors).
    pub format: LogFormat,
    /// `tracing` filter directives (`EnvFilter` syntax), e.g. `info,baton_engine=debug`. The
    /// `RUST_LOG` environment variable, when set, overrides it. Every request is logged at
    /// `info` on `baton_api::access`: `info,baton_api::access=off` turns that off.
    pub filter: String,
}

impl Default for LogSection {
    fn default() -> Self {
        Self {
            format: LogFormat::default(),
            filter: "info".to_owned(),
        }
    }
}

/// Reads an optional secret; an empty or blank string counts as unset.
/// A list from a file (an array) or from the environment (a string of comma-separated
/// items); empty items are dropped.
fn deserialize_list<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum List {
        Items(Vec<String>),
        Joined(String),
    }
    let items = match List::deserialize(de)? {
        List::Items(items) => items,
        List::Joined(joined) => joined.split(',').map(str::to_owned).collect(),
    };
    Ok(items
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect())
}

fn deserialize_secret<'de, D: Deserializer<'de>>(de: D) -> Result<Option<SecretString>, D::Error> {
    let value = Option::<String>::deserialize(de)?;
    Ok(value
        .filter(|s| !s.trim().is_empty())
        .map(SecretString::from))
}

fn serialize_dsn<S: Serializer>(value: &Option<SecretString>, ser: S) -> Result<S::Ok, S::Error> {
    use secrecy::ExposeSecret;
    match value {
        Some(v) => ser.serialize_some(&redact_dsn(v.expose_secret())),
        None => ser.serialize_none(),
    }
}

fn serialize_nats_url<S: Serializer>(
    value: &Option<SecretString>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    use secrecy::ExposeSecret;
    match value {
        Some(v) => ser.serialize_some(&redact_nats_url(v.expose_secret())),
        None => ser.serialize_none(),
    }
}

/// A secret that is set shows as redacted, whatever it holds.
fn serialize_redacted<S: Serializer>(
    value: &Option<SecretString>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(_) => ser.serialize_some(REDACTED),
        None => ser.serialize_none(),
    }
}

/// Reads the key table; entries with an empty or blank value count as unset.
fn deserialize_keys<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<BTreeMap<String, SecretString>, D::Error> {
    let keys = BTreeMap::<String, String>::deserialize(de)?;
    Ok(keys
        .into_iter()
        .filter(|(_, key)| !key.trim().is_empty())
        .map(|(id, key)| (id, SecretString::from(key)))
        .collect())
}

/// Shows the key ids, never the keys: `k1=***,k2=***`; unset when there are none.
fn serialize_key_ids<S: Serializer>(
    keys: &BTreeMap<String, SecretString>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    if keys.is_empty() {
        return ser.serialize_none();
    }
    let ids: Vec<String> = keys.keys().map(|id| format!("{id}=***")).collect();
    ser.serialize_some(&ids.join(","))
}

/// The environments as configured, on one line of JSON (`config explain` shows the map as
/// one key, as it does `crypto.keys`); none as unset.
fn serialize_environments<S: Serializer>(
    all: &BTreeMap<String, EnvironmentSection>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    if all.is_empty() {
        return ser.serialize_none();
    }
    let text = serde_json::to_string(all).map_err(serde::ser::Error::custom)?;
    ser.serialize_some(&text)
}

/// Reads an optional string; an empty or blank one counts as unset.
fn deserialize_text<'de, D: Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    let value = Option::<String>::deserialize(de)?;
    Ok(value.filter(|s| !s.trim().is_empty()))
}

/// Reads an optional path; an empty or blank one counts as unset.
fn deserialize_path<'de, D: Deserializer<'de>>(de: D) -> Result<Option<PathBuf>, D::Error> {
    Ok(deserialize_text(de)?.map(PathBuf::from))
}

fn serialize_opt_path<S: Serializer>(value: &Option<PathBuf>, ser: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(path) => ser.serialize_some(&path.to_string_lossy()),
        None => ser.serialize_none(),
    }
}

/// Paths need not be UTF-8; show them lossily rather than failing.
fn serialize_path<S: Serializer>(value: &Path, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(&value.to_string_lossy())
}
