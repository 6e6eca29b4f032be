//! The recovery rule, for a call whose intent is recorded without a result that this
//! driver is not making: a read or an idempotent tool runs again under the same
//! idempotency key once the agent still has it and it is still safe to repeat;
//! anything else is held as `tool.uncertain` for a member. Also a member's retry. No I/O.

use crate::outcome::info;
use baton_core::model::Tool;
use baton_events::{ErrorInfo, ToolEffect, ToolIntent};

/// What to do with an interrupted call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Recovery {
    /// Call it again under its recorded intent, with this tool.
    Rerun(Tool),
    /// It was safe to repeat but its tool is gone: an error result the model sees.
    Reject(ErrorInfo),
    /// It may have taken effect: hold it as `tool.uncertain` for a member.
    HoldUncertain,
}

/// The recovery rule for `intent`, whose tool is `tool` if the agent may still call it.
pub(crate) fn recover(intent: &ToolIntent, tool: Option<Tool>) -> Recovery {
    let declared_safe = intent.effect == ToolEffect::Read || intent.idempotent;
    let Some(tool) = tool else {
        if declared_safe {
            return Recovery::Reject(info(
                "tool_unavailable",
                "the call was interrupted and its tool is no longer available to this agent",
            ));
        }
        return Recovery::HoldUncertain;
    };
    if declared_safe && tool.safe_to_repeat() && tool.kind() == intent.kind {
        return Recovery::Rerun(tool);
    }
    Recovery::HoldUncertain
}

/// A member asked to call an uncertain call again: its intent, recorded anew in the
/// current `turn`, with its tool; or the error result the model gets when the agent
/// may no longer call the tool.
pub(crate) fn retry(
    intent: &ToolIntent,
    tool: Option<Tool>,
    turn: i64,
) -> Result<(ToolIntent, Tool), ErrorInfo> {
    let Some(tool) = tool else {
        return Err(info("tool_unavailable", "the tool is no longer available"));
    };
    let mut intent = intent.clone();
    intent.turn = turn;
    Ok((intent, tool))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::given::{idempotent, intent, mutation, read};

    #[test]
    fn an_interrupted_read_runs_again() {
        let tool = read("look");
        let given = intent("c1", &tool);
        assert_eq!(recover(&given, Some(tool.clone())), Recovery::Rerun(tool));
    }

    #[test]
    fn an_interrupted_idempotent_mutation_runs_again() {
        let tool = idempotent(mutation("pay"));
        let given = intent("c1", &tool);
        assert_eq!(recover(&given, Some(tool.clone())), Recovery::Rerun(tool));
    }

    #[test]
    fn an_interrupted_mutation_is_held_uncertain() {
        let tool = mutation("pay");
        let given = intent("c1", &tool);
        assert_eq!(recover(&given, Some(tool)), Recovery::HoldUncertain);
    }

    #[test]
    fn an_interrupted_read_whose_tool_is_gone_is_an_error_result() {
        let given = intent("c1", &read("look"));
        let Recovery::Reject(error) = recover(&given, None) else {
            panic!("not rejected");
        };
        assert_eq!(error.code, "tool_unavailable");
    }

    #[test]
    fn an_interrupted_mutation_whose_tool_is_gone_is_held_uncertain() {
        let given = intent("c1", &mutation("pay"));
        assert_eq!(recover(&given, None), Recovery::HoldUncertain);
    }

    #[test]
    fn a_read_whose_tool_became_a_mutation_is_held_uncertain() {
        let was = read("look");
        let given = intent("c1", &was);
        let now = Tool {
            effect: ToolEffect::Mutation,
            ..was
        };
        assert_eq!(recover(&given, Some(now)), Recovery::HoldUncertain);
    }

    #[test]
    fn an_idempotent_call_whose_tool_no_longer_is_held_uncertain() {
        let was = idempotent(mutation("pay"));
        let given = intent("c1", &was);
        let now = Tool {
            idempotent: false,
            ..was
        };
        assert_eq!(recover(&given, Some(now)), Recovery::HoldUncertain);
    }

    #[test]
    fn a_read_whose_tool_became_a_client_tool_is_held_uncertain() {
        let was = read("look");
        let given = intent("c1", &was);
        let now = Tool {
            kind: baton_core::model::ToolKindSpec::Client,
            ..was
        };
        assert_eq!(recover(&given, Some(now)), Recovery::HoldUncertain);
    }

    #[test]
    fn a_retry_records_its_intent_again_in_the_current_turn() {
        let tool = mutation("pay");
        let given = intent("c1", &tool);
        let (again, with) = retry(&given, Some(tool.clone()), 3).expect("retried");
        assert_eq!(again.turn, 3);
        assert_eq!(again.idempotency_key, given.idempotency_key);
        assert_eq!(with, tool);
    }

    #[test]
    fn a_retry_whose_tool_is_gone_is_an_error_result() {
        let given = intent("c1", &mutation("pay"));
        let error = retry(&given, None, 3).expect_err("not retried");
        assert_eq!(error.code, "tool_unavailable");
    }
}
