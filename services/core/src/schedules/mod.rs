//! Schedules: an agent's runs started on a timetable, each fire exactly once across
//! replicas and crashes.
//!
//! A fire happens in two steps, each one a write the store guards by the schedule's
//! version, so no leader is elected:
//! 1. **Claim.** A replica that finds the schedule due decides what its fire time does
//!    (`decide.rs`: start a run, or skip it as missed or overlapping) and writes the
//!    decision: the timetable moves to its next time, and a run to start is kept as the
//!    schedule's *pending fire*, rendered whole (message, labels, and the `request_id`
//!    `schedule:<id>:<fire time>`). Of replicas deciding at once, one write wins; the
//!    others find the schedule moved and look again.
//! 2. **Record.** Whoever finds a pending fire (the claimer, or after its crash any
//!    replica) creates the run with that request and clears the pending fire. The run's
//!    creation is idempotent by its `request_id`, so a fire recorded twice (a replica
//!    killed between the two writes, or two replicas racing) still starts one run.
//!
//! Runs start on behalf of the schedule's owner (whoever last created, changed or resumed
//! it): a schedule whose owner may no longer create runs, or whose agent is archived or
//! gone, pauses itself with the reason instead of firing. "Run now" is a member's own
//! `create run` with the schedule's template, audited, and counts as a fire.

mod decide;
mod job;
mod timetable;

pub use decide::{Decision, MAX_COUNTED_MISSES, decide};
pub use job::Look;
pub use timetable::{MAX_CRON_CHARS, Timetable};

use crate::error::CoreError;
use crate::model::{
    Action, AuditAction, AuditEntry, PendingFire, Principal, Role, Schedule, ScheduleSpec,
    ScheduleState, WebhookEvent, WebhookMessage,
};
use crate::page::{self, Page};
use crate::ports::{AgentStore, ApiKeyStore, Clock, RunReader, ScheduleStore, UserStore};
use crate::runs::metadata::MAX_METADATA_KEYS;
use crate::runs::{CreateRun, CreatedRun, MAX_CONTENT_CHARS, MAX_TITLE_CHARS, Runs};
use crate::validate;
use baton_events::{AgentId, Metadata, ScheduleId};
use chrono::{DateTime, Utc};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The labels every run a schedule starts carries.
pub const RESERVED_LABELS: [&str; 4] = ["schedule_id", "fire_time", "trigger", "missed_fires"];
/// Labels a schedule may add of its own.
pub const MAX_OWN_LABELS: usize = MAX_METADATA_KEYS - RESERVED_LABELS.len();
/// Fire times shown after the next one.
pub const UPCOMING: usize = 5;
/// How often a change re-reads and retries after losing a version race.
const MAX_ATTEMPTS: usize = 5;

/// The template's placeholders.
const PLACEHOLDERS: [&str; 4] = [
    "{{fire_time}}",
    "{{fire_time_local}}",
    "{{schedule_name}}",
    "{{missed_fires}}",
];

/// How the schedules job runs.
#[derive(Debug, Clone)]
pub struct ScheduleOptions {
    /// The longest the job sleeps before looking for due schedules again (it wakes
    /// sooner for the soonest fire time it knows of, and for a change on this replica).
    pub poll: Duration,
    /// A fire time older than this when a replica gets to it counts as missed.
    pub grace: Duration,
    /// The least time between two fire times of one schedule.
    pub min_interval: Duration,
    /// Most due schedules taken in one look.
    pub batch: u32,
    /// Most schedules one tenant may have.
    pub max_per_tenant: u32,
}

impl Default for ScheduleOptions {
    fn default() -> Self {
        ScheduleOptions {
            poll: Duration::from_secs(5),
            grace: Duration::from_secs(60),
            min_interval: Duration::from_secs(60),
            batch: 100,
            max_per_tenant: 100,
        }
    }
}

/// The schedule use cases and the job that fires them.
#[derive(Clone)]
pub struct Schedules {
    pub store: Arc<dyn ScheduleStore>,
    /// Fires create runs as clients do.
    pub runs: Runs,
    pub reader: Arc<dyn RunReader>,
    pub agents: Arc<dyn AgentStore>,
    /// The owner's key or membership, checked before each fire.
    pub api_keys: Arc<dyn ApiKeyStore>,
    pub users: Arc<dyn UserStore>,
    pub clock: Arc<dyn Clock>,
    pub options: ScheduleOptions,
    /// Woken by a change on this replica, so the job looks again at once.
    pub changed: Arc<tokio::sync::Notify>,
}

