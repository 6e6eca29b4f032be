//! Baton's one way out: the HTTP client every call to a URL a tenant chose goes through
//! (model providers, http tools, and whatever calls out later), under the installation's
//! [`EgressPolicy`].
//!
//! The policy is applied where it matters. A URL whose host is an address (in any of the
//! spellings the URL parser normalizes: `127.1`, `2130706433`, `0x7f.1`,
//! `[::ffff:127.0.0.1]`) is judged before anything is sent; a host name is judged by the
//! addresses it resolves to, in the client's own resolver, which hands the connector only
//! the admitted ones: so a name that resolves to a denied address, or that rebinds to one
//! between a check and the connection, never gets a connection. Redirects are not
//! followed, and no proxy from the environment is used. A refusal names the rule, never
//! the address.

mod mask;
pub mod mcp;
pub mod proxy;
mod webhooks;

pub use mask::{Mask, cut};
pub use webhooks::EXCERPT_CHARS;

use baton_core::egress::{Denied, EgressPolicy, HostRule};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use thiserror::Error;

/// How long making a connection (and its TLS handshake) may take.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub use baton_core::egress;

#[derive(Debug, Error)]
pub enum EgressError {
    #[error("cannot build the outbound HTTP client: {0}")]
    Client(String),
}

/// The outbound client and its policy; cheap to clone (one connection pool).
#[derive(Clone)]
pub struct Egress {
    policy: Arc<EgressPolicy>,
    client: reqwest::Client,
    /// OAuth access tokens of MCP servers, shared by every tenant's connections (keyed by
    /// server and client credentials).
    mcp_tokens: mcp::TokenCache,
    /// The protocol revision each MCP server agreed on last.
    mcp_eras: mcp::Eras,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// Makes ring the process's rustls crypto provider, unless one was chosen already. reqwest
/// is built without a provider of its own (its default, aws-lc-rs, is a long C build), so
/// a process installs one before it builds a client; calling this again does nothing.
pub fn use_ring_for_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Egress {
    pub fn new(policy: impl Into<Arc<EgressPolicy>>) -> Result<Self, EgressError> {
        let policy = policy.into();
        use_ring_for_tls();
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(PolicyResolver {
                policy: policy.clone(),
            }))
            .redirect(reqwest::redirect::Policy::none())
            // A connection not made in this time is a failure to connect (nothing was
            // sent), not a timeout of a request that may have been.
            .connect_timeout(CONNECT_TIMEOUT)
            .no_proxy()
            .build()
            .map_err(|e| EgressError::Client(e.to_string()))?;
        Ok(Self {
            policy,
            client,
            mcp_tokens: mcp::TokenCache::default(),
            mcp_eras: mcp::Eras::default(),
        })
    }

    pub fn policy(&self) -> &EgressPolicy {
        &self.policy
    }

    /// The client for calls a tenant chose: the policy, narrowed by `hosts`, the tenant's
    /// allowlist (empty when it keeps none).
    pub fn for_tenant(&self, hosts: Vec<HostRule>) -> TenantEgress {
        TenantEgress {
            egress: self.clone(),
            hosts: hosts.into(),
        }
    }

    /// The rule that refused a call at connect time (its host resolved to denied
    /// addresses only), if that is why `error` happened.
    pub fn denied(error: &reqwest::Error) -> Option<Denied> {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = source {
            if let Some(denied) = e.downcast_ref::<Denied>() {
                return Some(denied.clone());
            }
            source = e.source();
        }
        None
    }
}

/// The outbound client of one tenant's calls; cheap to clone (the client is shared).
#[derive(Debug, Clone)]
pub struct TenantEgress {
    egress: Egress,
    hosts: Arc<[HostRule]>,
}

impl TenantEgress {
    /// The OAuth tokens of MCP servers bought so far.
    pub fn mcp_tokens(&self) -> mcp::TokenCache {
        self.egress.mcp_tokens.clone()
    }

    /// The protocol revisions MCP servers agreed on.
    pub fn mcp_eras(&self) -> mcp::Eras {
        self.egress.mcp_eras.clone()
    }

    /// A request to `url`, when the policy and the tenant's allowlist let it out; else the
    /// rule that refused it, counted. The addresses a host name resolves to are judged
    /// again when the request connects.
    pub fn request(
        &self,
        method: reqwest::Method,
        url: &url::Url,
    ) -> Result<reqwest::RequestBuilder, Denied> {
        self.egress
            .policy
            .check_url(url, &self.hosts)
            .inspect_err(count)?;
        Ok(self.egress.client.request(method, url.clone()))
    }
}

/// What a failed call may tell the tenant: the kind of failure, never the text of the
/// operating system's error or an address (which would make the client a port scanner).
pub fn describe(error: &reqwest::Error) -> &'static str {
    if Egress::denied(error).is_some() {
        "the host may not be called from this installation"
    } else if error.is_connect() && error.is_timeout() {
        "connecting timed out"
    } else if error.is_connect() {
        "could not connect"
    } else if error.is_timeout() {
        "the request timed out"
    } else if error.is_body() || error.is_decode() {
        "the answer broke off"
    } else {
        "the request failed"
    }
}

/// Whether a failed call may have reached the other side: anything but a failure to
/// connect (or a refusal by the policy, which is one) or a request that could not be
/// built may have been sent.
pub fn maybe_sent(error: &reqwest::Error) -> bool {
    !error.is_connect() && !error.is_builder() && Egress::denied(error).is_none()
}

/// The addresses of this machine's interfaces that are not loopback: a replica never
/// calls itself through them (loopback is judged by its own rule).
pub fn own_addresses() -> Vec<IpAddr> {
    match if_addrs::get_if_addrs() {
        Ok(interfaces) => interfaces
            .into_iter()
            .map(|i| i.ip())
            .filter(|ip| !ip.is_loopback())
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list this machine's addresses for the egress policy");
            Vec::new()
        }
    }
}

fn count(denied: &Denied) {
    metrics::counter!("baton_egress_denied_total", "rule" => denied.rule.clone()).increment(1);
}

/// Resolves names with the system resolver and keeps the addresses the policy admits.
struct PolicyResolver {
    policy: Arc<EgressPolicy>,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let admitted = policy
                .admit(found.map(|a| a.ip()))
                .inspect_err(count)
                .map_err(|denied| Box::new(denied) as Box<dyn std::error::Error + Send + Sync>)?;
            let addrs: Addrs = Box::new(admitted.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}
