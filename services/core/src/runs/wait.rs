//! Waiting for a turn to settle (`wait` on a created run or a posted message): follow the
//! run's events after the message that started the turn until one of them settles it, then
//! answer with the run and the turn's last assistant message. A queued message is first
//! followed until a turn takes it.
//!
//! A turn settles when it completes or fails, when it needs someone (an approval, a
//! `client` tool's output, an uncertain call), or when the run ends. Following goes
//! through [`follow`](super::follow) (bus first, the database on a gap or silence), so
//! any replica can wait for a turn another replica drives. The caller bounds the wait:
//! dropping the future drops the subscription and leaves nothing behind.

use super::commands::Runs;
use super::follow::follow;
use super::requests::{PostedMessage, QueuedMessage, TurnOutcome, TurnResult};
use crate::error::CoreError;
use crate::model::{Message, Principal, RunStatus};
use baton_events::{Decoded, MessageRole, RunEvent, RunId, ToolKind};
use futures::StreamExt;
use std::ops::ControlFlow;
use std::time::Duration;

/// Messages read per page while looking for a turn's reply.
const REPLY_SCAN: u32 = 500;

/// Whether `event`, appended after the message that asked for `turn`, settles it.
fn settles(event: &RunEvent, turn: i64) -> Option<TurnOutcome> {
    match event {
        RunEvent::TurnCompleted(e) if e.turn >= turn => Some(TurnOutcome::Completed),
        RunEvent::TurnFailed(e) if e.turn >= turn => Some(TurnOutcome::Failed),
        RunEvent::TurnInterrupted(e) if e.turn >= turn => Some(TurnOutcome::Interrupted),
        RunEvent::ApprovalRequested(e) if e.turn >= turn => Some(TurnOutcome::RequiresAction),
        RunEvent::ToolIntent(e) if e.turn >= turn && e.kind == ToolKind::Client => {
            Some(TurnOutcome::RequiresAction)
        }
        // Uncertain calls name no turn: any after the turn's message is the turn's own.
        RunEvent::ToolUncertain(_) => Some(TurnOutcome::RequiresAction),
        RunEvent::RunCompleted(_) => Some(TurnOutcome::Completed),
        RunEvent::RunFailed(_) => Some(TurnOutcome::Failed),
        RunEvent::RunCancelled(_) => Some(TurnOutcome::Cancelled),
        _ => None,
    }
}

/// How following a run ended.
enum Watched<T> {
    /// The event the caller looked for, and its version.
    Found(T, i64),
    /// The run ended and every event of it was seen, none of them the one looked for.
    Ended(RunStatus, i64),
}

impl Runs {
    /// Waits until `turn`, asked for by `message`, settles. Never returns on its own
    /// while the turn runs: the caller bounds it.
    #[tracing::instrument(name = "runs.wait_turn", skip_all)]
    pub async fn wait_turn(
        &self,
        p: &Principal,
        message: &Message,
        turn: i64,
        resync: Duration,
    ) -> Result<TurnResult, CoreError> {
        self.wait_until(p, message, turn, resync, settles).await
    }

    /// Waits until `turn`, asked for by `message`, ends: as [`Runs::wait_turn`], but a turn
    /// that waits on someone (an approval, a client's output) waits on. Never returns on
    /// its own while the turn runs: the caller bounds it.
    pub(super) async fn wait_answer(
        &self,
        p: &Principal,
        message: &Message,
        turn: i64,
        resync: Duration,
    ) -> Result<TurnResult, CoreError> {
        let ends =
            |e: &RunEvent, turn| settles(e, turn).filter(|o| *o != TurnOutcome::RequiresAction);
        self.wait_until(p, message, turn, resync, ends).await
    }

