//! Execution environments: where a workspace command runs. The operator defines the
//! bases (a root filesystem, read-only dependency layers, limits, whether commands may
//! reach the network through the egress policy, and the least role that may execute in
//! them); a tenant's admins define environments of their own on one of those bases,
//! which can only narrow it. A `shell` or `python` tool names one (`default` when it
//! names none).

use super::Role;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The environment a workspace command runs in when its tool names none.
pub const DEFAULT_ENVIRONMENT: &str = "default";

/// Limits of one command; an unset one is the base's (or the built-in default's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentLimits {
    /// The longest a command may run, in milliseconds (also bounded by the tool's
    /// `timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
    /// Address space of each process, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Processes (and threads) at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Open files of each process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
}

impl EnvironmentLimits {
    /// Each of `self`'s limits, or `base`'s where `self` sets none.
    pub fn or(self, base: EnvironmentLimits) -> EnvironmentLimits {
        EnvironmentLimits {
            wall_ms: self.wall_ms.or(base.wall_ms),
            memory_bytes: self.memory_bytes.or(base.memory_bytes),
            processes: self.processes.or(base.processes),
            open_files: self.open_files.or(base.open_files),
        }
    }

    /// The first limit of `self` above the same limit of `ceiling`, by name.
    pub fn above(&self, ceiling: &EnvironmentLimits) -> Option<&'static str> {
        let over = |mine: Option<u64>, max: Option<u64>| matches!((mine, max), (Some(a), Some(b)) if a > b);
        if over(self.wall_ms, ceiling.wall_ms) {
            Some("wall_ms")
        } else if over(self.memory_bytes, ceiling.memory_bytes) {
            Some("memory_bytes")
        } else if over(self.processes, ceiling.processes) {
            Some("processes")
        } else if over(self.open_files, ceiling.open_files) {
            Some("open_files")
        } else {
            None
        }
    }
}

/// A read-only directory of the host shown inside sandboxes (a Python environment, a
/// toolchain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Layer {
    /// The host directory.
    pub host: String,
    /// Where commands see it (absolute).
    pub at: String,
}

/// An environment the operator defines (configuration `workspaces.environments.<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseEnvironment {
    pub name: String,
    /// A directory holding a whole root filesystem, shown read-only instead of the host's
    /// system directories; `None`: the host's.
    pub root: Option<String>,
    pub layers: Vec<Layer>,
    /// `PATH` inside the sandbox; `None`: the usual system directories.
    pub path: Option<String>,
    /// Whether commands may reach hosts, through the egress policy alone.
    pub network: bool,
    pub limits: EnvironmentLimits,
    /// The least role of whoever asked for a turn for its commands to run here.
    pub execute_role: Role,
}

impl BaseEnvironment {
    /// The built-in `default`: the host's system directories, no network, members.
    pub fn builtin() -> Self {
        Self {
            name: DEFAULT_ENVIRONMENT.into(),
            root: None,
            layers: Vec::new(),
            path: None,
            network: false,
            limits: EnvironmentLimits::default(),
            execute_role: Role::Member,
        }
    }
}

/// A tenant's own environment: a base of the operator's, narrowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TenantEnvironment {
    pub name: String,
    /// The operator's environment it narrows.
    pub base: String,
    /// Whether commands may reach hosts (through the egress policy and the tenant's
    /// allowlist); only where the base allows it.
    pub network: bool,
    pub limits: EnvironmentLimits,
    /// The least role of whoever asked for a turn for its commands to run here; at least
    /// the base's.
    pub execute_role: Role,
    pub updated_at: DateTime<Utc>,
}

/// An environment as resolved for a command: its base's root and layers, the tenant's
/// narrowing applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    pub name: String,
    pub base: BaseEnvironment,
    pub network: bool,
    pub limits: EnvironmentLimits,
    pub execute_role: Role,
}

impl Environment {
    /// The operator's environment as it stands.
    pub fn of_base(base: BaseEnvironment) -> Self {
        Self {
            name: base.name.clone(),
            network: base.network,
            limits: base.limits,
            execute_role: base.execute_role,
            base,
        }
    }

    /// A tenant's environment `t` on `base`.
    pub fn of_tenant(t: &TenantEnvironment, base: BaseEnvironment) -> Self {
        Self {
            name: t.name.clone(),
            network: t.network && base.network,
            limits: t.limits.or(base.limits),
            execute_role: t.execute_role.max(base.execute_role),
            base,
        }
    }
}

/// An environment as listed: the operator's or the tenant's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EnvironmentView {
    pub name: String,
    /// `operator` (configured on the server; read-only) or `tenant`.
    pub source: String,
    /// For a tenant's environment, the operator's environment it narrows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    pub network: bool,
    pub limits: EnvironmentLimits,
    pub execute_role: Role,
    /// The read-only directories commands see (the operator's environments only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<Layer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
}
