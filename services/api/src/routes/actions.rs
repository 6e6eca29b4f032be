//! What a run's turn waits for: its tool-call receipts, approvals, client tool outputs
//! and the resolution of uncertain calls; and its checkpoints (`/v1/runs/{run_id}/...`).

use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath};
use crate::state::AppState;
use axum::extract::State;
use baton_core::RunId;
use baton_core::model::Receipt;
use baton_core::runs::{ApprovalDecision, ReceiptResolution, ToolOutput};
use baton_events::{ApprovalId, ReceiptId};
use serde::{Deserialize, Serialize};

#[derive(Serialize, utoipa::ToSchema)]
pub struct ReceiptList {
    pub items: Vec<Receipt>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct CheckpointList {
    pub items: Vec<baton_core::model::CheckpointMeta>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOutputsBody {
    pub tool_outputs: Vec<ToolOutput>,
}

/// Every tool call of the run and its state, oldest first.
#[utoipa::path(get, path = "/v1/runs/{run_id}/receipts", operation_id = "listRunReceipts", tag = "receipts",
    params(("run_id" = RunId, Path, description = "Run id")),
    responses((status = 200, body = ReceiptList), (status = "4XX", body = Problem)))]
pub async fn receipts(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(run): ApiPath<RunId>,
) -> ApiResult<axum::Json<ReceiptList>> {
    let items = st.runs.list_receipts(&p, run).await?;
    Ok(axum::Json(ReceiptList { items }))
}

/// Approve or deny a tool call that waits for approval (member).
#[utoipa::path(post, path = "/v1/runs/{run_id}/approvals/{approval_id}", operation_id = "decideRunApproval", tag = "approvals",
    request_body = ApprovalDecision,
    params(("run_id" = RunId, Path, description = "Run id"),
        ("approval_id" = ApprovalId, Path, description = "Approval id")),
    responses((status = 200, body = Receipt), (status = "4XX", body = Problem)))]
pub async fn decide_approval(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath((run, approval)): ApiPath<(RunId, ApprovalId)>,
    ApiJson(body): ApiJson<ApprovalDecision>,
) -> ApiResult<axum::Json<Receipt>> {
    Ok(axum::Json(
        st.runs.decide_approval(&p, run, approval, body).await?,
    ))
}

/// Submit the outputs of `client` tool calls (member); the turn goes on once every
/// awaited output is in.
#[utoipa::path(post, path = "/v1/runs/{run_id}/tool-outputs", operation_id = "submitRunToolOutputs", tag = "receipts",
    request_body = ToolOutputsBody,
    params(("run_id" = RunId, Path, description = "Run id")),
    responses((status = 200, body = ReceiptList), (status = "4XX", body = Problem)))]
pub async fn tool_outputs(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(run): ApiPath<RunId>,
    ApiJson(body): ApiJson<ToolOutputsBody>,
) -> ApiResult<axum::Json<ReceiptList>> {
    let items = st
        .runs
        .submit_tool_outputs(&p, run, body.tool_outputs)
        .await?;
    Ok(axum::Json(ReceiptList { items }))
}

/// Resolve an uncertain call (member): `retry` calls it again with the same
/// idempotency key, `skip` tells the model it did not run, `complete` supplies its
/// output.
#[utoipa::path(post, path = "/v1/runs/{run_id}/receipts/{receipt_id}/resolve", operation_id = "resolveRunReceipt", tag = "receipts",
    request_body = ReceiptResolution,
    params(("run_id" = RunId, Path, description = "Run id"),
        ("receipt_id" = ReceiptId, Path, description = "Receipt id")),
    responses((status = 200, body = Receipt), (status = "4XX", body = Problem)))]
pub async fn resolve(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath((run, receipt)): ApiPath<(RunId, ReceiptId)>,
    ApiJson(body): ApiJson<ReceiptResolution>,
) -> ApiResult<axum::Json<Receipt>> {
    Ok(axum::Json(
        st.runs.resolve_receipt(&p, run, receipt, body).await?,
    ))
}

/// The run's checkpoints, oldest first: metadata only (the snapshots are sealed).
#[utoipa::path(get, path = "/v1/runs/{run_id}/checkpoints", operation_id = "listRunCheckpoints", tag = "checkpoints",
    params(("run_id" = RunId, Path, description = "Run id")),
    responses((status = 200, body = CheckpointList), (status = "4XX", body = Problem)))]
pub async fn checkpoints(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(run): ApiPath<RunId>,
) -> ApiResult<axum::Json<CheckpointList>> {
    let items = st.checkpoints.list(&p, run).await?;
    Ok(axum::Json(CheckpointList { items }))
}