    async fn wait_until(
        &self,
        p: &Principal,
        message: &Message,
        turn: i64,
        resync: Duration,
        settles: impl Fn(&RunEvent, i64) -> Option<TurnOutcome>,
    ) -> Result<TurnResult, CoreError> {
        let watched = self
            .watch(p, message.run_id, message.version, resync, |e| {
                settles(e, turn)
            })
            .await?;
        let (outcome, version) = match watched {
            Watched::Found(outcome, version) => (outcome, version),
            Watched::Ended(status, version) => {
                let outcome = match status {
                    RunStatus::Cancelled => TurnOutcome::Cancelled,
                    RunStatus::Failed => TurnOutcome::Failed,
                    _ => TurnOutcome::Completed,
                };
                (outcome, version)
            }
        };
        self.result(p, message, turn, outcome, version).await
    }

    /// Waits until `queued` is taken from the run's queue and the turn it starts settles,
    /// then answers as for a message that started its turn at once. `None`: the run ended
    /// first and never took it. Never returns on its own while it waits: the caller
    /// bounds it.
    #[tracing::instrument(name = "runs.wait_queued", skip_all)]
    pub async fn wait_queued(
        &self,
        p: &Principal,
        queued: &QueuedMessage,
        resync: Duration,
    ) -> Result<Option<PostedMessage>, CoreError> {
        let id = queued.message_id;
        let taken = self
            .watch(p, queued.run_id, queued.version, resync, |e| match e {
                RunEvent::TurnRequested(t) if t.message_id == id => Some(t.turn),
                _ => None,
            })
            .await?;
        let Watched::Found(turn, _) = taken else {
            return Ok(None);
        };
        let Some(message) = self.find_message(p, queued).await? else {
            return Err(CoreError::Internal(format!(
                "message {id} started turn {turn} but is not among the run's messages"
            )));
        };
        let result = self.wait_turn(p, &message, turn, resync).await?;
        Ok(Some(PostedMessage {
            message,
            turn,
            result: Some(result),
        }))
    }

    /// Follows `run`'s events after `cursor` until `found` picks one, or the run has
    /// ended with all its events seen. Following goes bus first, the database on a gap or
    /// silence; when the bus drops a subscriber that fell behind, it follows again from
    /// the last event seen.
    async fn watch<T>(
        &self,
        p: &Principal,
        run: RunId,
        mut cursor: i64,
        resync: Duration,
        mut found: impl FnMut(&RunEvent) -> Option<T>,
    ) -> Result<Watched<T>, CoreError> {
        loop {
            if let Some(events) = follow(self, p, run, cursor, resync).await? {
                let mut events = std::pin::pin!(events);
                while let Some(e) = events.next().await {
                    let e = e?;
                    cursor = e.version;
                    if let Decoded::Known(event) = e.decode()
                        && let Some(hit) = found(&event)
                    {
                        return Ok(Watched::Found(hit, e.version));
                    }
                }
            }
            let now = self.get_run(p, run).await?;
            if now.status.is_terminal() && cursor >= now.version {
                return Ok(Watched::Ended(now.status, now.version));
            }
        }
    }

    /// The message `queued` became when its turn took it.
    async fn find_message(
        &self,
        p: &Principal,
        queued: &QueuedMessage,
    ) -> Result<Option<Message>, CoreError> {
        let id = queued.message_id;
        self.scan_messages(p, queued.run_id, queued.after_seq, |m| {
            if m.id == id {
                ControlFlow::Break(m)
            } else {
                ControlFlow::Continue(())
            }
        })
        .await
    }

    /// Pages through `run`'s messages after `seq`, in order, handing each to `visit` until
    /// it breaks with its answer; `None` when the messages run out first.
    async fn scan_messages<T>(
        &self,
        p: &Principal,
        run: RunId,
        mut seq: i64,
        mut visit: impl FnMut(Message) -> ControlFlow<T>,
    ) -> Result<Option<T>, CoreError> {
        loop {
            let page = self
                .reader
                .list_messages(p.tenant, run, seq, REPLY_SCAN)
                .await?;
            let full = page.len() == REPLY_SCAN as usize;
            for m in page {
                seq = m.seq;
                if let ControlFlow::Break(found) = visit(m) {
                    return Ok(Some(found));
                }
            }
            if !full {
                return Ok(None);
            }
        }
    }

