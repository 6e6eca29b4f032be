//! The egress policy: which addresses and hosts an outbound call a tenant chose (a tool's
//! endpoint, a model provider, an MCP server, a webhook) may reach. Pure rules, no I/O:
//! the definition-time checks of the use cases and the one outbound client
//! (`baton-egress`, which applies them to the addresses a name resolves to, at connect
//! time) both ask it.
//!
//! In order: the operator's denylist refuses; the operator's allowlist admits; then the
//! built-in categories refuse what no tenant should reach from a replica: loopback (unless
//! the policy allows it, as the embedded tier's does), link-local (cloud metadata at
//! 169.254.169.254 and fd00:ec2::254 among them), private (RFC 1918 and unique local),
//! shared (CGNAT), multicast, unspecified, broadcast and reserved ranges, and the replica's
//! own addresses. IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4)
//! are judged by that address. A tenant's allowlist of hosts can only narrow this.

use ipnet::IpNet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use thiserror::Error;

/// Why a call may not go out: the rule, never the address a name resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("egress denied: {rule}")]
pub struct Denied {
    pub rule: String,
}

impl Denied {
    fn by(rule: impl Into<String>) -> Self {
        Denied { rule: rule.into() }
    }
}

/// A host the operator (or a tenant) names: an address range, an exact host name, or every
/// name under a domain (`*.example.com`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRule {
    Net(IpNet),
    Name(String),
    Suffix(String),
}

impl HostRule {
    /// Parses `10.0.0.0/8`, `10.1.2.3`, `fd00::/8`, `api.example.com` or `*.example.com`.
    pub fn parse(text: &str) -> Result<HostRule, String> {
        let t = text.trim();
        if let Ok(net) = t.parse::<IpNet>() {
            return Ok(HostRule::Net(net.trunc()));
        }
        if let Ok(ip) = t.parse::<IpAddr>() {
            return Ok(HostRule::Net(IpNet::from(ip)));
        }
        let name = t.to_ascii_lowercase();
        let (suffix, bare) = match name.strip_prefix("*.") {
            Some(rest) => (true, rest.to_string()),
            None => (false, name),
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if bare.is_empty() || bare.len() > 253 || !bare.split('.').all(label_ok) {
            return Err(format!(
                "{text:?} is neither an address range (10.0.0.0/8), an address, a host name \
                 nor `*.` and a domain"
            ));
        }
        Ok(if suffix {
            HostRule::Suffix(bare)
        } else {
            HostRule::Name(bare)
        })
    }

    fn matches_ip(&self, ip: IpAddr) -> bool {
        matches!(self, HostRule::Net(net) if net.contains(&ip))
    }

    fn matches_name(&self, host: &str) -> bool {
        match self {
            HostRule::Net(_) => false,
            HostRule::Name(name) => host == name,
            HostRule::Suffix(domain) => host
                .strip_suffix(domain.as_str())
                .is_some_and(|rest| rest.ends_with('.')),
        }
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostRule::Net(net) => write!(f, "{net}"),
            HostRule::Name(name) => f.write_str(name),
            HostRule::Suffix(domain) => write!(f, "*.{domain}"),
        }
    }
}

/// The policy of one installation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Loopback may be reached (the embedded tier, whose owner is its only tenant).
    pub allow_loopback: bool,
    /// Admitted even where a built-in category refuses (an internal service tools use).
    pub allow: Vec<HostRule>,
    /// Refused whatever else says.
    pub deny: Vec<HostRule>,
    /// The replica's own addresses: never reached, loopback allowed or not.
    pub own_addresses: Vec<IpAddr>,
}

impl EgressPolicy {
    /// The team tier's default: every built-in category refused, loopback too.
    pub fn strict() -> Self {
        Self::default()
    }

    /// The embedded tier's default: as strict, but loopback allowed.
    pub fn local() -> Self {
        Self {
            allow_loopback: true,
            ..Self::default()
        }
    }