impl Schedules {
    /// Creates a schedule (member); the caller becomes its owner.
    #[tracing::instrument(name = "schedules.create", skip_all)]
    pub async fn create(&self, p: &Principal, spec: ScheduleSpec) -> Result<Schedule, CoreError> {
        p.require(Action::ManageSchedules)?;
        let now = self.clock.now();
        let timetable = self.check(p, &spec, now).await?;
        let cap = self.options.max_per_tenant;
        let existing = self.store.list_schedules(p.tenant, None, None, cap).await?;
        if existing.len() >= cap as usize {
            return Err(CoreError::invalid(format!(
                "the tenant has {cap} schedules, the most this installation allows; delete one first"
            )));
        }
        let next = first_fire(&timetable, &spec, now);
        if next.is_none() {
            return Err(CoreError::invalid(
                "the schedule would never fire: ends_at comes before its first fire time",
            ));
        }
        let mut s = Schedule {
            id: ScheduleId::new(),
            tenant: p.tenant,
            spec,
            state: ScheduleState::Active,
            paused_reason: None,
            next_fire_at: next,
            upcoming: Vec::new(),
            pending: None,
            last_fire_at: None,
            last_run_id: None,
            fires: 0,
            skipped: 0,
            owner: p.actor.clone(),
            version: 1,
            created_at: now,
            updated_at: now,
        };
        let audit = audit(p, now, AuditAction::ScheduleCreated, &s);
        self.store.create_schedule(&s, &audit).await?;
        self.changed.notify_one();
        s.upcoming = upcoming(&timetable, &s);
        Ok(s)
    }

    /// One schedule, with its upcoming fire times.
    #[tracing::instrument(name = "schedules.get", skip_all)]
    pub async fn get(&self, p: &Principal, id: ScheduleId) -> Result<Schedule, CoreError> {
        p.require(Action::ReadSchedules)?;
        let mut s = self.load(p, id).await?;
        if let Ok(t) = Timetable::parse(&s.spec.cron, &s.spec.timezone) {
            s.upcoming = upcoming(&t, &s);
        }
        Ok(s)
    }

    /// A page of the tenant's schedules, newest first (of one agent when given).
    #[tracing::instrument(name = "schedules.list", skip_all)]
    pub async fn list(
        &self,
        p: &Principal,
        agent: Option<AgentId>,
        cursor: Option<ScheduleId>,
        limit: Option<u32>,
    ) -> Result<Page<Schedule>, CoreError> {
        p.require(Action::ReadSchedules)?;
        let limit = page::limit(limit)?;
        let items = self
            .store
            .list_schedules(p.tenant, agent, cursor, limit)
            .await?;
        Ok(Page::of(items, limit, |s| s.id.to_string()))
    }

    /// Replaces the definition (member); the caller becomes the owner. An active or
    /// ended schedule goes on from the new timetable's first time from now.
    #[tracing::instrument(name = "schedules.update", skip_all)]
    pub async fn update(
        &self,
        p: &Principal,
        id: ScheduleId,
        spec: ScheduleSpec,
    ) -> Result<Schedule, CoreError> {
        p.require(Action::ManageSchedules)?;
        let now = self.clock.now();
        let timetable = self.check(p, &spec, now).await?;
        self.change(p, id, AuditAction::ScheduleUpdated, |s| {
            s.spec = spec.clone();
            s.owner = p.actor.clone();
            if s.state != ScheduleState::Paused {
                restart(s, &timetable, now);
            }
            Ok(())
        })
        .await
    }

    /// Pauses it (member): it fires no more until resumed. A fire already decided is
    /// still recorded.
    #[tracing::instrument(name = "schedules.pause", skip_all)]
    pub async fn pause(&self, p: &Principal, id: ScheduleId) -> Result<Schedule, CoreError> {
        p.require(Action::ManageSchedules)?;
        self.change(p, id, AuditAction::SchedulePaused, |s| {
            if s.state == ScheduleState::Ended {
                return Err(CoreError::WrongState(format!(
                    "schedule {} has ended: it fires no more",
                    s.id
                )));
            }
            s.state = ScheduleState::Paused;
            s.paused_reason = Some(format!("paused by {}", p.actor));
            Ok(())
        })
        .await
    }

