//! Execution environments: the operator's (from configuration, read-only here) and each
//! tenant's own, which narrow one of the operator's. [`Environments::resolve`] gives
//! the engine the environment a command runs in when it acquires it, and
//! [`acting_role`] the role of whoever a turn acts for, checked against the
//! environment's `execute_role` there (not only when a tool is defined: a key revoked or
//! a member demoted since loses it at once).

use crate::error::CoreError;
use crate::model::{
    Action, AuditAction, AuditEntry, BaseEnvironment, DEFAULT_ENVIRONMENT, Environment,
    EnvironmentLimits, EnvironmentView, Principal, Role, TenantEnvironment,
};
use crate::ports::{ApiKeyStore, Clock, EnvironmentStore, UserStore};
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The longest environment name.
pub const MAX_NAME_CHARS: usize = 64;
/// The most environments of its own a tenant keeps.
pub const MAX_PER_TENANT: usize = 100;

/// A tenant's environment as a client defines it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEnvironment {
    /// The operator's environment it narrows (`GET /v1/environments` lists them);
    /// default `default`.
    #[serde(default = "default_base")]
    pub base: String,
    /// Whether commands may reach hosts, through the egress policy and the tenant's
    /// allowlist; only where the base allows it. Commands with network are mutations:
    /// one cut off by a crash is held `uncertain`, never run again unasked.
    #[serde(default)]
    pub network: bool,
    /// Each at most the base's.
    #[serde(default)]
    pub limits: EnvironmentLimits,
    /// The least role of whoever asked for a turn for its commands to run here; at least
    /// the base's (default: the base's).
    #[serde(default)]
    pub execute_role: Option<Role>,
}

fn default_base() -> String {
    DEFAULT_ENVIRONMENT.into()
}

/// The operator's environments, by name; `default` is always there.
#[derive(Debug, Clone)]
pub struct Bases(BTreeMap<String, BaseEnvironment>);

impl Bases {
    /// `configured`, with the built-in `default` unless the operator defines one.
    pub fn new(configured: impl IntoIterator<Item = BaseEnvironment>) -> Self {
        let mut all: BTreeMap<String, BaseEnvironment> = configured
            .into_iter()
            .map(|b| (b.name.clone(), b))
            .collect();
        all.entry(DEFAULT_ENVIRONMENT.into())
            .or_insert_with(BaseEnvironment::builtin);
        Self(all)
    }

    pub fn get(&self, name: &str) -> Option<&BaseEnvironment> {
        self.0.get(name)
    }
}

impl Default for Bases {
    fn default() -> Self {
        Self::new([])
    }
}

/// The environment use cases.
#[derive(Clone)]
pub struct Environments {
    pub store: Arc<dyn EnvironmentStore>,
    pub bases: Arc<Bases>,
    pub clock: Arc<dyn Clock>,
}

impl Environments {
    /// The operator's environments, then the tenant's (viewer).
    #[tracing::instrument(name = "environments.list", skip_all)]
    pub async fn list(&self, p: &Principal) -> Result<Vec<EnvironmentView>, CoreError> {
        p.require(Action::ReadEnvironments)?;
        let mut out: Vec<EnvironmentView> = self.bases.0.values().map(base_view).collect();
        let own = self.store.list_environments(p.tenant).await?;
        out.extend(own.iter().map(tenant_view));
        Ok(out)
    }

    /// Defines or replaces the tenant's environment `name` (admin).
    #[tracing::instrument(name = "environments.put", skip_all)]
    pub async fn put(
        &self,
        p: &Principal,
        name: &str,
        new: NewEnvironment,
    ) -> Result<EnvironmentView, CoreError> {
        p.require(Action::ManageEnvironments)?;
        check_name(name)?;
        if self.bases.get(name).is_some() {
            return Err(CoreError::AlreadyExists(format!(
                "{name:?} is an environment of the operator's; choose another name"
            )));
        }
        let base = self.bases.get(&new.base).ok_or_else(|| {
            CoreError::invalid(format!(
                "base: the operator defines no environment {:?}",
                new.base
            ))
        })?;
        if new.network && !base.network {
            return Err(CoreError::invalid(format!(
                "network: the base {:?} allows no network",
                base.name
            )));
        }
        check_limits(&new.limits, &base.limits)?;
        let execute_role = new.execute_role.unwrap_or(base.execute_role);
        if execute_role < base.execute_role {
            return Err(CoreError::invalid(format!(
                "execute_role: at least {} (the base's)",
                base.execute_role.as_str()
            )));
        }
        let own = self.store.list_environments(p.tenant).await?;
        if own.len() >= MAX_PER_TENANT && !own.iter().any(|e| e.name == name) {
            return Err(CoreError::invalid(format!(
                "a tenant keeps at most {MAX_PER_TENANT} environments"
            )));
        }
        let now = self.clock.now();
        let env = TenantEnvironment {
            name: name.into(),
            base: base.name.clone(),
            network: new.network,
            limits: new.limits,
            execute_role,
            updated_at: now,
        };
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::EnvironmentSet,
            name.to_string(),
            serde_json::json!({
                "base": env.base, "network": env.network,
                "execute_role": env.execute_role, "limits": env.limits,
            }),
        );
        self.store.put_environment(p.tenant, &env, &audit).await?;
        Ok(tenant_view(&env))
    }

    /// Deletes the tenant's environment `name` (admin). Tools that name it fail clearly
    /// at their next call.
    #[tracing::instrument(name = "environments.delete", skip_all)]
    pub async fn delete(&self, p: &Principal, name: &str) -> Result<(), CoreError> {
        p.require(Action::ManageEnvironments)?;
        let audit = AuditEntry::by(
            p,
            self.clock.now(),
            AuditAction::EnvironmentDeleted,
            name.to_string(),
            serde_json::json!({}),
        );
        match self
            .store
            .delete_environment(p.tenant, name, &audit)
            .await?
        {
            true => Ok(()),
            false => Err(CoreError::NotFound("environment")),
        }
    }

    /// The environment `name` as tenant `tenant`'s commands see it: the operator's of
    /// that name, or the tenant's own on its base; `None` when neither exists (or the
    /// tenant's base is no longer configured).
    pub async fn resolve(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> Result<Option<Environment>, CoreError> {
        if let Some(base) = self.bases.get(name) {
            return Ok(Some(Environment::of_base(base.clone())));
        }
        let Some(own) = self.store.get_environment(tenant, name).await? else {
            return Ok(None);
        };
        Ok(self
            .bases
            .get(&own.base)
            .map(|base| Environment::of_tenant(&own, base.clone())))
    }
}