    /// Whether a call may go to `url` as written: an `http` or `https` URL without
    /// credentials in it, whose host, when it is an address, the policy admits (a name is
    /// judged by the operator's rules here and by its addresses at connect time), and
    /// which `tenant_hosts`, when the tenant keeps such a list, names.
    pub fn check_url(&self, url: &url::Url, tenant_hosts: &[HostRule]) -> Result<(), Denied> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Denied::by("only http and https URLs"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Denied::by(
                "credentials in the URL (send them as a secret header)",
            ));
        }
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check_host_ip(IpAddr::V4(ip), tenant_hosts),
            Some(url::Host::Ipv6(ip)) => self.check_host_ip(IpAddr::V6(ip), tenant_hosts),
            Some(url::Host::Domain(name)) => self.check_name(name, tenant_hosts),
            None => Err(Denied::by("a URL without a host")),
        }
    }

    fn check_host_ip(&self, ip: IpAddr, tenant_hosts: &[HostRule]) -> Result<(), Denied> {
        if !tenant_hosts.is_empty() && !tenant_hosts.iter().any(|r| r.matches_ip(ip)) {
            return Err(Denied::by("not in the tenant's egress allowlist"));
        }
        self.check_ip(ip)
    }

    /// The name-level rules: the operator's lists, and the tenant's allowlist.
    pub fn check_name(&self, host: &str, tenant_hosts: &[HostRule]) -> Result<(), Denied> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(rule) = self.deny.iter().find(|r| r.matches_name(&host)) {
            return Err(Denied::by(format!("the operator's denylist ({rule})")));
        }
        if !tenant_hosts.is_empty() && !tenant_hosts.iter().any(|r| r.matches_name(&host)) {
            return Err(Denied::by("not in the tenant's egress allowlist"));
        }
        Ok(())
    }

    /// Whether an address may be connected to.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Denied> {
        let ip = ip.to_canonical();
        if let Some(rule) = self.deny.iter().find(|r| r.matches_ip(ip)) {
            return Err(Denied::by(format!("the operator's denylist ({rule})")));
        }
        if self
            .own_addresses
            .iter()
            .any(|own| own.to_canonical() == ip)
        {
            return Err(Denied::by("the replica's own address"));
        }
        if self.allow.iter().any(|r| r.matches_ip(ip)) {
            return Ok(());
        }
        match category(ip) {
            Some("loopback") if self.allow_loopback => Ok(()),
            Some(name) => Err(Denied::by(name)),
            None => Ok(()),
        }
    }

    /// The addresses `host` resolved to that may be connected to; when none may, the rule
    /// that refused the first.
    pub fn admit(&self, resolved: impl IntoIterator<Item = IpAddr>) -> Result<Vec<IpAddr>, Denied> {
        let mut admitted = Vec::new();
        let mut first_refusal = None;
        for ip in resolved {
            match self.check_ip(ip) {
                Ok(()) => admitted.push(ip),
                Err(denied) => {
                    first_refusal.get_or_insert(denied);
                }
            }
        }
        match (admitted.is_empty(), first_refusal) {
            (false, _) => Ok(admitted),
            (true, Some(denied)) => Err(denied),
            (true, None) => Err(Denied::by("a name that resolves to no address")),
        }
    }
}

impl EgressPolicy {
    /// What a definition (a tool's URL, a provider's base URL) answers when the policy, or
    /// the tenant's allowlist (`tenant_hosts`, empty when it keeps none), refuses `url` in
    /// `field`: `egress_denied`, naming the field and the rule.
    pub fn check_definition(
        &self,
        field: &str,
        url: &url::Url,
        tenant_hosts: &[HostRule],
    ) -> Result<(), crate::CoreError> {
        self.check_url(url, tenant_hosts).map_err(|denied| {
            crate::CoreError::EgressDenied(format!(
                "{field} may not be called from this installation: {denied}"
            ))
        })
    }
}

/// The built-in category an address falls in, if any.
fn category(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => category_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => category_v4(v4),
            None => category_v6(v6),
        },
    }
}

fn category_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(match () {
        () if ip.is_loopback() => "loopback",
        () if ip.is_unspecified() || a == 0 => "unspecified",
        () if ip.is_link_local() => "link-local",
        () if ip.is_private() => "private",
        () if a == 100 && (64..128).contains(&b) => "shared address space (CGNAT)",
        () if ip.is_multicast() => "multicast",
        () if ip.is_broadcast() => "broadcast",
        // 192.0.0.0/24 (protocol assignments), 198.18.0.0/15 (benchmarking), 240.0.0.0/4.
        () if (a == 192 && b == 0 && ip.octets()[2] == 0)
            || (a == 198 && (18..20).contains(&b))
            || a >= 240 =>
        {
            "reserved"
        }
        () => return None,
    })
}

fn category_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(match () {
        () if ip.is_loopback() => "loopback",
        () if ip.is_unspecified() => "unspecified",
        () if first & 0xffc0 == 0xfe80 => "link-local",
        // Unique local, fd00:ec2::254 (a cloud's metadata) among them.
        () if first & 0xfe00 == 0xfc00 => "private",
        () if ip.is_multicast() => "multicast",
        // Deprecated site-local.
        () if first & 0xffc0 == 0xfec0 => "private",
        () => return None,
    })
}

/// The IPv4 address an IPv6 one carries: mapped (`::ffff:a.b.c.d`), compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) or 6to4 (`2002:aabb:ccdd::/48`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_loopback() && !ip.is_unspecified() {
        return Some(tail());
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail());
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

#[cfg(test)]
mod tests;
