//! Read batching: the calls of one model step run in the model's order, but
//! independent reads and delegations run together. An `http` read or a `delegate` call
//! that needs no approval takes along the new calls right after it that are like it
//! and pass their checks, up to the turn's call limit; anything else runs alone. No I/O.

use super::check::check_call;
use crate::agent::TurnContext;
use crate::state::{Call, CallState, RunState};
use baton_core::model::{Tool, ToolKindSpec};
use baton_events::ToolEffect;

/// The calls to run in one step, starting with the new call `i` of the latest model
/// step, which passed its check as a call of `tool`.
pub(crate) fn batch(
    ctx: &TurnContext,
    state: &RunState,
    i: usize,
    tool: &Tool,
) -> Vec<(Call, Tool)> {
    let mut batch = vec![(state.calls[i].clone(), tool.clone())];
    if !runs_alongside(tool) {
        return batch;
    }
    let delegating = |b: &[(Call, Tool)]| b.iter().filter(|(_, t)| is_delegate(t)).count() as u32;
    for next in &state.calls[i + 1..] {
        let limit_left = state.tool_calls + (batch.len() as u32) < ctx.agent.limits.max_tool_calls;
        match check_call(ctx, state.tool_calls, next, true) {
            // A run starts at most MAX_CHILDREN runs: the delegations of one batch count
            // together (each checks the children already there, none of each other's).
            Ok(t)
                if is_delegate(t)
                    && state.delegations + delegating(&batch) >= baton_core::runs::MAX_CHILDREN =>
            {
                break;
            }
            Ok(t) if limit_left && next.state == CallState::New && runs_alongside(t) => {
                batch.push((next.clone(), t.clone()));
            }
            _ => break,
        }
    }
    batch
}

fn is_delegate(tool: &Tool) -> bool {
    matches!(tool.kind, ToolKindSpec::Delegate { .. })
}

/// An `http` or `mcp` read, or a delegation (each starts a run of its own), that needs
/// no approval: it may run alongside others like it.
fn runs_alongside(tool: &Tool) -> bool {
    !tool.requires_approval
        && match tool.kind {
            ToolKindSpec::Http { .. } | ToolKindSpec::Mcp { .. } => tool.effect == ToolEffect::Read,
            ToolKindSpec::Delegate { .. } => true,
            // Commands and writes promote against the files they saw: one at a time.
            ToolKindSpec::Workspace { .. } => tool.effect == ToolEffect::Read,
            ToolKindSpec::Client => false,
        }
}
