//! The run commands and queries: create, read, list, post a message, cancel, read events.
//! The engine drives turns; these only record what clients asked for and wake it.
//!
//! Busy rule: a message starts a turn only while the run is idle; during a turn it is
//! refused (`RunBusy`) or queued, by its strategy or its agent's. The check and the write
//! are one optimistic append against the version that was checked, so of two racing
//! messages to an idle run exactly one starts a turn and the other is refused or queued
//! behind it, with nothing else written.

use super::decide;
use super::idempotency::{check_replay, fingerprint, record};
use super::recorder::Recorder;
use super::requests::{
    CreateRun, CreatedRun, MAX_CONTENT_CHARS, MAX_REQUEST_ID_CHARS, MAX_TITLE_CHARS, PostMessage,
    Posted, PostedMessage, QueuedMessage,
};
use crate::error::{CoreError, StoreError};
use crate::model::{Action, AgentLimits, MessageStrategy, Principal};
use crate::model::{Message, RunSummary};
use crate::page::{self, Page};
use crate::ports::{
    AgentStore, AppendOutcome, AppendRequest, Clock, EventBus, RunDriver, RunFilter, RunListQuery,
    RunReader, ToolStore,
};
use crate::validate;
use baton_events::{
    Envelope, EventMeta, MessageId, MessageRole, NewEvent, ParentRun, RunCreated, RunEvent, RunId,
    RunUpdated, TenantId, ToolVersions,
};
use serde::Deserialize;
use std::sync::Arc;

/// How often a command re-reads and retries after losing a version race.
pub(crate) const MAX_ATTEMPTS: usize = 5;
/// How often a posted message does: racing messages to a busy run are all queued.
const MAX_POST_ATTEMPTS: u32 = 40;

/// A short, random pause before attempt `attempt` of a contended append (0 to 2 ms, more
/// with each attempt up to 20 ms), so racers do not collide in lockstep.
fn contended_backoff(attempt: u32) -> std::time::Duration {
    let ceiling_us = 2_000 * u64::from(attempt.min(10));
    std::time::Duration::from_micros(rand::random_range(0..=ceiling_us))
}

/// The run use cases, holding the ports they need.
#[derive(Clone)]
pub struct Runs {
    pub reader: Arc<dyn RunReader>,
    pub recorder: Recorder,
    /// The replica taking the commands, recorded in their events' metadata.
    pub replica: String,
    pub agents: Arc<dyn AgentStore>,
    /// The agent's tools, whose current versions a new run keeps.
    pub tools: Arc<dyn ToolStore>,
    pub driver: Arc<dyn RunDriver>,
    pub clock: Arc<dyn Clock>,
}

impl Runs {
    fn store(&self) -> &dyn RunReader {
        self.reader.as_ref()
    }

    pub fn bus(&self) -> &Arc<dyn EventBus> {
        &self.recorder.bus
    }

    #[tracing::instrument(name = "runs.create_run", skip_all)]
    pub async fn create_run(&self, p: &Principal, cmd: CreateRun) -> Result<CreatedRun, CoreError> {
        self.create_run_under(p, cmd, None).await
    }

    /// Creates a run, the child of `parent`'s delegate call when given.
    pub(super) async fn create_run_under(
        &self,
        p: &Principal,
        cmd: CreateRun,
        parent: Option<ParentRun>,
    ) -> Result<CreatedRun, CoreError> {
        p.require(Action::CreateRuns)?;
        validate::request_id(cmd.request_id.as_deref(), MAX_REQUEST_ID_CHARS)?;
        if let Some(title) = &cmd.title {
            validate::text("title", title, MAX_TITLE_CHARS)?;
        }
        super::metadata::check(&cmd.metadata)?;
        if let Some(content) = &cmd.message {
            check_content(content)?;
        }
        let fingerprint = fingerprint("create_run", &cmd);
        if let Some(done) = self.replay(p, &cmd.request_id, &fingerprint).await? {
            return Ok(done);
        }
        let agent = self
            .agents
            .get_agent(p.tenant, cmd.agent_id)
            .await?
            .ok_or(CoreError::NotFound("agent"))?;
        if agent.archived_at.is_some() {
            return Err(crate::agents::archived(agent.id));
        }
        let mut tool_versions = ToolVersions::new();
        for id in &agent.tools {
            if let Some(tool) = self.tools.get_tool(p.tenant, *id).await? {
                tool_versions.insert(*id, tool.version);
            }
        }

        let at = self.clock.now();
        let run_id = RunId::new();
        let meta = meta(&self.replica, p, cmd.request_id.as_deref());
        let mut events = vec![NewEvent::new(
            RunEvent::RunCreated(RunCreated {
                agent_id: agent.id,
                agent_version: agent.version,
                title: cmd.title.clone(),
                metadata: cmd.metadata.clone(),
                tool_versions,
                parent,
            }),
            meta.clone(),
        )];
        let message = cmd.message.as_ref().map(|content| Message {
            id: MessageId::new(),
            run_id,
            seq: 1,
            role: MessageRole::User,
            content: content.clone(),
            version: 2,
            created_at: at,
        });
        if let Some(m) = &message {
            events.extend(with_meta(decide::user_turn(m.id, &m.content, 1), &meta));
        }
        let mut run = RunSummary::empty(p.tenant, run_id, at);
        for (i, e) in events.iter().enumerate() {
            run.apply(&e.event, i as i64 + 1, at);
        }
        let result = CreatedRun {
            run,
            message,
            result: None,
        };
        let mut req = AppendRequest::new(run_id, 0, events, at);
        req.idempotency = record(&cmd.request_id, "create_run", fingerprint.clone(), &result);
        match self.recorder.append(p.tenant, req).await? {
            AppendOutcome::Appended { run, events } => {
                if result.message.is_some() {
                    self.driver.wake_from((*run).clone(), events);
                }
                Ok(CreatedRun {
                    run: *run,
                    ..result
                })
            }
            AppendOutcome::Duplicate(rec) => check_replay(&rec, &fingerprint),
        }
    }