fn check_name(name: &str) -> Result<(), CoreError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(CoreError::invalid(format!(
            "name: 1 to {MAX_NAME_CHARS} of a-z, 0-9, - and _"
        )))
    }
}

fn check_limits(mine: &EnvironmentLimits, base: &EnvironmentLimits) -> Result<(), CoreError> {
    let set = [
        ("wall_ms", mine.wall_ms),
        ("memory_bytes", mine.memory_bytes),
        ("processes", mine.processes),
        ("open_files", mine.open_files),
    ];
    if let Some((name, _)) = set.iter().find(|(_, v)| *v == Some(0)) {
        return Err(CoreError::invalid(format!(
            "limits.{name}: at least 1 (leave it out for the base's)"
        )));
    }
    match mine.above(base) {
        Some(name) => Err(CoreError::invalid(format!(
            "limits.{name}: at most the base's"
        ))),
        None => Ok(()),
    }
}

fn base_view(b: &BaseEnvironment) -> EnvironmentView {
    EnvironmentView {
        name: b.name.clone(),
        source: "operator".into(),
        base: None,
        network: b.network,
        limits: b.limits,
        execute_role: b.execute_role,
        layers: b.layers.clone(),
        updated_at: None,
    }
}

fn tenant_view(e: &TenantEnvironment) -> EnvironmentView {
    EnvironmentView {
        name: e.name.clone(),
        source: "tenant".into(),
        base: Some(e.base.clone()),
        network: e.network,
        limits: e.limits,
        execute_role: e.execute_role,
        layers: Vec::new(),
        updated_at: Some(e.updated_at),
    }
}

/// The role `actor` (as events record it) acts with in `tenant` at `now`: a key's role
/// while it is neither revoked nor expired, a user's membership, the embedded tier's
/// local owner; schedules and delegations act as members (as their runs were started).
/// `None`: the actor has no rights in the tenant now.
pub async fn acting_role(
    keys: &dyn ApiKeyStore,
    users: &dyn UserStore,
    tenant: TenantId,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<Option<Role>, CoreError> {
    let id = |s: &str| uuid::Uuid::parse_str(s).ok();
    if let Some(key) = actor.strip_prefix("key:") {
        let Some(key) = id(key) else { return Ok(None) };
        let found = keys.get_api_key(tenant, key).await?;
        return Ok(found
            .filter(|k| k.key.revoked_at.is_none() && k.key.expires_at.is_none_or(|at| at > now))
            .map(|k| k.key.role));
    }
    if let Some(user) = actor.strip_prefix("user:") {
        let Some(user) = id(user) else {
            return Ok(None);
        };
        return Ok(users.get_member(tenant, user).await?.map(|m| m.role));
    }
    Ok(match actor {
        "local" => Some(Role::Owner),
        a if a.starts_with("schedule:") || a.starts_with("run:") => Some(Role::Member),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain() {
        assert!(check_name("py-data_2").is_ok());
        for bad in ["", "Py", "a/b", "../x", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn limits_narrow_the_base_only() {
        let base = EnvironmentLimits {
            wall_ms: Some(10_000),
            ..Default::default()
        };
        let within = EnvironmentLimits {
            wall_ms: Some(5_000),
            processes: Some(8),
            ..Default::default()
        };
        assert!(check_limits(&within, &base).is_ok());
        let above = EnvironmentLimits {
            wall_ms: Some(20_000),
            ..Default::default()
        };
        assert!(check_limits(&above, &base).is_err());
        let zero = EnvironmentLimits {
            open_files: Some(0),
            ..Default::default()
        };
        assert!(check_limits(&zero, &base).is_err());
    }

    #[test]
    fn a_tenant_environment_never_widens_its_base() {
        let mut base = BaseEnvironment::builtin();
        base.execute_role = Role::Admin;
        base.limits.processes = Some(16);
        let own = TenantEnvironment {
            name: "mine".into(),
            base: "default".into(),
            network: true,
            limits: EnvironmentLimits::default(),
            execute_role: Role::Member,
            updated_at: chrono::Utc::now(),
        };
        let env = Environment::of_tenant(&own, base);
        assert!(!env.network, "the base allows no network");
        assert_eq!(env.execute_role, Role::Admin);
        assert_eq!(env.limits.processes, Some(16));
    }
}