    /// Resumes it (member), from its first fire time from now: the times that passed
    /// while it was paused are not fired. The caller becomes the owner.
    #[tracing::instrument(name = "schedules.resume", skip_all)]
    pub async fn resume(&self, p: &Principal, id: ScheduleId) -> Result<Schedule, CoreError> {
        p.require(Action::ManageSchedules)?;
        p.require(Action::CreateRuns)?;
        let now = self.clock.now();
        let current = self.load(p, id).await?;
        self.check_agent(p, current.spec.agent_id).await?;
        let timetable = Timetable::parse(&current.spec.cron, &current.spec.timezone)?;
        self.change(p, id, AuditAction::ScheduleResumed, |s| {
            if s.state != ScheduleState::Paused {
                return Err(CoreError::WrongState(format!(
                    "schedule {} is {}, not paused",
                    s.id,
                    s.state.as_str()
                )));
            }
            s.owner = p.actor.clone();
            restart(s, &timetable, now);
            Ok(())
        })
        .await
    }

    /// Deletes it (member); the runs it started stay.
    #[tracing::instrument(name = "schedules.delete", skip_all)]
    pub async fn delete(&self, p: &Principal, id: ScheduleId) -> Result<(), CoreError> {
        p.require(Action::ManageSchedules)?;
        let s = self.load(p, id).await?;
        let audit = audit(p, self.clock.now(), AuditAction::ScheduleDeleted, &s);
        if !self.store.delete_schedule(p.tenant, id, &audit).await? {
            return Err(CoreError::NotFound("schedule"));
        }
        Ok(())
    }

    /// Starts a run of the schedule now, as the caller (who must be allowed to create
    /// runs): audited, counted as a fire, with its own `request_id`
    /// (`schedule:<id>:now:<the caller's request_id, or a new one>`).
    #[tracing::instrument(name = "schedules.run_now", skip_all)]
    pub async fn run_now(
        &self,
        p: &Principal,
        id: ScheduleId,
        request_id: Option<String>,
    ) -> Result<CreatedRun, CoreError> {
        p.require(Action::CreateRuns)?;
        validate::request_id(request_id.as_deref(), 100)?;
        let s = self.load(p, id).await?;
        let timetable = Timetable::parse(&s.spec.cron, &s.spec.timezone)?;
        let now = self.clock.now();
        let key = request_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let fire = render(
            &s,
            &timetable,
            now,
            1,
            format!("schedule:{}:now:{key}", s.id),
        );
        let created = self.runs.create_run(p, command(&fire, "now")).await?;
        let run = created.run.id;
        let at = self.clock.now();
        self.change(p, id, AuditAction::ScheduleRunNow, |s| {
            s.fires += 1;
            s.last_fire_at = Some(now);
            s.last_run_id = Some(run);
            Ok(())
        })
        .await
        // The run exists: the caller gets it even if the schedule could not count it (a
        // retry with the same request_id finds it, and counts nothing twice).
        .inspect_err(|e| {
            tracing::warn!(schedule = %id, run = %run, error = %e, "a run now started a run the schedule could not count");
        })
        .ok();
        metrics::counter!("baton_schedule_fires_total", "trigger" => "now").increment(1);
        tracing::debug!(schedule = %id, run = %run, at = %at, "schedule run now");
        Ok(created)
    }

    /// The tenant's schedule `id`, or 404 (another tenant's too).
    async fn load(&self, p: &Principal, id: ScheduleId) -> Result<Schedule, CoreError> {
        self.store
            .get_schedule(p.tenant, id)
            .await?
            .ok_or(CoreError::NotFound("schedule"))
    }

    /// Applies `edit` to the stored schedule and writes it with its audit entry, again
    /// from a fresh read when another change (a fire) won the race.
    async fn change(
        &self,
        p: &Principal,
        id: ScheduleId,
        action: AuditAction,
        edit: impl Fn(&mut Schedule) -> Result<(), CoreError>,
    ) -> Result<Schedule, CoreError> {
        for _ in 0..MAX_ATTEMPTS {
            let current = self.load(p, id).await?;
            let mut s = current.clone();
            edit(&mut s)?;
            let now = self.clock.now();
            s.version = current.version + 1;
            s.updated_at = now;
            let audit = audit(p, now, action, &s);
            let message = (action == AuditAction::SchedulePaused).then(|| paused(&s));
            if self
                .store
                .update_schedule(&s, current.version, Some(&audit), message.as_ref())
                .await?
            {
                self.changed.notify_one();
                if let Ok(t) = Timetable::parse(&s.spec.cron, &s.spec.timezone) {
                    s.upcoming = upcoming(&t, &s);
                }
                return Ok(s);
            }
        }
        Err(CoreError::Conflict)
    }