    #[tracing::instrument(name = "runs.get_run", skip_all)]
    pub async fn get_run(&self, p: &Principal, run: RunId) -> Result<RunSummary, CoreError> {
        p.require(Action::ReadRuns)?;
        self.load(p.tenant, run).await
    }

    /// The runs passing `filter`, newest first. The cursor is a run id, so a page never
    /// shifts when runs are created or change meanwhile (a changed run may leave or
    /// join the pages not read yet).
    #[tracing::instrument(name = "runs.list_runs", skip_all)]
    pub async fn list_runs(
        &self,
        p: &Principal,
        filter: RunFilter,
        cursor: Option<RunId>,
        limit: Option<u32>,
    ) -> Result<Page<RunSummary>, CoreError> {
        p.require(Action::ReadRuns)?;
        let limit = page::limit(limit)?;
        let query = RunListQuery {
            filter: super::metadata::check_filter(filter)?,
            before: cursor,
            limit,
        };
        let items = self.store().list_runs(p.tenant, &query).await?;
        let next_cursor = (items.len() == limit as usize)
            .then(|| items.last().map(|r| r.id.to_string()))
            .flatten();
        Ok(Page { items, next_cursor })
    }

    #[tracing::instrument(name = "runs.post_message", skip_all)]
    pub async fn post_message(
        &self,
        p: &Principal,
        run_id: RunId,
        cmd: PostMessage,
    ) -> Result<Posted, CoreError> {
        p.require(Action::PostMessages)?;
        validate::request_id(cmd.request_id.as_deref(), MAX_REQUEST_ID_CHARS)?;
        check_content(&cmd.content)?;
        let fingerprint = fingerprint("post_message", &(run_id, &cmd));
        // The agent's rule, read only for a message to a busy run that names none.
        let mut agent_rule = None;
        // Messages queued at once all append to the run's stream: each round of the race
        // stores one, so losers back off a little and try again, for longer than other
        // commands (one of which settles the race for the rest).
        for attempt in 0..MAX_POST_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(contended_backoff(attempt)).await;
            }
            if let Some(done) = self.replay(p, &cmd.request_id, &fingerprint).await? {
                return Ok(done);
            }
            let run = self.load(p.tenant, run_id).await?;
            let (strategy, max_queued) = match (cmd.strategy, run.status.in_turn()) {
                (Some(MessageStrategy::Reject), _) | (_, false) => {
                    (MessageStrategy::Reject, u32::MAX)
                }
                (strategy, true) => {
                    let limits = match agent_rule {
                        Some(limits) => limits,
                        None => *agent_rule.insert(self.limits_of(&run).await?),
                    };
                    (
                        strategy.unwrap_or(limits.message_strategy),
                        limits.max_queued_messages,
                    )
                }
            };
            let message_id = MessageId::new();
            let posting =
                decide::post_message(&run, message_id, &cmd.content, strategy, max_queued);
            let (events, result) = match posting {
                Ok(decide::Posting::Turn { events, turn }) => {
                    let message = Message {
                        id: message_id,
                        run_id,
                        seq: run.message_count + 1,
                        role: MessageRole::User,
                        content: cmd.content.clone(),
                        version: run.version + 1,
                        created_at: self.clock.now(),
                    };
                    let posted = PostedMessage {
                        message,
                        turn,
                        result: None,
                    };
                    (events, Posted::Turn(Box::new(posted)))
                }
                Ok(decide::Posting::Queued { events, position }) => {
                    let queued = QueuedMessage {
                        message_id,
                        run_id,
                        content: cmd.content.clone(),
                        position,
                        version: run.version + 1,
                        queued_at: self.clock.now(),
                        after_seq: run.message_count,
                    };
                    (events, Posted::Queued(queued))
                }
                Err(refusal) => {
                    // The original of a repeated request may have committed (and made the
                    // run busy) between the idempotency check above and this read: it wins.
                    if let Some(done) = self.replay(p, &cmd.request_id, &fingerprint).await? {
                        return Ok(done);
                    }
                    return Err(refusal);
                }
            };
            let events = with_meta(events, &meta(&self.replica, p, cmd.request_id.as_deref()));
            let mut req = AppendRequest::new(run_id, run.version, events, self.clock.now());
            // Decided on the run just read: the store writes against it.
            req.base = Some(Box::new(run));
            req.idempotency = record(
                &cmd.request_id,
                "post_message",
                fingerprint.clone(),
                &result,
            );
            match self.recorder.append(p.tenant, req).await {
                Ok(AppendOutcome::Appended { run, events }) => {
                    // A queued message needs no wake (the turn in progress takes it),
                    // unless it ends that turn.
                    if matches!(result, Posted::Turn(_)) || strategy.interrupts().is_some() {
                        self.driver.wake_from(*run, events);
                    }
                    return Ok(result);
                }
                Ok(AppendOutcome::Duplicate(rec)) => return check_replay(&rec, &fingerprint),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(CoreError::Conflict)
    }

