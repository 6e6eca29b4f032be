//! Call checking: whether a tool call the model made may run — a tool the agent has,
//! arguments that are JSON and match the tool's input schema, within the turn's call
//! limit — or the error result the model reads instead. No I/O.

use crate::agent::TurnContext;
use crate::outcome::info;
use crate::state::Call;
use baton_core::model::Tool;
use baton_events::ErrorInfo;

/// The call's tool, or the error the model gets instead: unknown tool, arguments that
/// are not JSON or do not match the schema, the call limit. `count`: the call is new
/// and counts against the limit (`made` calls so far this turn); an approved call was
/// checked against it when its approval was asked.
pub(crate) fn check_call<'c>(
    ctx: &'c TurnContext,
    made: u32,
    call: &Call,
    count: bool,
) -> Result<&'c Tool, ErrorInfo> {
    let name = &call.request.name;
    let tool = ctx.tool(name).ok_or_else(|| {
        let known: Vec<&str> = ctx.tools.iter().map(|t| t.name.as_str()).collect();
        info(
            "unknown_tool",
            format!("there is no tool named {name:?}; the tools are {known:?}"),
        )
    })?;
    let max = ctx.agent.limits.max_tool_calls;
    if count && made >= max {
        return Err(info(
            "tool_call_limit",
            format!("this turn already made {max} tool calls, the most it may"),
        ));
    }
    let args: serde_json::Value = serde_json::from_str(&call.request.arguments).map_err(|e| {
        info(
            "bad_arguments",
            format!("the arguments are not valid JSON: {e}"),
        )
    })?;
    let validator = match ctx.schema(tool.id) {
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            return Err(info(
                "bad_tool_schema",
                format!("the tool's input schema does not compile: {e}"),
            ));
        }
        None => return Err(info("unknown_tool", format!("no schema for {name:?}"))),
    };
    let problems: Vec<String> = validator
        .iter_errors(&args)
        .take(5)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    if !problems.is_empty() {
        return Err(info(
            "bad_arguments",
            format!(
                "the arguments do not match the tool's input schema: {}",
                problems.join("; ")
            ),
        ));
    }
    Ok(tool)
}
