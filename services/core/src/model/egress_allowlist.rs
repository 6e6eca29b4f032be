//! A tenant's egress allowlist: the hosts its outbound calls may reach. It only narrows
//! the installation's egress policy ([`crate::egress`]).

use crate::egress::HostRule;
use crate::error::StoreError;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// The hosts a tenant's tools and model providers may call; empty, the operator's policy
/// alone decides.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EgressAllowlist {
    /// Host names (`api.example.com`), domains with every name under them
    /// (`*.example.com`), addresses and address ranges (`203.0.113.0/24`), in the form
    /// they are matched in.
    pub hosts: Vec<String>,
    /// When it was last set; `null` when it never was.
    pub updated_at: Option<DateTime<Utc>>,
}

impl EgressAllowlist {
    /// The rules, for the policy. A stored host that no longer parses is unreadable data.
    pub fn rules(&self) -> Result<Vec<HostRule>, StoreError> {
        self.hosts
            .iter()
            .map(|h| {
                HostRule::parse(h).map_err(|e| {
                    StoreError::Unreadable(format!("the egress allowlist holds {h:?}: {e}"))
                })
            })
            .collect()
    }
}
