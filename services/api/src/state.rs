//! What every handler can reach: the use cases, built once by the server, and the HTTP
//! settings.

use baton_core::agents::Agents;
use baton_core::api_keys::ApiKeys;
use baton_core::audit::Audit;
use baton_core::auth::Authenticator;
use baton_core::egress_allowlists::EgressAllowlists;
use baton_core::encryption_keys::EncryptionKeys;
use baton_core::invitations::Invitations;
use baton_core::mcp_servers::McpServers;
use baton_core::members::Members;
use baton_core::retention::Retention;
use baton_core::runs::{Checkpoints, Runs};
use baton_core::schedules::Schedules;
use baton_core::secrets::Secrets;
use baton_core::tools::Tools;
use baton_core::webhooks::Webhooks;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// HTTP-level settings, from the server's configuration.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Largest accepted request body.
    pub body_limit_bytes: usize,
    /// Comment lines sent on idle SSE streams.
    pub sse_keepalive: Duration,
    /// How long an idle SSE stream waits before re-checking the database.
    pub sse_resync: Duration,
    /// Largest total size of a request's headers.
    pub header_limit_bytes: usize,
    /// Host names (lower case, maybe with `:port`) answered; empty: any.
    pub allowed_hosts: Vec<String>,
    /// Web origins (`scheme://host[:port]`, lower case) allowed to call from a browser.
    pub allowed_origins: Vec<String>,
    /// How long a request may take to arrive and be answered (an event stream: until it
    /// opens).
    pub request_timeout: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            body_limit_bytes: 1024 * 1024,
            sse_keepalive: Duration::from_secs(15),
            sse_resync: Duration::from_secs(2),
            header_limit_bytes: 16 * 1024,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// What every handler can reach, shared: a request's extractors and layers each take a
/// clone, and cloning the use cases themselves (dozens of `Arc`s and a few strings) cost
/// more than some requests' own work.
#[derive(Clone)]
pub struct AppState(Arc<Services>);

impl AppState {
    pub fn new(services: Services) -> Self {
        AppState(Arc::new(services))
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

/// The use cases and settings behind an [`AppState`].
pub struct Services {
    pub runs: Runs,
    pub agents: Agents,
    pub tools: Tools,
    /// The tenant's egress allowlist, for its admins.
    pub egress_allowlists: EgressAllowlists,
    /// The execution environments workspace commands run in.
    pub environments: baton_core::environments::Environments,
    /// The tenant's retention policy and the job's progress on it, for its admins.
    pub retention: Retention,
    /// The tenant's schedules, and "run now".
    pub schedules: Schedules,
    /// The tenant's webhook endpoints and their deliveries.
    pub webhooks: Webhooks,
    pub mcp_servers: McpServers,
    pub checkpoints: Checkpoints,
    /// Runs' files: list, download, upload.
    pub workspaces: baton_core::workspace::Workspaces,
    /// Write-only for clients; the engine reads values through its own `SecretReader`.
    pub secrets: Secrets,
    /// The tenant's audit stream, for its admins.
    pub audit: Audit,
    /// The tenant's records per encryption key, and reseals run on this replica.
    pub encryption_keys: EncryptionKeys,
    pub api_keys: ApiKeys,
    pub members: Members,
    /// The invited user's side of invitations.
    pub invitations: Invitations,
    /// Credentials to principals: every extractor of the caller goes through it.
    pub auth: Authenticator,
    /// Tickets that open a run's event stream from a browser.
    pub stream_tickets: baton_core::stream_tickets::StreamTickets,
    /// Users, login sessions and the login rate limits.
    pub accounts: crate::accounts::Accounts,
    pub http: HttpSettings,
    /// Request rate limits per key and per tenant.
    pub limits: crate::limits::RateLimits,
    /// Open event streams per caller and per tenant.
    pub streams: crate::streams::StreamLimits,
    /// Open event streams by their callers, ended when their credentials end.
    pub revocations: crate::revocations::Revocations,
    /// Why this replica cannot run workspace commands (no usable bubblewrap), if it
    /// cannot: `/readyz` says `code_tools: unavailable`.
    pub code_tools_unavailable: Option<String>,
    /// This replica's identity (`name/boot`), shown by `/readyz`.
    pub replica: String,
    /// Cancelled when the server shuts down: SSE streams end so shutdown is not held up.
    pub shutdown: CancellationToken,
    /// Background work started by requests (a reseal); the server waits for it at shutdown.
    pub tasks: TaskTracker,
}