    /// The limits of the agent version `run` started with (its message strategy and
    /// queue cap); the defaults if that version is gone.
    async fn limits_of(&self, run: &RunSummary) -> Result<AgentLimits, CoreError> {
        let agent = self
            .agents
            .get_agent_version(run.tenant, run.agent_id, run.agent_version)
            .await?;
        Ok(agent.map(|a| a.limits).unwrap_or_default())
    }

    #[tracing::instrument(name = "runs.list_messages", skip_all)]
    pub async fn list_messages(
        &self,
        p: &Principal,
        run: RunId,
        after: Option<i64>,
        limit: Option<u32>,
    ) -> Result<Page<Message>, CoreError> {
        p.require(Action::ReadRuns)?;
        let limit = page::limit(limit)?;
        let after = validate::non_negative("after", after)?;
        self.load(p.tenant, run).await?;
        let items = self
            .store()
            .list_messages(p.tenant, run, after, limit)
            .await?;
        let next_cursor = (items.len() == limit as usize)
            .then(|| items.last().map(|m| m.seq.to_string()))
            .flatten();
        Ok(Page { items, next_cursor })
    }

    /// Cancels a run. An idle run is cancelled at once; a busy one gets
    /// `run.cancel_requested` and the engine ends the turn at its next step boundary.
    /// Cancelling a cancelled run returns it unchanged.
    #[tracing::instrument(name = "runs.cancel_run", skip_all)]
    pub async fn cancel_run(
        &self,
        p: &Principal,
        run_id: RunId,
        reason: Option<String>,
    ) -> Result<RunSummary, CoreError> {
        p.require(Action::CancelRuns)?;
        if let Some(r) = &reason {
            validate::text("reason", r, MAX_TITLE_CHARS)?;
        }
        for _ in 0..MAX_ATTEMPTS {
            let run = self.load(p.tenant, run_id).await?;
            let (events, busy) = match decide::cancel(&run, reason.as_deref())? {
                decide::Cancel::Unchanged => {
                    self.cancel_children(p, run_id).await;
                    return Ok(run);
                }
                decide::Cancel::Append { events, wake } => (events, wake),
            };
            let events = with_meta(events, &meta(&self.replica, p, None));
            let req = AppendRequest::new(run_id, run.version, events, self.clock.now());
            match self.recorder.append(p.tenant, req).await {
                Ok(AppendOutcome::Appended { run, .. }) => {
                    if busy {
                        self.driver.wake(p.tenant, run_id);
                    }
                    self.cancel_children(p, run_id).await;
                    return Ok(*run);
                }
                Ok(AppendOutcome::Duplicate(_)) => {
                    return Err(CoreError::Internal("unexpected idempotency hit".into()));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(CoreError::Conflict)
    }

    /// Cancels the runs `run_id`'s `delegate` calls started that have not ended (and so
    /// theirs, in turn): a parent waiting on a child then gets its answer, "cancelled",
    /// and ends. A child that cannot be cancelled now is logged and left: a cancel of
    /// the parent asked again tries again.
    async fn cancel_children(&self, p: &Principal, run_id: RunId) {
        let filter = RunFilter {
            parent: Some(run_id),
            ..RunFilter::default()
        };
        let query = RunListQuery {
            filter,
            before: None,
            limit: crate::page::MAX_LIMIT,
        };
        let children = match self.store().list_runs(p.tenant, &query).await {
            Ok(children) => children,
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "could not list the run's delegated runs to cancel them");
                return;
            }
        };
        for child in children.iter().filter(|c| !c.status.is_terminal()) {
            let reason = Some(format!("its parent run {run_id} was cancelled"));
            if let Err(e) = Box::pin(self.cancel_run(p, child.id, reason)).await {
                tracing::warn!(run = %run_id, child = %child.id, error = %e, "could not cancel a delegated run");
            }
        }
    }

    /// Changes the run's title and metadata (a merge patch), in any status (a finished
    /// run can still be labelled). During a turn the engine's next append finds the
    /// version moved, sees that only labels changed, and appends again on top: the turn
    /// loses nothing. A patch that changes nothing appends nothing.
    #[tracing::instrument(name = "runs.update_run", skip_all)]
    pub async fn update_run(
        &self,
        p: &Principal,
        run_id: RunId,
        patch: super::metadata::RunPatch,
    ) -> Result<RunSummary, CoreError> {
        p.require(Action::UpdateRuns)?;
        for _ in 0..MAX_ATTEMPTS {
            let run = self.load(p.tenant, run_id).await?;
            let (title, metadata) = patch.apply(run.title.as_deref(), &run.metadata)?;
            if title == run.title && metadata == run.metadata {
                return Ok(run);
            }
            let event = RunEvent::RunUpdated(RunUpdated { title, metadata });
            let events = with_meta(vec![event], &meta(&self.replica, p, None));
            let req = AppendRequest::new(run_id, run.version, events, self.clock.now());
            match self.recorder.append(p.tenant, req).await {
                Ok(AppendOutcome::Appended { run, .. }) => return Ok(*run),
                Ok(AppendOutcome::Duplicate(_)) => {
                    return Err(CoreError::Internal("unexpected idempotency hit".into()));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(CoreError::Conflict)
    }

    /// A page of a run's events with `version > after`.
    #[tracing::instrument(name = "runs.read_events", skip_all)]
    pub async fn read_events(
        &self,
        p: &Principal,
        run: RunId,
        after: Option<i64>,
        limit: Option<u32>,
    ) -> Result<Vec<Envelope>, CoreError> {
        p.require(Action::ReadRuns)?;
        let limit = page::limit(limit)?;
        let after = validate::non_negative("after", after)?;
        let summary = self.load(p.tenant, run).await?;
        check_cursor(after, &summary)?;
        Ok(self
            .store()
            .read_stream(p.tenant, run, after, limit)
            .await?)
    }

    pub(crate) async fn load(&self, tenant: TenantId, run: RunId) -> Result<RunSummary, CoreError> {
        self.store()
            .get_run(tenant, run)
            .await?
            .ok_or(CoreError::NotFound("run"))
    }

    /// The stored result of an earlier request with the same `request_id`, if any.
    async fn replay<T: for<'de> Deserialize<'de>>(
        &self,
        p: &Principal,
        request_id: &Option<String>,
        fingerprint: &str,
    ) -> Result<Option<T>, CoreError> {
        let Some(id) = request_id else {
            return Ok(None);
        };
        match self.store().find_idempotency(p.tenant, id).await? {
            Some(rec) => check_replay(&rec, fingerprint).map(Some),
            None => Ok(None),
        }
    }
}

/// The events to append, each with `meta`.
fn with_meta(events: Vec<RunEvent>, meta: &EventMeta) -> Vec<NewEvent> {
    events
        .into_iter()
        .map(|e| NewEvent::new(e, meta.clone()))
        .collect()
}

pub(crate) fn meta(replica: &str, p: &Principal, request_id: Option<&str>) -> EventMeta {
    let mut meta = EventMeta::new(p.tenant);
    meta.replica = Some(replica.to_string());
    meta.actor = Some(p.actor.clone());
    meta.request_id = request_id.map(str::to_string);
    meta.traceparent = crate::trace::current();
    meta
}

fn check_content(content: &str) -> Result<(), CoreError> {
    validate::non_blank("content", content, MAX_CONTENT_CHARS)
}

/// One rule for an event cursor, paged or streamed: at most the run's version. A cursor
/// past it did not come from this run (the client mixed runs up, or the database was
/// restored to an earlier point): an empty page would hide that.
pub(super) fn check_cursor(after: i64, run: &RunSummary) -> Result<(), CoreError> {
    if after > run.version {
        return Err(CoreError::invalid(format!(
            "the event cursor {after} is past the end of the run (version {})",
            run.version
        )));
    }
    Ok(())
}
