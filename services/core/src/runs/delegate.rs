//! Delegation, the run use cases' side: a `delegate` tool call of a parent run starts a
//! child run of another agent of the tenant, with the call's receipt id as its
//! `request_id` (a call run again after a crash finds its child and starts none), and
//! waits until the child's first turn ends; its reply, in full, is the answer.
//!
//! Bounds: a chain of delegations is at most [`MAX_DEPTH`] runs below the one a client
//! started, and one run starts at most [`MAX_CHILDREN`]. A cancel of a parent cancels its
//! children (`commands.rs`), which ends the parent's wait.

use super::commands::Runs;
use super::requests::{CreateRun, TurnOutcome};
use crate::error::CoreError;
use crate::model::{Principal, Role};
use crate::ports::{Delegated, Delegation, Delegator, RunFilter, RunListQuery};
use async_trait::async_trait;
use baton_events::ParentRun;
use std::time::Duration;

/// Delegations in a chain below the run a client started.
pub const MAX_DEPTH: u32 = 3;
/// Runs one run may start by delegation.
pub const MAX_CHILDREN: u32 = 20;
/// How long the wait for a child's answer follows the bus before looking at the store.
const RESYNC: Duration = Duration::from_secs(2);

#[async_trait]
impl Delegator for Runs {
    #[tracing::instrument(name = "runs.delegate", skip_all, fields(parent = %d.parent))]
    async fn delegate(&self, d: Delegation) -> Result<Delegated, CoreError> {
        if d.depth > MAX_DEPTH {
            return Err(CoreError::invalid(format!(
                "delegation goes at most {MAX_DEPTH} runs deep; this run is {} deep already",
                d.depth - 1
            )));
        }
        // The parent's call acts in its tenant, as a member may.
        let p = Principal {
            tenant: d.tenant,
            role: Role::Member,
            actor: format!("run:{}", d.parent),
            source: None,
        };
        let request_id = d.receipt.to_string();
        let again = self
            .reader
            .find_idempotency(d.tenant, &request_id)
            .await?
            .is_some();
        if !again {
            self.check_fan_out(&p, d.parent).await?;
        }
        let cmd = CreateRun {
            agent_id: d.agent,
            title: None,
            metadata: Default::default(),
            message: Some(d.message),
            request_id: Some(request_id),
        };
        let parent = ParentRun {
            run_id: d.parent,
            receipt_id: d.receipt,
            depth: d.depth,
        };
        let created = self.create_run_under(&p, cmd, Some(parent)).await?;
        let child = created.run.id;
        let Some(message) = created.message else {
            return Err(CoreError::Internal(format!(
                "delegated run {child} was created without its message"
            )));
        };
        let ended = self.wait_answer(&p, &message, 1, RESYNC).await?;
        let answer = match ended.outcome {
            TurnOutcome::Completed => Ok(ended.reply.map(|m| m.content).unwrap_or_default()),
            TurnOutcome::Failed => Err(format!(
                "the delegated run {child} failed: {}",
                ended
                    .run
                    .last_error
                    .map_or_else(|| "no reason given".to_string(), |e| e.message)
            )),
            TurnOutcome::Cancelled => Err(format!("the delegated run {child} was cancelled")),
            TurnOutcome::Interrupted => Err(format!(
                "the delegated run {child}'s turn was interrupted by a message of a member"
            )),
            TurnOutcome::RequiresAction => {
                Err(format!("the delegated run {child} waits for a member"))
            }
        };
        Ok(Delegated { child, answer })
    }
}

impl Runs {
    /// Refuses a new child once `parent` started [`MAX_CHILDREN`].
    async fn check_fan_out(
        &self,
        p: &Principal,
        parent: baton_events::RunId,
    ) -> Result<(), CoreError> {
        let query = RunListQuery {
            filter: RunFilter {
                parent: Some(parent),
                ..RunFilter::default()
            },
            before: None,
            limit: MAX_CHILDREN,
        };
        let children = self.reader.list_runs(p.tenant, &query).await?;
        if children.len() >= MAX_CHILDREN as usize {
            return Err(CoreError::invalid(format!(
                "a run starts at most {MAX_CHILDREN} runs by delegation; this one has"
            )));
        }
        Ok(())
    }
}
