//! Read batching: the calls of one model step run in the model's order, but
//! independent reads run together. An `http` read that needs no approval takes along
//! the new calls right after it that are `http` reads needing no approval and pass
//! their checks, up to the turn's call limit; anything else runs alone. No I/O.

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
    if !is_plain_read(tool) {
        return batch;
    }
    for next in &state.calls[i + 1..] {
        let limit_left = state.tool_calls + (batch.len() as u32) < ctx.agent.limits.max_tool_calls;
        match check_call(ctx, state.tool_calls, next, true) {
            Ok(t) if limit_left && next.state == CallState::New && is_plain_read(t) => {
                batch.push((next.clone(), t.clone()));
            }
            _ => break,
        }
    }
    batch
}

/// An `http` read that needs no approval: it may run alongside others like it.
fn is_plain_read(tool: &Tool) -> bool {
    tool.effect == ToolEffect::Read
        && !tool.requires_approval
        && matches!(tool.kind, ToolKindSpec::Http { .. })
}
