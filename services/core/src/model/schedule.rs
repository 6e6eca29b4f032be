//! Schedules: an agent's runs started on a timetable (a cron expression in a time zone),
//! each fire creating one run, exactly once across replicas and crashes.

use baton_events::{AgentId, Metadata, RunId, ScheduleId, TenantId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What becomes of fire times that passed while no replica could fire them (all down,
/// the database away) for longer than the installation's grace (`schedules.grace_ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MissedFires {
    /// They are skipped: the schedule goes on from its next fire time.
    #[default]
    Skip,
    /// One run is started for all of them, at the latest (its `missed_fires` label
    /// counts them).
    RunOnce,
}

/// What a fire does while the previous run the schedule started is still active
/// (queued, running, or waiting for a member's decision).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Start the new run anyway.
    #[default]
    Allow,
    /// Skip this fire.
    Skip,
}

/// Whether a schedule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleState {
    Active,
    /// Paused by a member, or by Baton with a reason (`paused_reason`): its agent was
    /// archived or deleted, or whoever made it may no longer create runs.
    Paused,
    /// Past its `ends_at`: it fires no more.
    Ended,
}

impl ScheduleState {
    pub fn as_str(&self) -> &'static str {
        match self {
            ScheduleState::Active => "active",
            ScheduleState::Paused => "paused",
            ScheduleState::Ended => "ended",
        }
    }

    pub fn parse(s: &str) -> Option<ScheduleState> {
        match s {
            "active" => Some(ScheduleState::Active),
            "paused" => Some(ScheduleState::Paused),
            "ended" => Some(ScheduleState::Ended),
            _ => None,
        }
    }
}

/// A schedule's definition: what it starts, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// 1 to 200 characters, not blank.
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// The agent each fire starts a run of; an archived or deleted agent pauses the
    /// schedule.
    pub agent_id: AgentId,
    /// The run's first message, a template: `{{fire_time}}` (RFC 3339, UTC),
    /// `{{fire_time_local}}` (RFC 3339, in `timezone`), `{{schedule_name}}` and
    /// `{{missed_fires}}` are replaced.
    #[schema(min_length = 1, max_length = 200000)]
    pub message: String,
    /// The run's title, a template as `message` is; none when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Labels each run gets, besides `schedule_id`, `fire_time` and `trigger` (and
    /// `missed_fires` when some were missed): at most 12.
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub metadata: Metadata,
    /// A cron expression: five fields (minute, hour, day of month, month, day of week),
    /// or six with seconds first; `L`, `W`, `#` and the nicknames (`@daily`, …) as
    /// Vixie cron and its usual extensions read them.
    #[schema(example = "0 9 * * MON-FRI")]
    pub cron: String,
    /// An IANA time zone the expression is read in (`Europe/Berlin`); `UTC` when
    /// omitted. A fixed time of day (one value each for the hour, minute and second) the
    /// clocks skip fires once just after the change, and one they repeat fires once, at
    /// its first occurrence; an expression with several hours or minutes, or a step,
    /// fires at each instant that matches.
    #[serde(default = "utc")]
    pub timezone: String,
    /// No fire before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<DateTime<Utc>>,
    /// No fire after this instant: the schedule ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub missed: MissedFires,
    #[serde(default)]
    pub overlap: Overlap,
}

fn utc() -> String {
    "UTC".to_string()
}

/// A fire decided and claimed (the schedule moved past it), whose run may not be
/// recorded yet: the command is kept whole, so whichever replica records it sends the
/// same request and the run is created once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingFire {
    pub at: DateTime<Utc>,
    /// Fire times it stands for beyond itself (missed ones, with `run_once`).
    #[serde(default)]
    pub missed: u64,
    /// The run it creates, rendered at the decision: the agent, its title, first
    /// message and labels, and the `request_id` that makes its creation idempotent.
    pub agent_id: AgentId,
    #[serde(default)]
    pub title: Option<String>,
    pub message: String,
    #[serde(default)]
    pub metadata: Metadata,
    pub request_id: String,
}

/// A schedule, its state and what it has done.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Schedule {
    pub id: ScheduleId,
    #[serde(skip)]
    pub tenant: TenantId,
    pub spec: ScheduleSpec,
    pub state: ScheduleState,
    /// Why it is paused (`agent_archived: …`, `owner_lost_access: …`, or who paused it).
    pub paused_reason: Option<String>,
    /// Its next fire time while active; null once ended.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The fire times after the next (up to 5), while active.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub upcoming: Vec<DateTime<Utc>>,
    #[serde(skip)]
    pub pending: Option<PendingFire>,
    /// The fire time of the last run it started (or when a member ran it now).
    pub last_fire_at: Option<DateTime<Utc>>,
    pub last_run_id: Option<RunId>,
    /// Runs it started, by its timetable and by members' "run now".
    pub fires: u64,
    /// Fire times it skipped: missed (with `missed: skip`), or overlapping an active run
    /// (with `overlap: skip`).
    pub skipped: u64,
    /// Who made it (`key:<id>`, `user:<id>`, `local`): its runs are started on their
    /// behalf, and it pauses when they may no longer create runs.
    pub owner: String,
    /// Bumped by every change, its fires included.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
