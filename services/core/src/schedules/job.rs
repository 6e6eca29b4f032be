//! The job that fires due schedules. Every replica runs it; each step is a write guarded
//! by the schedule's version (see the module above), so replicas looking at the same
//! schedule at once agree on one outcome, and a replica killed between the claim and the
//! record leaves a pending fire the next look records.

use super::{Schedules, Timetable, command, decide, lasting, paused, principal, render, rfc3339};
use crate::error::CoreError;
use crate::model::{
    Action, AuditAction, AuditEntry, Overlap, PendingFire, Schedule, ScheduleState, WebhookMessage,
};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Steps one look takes for one schedule (a record and a claim each, over missed times).
const MAX_STEPS: usize = 8;

/// What one look did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Look {
    /// Due schedules found.
    pub due: u32,
    /// Runs started (or found started by an earlier attempt).
    pub fired: u32,
    /// Schedules that could not be advanced this time (the store away): tried again at
    /// the next look.
    pub errors: u32,
}

impl Schedules {
    /// Looks for due schedules once and advances each as far as it is due.
    #[tracing::instrument(name = "schedules.look", skip_all)]
    pub async fn look(&self) -> Result<Look, CoreError> {
        let now = self.clock.now();
        let due = self.store.due_schedules(now, self.options.batch).await?;
        let mut look = Look {
            due: u32::try_from(due.len()).unwrap_or(u32::MAX),
            ..Look::default()
        };
        for s in due {
            let id = s.id;
            match self.advance(s).await {
                Ok(fired) => look.fired += fired,
                Err(e) => {
                    look.errors += 1;
                    tracing::warn!(schedule = %id, error = %e, "a due schedule could not be advanced");
                }
            }
        }
        Ok(look)
    }

    /// Records `s`'s pending fire and claims its due fire times, until it is not due;
    /// the runs it started.
    async fn advance(&self, mut s: Schedule) -> Result<u32, CoreError> {
        let mut fired = 0;
        for _ in 0..MAX_STEPS {
            let now = self.clock.now();
            let step = if let Some(fire) = s.pending.clone() {
                let step = self.record(&s, &fire).await?;
                if step
                    .as_ref()
                    .is_some_and(|n| n.last_run_id != s.last_run_id)
                {
                    fired += 1;
                }
                step
            } else {
                match (s.state, s.next_fire_at) {
                    (ScheduleState::Active, Some(due)) if due <= now => {
                        self.claim(&s, due, now).await?
                    }
                    _ => return Ok(fired),
                }
            };
            s = match step {
                Some(next) => next,
                // Moved meanwhile (another replica's step, a member's change): look again.
                None => match self.store.get_schedule(s.tenant, s.id).await? {
                    Some(fresh) => fresh,
                    None => return Ok(fired),
                },
            };
        }
        Ok(fired)
    }