    /// Checks a definition: its text, labels, timetable, and agent.
    async fn check(
        &self,
        p: &Principal,
        spec: &ScheduleSpec,
        now: DateTime<Utc>,
    ) -> Result<Timetable, CoreError> {
        validate::non_blank("name", &spec.name, 200)?;
        check_template("message", &spec.message, MAX_CONTENT_CHARS)?;
        validate::non_blank("message", &spec.message, MAX_CONTENT_CHARS)?;
        if let Some(title) = &spec.title {
            check_template("title", title, MAX_TITLE_CHARS)?;
        }
        check_labels(&spec.metadata)?;
        let timetable = Timetable::parse(&spec.cron, &spec.timezone)?;
        timetable.check(now, self.options.min_interval)?;
        if let (Some(start), Some(end)) = (spec.starts_at, spec.ends_at)
            && end <= start
        {
            return Err(CoreError::invalid("ends_at must come after starts_at"));
        }
        self.check_agent(p, spec.agent_id).await?;
        Ok(timetable)
    }

    /// The agent is the tenant's and takes runs.
    async fn check_agent(&self, p: &Principal, agent: AgentId) -> Result<(), CoreError> {
        match self.agents.get_agent(p.tenant, agent).await? {
            None => Err(CoreError::invalid(format!("agent_id: no agent {agent}"))),
            Some(a) if a.archived_at.is_some() => Err(crate::agents::archived(a.id)),
            Some(_) => Ok(()),
        }
    }
}

/// The first fire time of `spec` from `now` (not before `starts_at`, not after
/// `ends_at`).
fn first_fire(t: &Timetable, spec: &ScheduleSpec, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let from = spec.starts_at.map_or(now, |s| s.max(now));
    t.at_or_after(from)
        .filter(|next| spec.ends_at.is_none_or(|end| *next <= end))
}

/// Puts `s` on its timetable from `now`: active with its first fire time, or ended.
fn restart(s: &mut Schedule, t: &Timetable, now: DateTime<Utc>) {
    s.next_fire_at = first_fire(t, &s.spec, now);
    s.paused_reason = None;
    s.state = if s.next_fire_at.is_some() {
        ScheduleState::Active
    } else {
        ScheduleState::Ended
    };
}

/// The fire times after the next one, while active.
fn upcoming(t: &Timetable, s: &Schedule) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let (ScheduleState::Active, Some(mut at)) = (s.state, s.next_fire_at) else {
        return out;
    };
    while out.len() < UPCOMING {
        match t.after(at) {
            Some(next) if s.spec.ends_at.is_none_or(|end| next <= end) => {
                out.push(next);
                at = next;
            }
            _ => break,
        }
    }
    out
}

/// A template's text is bounded and names only known placeholders.
fn check_template(field: &str, text: &str, max: usize) -> Result<(), CoreError> {
    validate::text(field, text, max)?;
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let tail = &rest[start..];
        let Some(end) = tail.find("}}") else {
            break;
        };
        let name = &tail[..end + 2];
        if !PLACEHOLDERS.contains(&name) {
            return Err(CoreError::invalid(format!(
                "{field}: unknown placeholder {name}; known are {}",
                PLACEHOLDERS.join(", ")
            )));
        }
        rest = &tail[end + 2..];
    }
    Ok(())
}

/// A schedule's own labels leave room for the ones each run gets, and use none of
/// their keys.
fn check_labels(metadata: &Metadata) -> Result<(), CoreError> {
    if metadata.len() > MAX_OWN_LABELS {
        return Err(CoreError::invalid(format!(
            "metadata holds at most {MAX_OWN_LABELS} keys on a schedule, not {}",
            metadata.len()
        )));
    }
    if let Some(key) = metadata
        .keys()
        .find(|k| RESERVED_LABELS.contains(&k.as_str()))
    {
        return Err(CoreError::invalid(format!(
            "metadata key {key:?} is set by the schedule on each run"
        )));
    }
    crate::runs::metadata::check(metadata)
}

