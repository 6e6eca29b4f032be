//! What the API keeps for users and login sessions: the use cases, and the login rate
//! limits (`auth.login_account_rate_limit`, `auth.login_address_rate_limit`).
//!
//! Login attempts are counted per account (the normalized email, whether or not an
//! account has it, so a limit says nothing about which accounts exist) and per source
//! address (an IPv6 address counts as its /64, which one host usually holds whole). Every
//! attempt counts, before any password is checked; the buckets hold a minute's worth.
//! Like the request limits, each replica counts its own attempts.

use crate::limits::{Buckets, Exceeded};
use baton_core::users::{MAX_EMAIL_CHARS, Users};
use std::net::IpAddr;

/// The user and session use cases, and the login limits of this replica.
#[derive(Clone)]
pub struct Accounts {
    pub users: Users,
    pub login_limits: LoginLimits,
}

/// Login attempt limits per account and per source address; cheap to clone.
#[derive(Clone, Default)]
pub struct LoginLimits {
    accounts: Buckets<String>,
    addresses: Buckets<IpAddr>,
}

impl LoginLimits {
    /// Limits of `per_account` and `per_address` attempts a minute (0: none).
    pub fn new(per_account: u32, per_address: u32) -> Self {
        Self {
            accounts: Buckets::per_minute(per_account),
            addresses: Buckets::per_minute(per_address),
        }
    }

    /// Counts an attempt from `address` (`None` when the server does not know it, which
    /// counts as one shared address).
    pub fn check_address(&self, address: Option<IpAddr>) -> Result<(), Exceeded> {
        let key = address.map_or(IpAddr::from([0u8; 16]), address_key);
        self.addresses
            .check(&key, "login attempts from this address")
    }

    /// Counts an attempt on the account of `email` (normalized).
    pub fn check_account(&self, email: &str) -> Result<(), Exceeded> {
        // Longer emails belong to no account; their prefix is key enough.
        let key: String = email.chars().take(MAX_EMAIL_CHARS + 1).collect();
        self.accounts.check(&key, "login attempts on this account")
    }
}

/// The address a login is counted under: IPv4 as is (also when mapped into IPv6), IPv6
/// by its /64.
fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & (u128::MAX << 64);
                IpAddr::V6(bits.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_account_gets_its_minute_of_attempts_then_waits() {
        let limits = LoginLimits::new(3, 0);
        for _ in 0..3 {
            assert!(limits.check_account("ada@example.com").is_ok());
        }
        let e = limits.check_account("ada@example.com").expect_err("spent");
        assert_eq!(e.what, "login attempts on this account");
        assert!(e.wait > Duration::from_secs(10) && e.wait <= Duration::from_secs(20));
        assert!(limits.check_account("bob@example.com").is_ok());
        assert!(limits.check_address(None).is_ok(), "no address limit");
    }

    #[test]
    fn an_ipv6_host_counts_as_its_64_and_mapped_ipv4_as_ipv4() {
        let limits = LoginLimits::new(0, 2);
        let a: IpAddr = "2001:db8::1".parse().expect("ip");
        let b: IpAddr = "2001:db8::ffff:2".parse().expect("ip");
        assert!(limits.check_address(Some(a)).is_ok());
        assert!(limits.check_address(Some(b)).is_ok());
        let e = limits
            .check_address(Some("2001:db8::3".parse().expect("ip")))
            .expect_err("one /64");
        assert_eq!(e.what, "login attempts from this address");
        assert!(
            limits
                .check_address(Some("2001:db8:0:1::1".parse().expect("ip")))
                .is_ok()
        );
        let v4: IpAddr = "192.0.2.7".parse().expect("ip");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().expect("ip");
        assert_eq!(address_key(mapped), v4);
    }

    #[test]
    fn zero_means_no_limit() {
        let limits = LoginLimits::new(0, 0);
        assert!((0..1000).all(|_| limits.check_account("a@b").is_ok()));
        assert!((0..1000).all(|_| limits.check_address(None).is_ok()));
    }
}