    /// Decides what the fire time `due` does and writes the decision.
    async fn claim(
        &self,
        s: &Schedule,
        due: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<Schedule>, CoreError> {
        let timetable = match Timetable::parse(&s.spec.cron, &s.spec.timezone) {
            Ok(t) => t,
            Err(e) => {
                return self
                    .pause_itself(s, "timetable_unreadable", &e.to_string())
                    .await;
            }
        };
        let active = s.spec.overlap == Overlap::Skip && self.previous_active(s).await?;
        let grace = TimeDelta::from_std(self.options.grace).unwrap_or(TimeDelta::MAX);
        let d = decide(&timetable, &s.spec, due, now, grace, active);
        let mut next = moved(s, now);
        next.next_fire_at = d.next;
        if d.next.is_none() {
            next.state = ScheduleState::Ended;
        }
        next.skipped += d.skipped;
        if let Some((at, count)) = d.fire {
            if let Some((kind, why)) = self.blocked(s, now).await? {
                return self.pause_itself(s, kind, &why).await;
            }
            let request_id = format!("schedule:{}:{}", s.id, rfc3339(at));
            next.pending = Some(render(s, &timetable, at, count, request_id));
        }
        let written = self.write(s, next, None, None).await?;
        if written.is_some() && d.skipped > 0 {
            let reason = if due < now - grace {
                "missed"
            } else {
                "overlap"
            };
            metrics::counter!("baton_schedule_skipped_total", "reason" => reason)
                .increment(d.skipped);
        }
        Ok(written)
    }

    /// Starts the pending fire's run and clears it.
    async fn record(
        &self,
        s: &Schedule,
        fire: &PendingFire,
    ) -> Result<Option<Schedule>, CoreError> {
        let created = match self
            .runs
            .create_run(&principal(s), command(fire, "timetable"))
            .await
        {
            Ok(created) => created,
            Err(e) if lasting(&e) => {
                return self.pause_itself(s, refusal(&e), &e.to_string()).await;
            }
            Err(e) => return Err(e),
        };
        let now = self.clock.now();
        let mut next = moved(s, now);
        next.pending = None;
        next.fires += 1;
        next.last_fire_at = Some(fire.at);
        next.last_run_id = Some(created.run.id);
        let written = self.write(s, next, None, None).await?;
        if written.is_some() {
            metrics::counter!("baton_schedule_fires_total", "trigger" => "timetable").increment(1);
            if fire.missed == 0 {
                let late = (created.run.created_at - fire.at)
                    .to_std()
                    .unwrap_or_default();
                metrics::histogram!("baton_schedule_fire_lateness_seconds")
                    .record(late.as_secs_f64());
            }
        }
        Ok(written)
    }

    /// Pauses `s` with a reason (`kind: why`), audited as the scheduler's; a pending
    /// fire is dropped.
    async fn pause_itself(
        &self,
        s: &Schedule,
        kind: &'static str,
        why: &str,
    ) -> Result<Option<Schedule>, CoreError> {
        let now = self.clock.now();
        let reason = format!("{kind}: {why}");
        let mut next = moved(s, now);
        next.state = ScheduleState::Paused;
        next.pending = None;
        next.paused_reason = Some(reason.clone());
        let audit = AuditEntry::scheduler(
            now,
            AuditAction::SchedulePaused,
            s.id.to_string(),
            json!({"name": s.spec.name, "version": next.version, "reason": reason}),
        );
        let message = paused(&next);
        let written = self.write(s, next, Some(audit), Some(&message)).await?;
        if written.is_some() {
            tracing::warn!(schedule = %s.id, tenant = %s.tenant, reason = %reason, "a schedule paused itself");
            metrics::counter!("baton_schedule_pauses_total", "reason" => kind).increment(1);
        }
        Ok(written)
    }

    /// Why `s` may not fire now, if it may not: its agent is gone or archived, or its
    /// owner may no longer create runs in the tenant.
    async fn blocked(
        &self,
        s: &Schedule,
        now: DateTime<Utc>,
    ) -> Result<Option<(&'static str, String)>, CoreError> {
        let agent = s.spec.agent_id;
        match self.agents.get_agent(s.tenant, agent).await? {
            None => {
                return Ok(Some((
                    "agent_missing",
                    format!("agent {agent} no longer exists"),
                )));
            }
            Some(a) if a.archived_at.is_some() => {
                return Ok(Some((
                    "agent_archived",
                    format!("agent {agent} is archived"),
                )));
            }
            Some(_) => {}
        }
        let least = Action::CreateRuns.min_role();
        let lost = |who: String| Some(("owner_lost_access", who));
        if let Some(id) = s.owner.strip_prefix("key:") {
            let key = match uuid::Uuid::parse_str(id) {
                Ok(id) => self.api_keys.get_api_key(s.tenant, id).await?,
                Err(_) => None,
            };
            let usable = key.is_some_and(|k| {
                k.key.revoked_at.is_none()
                    && k.key.expires_at.is_none_or(|at| at > now)
                    && k.key.role >= least
            });
            if !usable {
                return Ok(lost(format!(
                    "API key {id}, its owner, is revoked, expired or may not create runs"
                )));
            }
        } else if let Some(id) = s.owner.strip_prefix("user:") {
            let member = match uuid::Uuid::parse_str(id) {
                Ok(id) => self.users.get_member(s.tenant, id).await?,
                Err(_) => None,
            };
            if member.is_none_or(|m| m.role < least) {
                return Ok(lost(format!(
                    "user {id}, its owner, is no longer a member who may create runs"
                )));
            }
        }
        Ok(None)
    }

    /// Whether the last run `s` started has a turn in progress or waits for a member.
    async fn previous_active(&self, s: &Schedule) -> Result<bool, CoreError> {
        let Some(run) = s.last_run_id else {
            return Ok(false);
        };
        Ok(self
            .reader
            .get_run(s.tenant, run)
            .await?
            .is_some_and(|r| r.status.in_turn()))
    }

    /// Writes `next` over `current` if it has not moved: `next`, or `None` when it had.
    async fn write(
        &self,
        current: &Schedule,
        next: Schedule,
        audit: Option<AuditEntry>,
        message: Option<&WebhookMessage>,
    ) -> Result<Option<Schedule>, CoreError> {
        let written = self
            .store
            .update_schedule(&next, current.version, audit.as_ref(), message)
            .await?;
        Ok(written.then_some(next))
    }

    /// Looks for due schedules until `shutdown`: at each soonest fire time it knows of,
    /// at a change on this replica, and at least every `poll`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            // A schedule that could not be advanced is due still: wait a poll before the
            // next try rather than at once.
            let pause = match self.look().await {
                Ok(look) if look.errors == 0 => self.until_next().await,
                Ok(_) => self.options.poll,
                Err(e) => {
                    tracing::warn!(error = %e, "the schedules job could not look for due schedules");
                    self.options.poll
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.changed.notified() => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// How long until the soonest fire time, at most `poll`.
    async fn until_next(&self) -> Duration {
        let poll = self.options.poll;
        match self.store.next_fire_time().await {
            Ok(Some(at)) => (at - self.clock.now())
                .to_std()
                .unwrap_or(Duration::ZERO)
                .min(poll),
            Ok(None) => poll,
            Err(e) => {
                tracing::warn!(error = %e, "the schedules job could not read the next fire time");
                poll
            }
        }
    }
}

/// `s` as the next version, changed at `now`.
fn moved(s: &Schedule, now: DateTime<Utc>) -> Schedule {
    let mut next = s.clone();
    next.version = s.version + 1;
    next.updated_at = now;
    next.upcoming = Vec::new();
    next
}

/// What refused a fire's run, as a pause reason's kind.
fn refusal(e: &CoreError) -> &'static str {
    match e {
        CoreError::NotFound(_) => "agent_missing",
        CoreError::WrongState(_) => "agent_archived",
        CoreError::Forbidden(_) | CoreError::NoAccess(_) => "owner_lost_access",
        _ => "fire_refused",
    }
}