    /// The answer for `turn`, settled by the event at `version`: the run as it stands
    /// now, and the turn's reply up to that event.
    async fn result(
        &self,
        p: &Principal,
        message: &Message,
        turn: i64,
        outcome: TurnOutcome,
        version: i64,
    ) -> Result<TurnResult, CoreError> {
        let summary = self.get_run(p, message.run_id).await?;
        let reply = self.reply(p, message, version).await?;
        Ok(TurnResult {
            turn,
            outcome,
            run: summary,
            reply,
        })
    }

    /// The last assistant message after `asked_by` and at most at version `until`.
    async fn reply(
        &self,
        p: &Principal,
        asked_by: &Message,
        until: i64,
    ) -> Result<Option<Message>, CoreError> {
        let mut reply = None;
        self.scan_messages(p, asked_by.run_id, asked_by.seq, |m| {
            if m.version > until {
                return ControlFlow::Break(());
            }
            if m.role == MessageRole::Assistant {
                reply = Some(m);
            }
            ControlFlow::Continue(())
        })
        .await?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_events::{
        ApprovalId, ApprovalRequested, ErrorInfo, ReceiptId, RunCompleted, ToolEffect, ToolId,
        ToolIntent, ToolUncertain, TurnCompleted, TurnFailed, TurnStarted,
    };

    fn intent(turn: i64, kind: ToolKind) -> RunEvent {
        RunEvent::ToolIntent(ToolIntent {
            receipt_id: ReceiptId::new(),
            turn,
            call_id: "c".into(),
            tool_id: ToolId::new(),
            tool: "t".into(),
            kind,
            effect: ToolEffect::Mutation,
            idempotent: false,
            arguments: serde_json::json!({}),
            idempotency_key: "k".into(),
        })
    }

    #[test]
    fn a_turn_settles_when_it_ends_needs_someone_or_the_run_ends() {
        let t = 3;
        let failed = RunEvent::TurnFailed(TurnFailed {
            turn: t,
            error: ErrorInfo {
                code: "x".into(),
                message: "y".into(),
            },
        });
        let approval = RunEvent::ApprovalRequested(ApprovalRequested {
            approval_id: ApprovalId::new(),
            receipt_id: ReceiptId::new(),
            turn: t,
            call_id: "c".into(),
            tool_id: ToolId::new(),
            tool: "t".into(),
            effect: ToolEffect::Mutation,
            arguments: serde_json::json!({}),
        });
        let cases = [
            (
                RunEvent::TurnCompleted(TurnCompleted {
                    turn: t,
                    finish_reason: None,
                }),
                Some(TurnOutcome::Completed),
            ),
            (failed, Some(TurnOutcome::Failed)),
            (approval, Some(TurnOutcome::RequiresAction)),
            (
                intent(t, ToolKind::Client),
                Some(TurnOutcome::RequiresAction),
            ),
            (intent(t, ToolKind::Http), None),
            (
                RunEvent::ToolUncertain(ToolUncertain {
                    receipt_id: ReceiptId::new(),
                    reason: "r".into(),
                }),
                Some(TurnOutcome::RequiresAction),
            ),
            (
                RunEvent::RunCompleted(RunCompleted {}),
                Some(TurnOutcome::Completed),
            ),
            (RunEvent::TurnStarted(TurnStarted { turn: t }), None),
            // An earlier turn's end (a replay from before the message) settles nothing.
            (
                RunEvent::TurnCompleted(TurnCompleted {
                    turn: t - 1,
                    finish_reason: None,
                }),
                None,
            ),
            (intent(t - 1, ToolKind::Client), None),
        ];
        for (event, want) in cases {
            assert_eq!(settles(&event, t), want, "{event:?}");
        }
    }
}