/// An instant as the labels and templates show it (RFC 3339, UTC, whole seconds).
fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn fill(template: &str, s: &Schedule, t: &Timetable, at: DateTime<Utc>, missed: u64) -> String {
    template
        .replace("{{fire_time}}", &rfc3339(at))
        .replace("{{fire_time_local}}", &t.local(at))
        .replace("{{schedule_name}}", &s.spec.name)
        .replace("{{missed_fires}}", &missed.to_string())
}

/// `text` cut to `max` characters: a template filled with a long name or zone must not
/// make a fire's run refused.
fn at_most(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => text[..end].to_string(),
        None => text,
    }
}

/// The run a fire at `at` starts, standing for `count` fire times, rendered whole.
fn render(
    s: &Schedule,
    t: &Timetable,
    at: DateTime<Utc>,
    count: u64,
    request_id: String,
) -> PendingFire {
    let mut metadata = s.spec.metadata.clone();
    metadata.insert("schedule_id".into(), s.id.to_string());
    metadata.insert("fire_time".into(), rfc3339(at));
    if count > 1 {
        metadata.insert("missed_fires".into(), count.to_string());
    }
    PendingFire {
        at,
        missed: count.saturating_sub(1),
        agent_id: s.spec.agent_id,
        title: s
            .spec
            .title
            .as_deref()
            .map(|x| at_most(fill(x, s, t, at, count), MAX_TITLE_CHARS)),
        message: at_most(fill(&s.spec.message, s, t, at, count), MAX_CONTENT_CHARS),
        metadata,
        request_id,
    }
}

/// The create-run command of a fire, labelled with what triggered it.
fn command(fire: &PendingFire, trigger: &str) -> CreateRun {
    let mut metadata = fire.metadata.clone();
    metadata.insert("trigger".into(), trigger.into());
    CreateRun {
        agent_id: fire.agent_id,
        title: fire.title.clone(),
        metadata,
        message: Some(fire.message.clone()),
        request_id: Some(fire.request_id.clone()),
    }
}

/// An audit entry of `p`'s change to `s`.
fn audit(p: &Principal, at: DateTime<Utc>, action: AuditAction, s: &Schedule) -> AuditEntry {
    AuditEntry::by(
        p,
        at,
        action,
        s.id.to_string(),
        json!({"name": s.spec.name, "version": s.version, "state": s.state.as_str()}),
    )
}

/// The `schedule.paused` webhook event of `s`, just paused.
fn paused(s: &Schedule) -> WebhookMessage {
    WebhookMessage::new(
        uuid::Uuid::now_v7(),
        WebhookEvent::SchedulePaused,
        None,
        s.updated_at,
        json!({"schedule": s}),
    )
}

/// A fire acts in the schedule's tenant as a member may, named after the schedule.
fn principal(s: &Schedule) -> Principal {
    Principal {
        tenant: s.tenant,
        role: Role::Member,
        actor: format!("schedule:{}", s.id),
        source: None,
    }
}

/// Whether an error of a fire's run creation will not pass by trying again.
fn lasting(e: &CoreError) -> bool {
    !matches!(
        e,
        CoreError::Unavailable(_) | CoreError::Internal(_) | CoreError::Conflict
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_name_only_known_placeholders() {
        assert!(
            check_template(
                "message",
                "report for {{fire_time}} ({{schedule_name}})",
                100
            )
            .is_ok()
        );
        assert!(check_template("message", "braces { } and {{ unclosed", 100).is_ok());
        let e = check_template("title", "run {{when}}", 100).expect_err("unknown");
        assert!(
            e.to_string()
                .contains("title: unknown placeholder {{when}}"),
            "{e}"
        );
    }

    #[test]
    fn a_schedules_labels_leave_room_for_the_runs_own() {
        let mut m = Metadata::new();
        m.insert("team".into(), "ops".into());
        assert!(check_labels(&m).is_ok());
        m.insert("fire_time".into(), "x".into());
        let e = check_labels(&m).expect_err("reserved");
        assert!(
            e.to_string()
                .contains("\"fire_time\" is set by the schedule"),
            "{e}"
        );
        let many: Metadata = (0..=MAX_OWN_LABELS)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        assert!(check_labels(&many).is_err());
    }
}
