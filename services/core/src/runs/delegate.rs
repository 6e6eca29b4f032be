//! Delegation, the run use cases' side: a `delegate` tool call of a parent run starts a
//! child run of another agent of the tenant, with the call's receipt id as its
//! `request_id` (`delegate:<receipt>`: a call run again after a crash finds its child and
//! starts none), and waits until the child's first turn ends; its reply, in full, is the
//! answer.
//!
//! Bounds: a chain of delegations is at most [`MAX_DEPTH`] runs below the one a client
//! started, and one run starts at most [`MAX_CHILDREN`]. A cancel of a parent cancels its
//! children (`commands.rs`), which ends the parent's wait.

use super::commands::Runs;
use super::requests::{CreateRun, TurnOutcome};
use crate::error::CoreError;
use crate::model::{Principal, Role};
use crate::ports::{Child, Delegation, Delegator, RunFilter, RunListQuery};
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
    async fn start(&self, d: &Delegation) -> Result<Child, CoreError> {
        if d.depth > MAX_DEPTH {
            return Err(CoreError::invalid(format!(
                "delegation goes at most {MAX_DEPTH} runs deep; this run is {} deep already",
                d.depth - 1
            )));
        }
        let p = principal(d.tenant, d.parent);
        let request_id = request_id(d);
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
            message: Some(d.message.clone()),
            request_id: Some(request_id),
        };
        let parent = ParentRun {
            run_id: d.parent,
            receipt_id: d.receipt,
            depth: d.depth,
        };
        let created = self.create_run_under(&p, cmd, Some(parent)).await?;
        let run = created.run.id;
        let Some(message) = created.message else {
            return Err(CoreError::Internal(format!(
                "delegated run {run} was created without its message"
            )));
        };
        // A cancel of the parent that listed its children just before this one was
        // created would miss it: look at the parent after the creation, and cancel the
        // child if the parent is ending (one of the two always sees the other).
        let parent_run = self.reader.get_run(d.tenant, d.parent).await?;
        if parent_run.is_none_or(|r| r.cancel_requested || r.status.is_terminal()) {
            let why = Some(format!("its parent run {} was cancelled", d.parent));
            if let Err(e) = self.cancel_run(&p, run, why).await {
                tracing::warn!(child = %run, error = %e, "could not cancel a delegated run");
            }
        }
        Ok(Child {
            tenant: d.tenant,
            run,
            message,
        })
    }

    #[tracing::instrument(name = "runs.delegation_answer", skip_all, fields(child = %child.run))]
    async fn answer(&self, child: &Child) -> Result<Result<String, String>, CoreError> {
        let p = principal(child.tenant, child.run);
        let ended = self.wait_answer(&p, &child.message, 1, RESYNC).await?;
        let run = child.run;
        Ok(match ended.outcome {
            TurnOutcome::Completed => Ok(ended.reply.map(|m| m.content).unwrap_or_default()),
            TurnOutcome::Failed => Err(format!(
                "the delegated run {run} failed: {}",
                ended
                    .run
                    .last_error
                    .map_or_else(|| "no reason given".to_string(), |e| e.message)
            )),
            TurnOutcome::Cancelled => Err(format!("the delegated run {run} was cancelled")),
            TurnOutcome::Interrupted => Err(format!(
                "the delegated run {run}'s turn was interrupted by a message of a member"
            )),
            TurnOutcome::RequiresAction => {
                Err(format!("the delegated run {run} waits for a member"))
            }
        })
    }
}

/// A delegation acts in its run's tenant as a member may, named after the run.
fn principal(tenant: baton_events::TenantId, run: baton_events::RunId) -> Principal {
    Principal {
        tenant,
        role: Role::Member,
        actor: format!("run:{run}"),
        source: None,
    }
}

/// The child's `request_id`: the call's receipt, apart from clients' ids.
fn request_id(d: &Delegation) -> String {
    format!("delegate:{}", d.receipt)
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
