//! A tenant's egress allowlist, which its admins set: the hosts its tools and model
//! providers may call. It narrows the installation's [`EgressPolicy`] and never widens
//! it: a call must pass both. Entries match a URL's host as written: a name or `*.`
//! domain matches host names, an address or range matches literal addresses (a name is
//! not matched by the range it resolves into). Definitions are checked against it (a tool
//! or provider URL outside it is refused with `egress_denied`), and so is every call the
//! engine makes, from the next turn after a change.

use crate::egress::{EgressPolicy, HostRule};
use crate::error::CoreError;
use crate::model::{Action, AuditAction, AuditEntry, EgressAllowlist, Principal};
use crate::ports::{Clock, EgressAllowlistStore};
use baton_events::TenantId;
use serde::Deserialize;
use std::sync::Arc;

/// The most hosts an allowlist holds.
pub const MAX_HOSTS: usize = 100;

/// A new allowlist.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEgressAllowlist {
    /// Host names (`api.example.com`), `*.` and a domain (`*.example.com`: the names
    /// under it), addresses or ranges (`203.0.113.0/24`); at most 100. Empty: the
    /// installation's policy alone.
    pub hosts: Vec<String>,
}

/// The allowlist use cases, and the rules the definitions are checked against.
#[derive(Clone)]
pub struct EgressAllowlists {
    pub store: Arc<dyn EgressAllowlistStore>,
    /// The installation's policy, which the allowlist narrows.
    pub policy: Arc<EgressPolicy>,
    pub clock: Arc<dyn Clock>,
}

impl EgressAllowlists {
    /// The tenant's allowlist (admin); empty when it never set one.
    #[tracing::instrument(name = "egress_allowlists.get", skip_all)]
    pub async fn get(&self, p: &Principal) -> Result<EgressAllowlist, CoreError> {
        p.require(Action::ManageEgress)?;
        Ok(self
            .store
            .get_egress_allowlist(p.tenant)
            .await?
            .unwrap_or_default())
    }

    /// Replaces the tenant's allowlist (admin). Every entry must parse; they are kept in
    /// their matched form (lower case, ranges cut to their network), once each, in order.
    #[tracing::instrument(name = "egress_allowlists.set", skip_all)]
    pub async fn set(
        &self,
        p: &Principal,
        new: NewEgressAllowlist,
    ) -> Result<EgressAllowlist, CoreError> {
        p.require(Action::ManageEgress)?;
        let now = self.clock.now();
        let allowlist = EgressAllowlist {
            hosts: normalize(&new.hosts)?,
            updated_at: Some(now),
        };
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::EgressAllowlistSet,
            p.tenant.to_string(),
            serde_json::json!({"hosts": allowlist.hosts}),
        );
        self.store
            .put_egress_allowlist(p.tenant, &allowlist, &audit)
            .await?;
        Ok(allowlist)
    }

    /// The tenant's rules: empty when it keeps no allowlist.
    pub async fn rules(&self, tenant: TenantId) -> Result<Vec<HostRule>, CoreError> {
        Ok(match self.store.get_egress_allowlist(tenant).await? {
            Some(allowlist) => allowlist.rules()?,
            None => Vec::new(),
        })
    }

    /// A definition's URL (`field`) the installation's policy or the tenant's allowlist
    /// refuses is `egress_denied`, naming the field and the rule.
    pub async fn check_definition(
        &self,
        tenant: TenantId,
        field: &str,
        url: &url::Url,
    ) -> Result<(), CoreError> {
        let rules = self.rules(tenant).await?;
        self.policy.check_definition(field, url, &rules)
    }
}

/// The entries in their matched form, once each, or what is wrong with the first bad one.
fn normalize(hosts: &[String]) -> Result<Vec<String>, CoreError> {
    if hosts.len() > MAX_HOSTS {
        return Err(CoreError::invalid(format!(
            "hosts holds {} entries; at most {MAX_HOSTS}",
            hosts.len()
        )));
    }
    let mut out: Vec<String> = Vec::with_capacity(hosts.len());
    for (i, host) in hosts.iter().enumerate() {
        let rule = HostRule::parse(host)
            .map_err(|e| CoreError::invalid(format!("hosts[{i}]: {e}")))?
            .to_string();
        if !out.contains(&rule) {
            out.push(rule);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_kept_in_their_matched_form_once() {
        let hosts = [
            "API.example.com",
            "*.Example.org",
            "10.1.2.3/8",
            "api.example.com",
        ]
        .map(String::from);
        assert_eq!(
            normalize(&hosts).expect("valid"),
            ["api.example.com", "*.example.org", "10.0.0.0/8"]
        );
    }

    #[test]
    fn a_bad_entry_is_named_by_its_index() {
        let hosts = ["api.example.com", "http://x/"].map(String::from);
        let err = normalize(&hosts).expect_err("a URL is no host");
        assert!(err.to_string().contains("hosts[1]"), "{err}");
        let many = vec!["a.example.com".to_string(); MAX_HOSTS + 1];
        assert!(normalize(&many).is_err());
    }
}
