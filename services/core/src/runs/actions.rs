//! What members and API clients do for a turn that waits (`requires_action`): decide
//! an approval, submit the outputs of client tools, resolve an uncertain call; and the
//! receipts listing. Each command checks the receipt's state and appends against the
//! run version it read, so two racing decisions cannot both land; then it wakes the
//! run's driver.

use super::commands::{MAX_ATTEMPTS, Runs, meta};
use super::decide;
use super::requests::{
    ApprovalDecision, MAX_OUTPUT_CHARS, MAX_OUTPUTS, MAX_TITLE_CHARS, ReceiptResolution, ToolOutput,
};
use crate::error::{CoreError, StoreError};
use crate::model::Receipt;
use crate::model::{Action, Principal};
use crate::ports::{AppendOutcome, AppendRequest};
use crate::validate;
use baton_events::{ApprovalId, Decoded, Envelope, NewEvent, ReceiptId, RunId};

impl Runs {
    #[tracing::instrument(name = "runs.list_receipts", skip_all)]
    pub async fn list_receipts(
        &self,
        p: &Principal,
        run: RunId,
    ) -> Result<Vec<Receipt>, CoreError> {
        p.require(Action::ReadRuns)?;
        self.load(p.tenant, run).await?;
        Ok(self.reader.list_receipts(p.tenant, run).await?)
    }

    #[tracing::instrument(name = "runs.decide_approval", skip_all)]
    pub async fn decide_approval(
        &self,
        p: &Principal,
        run: RunId,
        approval: ApprovalId,
        decision: ApprovalDecision,
    ) -> Result<Receipt, CoreError> {
        p.require(Action::ResolveActions)?;
        if let Some(r) = &decision.reason {
            validate::text("reason", r, MAX_TITLE_CHARS * 10)?;
        }
        self.act(p, run, |receipts| {
            decide::decide_approval(receipts, approval, &decision)
        })
        .await
        .and_then(only)
    }

    #[tracing::instrument(name = "runs.submit_tool_outputs", skip_all)]
    pub async fn submit_tool_outputs(
        &self,
        p: &Principal,
        run: RunId,
        outputs: Vec<ToolOutput>,
    ) -> Result<Vec<Receipt>, CoreError> {
        p.require(Action::ResolveActions)?;
        if outputs.is_empty() || outputs.len() > MAX_OUTPUTS {
            return Err(CoreError::invalid(format!(
                "tool_outputs must hold 1 to {MAX_OUTPUTS} outputs"
            )));
        }
        for (i, o) in outputs.iter().enumerate() {
            validate::text(
                &format!("tool_outputs[{i}].output"),
                &o.output,
                MAX_OUTPUT_CHARS,
            )?;
            if outputs[..i].iter().any(|x| x.receipt_id == o.receipt_id) {
                return Err(CoreError::invalid(format!(
                    "tool_outputs lists receipt {} twice",
                    o.receipt_id
                )));
            }
        }
        self.act(p, run, |receipts| {
            decide::submit_tool_outputs(receipts, &outputs)
        })
        .await
    }

    #[tracing::instrument(name = "runs.resolve_receipt", skip_all)]
    pub async fn resolve_receipt(
        &self,
        p: &Principal,
        run: RunId,
        receipt: ReceiptId,
        res: ReceiptResolution,
    ) -> Result<Receipt, CoreError> {
        p.require(Action::ResolveActions)?;
        decide::check_resolution(&res)?;
        if let Some(o) = &res.output {
            validate::text("output", o, MAX_OUTPUT_CHARS)?;
        }
        self.act(p, run, |receipts| {
            decide::resolve_receipt(receipts, receipt, &res)
        })
        .await
        .and_then(only)
    }

    /// Reads the run and its receipts, lets `decide` (one of [`decide`]'s functions) pick
    /// the events and the receipts
    /// they change, appends the events against the version read (again from a fresh
    /// read after losing a race), wakes the run's driver and returns those receipts as
    /// the append left them (folded here with [`Receipt::apply`], not read again).
    async fn act(
        &self,
        p: &Principal,
        run_id: RunId,
        decide: impl Fn(&[Receipt]) -> Result<decide::Acted, CoreError>,
    ) -> Result<Vec<Receipt>, CoreError> {
        for _ in 0..MAX_ATTEMPTS {
            let run = self.load(p.tenant, run_id).await?;
            decide::open_for_actions(&run)?;
            let receipts = self.reader.list_receipts(p.tenant, run_id).await?;
            let (events, touched) = decide(&receipts)?;
            let meta = meta(&self.replica, p, None);
            let req = AppendRequest::new(
                run_id,
                run.version,
                events
                    .into_iter()
                    .map(|e| NewEvent::new(e, meta.clone()))
                    .collect(),
                self.clock.now(),
            );
            match self.recorder.append(p.tenant, req).await {
                Ok(AppendOutcome::Appended { events, .. }) => {
                    self.driver.wake(p.tenant, run_id);
                    return Ok(touched
                        .into_iter()
                        .map(|r| fold(r, run_id, &events))
                        .collect());
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
}

/// `before` after the appended `events` that concern it.
fn fold(before: Receipt, run: RunId, events: &[Envelope]) -> Receipt {
    events.iter().fold(before, |r, e| match e.decode() {
        Decoded::Known(event) if Receipt::id_of(&event) == Some(r.id) => {
            Receipt::apply(Some(r.clone()), run, &event, e.version, e.recorded_at).unwrap_or(r)
        }
        _ => r,
    })
}

/// The one receipt a single-call command changed.
fn only(mut receipts: Vec<Receipt>) -> Result<Receipt, CoreError> {
    receipts
        .pop()
        .ok_or_else(|| CoreError::Internal("a command changed no receipt".into()))
}
