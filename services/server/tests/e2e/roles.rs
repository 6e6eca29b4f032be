//! The authorization matrix, over real HTTP: every route the server serves (discovered
//! from `/openapi.json`, so a new route without a row here fails) is called
//!
//! - by every role of tenant A on A's own objects: a role below the route's least role
//!   answers `403 forbidden`, any other role gets through (anything but 401/403); admins
//!   and owners create and revoke API keys of roles up to their own and no higher;
//! - by tenant A's owner with tenant B's ids, in the path and in the body: `404
//!   not_found` for B's objects, answers that are exactly those of unknown ids, never one
//!   of B's ids or names, lists without B's items, and B's objects unchanged afterwards;
//! - without credentials and with malformed, unknown, expired and revoked keys: `401`;
//! - with percent-encoded `..` and `/` in each path segment: 400 or 404, never 5xx;
//! - with an oversize body (`413`) and an oversize header (`431`).
//!
//! Every error body must be problem+json that shows no stack trace, SQL or server path.
//! The matrices run in the team tier (Postgres, NATS) and in the embedded tier with keys.
//! [`ROUTES`] is the one table of expectations; `docs/security.md` documents the same
//! role matrix, and a test here checks that the two and `core::auth` agree.
//!
//! A cell that fails because of a known defect carries a [`Bug`] note in its row: it is
//! skipped and printed, and it fails once the defect is fixed, so the note gets removed.

use crate::common::{Api, TestApp};
use baton_core::{Action, Role};
use baton_testkit::{Behaviour, McpOptions, McpTestServer, Reply, ToolServer};
use chrono::{Duration as Age, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Who may call a route.
#[derive(Debug, Clone, Copy)]
enum Access {
    /// No credentials needed: probes and the descriptions of the service.
    Public,
    /// An API key of at least role `least`. `action` is what the route's use case asks
    /// `Principal::require` for; `least` must be its `min_role()` (checked), so a change
    /// of the authorization rules shows up here and in the docs.
    Key { action: Action, least: Role },
    /// Any valid credentials, whatever their role (`/v1/me`, `/v1/logout`): no action.
    Credentials,
}

/// What tenant A's owner gets from a route called with tenant B's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cross {
    /// B's objects in the path: `404 not_found`, as for an id that does not exist.
    NotFound,
    /// No object in the path (lists, creates): the call acts in A's tenant and its answer
    /// holds nothing of B's.
    Scoped,
    /// The path holds a name, not an id (`PUT /v1/secrets/{name}`): B's name stores A's
    /// own secret of that name and leaves B's untouched.
    OwnName,
    /// Public routes: nothing tenant-scoped to cross.
    Public,
}

/// One check of one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Cell {
    /// The route called by a key of this role of tenant A (or without one, if public).
    Role(Role),
    /// Tenant A's owner with tenant B's ids.
    CrossTenant,
    /// No, malformed, unknown, expired and revoked credentials.
    BadCredentials,
    /// Percent-encoded `..` and `/` in path segments.
    EncodedPath,
    /// A body over the configured limit.
    OversizeBody,
    /// A 64 KiB header.
    OversizeHeader,
    /// A 512 KiB header, beyond what the HTTP server buffers for a request's head (checked
    /// once, on one route: it is refused before any route is chosen).
    HugeHeader,
    /// A header value with a NUL byte, which the HTTP server cannot parse (checked once, as
    /// [`Cell::HugeHeader`]).
    MalformedHeader,
}

/// One route and what is expected of it.
struct Row {
    method: &'static str,
    /// The path template as `/openapi.json` spells it.
    path: &'static str,
    access: Access,
    /// What a role allowed to call the route may get with this test's fixtures: fresh
    /// objects in the states the route acts on, so mostly 2xx.
    allowed: &'static [u16],
    cross: Cross,
    /// Served beside the API and absent from `/openapi.json`.
    undocumented: bool,
}

const fn key(action: Action, least: Role) -> Access {
    Access::Key { action, least }
}

const fn row(
    method: &'static str,
    path: &'static str,
    access: Access,
    allowed: &'static [u16],
    cross: Cross,
) -> Row {
    Row {
        method,
        path,
        access,
        allowed,
        cross,
        undocumented: false,
    }
}

const fn undocumented(mut r: Row) -> Row {
    r.undocumented = true;
    r
}

use Action::*;
use Cross::{NotFound, OwnName, Scoped};

/// Every route, the least role that may call it, and what a call may answer. Rows are
/// called in this order, so a route that destroys a fixture (a secret's `DELETE`) comes
/// after the routes that need it.
#[rustfmt::skip]
const ROUTES: &[Row] = &[
    row("GET", "/livez", Access::Public, &[200], Cross::Public),
    row("GET", "/readyz", Access::Public, &[200], Cross::Public),
    undocumented(row("GET", "/openapi.json", Access::Public, &[200], Cross::Public)),
    undocumented(row("GET", "/metrics", Access::Public, &[200], Cross::Public)),
    row("POST", "/v1/agents", key(ManageAgents, Role::Admin), &[201], Scoped),
    row("GET", "/v1/agents", key(ReadAgents, Role::Viewer), &[200], Scoped),
    row("GET", "/v1/agents/{agent_id}", key(ReadAgents, Role::Viewer), &[200], NotFound),
    row("PUT", "/v1/agents/{agent_id}", key(ManageAgents, Role::Admin), &[200], NotFound),
    row("POST", "/v1/agents/{agent_id}/archive", key(ManageAgents, Role::Admin), &[200], NotFound),
    row("POST", "/v1/agents/{agent_id}/restore", key(ManageAgents, Role::Admin), &[200], NotFound),
    // The set's agent is not archived: a deletion reaches the use case and is refused.
    row("DELETE", "/v1/agents/{agent_id}", key(ManageAgents, Role::Admin), &[409], NotFound),
    row("POST", "/v1/tools", key(ManageTools, Role::Admin), &[201], Scoped),
    row("GET", "/v1/tools", key(ReadTools, Role::Viewer), &[200], Scoped),
    row("GET", "/v1/tools/{tool_id}", key(ReadTools, Role::Viewer), &[200], NotFound),
    row("POST", "/v1/tools/{tool_id}/archive", key(ManageTools, Role::Admin), &[200], NotFound),
    row("POST", "/v1/tools/{tool_id}/restore", key(ManageTools, Role::Admin), &[200], NotFound),
    // A new version of the archivable tool, restored by the row above.
    row("PUT", "/v1/tools/{tool_id}", key(ManageTools, Role::Admin), &[200], NotFound),
    // The set's tool is not archived: a deletion reaches the use case and is refused.
    row("DELETE", "/v1/tools/{tool_id}", key(ManageTools, Role::Admin), &[409], NotFound),
    row("POST", "/v1/runs", key(CreateRuns, Role::Member), &[201], Scoped),
    row("GET", "/v1/runs", key(ReadRuns, Role::Viewer), &[200], Scoped),
    row("GET", "/v1/runs/{run_id}", key(ReadRuns, Role::Viewer), &[200], NotFound),
    row("PATCH", "/v1/runs/{run_id}", key(UpdateRuns, Role::Member), &[200], NotFound),
    row("POST", "/v1/runs/{run_id}/cancel", key(CancelRuns, Role::Member), &[200], NotFound),
    row("DELETE", "/v1/runs/{run_id}", key(DeleteRuns, Role::Admin), &[204], NotFound),
    row("POST", "/v1/runs/{run_id}/messages", key(PostMessages, Role::Member), &[201], NotFound),
    row("GET", "/v1/runs/{run_id}/messages", key(ReadRuns, Role::Viewer), &[200], NotFound),
    row("GET", "/v1/runs/{run_id}/events", key(ReadRuns, Role::Viewer), &[200], NotFound),
    row("POST", "/v1/runs/{run_id}/stream-tickets", key(ReadRuns, Role::Viewer), &[201], NotFound),
    row("GET", "/v1/runs/{run_id}/receipts", key(ReadRuns, Role::Viewer), &[200], NotFound),
    row("GET", "/v1/runs/{run_id}/checkpoints", key(ReadRuns, Role::Viewer), &[200], NotFound),
    row("GET", "/v1/runs/{run_id}/files", key(ReadRuns, Role::Viewer), &[200], NotFound),
    row("GET", "/v1/runs/{run_id}/files/{path}", key(ReadRuns, Role::Viewer), &[200], NotFound),
    // New content for the set's file (200), or the same again on a second call.
    row("PUT", "/v1/runs/{run_id}/files/{path}", key(UploadFiles, Role::Member), &[200], NotFound),
    row("POST", "/v1/runs/{run_id}/approvals/{approval_id}", key(ResolveActions, Role::Member), &[200], NotFound),
    row("POST", "/v1/runs/{run_id}/tool-outputs", key(ResolveActions, Role::Member), &[200], NotFound),
    // Over HTTP a receipt becomes uncertain only when a cancel interrupts its mutation,
    // which ends the run: resolving it then answers 409 `run_ended`, after authorization.
    row("POST", "/v1/runs/{run_id}/receipts/{receipt_id}/resolve", key(ResolveActions, Role::Member), &[409], NotFound),
    row("PUT", "/v1/secrets/{name}", key(ManageSecrets, Role::Admin), &[200], OwnName),
    row("GET", "/v1/secrets", key(ManageSecrets, Role::Admin), &[200], Scoped),
    row("DELETE", "/v1/secrets/{name}", key(ManageSecrets, Role::Admin), &[204], NotFound),
    row("GET", "/v1/encryption-keys", key(ManageEncryptionKeys, Role::Admin), &[200], Scoped),
    // A reseal of the caller's tenant, started in the background: 202 at once.
    row("POST", "/v1/encryption-keys/reseal", key(ManageEncryptionKeys, Role::Admin), &[202], Scoped),
    row("POST", "/v1/api-keys", key(ManageApiKeys, Role::Admin), &[201], Scoped),
    row("GET", "/v1/api-keys", key(ManageApiKeys, Role::Admin), &[200], Scoped),
    row("DELETE", "/v1/api-keys/{key_id}", key(ManageApiKeys, Role::Admin), &[204], NotFound),
    // Logging in needs no key: the matrix tries emails no account has, so 401.
    row("POST", "/v1/login", Access::Public, &[401], Cross::Public),
    // An API key has no session to end.
    row("POST", "/v1/logout", Access::Credentials, &[400], Scoped),
    row("GET", "/v1/me", Access::Credentials, &[200], Scoped),
    // Invitations are a session's: an API key is refused whatever the id.
    row("GET", "/v1/me/invitations", Access::Credentials, &[400], Scoped),
    row("POST", "/v1/me/invitations/{invitation_id}/accept", Access::Credentials, &[400], Scoped),
    row("POST", "/v1/me/invitations/{invitation_id}/decline", Access::Credentials, &[400], Scoped),
    // The owner's set's newcomer is invited by the cross-tenant phase first, so the role
    // matrix finds an invitation pending already (409), after authorization.
    row("POST", "/v1/invitations", key(ManageMembers, Role::Admin), &[201, 409], Scoped),
    row("GET", "/v1/invitations", key(ManageMembers, Role::Admin), &[200], Scoped),
    row("DELETE", "/v1/invitations/{invitation_id}", key(ManageMembers, Role::Admin), &[204], NotFound),
    row("GET", "/v1/members", key(ManageMembers, Role::Admin), &[200], Scoped),
    row("PUT", "/v1/members/{user_id}", key(ManageMembers, Role::Admin), &[200], NotFound),
    row("DELETE", "/v1/members/{user_id}", key(ManageMembers, Role::Admin), &[204], NotFound),
    row("GET", "/v1/audit", key(ReadAudit, Role::Admin), &[200], Scoped),
    // An empty list: the tenant's later calls keep the installation's policy alone.
    row("GET", "/v1/environments", key(ReadEnvironments, Role::Viewer), &[200], Scoped),
    row("PUT", "/v1/environments/{name}", key(ManageEnvironments, Role::Admin), &[200], OwnName),
    row("DELETE", "/v1/environments/{name}", key(ManageEnvironments, Role::Admin), &[204], NotFound),
    row("GET", "/v1/egress-allowlist", key(ManageEgress, Role::Admin), &[200], Scoped),
    row("PUT", "/v1/egress-allowlist", key(ManageEgress, Role::Admin), &[200], Scoped),
    // Null: the tenant keeps its ended runs, as when it never set a policy.
    row("GET", "/v1/retention", key(ManageRetention, Role::Admin), &[200], Scoped),
    row("PUT", "/v1/retention", key(ManageRetention, Role::Admin), &[200], Scoped),
    row("POST", "/v1/schedules", key(ManageSchedules, Role::Member), &[201], Scoped),
    row("GET", "/v1/schedules", key(ReadSchedules, Role::Viewer), &[200], Scoped),
    row("GET", "/v1/schedules/{schedule_id}", key(ReadSchedules, Role::Viewer), &[200], NotFound),
    row("PUT", "/v1/schedules/{schedule_id}", key(ManageSchedules, Role::Member), &[200], NotFound),
    row("POST", "/v1/schedules/{schedule_id}/run", key(CreateRuns, Role::Member), &[201], NotFound),
    row("POST", "/v1/schedules/{schedule_id}/pause", key(ManageSchedules, Role::Member), &[200], NotFound),
    // Paused by the row above.
    row("POST", "/v1/schedules/{schedule_id}/resume", key(ManageSchedules, Role::Member), &[200], NotFound),
    row("DELETE", "/v1/schedules/{schedule_id}", key(ManageSchedules, Role::Member), &[204], NotFound),
    row("POST", "/v1/webhooks", key(ManageWebhooks, Role::Admin), &[201], Scoped),
    row("GET", "/v1/webhooks", key(ManageWebhooks, Role::Admin), &[200], Scoped),
    row("GET", "/v1/webhooks/{webhook_id}", key(ManageWebhooks, Role::Admin), &[200], NotFound),
    row("PUT", "/v1/webhooks/{webhook_id}", key(ManageWebhooks, Role::Admin), &[200], NotFound),
    row("POST", "/v1/webhooks/{webhook_id}/rotate-secret", key(ManageWebhooks, Role::Admin), &[200], NotFound),
    row("POST", "/v1/webhooks/{webhook_id}/enable", key(ManageWebhooks, Role::Admin), &[200], NotFound),
    row("GET", "/v1/webhooks/{webhook_id}/deliveries", key(ManageWebhooks, Role::Admin), &[200], NotFound),
    row("GET", "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}", key(ManageWebhooks, Role::Admin), &[200], NotFound),
    row("POST", "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/replay", key(ManageWebhooks, Role::Admin), &[200], NotFound),
    row("DELETE", "/v1/webhooks/{webhook_id}", key(ManageWebhooks, Role::Admin), &[204], NotFound),
    row("POST", "/v1/mcp-servers", key(ManageMcpServers, Role::Admin), &[201], Scoped),
    row("GET", "/v1/mcp-servers", key(ReadTools, Role::Viewer), &[200], Scoped),
    row("GET", "/v1/mcp-servers/{server_id}", key(ReadTools, Role::Viewer), &[200], NotFound),
    row("PUT", "/v1/mcp-servers/{server_id}", key(ManageMcpServers, Role::Admin), &[200], NotFound),
    // 502 and 404 (nothing discovered) only where BATON_SKIP_MCP=1 left the set's MCP
    // server unstarted.
    row("POST", "/v1/mcp-servers/{server_id}/discover", key(DiscoverMcpTools, Role::Member), &[200, 502], NotFound),
    row("GET", "/v1/mcp-servers/{server_id}/tools", key(ReadTools, Role::Viewer), &[200], NotFound),
    row("POST", "/v1/mcp-servers/{server_id}/tools/{name}/enable", key(ManageMcpServers, Role::Admin), &[200, 404], NotFound),
    // The row above left a tool enabled from it: refused (409) after authorization.
    row("DELETE", "/v1/mcp-servers/{server_id}", key(ManageMcpServers, Role::Admin), &[409, 204], NotFound),
];

const ROLES: [Role; 4] = [Role::Viewer, Role::Member, Role::Admin, Role::Owner];

/// Every action of `core::auth`. The match has no wildcard: a new action does not
/// compile until it is listed here, and then needs rows and a line in the docs.
fn all_actions() -> Vec<Action> {
    let all = [
        ReadAgents,
        ManageAgents,
        ReadRuns,
        CreateRuns,
        PostMessages,
        UpdateRuns,
        CancelRuns,
        DeleteRuns,
        ResolveActions,
        ReadTools,
        ManageTools,
        ManageSecrets,
        ManageEncryptionKeys,
        ManageApiKeys,
        ManageMembers,
        ManageOwners,
        ReadAudit,
        ManageEgress,
        ManageRetention,
        ReadSchedules,
        ManageSchedules,
        ManageWebhooks,
        DiscoverMcpTools,
        ManageMcpServers,
        UploadFiles,
        ReadEnvironments,
        ManageEnvironments,
    ];
    for a in all {
        match a {
            ReadAgents | ManageAgents | ReadRuns | CreateRuns | PostMessages | UpdateRuns
            | CancelRuns | DeleteRuns | ResolveActions | ReadTools | ManageTools
            | ManageSecrets | ManageEncryptionKeys | ManageApiKeys | ManageMembers
            | ManageOwners | ReadAudit | ManageEgress | ManageRetention | ReadSchedules
            | ManageSchedules | ManageWebhooks | DiscoverMcpTools | ManageMcpServers
            | UploadFiles | ReadEnvironments | ManageEnvironments => {}
        }
    }
    all.to_vec()
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

impl Row {
    fn least(&self) -> Option<Role> {
        match self.access {
            Access::Public => None,
            Access::Key { least, .. } => Some(least),
            Access::Credentials => Some(Role::Viewer),
        }
    }
}

// --- Fixtures ---------------------------------------------------------------------

/// One set of objects of a tenant, one for each kind of path parameter, in the state
/// its routes act on. Tenant A has a set per role, so each role's allowed calls meet
/// fresh objects; tenant B has one.
#[derive(Debug, Clone)]
struct Fixtures {
    /// In every name of the set: finding it in an answer means a name leaked.
    tag: String,
    tenant: String,
    /// A scripted agent that answers messages.
    agent: String,
    /// An agent no call of the matrix starts runs of: archived and restored.
    archivable: String,
    /// A tool no agent the matrix defines names: archived and restored.
    archivable_tool: String,
    /// A `client` tool.
    tool: String,
    /// A run of `agent` with a first exchange, waiting for a message.
    run: String,
    /// A run waiting for the approval of a tool call.
    approval_run: String,
    approval: String,
    /// A run waiting for a client tool's output.
    client_run: String,
    client_receipt: String,
    /// A run cancelled during a mutation, which left its receipt uncertain.
    uncertain_run: String,
    uncertain_receipt: String,
    /// An idle run for `cancel`.
    cancel_run: String,
    /// An idle run for `delete`.
    doomed_run: String,
    secret: String,
    /// One of the tenant's environments (on `default`).
    environment: String,
    /// A viewer API key, to revoke.
    api_key: String,
    /// A schedule of `agent`, firing daily.
    schedule: String,
    /// A webhook endpoint subscribed to `run.cancelled`, and its delivery of the
    /// cancel of `uncertain_run`.
    webhook: String,
    /// An MCP server (the test's, when it runs), discovered; and its URL.
    mcp_server: String,
    mcp_url: String,
    delivery: String,
    /// The user id of a viewer member, whose role changes and who is removed.
    member: String,
    /// The email of a user who is no member, to invite.
    newcomer: String,
    /// A pending invitation of another email, to revoke.
    invitation: String,
    /// The secret's `updated_at`, to prove nobody else wrote it.
    secret_updated: String,
    /// Every id and name of the set.
    identifiers: Vec<String>,
}

/// The `items` of a list answer.
fn items(r: &Reply) -> Vec<Value> {
    r.body["items"].as_array().cloned().unwrap_or_default()
}

fn id_of(r: &Reply, what: &str) -> String {
    r.body["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no id in {} {}", r.status, r.body))
        .to_string()
}

/// Sends `r`, and again after a pause while the server answers `429 rate_limited`: the
/// matrices make more requests per key than the rate limits allow in a burst, and pacing
/// is not what they test.
async fn send(api: &Api, r: reqwest::RequestBuilder) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = r.try_clone().expect("a request with a buffered body");
        let reply = api.send(attempt).await;
        if reply.status != 429 || Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn get(api: &Api, path: &str) -> Reply {
    send(api, api.req(Method::GET, path)).await
}

async fn send_json(api: &Api, method: Method, path: &str, body: Value) -> Reply {
    send(api, api.req(method, path).json(&body)).await
}

async fn post(api: &Api, path: &str, body: Value) -> Reply {
    send_json(api, Method::POST, path, body).await
}

/// Creates a run of `agent`, with a first message when given; returns its id.
async fn create_run(api: &Api, agent: &str, message: Option<&str>) -> String {
    let mut body = json!({"agent_id": agent});
    if let Some(m) = message {
        body["message"] = json!(m);
    }
    let r = post(api, "/v1/runs", body).await;
    assert_eq!(r.status, 201, "create run: {}", r.body);
    r.body["run"]["id"].as_str().expect("run id").to_string()
}

async fn summary(api: &Api, run: &str) -> Value {
    let r = get(api, &format!("/v1/runs/{run}")).await;
    assert_eq!(r.status, 200, "get run: {}", r.body);
    r.body
}

/// Polls the run until its status is `status`.
async fn wait_status(api: &Api, run: &str, status: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = summary(api, run).await;
        if r["status"] == status {
            return;
        }
        assert!(Instant::now() < deadline, "run never {status}: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn receipts(api: &Api, run: &str) -> Vec<Value> {
    let r = get(api, &format!("/v1/runs/{run}/receipts")).await;
    assert_eq!(r.status, 200, "receipts: {}", r.body);
    items(&r)
}

/// Polls the run's receipts until `done` holds; returns them.
async fn wait_receipts(
    api: &Api,
    run: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = receipts(api, run).await;
        if done(&got) {
            return got;
        }
        assert!(Instant::now() < deadline, "receipts never {what}: {got:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn receipt_in<'a>(receipts: &'a [Value], state: &str) -> Option<&'a Value> {
    receipts.iter().find(|r| r["state"] == state)
}

fn new_tag() -> String {
    format!("x{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

impl Fixtures {
    /// Builds a set in the tenant of `api` (an owner), with `http` tools on `tools`.
    async fn build(api: &Api, tenant: &str, tools: &ToolServer, mcp_url: &str) -> Fixtures {
        let tag = new_tag();
        let tool = |name: String, extra: Value| {
            let mut body = json!({"name": name, "input_schema": {"type": "object"}});
            if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
                b.extend(e.clone());
            }
            async move {
                let r = post(api, "/v1/tools", body).await;
                assert_eq!(r.status, 201, "create tool: {}", r.body);
                id_of(&r, "tool")
            }
        };
        let (ask_name, deploy_name, transfer_name) = (
            format!("{tag}_ask"),
            format!("{tag}_deploy"),
            format!("{tag}_transfer"),
        );
        let ask = tool(
            ask_name.clone(),
            json!({"effect": "read", "kind": {"kind": "client"}}),
        )
        .await;
        let deploy = tool(
            deploy_name.clone(),
            json!({"effect": "mutation", "requires_approval": true,
                   "kind": {"kind": "http", "url": tools.url("deploy")}}),
        )
        .await;
        let transfer = tool(
            transfer_name.clone(),
            json!({"effect": "mutation", "kind": {"kind": "http", "url": tools.url("transfer")}}),
        )
        .await;
        let agent = |name: String, replies: Value, tools: Vec<String>| async move {
            let r = post(
                api,
                "/v1/agents",
                json!({"name": name, "provider": {"kind": "scripted", "replies": replies},
                           "tools": tools}),
            )
            .await;
            assert_eq!(r.status, 201, "create agent: {}", r.body);
            id_of(&r, "agent")
        };
        let chat = agent(
            format!("{tag} chat"),
            json!([{"content": "one"}, {"content": "two"}, {"content": "three"},
                   {"content": "four"}]),
            vec![],
        )
        .await;
        let call = |name: &str| json!({"name": name, "arguments": {}});
        let approving = agent(
            format!("{tag} approving"),
            json!([{"tool_calls": [call(&deploy_name)]}, {"content": "deployed"}]),
            vec![deploy.clone()],
        )
        .await;
        let asking = agent(
            format!("{tag} asking"),
            json!([{"tool_calls": [call(&ask_name)]}, {"content": "thanks"}]),
            vec![ask.clone()],
        )
        .await;
        let paying = agent(
            format!("{tag} paying"),
            json!([{"tool_calls": [call(&transfer_name)]}, {"content": "paid"}]),
            vec![transfer.clone()],
        )
        .await;
        let secret = format!("{tag}_key");
        let put = send_json(
            api,
            Method::PUT,
            &format!("/v1/secrets/{secret}"),
            json!({"value": format!("value of {tag}")}),
        )
        .await;
        assert_eq!(put.status, 200, "put secret: {}", put.body);
        let environment = format!("{tag}-env");
        let env = send_json(
            api,
            Method::PUT,
            &format!("/v1/environments/{environment}"),
            json!({"base": "default"}),
        )
        .await;
        assert_eq!(env.status, 200, "put environment: {}", env.body);
        let created = post(
            api,
            "/v1/api-keys",
            json!({"name": format!("{tag} revocable"), "role": "viewer"}),
        )
        .await;
        assert_eq!(created.status, 201, "create API key: {}", created.body);
        let api_key = created.body["key"]["id"]
            .as_str()
            .expect("key id")
            .to_string();
        let token = created.body["token"].as_str().expect("token").to_string();

        let made = post(
            api,
            "/v1/schedules",
            json!({"name": format!("{tag} schedule"), "agent_id": chat,
                   "message": "report", "cron": "0 9 * * *"}),
        )
        .await;
        assert_eq!(made.status, 201, "create schedule: {}", made.body);
        let schedule = id_of(&made, "schedule");
        let hook = post(
            api,
            "/v1/webhooks",
            json!({"url": tools.url("hook"), "description": format!("{tag} hook"),
                   "events": ["run.cancelled"]}),
        )
        .await;
        assert_eq!(hook.status, 201, "create webhook: {}", hook.body);
        let webhook = hook.body["webhook"]["id"]
            .as_str()
            .expect("webhook id")
            .to_string();
        let made = post(
            api,
            "/v1/mcp-servers",
            json!({"name": format!("{tag}_mcp"), "url": mcp_url, "timeout_ms": 20_000}),
        )
        .await;
        assert_eq!(made.status, 201, "create MCP server: {}", made.body);
        let mcp_server = id_of(&made, "MCP server");
        let found = post(
            api,
            &format!("/v1/mcp-servers/{mcp_server}/discover"),
            json!({}),
        )
        .await;
        assert!(
            found.status == 200 || mcp_url.ends_with(":9/mcp"),
            "discover: {}",
            found.body
        );
        let run = create_run(api, &chat, Some("hi")).await;
        let file = format!("/v1/runs/{run}/files/{FIXTURE_FILE}");
        let r = send(api, api.req(Method::PUT, &file).body("first")).await;
        assert_eq!(r.status, 201, "upload: {}", r.body);
        let approval_run = create_run(api, &approving, Some("deploy")).await;
        let client_run = create_run(api, &asking, Some("ask")).await;
        let uncertain_run = create_run(api, &paying, Some("pay")).await;
        let cancel_run = create_run(api, &chat, None).await;
        let doomed_run = create_run(api, &chat, None).await;

        // The mutation is in flight (its tool answers only after a minute) when the
        // cancel comes, so it may have taken effect: the receipt is held uncertain.
        wait_receipts(api, &uncertain_run, "pending", |r| {
            receipt_in(r, "pending").is_some()
        })
        .await;
        let cancelled = post(api, &format!("/v1/runs/{uncertain_run}/cancel"), json!({})).await;
        assert_eq!(cancelled.status, 200, "cancel: {}", cancelled.body);
        let held = wait_receipts(api, &uncertain_run, "uncertain", |r| {
            receipt_in(r, "uncertain").is_some()
        })
        .await;
        let approving_receipts = wait_receipts(api, &approval_run, "awaiting_approval", |r| {
            receipt_in(r, "awaiting_approval").is_some()
        })
        .await;
        let asking_receipts = wait_receipts(api, &client_run, "awaiting_client", |r| {
            receipt_in(r, "awaiting_client").is_some()
        })
        .await;
        wait_status(api, &approval_run, "requires_action").await;
        wait_status(api, &client_run, "requires_action").await;
        wait_status(api, &run, "waiting").await;

        let field = |r: Option<&Value>, f: &str| {
            r.and_then(|r| r[f].as_str())
                .unwrap_or_else(|| panic!("no {f}"))
                .to_string()
        };
        let approval = field(
            receipt_in(&approving_receipts, "awaiting_approval"),
            "approval_id",
        );
        let client_receipt = field(receipt_in(&asking_receipts, "awaiting_client"), "id");
        let uncertain_receipt = field(receipt_in(&held, "uncertain"), "id");
        let deliveries = get(api, &format!("/v1/webhooks/{webhook}/deliveries")).await;
        assert_eq!(deliveries.status, 200, "deliveries: {}", deliveries.body);
        let delivery = field(items(&deliveries).first(), "id");
        let mut identifiers = vec![
            tag.clone(),
            tenant.to_string(),
            ask.clone(),
            deploy,
            transfer.clone(),
            chat.clone(),
            approving.clone(),
            asking,
            paying,
            run.clone(),
            approval_run.clone(),
            client_run.clone(),
            approval.clone(),
            client_receipt.clone(),
            uncertain_run.clone(),
            uncertain_receipt.clone(),
            cancel_run.clone(),
            doomed_run.clone(),
            secret.clone(),
            environment.clone(),
            api_key.clone(),
            schedule.clone(),
            webhook.clone(),
            mcp_server.clone(),
            delivery.clone(),
            token,
        ];
        // Every key of the tenant, by id and by shown prefix.
        let keys = get(api, "/v1/api-keys?limit=500").await;
        assert_eq!(keys.status, 200, "list API keys: {}", keys.body);
        for k in items(&keys) {
            for field in ["id", "prefix"] {
                identifiers.extend(k[field].as_str().map(str::to_string));
            }
        }
        identifiers.extend(
            approving_receipts
                .iter()
                .chain(&asking_receipts)
                .chain(&held)
                .filter_map(|r| r["id"].as_str().map(str::to_string)),
        );
        identifiers.sort();
        identifiers.dedup();
        Fixtures {
            secret_updated: put.body["updated_at"].as_str().unwrap_or("").to_string(),
            tag,
            tenant: tenant.to_string(),
            agent: chat,
            archivable: approving.clone(),
            archivable_tool: transfer.clone(),
            tool: ask,
            run,
            approval_run,
            approval,
            client_run,
            client_receipt,
            uncertain_run,
            uncertain_receipt,
            cancel_run,
            doomed_run,
            secret,
            environment,
            api_key,
            schedule,
            webhook,
            mcp_server,
            mcp_url: mcp_url.to_string(),
            delivery,
            // Users come from `add_users`, once the set exists.
            member: String::new(),
            newcomer: String::new(),
            invitation: String::new(),
            identifiers,
        }
    }

    /// A set of ids and names that exist nowhere, to compare answers with.
    fn unknown() -> Fixtures {
        let id = || uuid::Uuid::now_v7().to_string();
        let tag = new_tag();
        let mut f = Fixtures {
            tenant: id(),
            agent: id(),
            archivable: id(),
            archivable_tool: id(),
            tool: id(),
            run: id(),
            approval_run: id(),
            client_run: id(),
            approval: id(),
            client_receipt: id(),
            uncertain_run: id(),
            uncertain_receipt: id(),
            cancel_run: id(),
            doomed_run: id(),
            secret: format!("{tag}_key"),
            environment: format!("{tag}-env"),
            api_key: id(),
            schedule: id(),
            webhook: id(),
            mcp_server: id(),
            mcp_url: "http://127.0.0.1:9/mcp".into(),
            delivery: id(),
            member: id(),
            newcomer: format!("{tag}-new@example.com"),
            invitation: id(),
            secret_updated: String::new(),
            tag,
            identifiers: Vec::new(),
        };
        f.identifiers = vec![
            f.tag.clone(),
            f.tenant.clone(),
            f.schedule.clone(),
            f.webhook.clone(),
            f.mcp_server.clone(),
            f.delivery.clone(),
            f.agent.clone(),
            f.archivable.clone(),
            f.archivable_tool.clone(),
            f.tool.clone(),
            f.run.clone(),
            f.approval_run.clone(),
            f.client_run.clone(),
            f.approval.clone(),
            f.client_receipt.clone(),
            f.uncertain_run.clone(),
            f.uncertain_receipt.clone(),
            f.cancel_run.clone(),
            f.doomed_run.clone(),
            f.secret.clone(),
            f.environment.clone(),
            f.api_key.clone(),
            f.member.clone(),
            f.newcomer.clone(),
            f.invitation.clone(),
        ];
        f
    }

    /// Gives the set a viewer member, a user who is no member and a pending invitation
    /// of a third email: straight into the database, as no route creates users (`baton
    /// admin create-user` does, in a process of its own).
    async fn add_users(&mut self, app: &TestApp, tier: Tier) {
        let (member, newcomer) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        let invitation = uuid::Uuid::now_v7();
        let invited = format!("{}-invited@example.com", self.tag);
        let member_email = format!("{}-member@example.com", self.tag);
        let tenant: uuid::Uuid = self.tenant.parse().expect("tenant id");
        // A literal each database reads as a UUID (SQLite keeps them as 16-byte blobs),
        // and a timestamp both read.
        let id = |u: uuid::Uuid| match tier {
            Tier::Team => format!("'{u}'"),
            Tier::Embedded => format!("X'{}'", u.simple()),
        };
        let at = "'2025-01-01T00:00:00+00:00'";
        let users = format!(
            "INSERT INTO users (id, email, password_hash, created_at) VALUES \
             ({}, '{member_email}', '!', {at}), ({}, '{}', '!', {at})",
            id(member),
            id(newcomer),
            self.newcomer_email(),
        );
        let membership = format!(
            "INSERT INTO memberships (tenant_id, user_id, role, created_at) \
             VALUES ({}, {}, 'viewer', {at})",
            id(tenant),
            id(member),
        );
        let pending = format!(
            "INSERT INTO invitations (tenant_id, id, email, role, invited_by, created_at, \
             expires_at, state) VALUES ({}, {}, '{invited}', 'viewer', 'local', {at}, \
             '2999-01-01T00:00:00+00:00', 'pending')",
            id(tenant),
            id(invitation),
        );
        // `execute_sql` takes a `&'static str`: these few statements live on.
        for statement in [users, membership, pending] {
            app.execute_sql(Box::leak(statement.into_boxed_str())).await;
        }
        self.member = member.to_string();
        self.newcomer = self.newcomer_email();
        self.invitation = invitation.to_string();
        self.identifiers.extend([
            self.invitation.clone(),
            invited,
            self.member.clone(),
            member_email,
            newcomer.to_string(),
            self.newcomer.clone(),
        ]);
    }

    fn newcomer_email(&self) -> String {
        format!("{}-new@example.com", self.tag)
    }
}

// --- Requests ----------------------------------------------------------------------

/// Where a request's ids come from: `outer` for the object in the path (agent, tool,
/// run, secret), `nested` for the object under it (an approval or receipt of the run,
/// in the path or the body), `refs` for other objects named in the body (a run's agent,
/// an agent's tools).
#[derive(Clone, Copy)]
struct Src<'a> {
    outer: &'a Fixtures,
    nested: &'a Fixtures,
    refs: &'a Fixtures,
}

impl<'a> Src<'a> {
    fn all(f: &'a Fixtures) -> Self {
        Src {
            outer: f,
            nested: f,
            refs: f,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Req {
    method: Method,
    path: String,
    body: Option<Value>,
}

impl Req {
    /// Everything the request names, to tell an echo from a leak.
    fn text(&self) -> String {
        format!(
            "{} {}",
            self.path,
            self.body.as_ref().map(Value::to_string).unwrap_or_default()
        )
    }
}

/// The call of `row` with ids from `src`; `nonce` makes names that must be unique.
fn request(row: &Row, src: Src, nonce: &str) -> Req {
    let Src {
        outer,
        nested,
        refs,
    } = src;
    let agent_body = json!({"name": format!("{nonce} agent"), "instructions": "Be brief.",
        "provider": {"kind": "scripted", "replies": [{"content": "ok"}]}, "tools": [refs.tool]});
    let (path, body) = match (row.method, row.path) {
        ("GET", "/livez" | "/readyz" | "/openapi.json" | "/metrics") => {
            (row.path.to_string(), None)
        }
        ("POST", "/v1/agents") => (row.path.to_string(), Some(agent_body)),
        ("GET", "/v1/agents" | "/v1/tools" | "/v1/runs" | "/v1/secrets") => {
            (row.path.to_string(), None)
        }
        ("GET", "/v1/agents/{agent_id}") => (format!("/v1/agents/{}", outer.agent), None),
        ("POST", "/v1/agents/{agent_id}/archive") => {
            (format!("/v1/agents/{}/archive", outer.archivable), None)
        }
        ("POST", "/v1/agents/{agent_id}/restore") => {
            (format!("/v1/agents/{}/restore", outer.archivable), None)
        }
        ("PUT", "/v1/agents/{agent_id}") => {
            (format!("/v1/agents/{}", outer.agent), Some(agent_body))
        }
        ("POST", "/v1/tools") => (
            row.path.to_string(),
            Some(
                json!({"name": format!("{nonce}_tool"), "input_schema": {"type": "object"},
                        "effect": "read", "kind": {"kind": "client"}}),
            ),
        ),
        ("GET", "/v1/tools/{tool_id}") => (format!("/v1/tools/{}", outer.tool), None),
        ("POST", "/v1/tools/{tool_id}/archive") => {
            (format!("/v1/tools/{}/archive", outer.archivable_tool), None)
        }
        ("POST", "/v1/tools/{tool_id}/restore") => {
            (format!("/v1/tools/{}/restore", outer.archivable_tool), None)
        }
        ("PUT", "/v1/tools/{tool_id}") => (
            format!("/v1/tools/{}", outer.archivable_tool),
            Some(
                json!({"name": format!("{nonce}_tool_v"), "input_schema": {"type": "object"},
                        "effect": "read", "kind": {"kind": "client"}}),
            ),
        ),
        ("DELETE", "/v1/tools/{tool_id}") => (format!("/v1/tools/{}", outer.tool), None),
        ("DELETE", "/v1/agents/{agent_id}") => (format!("/v1/agents/{}", outer.agent), None),
        ("POST", "/v1/runs") => (
            row.path.to_string(),
            Some(json!({"agent_id": refs.agent, "title": "matrix"})),
        ),
        ("GET", "/v1/runs/{run_id}") => (format!("/v1/runs/{}", outer.run), None),
        ("PATCH", "/v1/runs/{run_id}") => (
            format!("/v1/runs/{}", outer.run),
            Some(json!({"metadata": {"matrix": nonce}})),
        ),
        ("DELETE", "/v1/runs/{run_id}") => (format!("/v1/runs/{}", outer.doomed_run), None),
        ("POST", "/v1/runs/{run_id}/cancel") => (
            format!("/v1/runs/{}/cancel", outer.cancel_run),
            Some(json!({"reason": "matrix"})),
        ),
        ("POST", "/v1/runs/{run_id}/messages") => (
            format!("/v1/runs/{}/messages", outer.run),
            Some(json!({"content": "hello again"})),
        ),
        ("GET", "/v1/runs/{run_id}/messages") => (format!("/v1/runs/{}/messages", outer.run), None),
        ("GET", "/v1/runs/{run_id}/events") => (format!("/v1/runs/{}/events", outer.run), None),
        ("POST", "/v1/runs/{run_id}/stream-tickets") => {
            (format!("/v1/runs/{}/stream-tickets", outer.run), None)
        }
        ("GET", "/v1/runs/{run_id}/receipts") => (format!("/v1/runs/{}/receipts", outer.run), None),
        ("GET", "/v1/runs/{run_id}/checkpoints") => {
            (format!("/v1/runs/{}/checkpoints", outer.run), None)
        }
        ("GET", "/v1/runs/{run_id}/files") => (format!("/v1/runs/{}/files", outer.run), None),
        ("GET", "/v1/runs/{run_id}/files/{path}") => {
            (format!("/v1/runs/{}/files/{FIXTURE_FILE}", outer.run), None)
        }
        ("PUT", "/v1/runs/{run_id}/files/{path}") => (
            format!("/v1/runs/{}/files/{FIXTURE_FILE}", outer.run),
            Some(json!({"matrix": nonce})),
        ),
        ("POST", "/v1/runs/{run_id}/approvals/{approval_id}") => (
            format!(
                "/v1/runs/{}/approvals/{}",
                outer.approval_run, nested.approval
            ),
            Some(json!({"approve": true, "reason": "matrix"})),
        ),
        ("POST", "/v1/runs/{run_id}/tool-outputs") => (
            format!("/v1/runs/{}/tool-outputs", outer.client_run),
            Some(json!({"tool_outputs": [{"receipt_id": nested.client_receipt, "output": "42"}]})),
        ),
        ("POST", "/v1/runs/{run_id}/receipts/{receipt_id}/resolve") => (
            format!(
                "/v1/runs/{}/receipts/{}/resolve",
                outer.uncertain_run, nested.uncertain_receipt
            ),
            Some(json!({"resolution": "skip"})),
        ),
        ("PUT", "/v1/secrets/{name}") => (
            format!("/v1/secrets/{}", outer.secret),
            Some(json!({"value": format!("value {nonce}")})),
        ),
        ("DELETE", "/v1/secrets/{name}") => (format!("/v1/secrets/{}", outer.secret), None),
        ("GET", "/v1/environments") => (row.path.to_string(), None),
        ("PUT", "/v1/environments/{name}") => (
            format!("/v1/environments/{}", outer.environment),
            Some(json!({"base": "default", "execute_role": "admin"})),
        ),
        ("DELETE", "/v1/environments/{name}") => {
            (format!("/v1/environments/{}", outer.environment), None)
        }
        ("GET", "/v1/encryption-keys") | ("POST", "/v1/encryption-keys/reseal") => {
            (row.path.to_string(), None)
        }
        ("POST", "/v1/api-keys") => (
            row.path.to_string(),
            Some(json!({"name": format!("{nonce} key"), "role": "viewer"})),
        ),
        ("GET", "/v1/api-keys" | "/v1/audit" | "/v1/egress-allowlist" | "/v1/retention") => {
            (row.path.to_string(), None)
        }
        ("PUT", "/v1/egress-allowlist") => (row.path.to_string(), Some(json!({"hosts": []}))),
        ("PUT", "/v1/retention") => (row.path.to_string(), Some(json!({"run_days": null}))),
        ("POST", "/v1/login") => (
            row.path.to_string(),
            Some(json!({"email": format!("{nonce}@nobody.example"), "password": "matrix"})),
        ),
        ("POST", "/v1/logout")
        | ("GET", "/v1/me" | "/v1/members" | "/v1/invitations" | "/v1/me/invitations") => {
            (row.path.to_string(), None)
        }
        ("POST", "/v1/invitations") => (
            row.path.to_string(),
            Some(json!({"email": outer.newcomer, "role": "viewer"})),
        ),
        ("DELETE", "/v1/invitations/{invitation_id}") => {
            (format!("/v1/invitations/{}", outer.invitation), None)
        }
        ("POST", "/v1/me/invitations/{invitation_id}/accept") => (
            format!("/v1/me/invitations/{}/accept", outer.invitation),
            None,
        ),
        ("POST", "/v1/me/invitations/{invitation_id}/decline") => (
            format!("/v1/me/invitations/{}/decline", outer.invitation),
            None,
        ),
        ("PUT", "/v1/members/{user_id}") => (
            format!("/v1/members/{}", outer.member),
            Some(json!({"role": "member"})),
        ),
        ("DELETE", "/v1/members/{user_id}") => (format!("/v1/members/{}", outer.member), None),
        ("DELETE", "/v1/api-keys/{key_id}") => (format!("/v1/api-keys/{}", outer.api_key), None),
        ("POST", "/v1/schedules") => (
            row.path.to_string(),
            Some(
                json!({"name": format!("{nonce} schedule"), "agent_id": refs.agent,
                        "message": "report", "cron": "0 9 * * *"}),
            ),
        ),
        ("GET", "/v1/schedules") => (row.path.to_string(), None),
        ("GET" | "DELETE", "/v1/schedules/{schedule_id}") => {
            (format!("/v1/schedules/{}", outer.schedule), None)
        }
        ("PUT", "/v1/schedules/{schedule_id}") => (
            format!("/v1/schedules/{}", outer.schedule),
            Some(
                json!({"name": format!("{nonce} schedule"), "agent_id": refs.agent,
                        "message": "report", "cron": "15 9 * * *"}),
            ),
        ),
        ("POST", "/v1/schedules/{schedule_id}/run") => (
            format!("/v1/schedules/{}/run", outer.schedule),
            Some(json!({"request_id": nonce})),
        ),
        ("POST", "/v1/schedules/{schedule_id}/pause") => {
            (format!("/v1/schedules/{}/pause", outer.schedule), None)
        }
        ("POST", "/v1/schedules/{schedule_id}/resume") => {
            (format!("/v1/schedules/{}/resume", outer.schedule), None)
        }
        ("POST", "/v1/webhooks") => (
            row.path.to_string(),
            Some(
                json!({"url": "http://127.0.0.1:9/hook", "description": format!("{nonce} hook"),
                        "events": ["run.completed"]}),
            ),
        ),
        ("GET", "/v1/webhooks") => (row.path.to_string(), None),
        ("GET" | "DELETE", "/v1/webhooks/{webhook_id}") => {
            (format!("/v1/webhooks/{}", outer.webhook), None)
        }
        ("PUT", "/v1/webhooks/{webhook_id}") => (
            format!("/v1/webhooks/{}", outer.webhook),
            Some(
                json!({"url": "http://127.0.0.1:9/hook", "description": format!("{nonce} hook"),
                        "events": ["run.cancelled", "run.failed"]}),
            ),
        ),
        ("POST", "/v1/webhooks/{webhook_id}/rotate-secret") => (
            format!("/v1/webhooks/{}/rotate-secret", outer.webhook),
            Some(json!({"overlap_secs": 60})),
        ),
        ("POST", "/v1/webhooks/{webhook_id}/enable") => {
            (format!("/v1/webhooks/{}/enable", outer.webhook), None)
        }
        ("GET", "/v1/webhooks/{webhook_id}/deliveries") => {
            (format!("/v1/webhooks/{}/deliveries", outer.webhook), None)
        }
        ("GET", "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}") => (
            format!(
                "/v1/webhooks/{}/deliveries/{}",
                outer.webhook, nested.delivery
            ),
            None,
        ),
        ("POST", "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/replay") => (
            format!(
                "/v1/webhooks/{}/deliveries/{}/replay",
                outer.webhook, nested.delivery
            ),
            None,
        ),
        ("POST", "/v1/mcp-servers") => (
            row.path.to_string(),
            Some(json!({"name": format!("{nonce}_mcp"), "url": "http://127.0.0.1:9/mcp"})),
        ),
        ("GET", "/v1/mcp-servers") => (row.path.to_string(), None),
        ("GET" | "DELETE", "/v1/mcp-servers/{server_id}") => {
            (format!("/v1/mcp-servers/{}", outer.mcp_server), None)
        }
        ("PUT", "/v1/mcp-servers/{server_id}") => (
            format!("/v1/mcp-servers/{}", outer.mcp_server),
            Some(
                json!({"name": format!("{}_mcp", outer.tag), "url": outer.mcp_url,
                        "timeout_ms": 20_000}),
            ),
        ),
        ("POST", "/v1/mcp-servers/{server_id}/discover") => (
            format!("/v1/mcp-servers/{}/discover", outer.mcp_server),
            None,
        ),
        ("GET", "/v1/mcp-servers/{server_id}/tools") => {
            (format!("/v1/mcp-servers/{}/tools", outer.mcp_server), None)
        }
        ("POST", "/v1/mcp-servers/{server_id}/tools/{name}/enable") => (
            format!("/v1/mcp-servers/{}/tools/lookup/enable", outer.mcp_server),
            Some(json!({"name": format!("{nonce}_lookup"), "effect": "read"})),
        ),
        _ => panic!("{row}: `request` does not know how to call this route; add it"),
    };
    Req {
        method: Method::from_bytes(row.method.as_bytes()).expect("a method"),
        path,
        body,
    }
}

async fn call(api: &Api, req: &Req) -> Reply {
    let mut r = api.req(req.method.clone(), &req.path);
    if let Some(body) = &req.body {
        r = r.json(body);
    }
    send(api, r).await
}

/// Sends a request byte for byte and reads the whole answer. reqwest, like browsers,
/// resolves `%2e%2e` segments before sending; the server's own handling of them can only
/// be probed from a raw socket.
async fn raw_once(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> Reply {
    let addr = base.strip_prefix("http://").expect("an http base URL");
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
        stream.write_all(head.as_bytes()).await.expect("write head");
        stream.write_all(body.as_bytes()).await.expect("write body");
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).await.expect("read answer");
        bytes
    };
    let bytes = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer within 10 s"));
    parse_http(&bytes).unwrap_or_else(|| {
        panic!(
            "{method} {path}: not an HTTP answer: {:?}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

/// [`raw_once`], again after a pause while the server answers `429 rate_limited`.
async fn raw(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = raw_once(base, method, path, headers, body).await;
        if reply.status != 429 || Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn parse_http(bytes: &[u8]) -> Option<Reply> {
    let split = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut rest = &bytes[split + 4..];
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        let mut out = Vec::new();
        loop {
            let end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size_text = std::str::from_utf8(&rest[..end]).ok()?;
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            rest = &rest[end + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(rest.get(..size)?);
            rest = rest.get(size + 2..)?;
        }
        out
    } else {
        rest.to_vec()
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    Some(Reply {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        content_type: headers.get("content-type").cloned().unwrap_or_default(),
        headers: Default::default(),
    })
}

// --- Checks ------------------------------------------------------------------------

/// What an error body must never show: traces, SQL, driver names, server paths.
const LEAK_MARKERS: &[&str] = &[
    "panicked",
    "backtrace",
    "thread '",
    ".rs:",
    "/src/",
    "services/",
    "/home/",
    "/work/",
    "/tmp/",
    "/usr/",
    "select ",
    "insert into",
    "delete from",
    "update ",
    "sqlx",
    "postgres",
    "sqlite",
    "pg_",
    "relation \"",
    "syntax error",
    "violates",
    "duplicate key",
];

type Check = Result<(), String>;

fn brief(r: &Reply) -> String {
    let text = r.body.to_string();
    let cut: String = text.chars().take(300).collect();
    format!("{} {cut}", r.status)
}

/// A problem+json body with the fields every problem has, showing nothing internal.
fn problem_shape(r: &Reply) -> Check {
    if !r.content_type.starts_with("application/problem+json") {
        return Err(format!(
            "content type {:?}, not problem+json: {}",
            r.content_type,
            brief(r)
        ));
    }
    let b = &r.body;
    let fields_ok = b["status"].as_u64() == Some(u64::from(r.status))
        && b["code"].is_string()
        && b["detail"].is_string()
        && b["title"].is_string()
        && b["type"].is_string()
        && b["request_id"].is_string();
    if !fields_ok {
        return Err(format!("incomplete problem body: {}", brief(r)));
    }
    let text = b.to_string().to_ascii_lowercase();
    match LEAK_MARKERS.iter().find(|m| text.contains(*m)) {
        Some(m) => Err(format!("the problem body shows {m:?}: {}", brief(r))),
        None => Ok(()),
    }
}

fn problem(r: &Reply, status: u16, code: &str) -> Check {
    if r.status != status || r.body["code"] != code {
        return Err(format!("expected {status} {code}, got {}", brief(r)));
    }
    problem_shape(r)
}

/// Any answer but 401/403, in `allowed`; an error answer must be a clean problem.
fn let_through(r: &Reply, allowed: &[u16]) -> Check {
    if !allowed.contains(&r.status) {
        return Err(format!("expected one of {allowed:?}, got {}", brief(r)));
    }
    if r.status >= 400 {
        problem_shape(r)?;
    }
    Ok(())
}

/// None of `theirs` appears in the answer, unless the request itself named it.
fn shows_none_of(r: &Reply, theirs: &[String], sent: &str) -> Check {
    let text = match &r.body {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match theirs
        .iter()
        .find(|t| text.contains(t.as_str()) && !sent.contains(t.as_str()))
    {
        Some(t) => Err(format!(
            "the answer shows another tenant's {t:?}: {}",
            brief(r)
        )),
        None => Ok(()),
    }
}

/// Status, code and detail with every id and name of `sets` replaced: two answers of the
/// same shape cannot be told apart by what they were asked about.
fn shape(r: &Reply, sets: &[&Fixtures]) -> String {
    let mut detail = r.body["detail"].as_str().unwrap_or_default().to_string();
    let mut names: Vec<&String> = sets.iter().flat_map(|s| &s.identifiers).collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for n in names {
        detail = detail.replace(n.as_str(), "<id>");
    }
    format!("{} {} {detail}", r.status, r.body["code"])
}

/// Gathers the outcome of every cell, and fails once at the end with all of them.
#[derive(Default)]
struct Outcomes {
    /// Failed checks per (row index, cell); an entry with no failures passed.
    cells: BTreeMap<(usize, Cell), Vec<String>>,
    checks: usize,
}

impl Outcomes {
    fn record(&mut self, row: usize, cell: Cell, check: Check) {
        self.checks += 1;
        let entry = self.cells.entry((row, cell)).or_default();
        if let Err(e) = check {
            entry.push(e);
        }
    }

    /// Panics with every failure.
    fn finish(self, tier: &str) {
        let failures: Vec<String> = self
            .cells
            .iter()
            .filter(|(_, errors)| !errors.is_empty())
            .map(|((i, cell), errors)| format!("{} [{cell:?}]: {}", ROUTES[*i], errors.join("; ")))
            .collect();
        eprintln!(
            "{tier}: {} checks in {} cells, {} failures",
            self.checks,
            self.cells.len(),
            failures.len()
        );
        assert!(
            failures.is_empty(),
            "{tier}: {} cells failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}

// --- The matrices ------------------------------------------------------------------

/// The tiers the matrices run in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tier {
    Team,
    Embedded,
}

struct World {
    app: TestApp,
    /// Tenant A's clients by role.
    a: BTreeMap<Role, Api>,
    /// Tenant A's fixture sets by role.
    a_sets: BTreeMap<Role, Fixtures>,
    b_owner: Api,
    b: Fixtures,
    /// Keeps the `http` tools' endpoint up; the mutation left uncertain waits on it.
    _tools: ToolServer,
    /// The sets' MCP server (none where BATON_SKIP_MCP=1).
    _mcp: Option<McpTestServer>,
}

impl World {
    /// A new owner key of tenant A, for a phase of many requests: each key has its own
    /// rate limit.
    async fn owner_key(&self) -> Api {
        let tenant = self.a_sets[&Role::Owner].tenant.parse().expect("tenant id");
        let token = self.app.key(tenant, Role::Owner, None, None).await;
        Api::new(&self.app.base, Some(token))
    }
}

/// The file of each set's run.
const FIXTURE_FILE: &str = "uploads/fixture.json";

async fn world(tier: Tier) -> World {
    // A file may be as large as any other body, so the oversize probe meets its limit.
    let files_like_bodies = |c: &mut baton_server::config::Config| {
        c.workspaces.max_file_bytes = c.http.body_limit_bytes as u64
    };
    let app = match tier {
        Tier::Team => {
            TestApp::team_with(&baton_testkit::replicas::nats_url(), files_like_bodies).await
        }
        Tier::Embedded => TestApp::embedded_with(files_like_bodies).await,
    };
    let tools = ToolServer::start().await;
    let mcp = McpTestServer::start(Path::new(ROOT), McpOptions::default()).await;
    let mcp_url = mcp
        .as_ref()
        .map_or("http://127.0.0.1:9/mcp".to_string(), McpTestServer::url);
    tools.set(
        "transfer",
        Behaviour {
            delay: Duration::from_secs(60),
            ..Behaviour::default()
        },
    );
    let (tenant_a, a_owner) = app.tenant(Role::Owner).await;
    let (tenant_b, b_owner) = app.tenant(Role::Owner).await;
    let mut a = BTreeMap::new();
    for role in [Role::Viewer, Role::Member, Role::Admin] {
        let token = app.key(tenant_a, role, None, None).await;
        a.insert(role, Api::new(&app.base, Some(token)));
    }
    a.insert(Role::Owner, a_owner.clone());
    let (ta, tb) = (tenant_a.to_string(), tenant_b.to_string());
    // A builder each, each with its own key, to stay within the per-key rate limit.
    let mut builders = Vec::new();
    for _ in 0..4 {
        let token = app.key(tenant_a, Role::Owner, None, None).await;
        builders.push(Api::new(&app.base, Some(token)));
    }
    let (viewer, member, admin, owner, b) = tokio::join!(
        Fixtures::build(&builders[0], &ta, &tools, &mcp_url),
        Fixtures::build(&builders[1], &ta, &tools, &mcp_url),
        Fixtures::build(&builders[2], &ta, &tools, &mcp_url),
        Fixtures::build(&builders[3], &ta, &tools, &mcp_url),
        Fixtures::build(&b_owner, &tb, &tools, &mcp_url),
    );
    let mut a_sets = BTreeMap::from([
        (Role::Viewer, viewer),
        (Role::Member, member),
        (Role::Admin, admin),
        (Role::Owner, owner),
    ]);
    let mut b = b;
    for set in a_sets.values_mut().chain([&mut b]) {
        set.add_users(&app, tier).await;
    }
    World {
        app,
        a,
        a_sets,
        b_owner,
        b,
        _tools: tools,
        _mcp: mcp,
    }
}

/// Every path × method of `/openapi.json` has a row, and every documented row a route.
async fn routes_have_rows(api: &Api) {
    let doc = get(api, "/openapi.json").await;
    assert_eq!(doc.status, 200, "openapi: {}", doc.body);
    let mut served = BTreeSet::new();
    for (path, item) in doc.body["paths"].as_object().expect("paths") {
        for method in [
            "get", "put", "post", "delete", "patch", "head", "options", "trace",
        ] {
            if item.get(method).is_some() {
                served.insert((method.to_ascii_uppercase(), path.clone()));
            }
        }
    }
    let rows: BTreeSet<(String, String)> = ROUTES
        .iter()
        .filter(|r| !r.undocumented)
        .map(|r| (r.method.to_string(), r.path.to_string()))
        .collect();
    let missing: Vec<String> = served
        .difference(&rows)
        .map(|(m, p)| format!("route {m} {p} has no row in the role matrix"))
        .collect();
    let stale: Vec<String> = rows
        .difference(&served)
        .map(|(m, p)| format!("row {m} {p} is not in /openapi.json"))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "{}",
        [missing, stale].concat().join("\n")
    );
}

/// Each role of tenant A on its own set of A's objects.
async fn role_matrix(w: &World, out: &mut Outcomes) {
    let anonymous = w.app.anonymous();
    for (i, row) in ROUTES.iter().enumerate() {
        for role in ROLES {
            let set = &w.a_sets[&role];
            let req = request(row, Src::all(set), &new_tag());
            let check = match row.least() {
                None => {
                    // Public: answers without a key, and with any key.
                    let bare = call(&anonymous, &req).await;
                    let keyed = call(&w.a[&role], &req).await;
                    let_through(&bare, row.allowed).and_then(|()| let_through(&keyed, row.allowed))
                }
                Some(least) => {
                    let r = call(&w.a[&role], &req).await;
                    if role < least {
                        problem(&r, 403, "forbidden")
                    } else {
                        let_through(&r, row.allowed)
                    }
                }
            };
            out.record(i, Cell::Role(role), check);
        }
    }
}

/// Creates an API key of `role` with `api`; returns its id and token.
async fn api_key(api: &Api, role: Role) -> (String, String) {
    let r = post(
        api,
        "/v1/api-keys",
        json!({"name": format!("{role:?} key"), "role": role.as_str()}),
    )
    .await;
    assert_eq!(r.status, 201, "create a {role:?} key: {}", r.body);
    let id = r.body["key"]["id"].as_str().expect("key id").to_string();
    let token = r.body["token"].as_str().expect("token").to_string();
    (id, token)
}

fn row_of(method: &str, path: &str) -> usize {
    ROUTES
        .iter()
        .position(|r| r.method == method && r.path == path)
        .unwrap_or_else(|| panic!("no row {method} {path}"))
}

/// A key's role is at most its creator's: admins and owners create and revoke keys of
/// each role up to their own, and get `403 forbidden` above it.
async fn key_grants(w: &World, out: &mut Outcomes) {
    let (create, revoke) = (
        row_of("POST", "/v1/api-keys"),
        row_of("DELETE", "/v1/api-keys/{key_id}"),
    );
    let owner = &w.a[&Role::Owner];
    for creator in [Role::Admin, Role::Owner] {
        let api = &w.a[&creator];
        for target in ROLES {
            let within = target <= creator;
            let r = post(
                api,
                "/v1/api-keys",
                json!({"name": "grant", "role": target.as_str()}),
            )
            .await;
            let check = if within {
                let_through(&r, &[201])
            } else {
                problem(&r, 403, "forbidden")
            };
            out.record(
                create,
                Cell::Role(creator),
                check.map_err(|e| format!("{creator:?} creating a {target:?} key: {e}")),
            );
            let (id, _) = api_key(owner, target).await;
            let r = send(api, api.req(Method::DELETE, &format!("/v1/api-keys/{id}"))).await;
            let check = if within {
                let_through(&r, &[204])
            } else {
                problem(&r, 403, "forbidden")
            };
            out.record(
                revoke,
                Cell::Role(creator),
                check.map_err(|e| format!("{creator:?} revoking a {target:?} key: {e}")),
            );
        }
    }
}

/// Tenant A's owner with tenant B's ids; then B's objects are checked unchanged.
async fn cross_tenant_matrix(w: &World, out: &mut Outcomes) {
    let a_owner = &w.a[&Role::Owner];
    let a = &w.a_sets[&Role::Owner];
    let b = &w.b;
    let unknown = Fixtures::unknown();
    let nonce = new_tag();
    // Names stored by A below are A's own; the rows naming them run last.
    let order = ROUTES
        .iter()
        .enumerate()
        .filter(|(_, r)| r.cross != OwnName)
        .chain(
            ROUTES
                .iter()
                .enumerate()
                .filter(|(_, r)| r.cross == OwnName),
        );
    for (i, row) in order {
        let base = request(row, Src::all(a), &nonce);
        let mut checks = Vec::new();
        match row.cross {
            Cross::Public => continue,
            Scoped => {
                let r = call(a_owner, &base).await;
                checks.push(
                    let_through(&r, row.allowed)
                        .and_then(|()| shows_none_of(&r, &b.identifiers, "")),
                );
            }
            OwnName => {
                let theirs = Src {
                    outer: b,
                    nested: a,
                    refs: a,
                };
                let req = request(row, theirs, &nonce);
                let r = call(a_owner, &req).await;
                checks.push(
                    let_through(&r, row.allowed)
                        .and_then(|()| shows_none_of(&r, &b.identifiers, &req.text())),
                );
            }
            NotFound => {
                // B's object in the path (and B's object under it): 404.
                let theirs = Src {
                    outer: b,
                    nested: b,
                    refs: a,
                };
                let nowhere = Src {
                    outer: &unknown,
                    nested: &unknown,
                    refs: a,
                };
                checks.push(
                    same_as_unknown(a_owner, row, theirs, nowhere, b, &unknown, &nonce, true).await,
                );
            }
        }
        // A's own object with B's object under it, and B's objects named in a body:
        // answered exactly as unknown ones.
        let variants = [
            (
                Src {
                    outer: a,
                    nested: b,
                    refs: a,
                },
                Src {
                    outer: a,
                    nested: &unknown,
                    refs: a,
                },
            ),
            (
                Src {
                    outer: a,
                    nested: a,
                    refs: b,
                },
                Src {
                    outer: a,
                    nested: a,
                    refs: &unknown,
                },
            ),
        ];
        for (theirs, nowhere) in variants {
            if request(row, theirs, &nonce) != base {
                checks.push(
                    same_as_unknown(a_owner, row, theirs, nowhere, b, &unknown, &nonce, false)
                        .await,
                );
            }
        }
        for c in checks {
            out.record(i, Cell::CrossTenant, c);
        }
    }

    // The event stream of B's run, asked for as SSE.
    let sse = send(
        a_owner,
        a_owner
            .req(Method::GET, &format!("/v1/runs/{}/events", b.run))
            .header("accept", "text/event-stream"),
    )
    .await;
    let events_row = ROUTES
        .iter()
        .position(|r| r.path == "/v1/runs/{run_id}/events")
        .expect("events row");
    out.record(
        events_row,
        Cell::CrossTenant,
        problem(&sse, 404, "not_found").and_then(|()| shows_none_of(&sse, &b.identifiers, &b.run)),
    );

    assert_untouched(&w.b_owner, b).await;
}

/// Calls `row` with `theirs` and with `nowhere` (the same call with unknown ids): both
/// answer the same (modulo the ids), a 4xx problem that shows none of B's ids or names
/// the request did not name; `not_found` when `must_404`.
#[allow(clippy::too_many_arguments)]
async fn same_as_unknown(
    api: &Api,
    row: &Row,
    theirs: Src<'_>,
    nowhere: Src<'_>,
    b: &Fixtures,
    unknown: &Fixtures,
    nonce: &str,
    must_404: bool,
) -> Check {
    let req = request(row, theirs, nonce);
    let r = call(api, &req).await;
    if must_404 {
        problem(&r, 404, "not_found")?;
    } else if !(400..500).contains(&r.status) {
        return Err(format!(
            "{} {} with another tenant's ids: expected a 4xx, got {}",
            req.method,
            req.path,
            brief(&r)
        ));
    }
    problem_shape(&r)?;
    shows_none_of(&r, &b.identifiers, &req.text())?;
    let control = call(api, &request(row, nowhere, nonce)).await;
    let (mine, theirs) = (shape(&control, &[b, unknown]), shape(&r, &[b, unknown]));
    if mine != theirs {
        return Err(format!(
            "{} {}: another tenant's ids answer {theirs:?}, unknown ids {mine:?}",
            req.method, req.path
        ));
    }
    Ok(())
}

/// B's objects are as B left them.
async fn assert_untouched(b_owner: &Api, b: &Fixtures) {
    let members = get(b_owner, "/v1/members").await;
    let theirs: Vec<&Value> = members.body["items"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    assert!(
        theirs.len() == 1
            && theirs[0]["user_id"] == b.member.as_str()
            && theirs[0]["role"] == "viewer",
        "B's members: {}",
        members.body
    );
    let run = summary(b_owner, &b.run).await;
    assert_eq!(run["status"], "waiting", "B's run: {run}");
    let messages = get(b_owner, &format!("/v1/runs/{}/messages", b.run)).await;
    assert_eq!(items(&messages).len(), 2, "B's messages: {}", messages.body);
    assert_eq!(summary(b_owner, &b.cancel_run).await["status"], "waiting");
    assert_eq!(summary(b_owner, &b.doomed_run).await["status"], "waiting");
    for (run, state) in [
        (&b.approval_run, "awaiting_approval"),
        (&b.client_run, "awaiting_client"),
    ] {
        assert_eq!(summary(b_owner, run).await["status"], "requires_action");
        let pending = receipts(b_owner, run).await;
        assert!(
            receipt_in(&pending, state).is_some(),
            "B's {state}: {pending:?}"
        );
    }
    let held = receipts(b_owner, &b.uncertain_run).await;
    assert!(receipt_in(&held, "uncertain").is_some(), "{held:?}");
    let agent = get(b_owner, &format!("/v1/agents/{}", b.agent)).await;
    assert_eq!(agent.body["version"], 1, "B's agent: {}", agent.body);
    let secrets = get(b_owner, "/v1/secrets").await;
    let mine: Vec<&Value> = secrets.body["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|s| s["name"] == b.secret.as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(mine.len(), 1, "B's secret: {}", secrets.body);
    assert_eq!(
        mine[0]["updated_at"].as_str(),
        Some(b.secret_updated.as_str()),
        "B's secret was written by someone else"
    );
    let envs = get(b_owner, "/v1/environments").await;
    let mine: Vec<Value> = items(&envs)
        .into_iter()
        .filter(|e| e["name"] == b.environment.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "B's environment: {}", envs.body);
    assert_eq!(
        mine[0]["execute_role"], "member",
        "B's environment was written by someone else"
    );
}

/// Every keyed route with no, malformed, unknown, expired and revoked credentials.
async fn bad_credentials(w: &World, tier: Tier, out: &mut Outcomes) {
    let tenant = w.a_sets[&Role::Owner].tenant.parse().expect("tenant id");
    let minute_ago = Some(Utc::now() - Age::minutes(1));
    let expired = w.app.key(tenant, Role::Owner, minute_ago, None).await;
    // Revoked through the API, as an admin would.
    let owner = &w.a[&Role::Owner];
    let (id, revoked) = api_key(owner, Role::Owner).await;
    let r = send(
        owner,
        owner.req(Method::DELETE, &format!("/v1/api-keys/{id}")),
    )
    .await;
    assert_eq!(r.status, 204, "revoke: {}", r.body);
    let mut creds = vec![
        (Some("not-a-key".to_string()), "malformed"),
        (
            Some(baton_core::crypto::tokens::issue_token().token),
            "not valid",
        ),
        (Some(expired), "expired"),
        (Some(revoked), "revoked"),
    ];
    // Without auth (the embedded tier) a request without a key is the local owner.
    if tier == Tier::Team {
        creds.push((None, "missing credentials"));
    }
    let set = &w.a_sets[&Role::Owner];
    for (i, row) in ROUTES.iter().enumerate() {
        if row.least().is_none() {
            continue;
        }
        let req = request(row, Src::all(set), &new_tag());
        for (token, says) in &creds {
            let api = Api::new(&w.app.base, token.clone());
            let r = call(&api, &req).await;
            let check = problem(&r, 401, "unauthorized").and_then(|()| {
                let detail = r.body["detail"].as_str().unwrap_or_default();
                if detail.contains(says) {
                    Ok(())
                } else {
                    Err(format!("{detail:?} should say {says:?}"))
                }
            });
            out.record(i, Cell::BadCredentials, check);
        }
        // A `Basic` scheme is no key either.
        let api = Api::new(&w.app.base, None);
        let mut r = api
            .req(req.method.clone(), &req.path)
            .header("authorization", "Basic eDp5");
        if let Some(body) = &req.body {
            r = r.json(body);
        }
        let r = send(&api, r).await;
        out.record(i, Cell::BadCredentials, problem(&r, 401, "unauthorized"));
    }
}

/// Each path parameter of each route replaced by percent-encoded `..` and `/` probes,
/// some of them aimed at tenant B's objects: 400 or 404, never another tenant's data.
async fn encoded_paths(w: &World, out: &mut Outcomes) {
    let set = &w.a_sets[&Role::Owner];
    let b = &w.b;
    let token = w.owner_key().await.token.expect("owner token");
    let probes = [
        "%2e%2e".to_string(),
        "%2E%2E".to_string(),
        "%2e%2e%2f%2e%2e".to_string(),
        "%2F".to_string(),
        "a%2Fb".to_string(),
        "%252e%252e%252f".to_string(),
        format!("..%2F{}", b.run),
        format!("%2e%2e%2f{}", b.agent),
        format!("{}%2F..%2F..", b.run),
        format!("%2e%2e%2f%2e%2e%2fsecrets%2f{}", b.secret),
    ];
    for (i, row) in ROUTES.iter().enumerate() {
        if !row.path.contains('{') {
            continue;
        }
        // The real request, then each of its ids in turn swapped for a probe.
        let req = request(row, Src::all(set), &new_tag());
        let ids: Vec<&String> = set
            .identifiers
            .iter()
            .filter(|id| req.path.split('/').any(|seg| seg == id.as_str()))
            .collect();
        assert!(!ids.is_empty(), "{row}: no id of the set in {}", req.path);
        let body = req.body.as_ref().map(Value::to_string).unwrap_or_default();
        let mut headers = vec![("authorization", format!("Bearer {token}"))];
        if req.body.is_some() {
            headers.push(("content-type", "application/json".to_string()));
        }
        for id in ids {
            for probe in &probes {
                let path: Vec<&str> = req
                    .path
                    .split('/')
                    .map(|seg| {
                        if seg == id.as_str() {
                            probe.as_str()
                        } else {
                            seg
                        }
                    })
                    .collect();
                let path = path.join("/");
                let r = raw(&w.app.base, row.method, &path, &headers, &body).await;
                let check = if r.status == 400 || r.status == 404 {
                    problem_shape(&r).and_then(|()| shows_none_of(&r, &b.identifiers, &path))
                } else {
                    Err(format!(
                        "{} {path}: expected 400 or 404, got {}",
                        row.method,
                        brief(&r)
                    ))
                };
                out.record(i, Cell::EncodedPath, check);
            }
        }
    }
}

/// Every route that takes a body, with one over the limit: 413. Every route with a
/// 64 KiB header: 431 or 400.
async fn oversize(w: &World, limit: usize, out: &mut Outcomes) {
    let set = &w.a_sets[&Role::Owner];
    let owner = w.owner_key().await;
    let filler = "x".repeat(64 * 1024);
    for (i, row) in ROUTES.iter().enumerate() {
        let req = request(row, Src::all(set), &new_tag());
        if req.body.is_some() {
            let big = json!({"content": "x".repeat(limit + 1)});
            let r = send(&owner, owner.req(req.method.clone(), &req.path).json(&big)).await;
            out.record(i, Cell::OversizeBody, problem(&r, 413, "payload_too_large"));
        }
        let mut r = owner
            .req(req.method.clone(), &req.path)
            .header("x-filler", filler.as_str());
        if let Some(body) = &req.body {
            r = r.json(body);
        }
        let check = match r.send().await {
            // The server may close the connection instead of answering.
            Err(e) => Err(format!("no answer to a 64 KiB header: {e}")),
            Ok(res) => {
                let status = res.status().as_u16();
                let headers = res.headers().clone();
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let text = res.text().await.unwrap_or_default();
                let reply = Reply {
                    status,
                    body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
                    content_type,
                    headers,
                };
                if status == 431 || status == 400 {
                    problem_shape(&reply)
                } else {
                    Err(format!(
                        "a 64 KiB header: expected 431 or 400, got {}",
                        brief(&reply)
                    ))
                }
            }
        };
        out.record(i, Cell::OversizeHeader, check);
    }
    let runs = row_of("GET", "/v1/runs");
    let token = owner.token.clone().expect("owner token");
    let headers = [
        ("authorization", format!("Bearer {token}")),
        ("x-filler", "x".repeat(512 * 1024)),
    ];
    let r = raw_once(&w.app.base, "GET", "/v1/runs", &headers, "").await;
    let check = if r.status == 431 {
        problem_shape(&r)
    } else {
        Err(format!("a 512 KiB header: expected 431, got {}", brief(&r)))
    };
    out.record(runs, Cell::HugeHeader, check);
    let headers = [
        ("authorization", format!("Bearer {token}")),
        ("x-filler", "a\0b".to_string()),
    ];
    let r = raw_once(&w.app.base, "GET", "/v1/runs", &headers, "").await;
    out.record(
        runs,
        Cell::MalformedHeader,
        problem(&r, 400, "malformed_request"),
    );
}

async fn every_matrix(tier: Tier, name: &str) {
    let started = Instant::now();
    let w = world(tier).await;
    let built = started.elapsed();
    routes_have_rows(&w.a[&Role::Owner]).await;
    for r in ROUTES {
        if let Access::Key { action, least } = r.access {
            assert_eq!(
                action.min_role(),
                least,
                "{r}: the route table says {least:?}, core::auth says {:?} for {action:?}",
                action.min_role()
            );
        }
    }
    let mut out = Outcomes::default();
    // Cross-tenant first: it leaves A's objects as they are, the role matrix does not.
    cross_tenant_matrix(&w, &mut out).await;
    role_matrix(&w, &mut out).await;
    key_grants(&w, &mut out).await;
    bad_credentials(&w, tier, &mut out).await;
    encoded_paths(&w, &mut out).await;
    let limit = baton_server::config::Config::embedded(std::path::Path::new("."))
        .http
        .body_limit_bytes;
    oversize(&w, limit, &mut out).await;
    eprintln!(
        "{name}: fixtures in {built:?}, every matrix in {:?}",
        started.elapsed()
    );
    w.app.stop().await;
    out.finish(name);
}

#[tokio::test]
async fn every_route_and_role_in_the_team_tier() {
    every_matrix(Tier::Team, "team tier").await;
}

#[tokio::test]
async fn every_route_and_role_in_the_embedded_tier_with_keys() {
    every_matrix(Tier::Embedded, "embedded tier").await;
}

// --- The security document ---------------------------------------------------------

/// The role table of `docs/security.md`: for each action, the roles marked `yes`, and
/// the routes it lists.
fn documented_roles() -> BTreeMap<String, (Vec<Role>, BTreeSet<String>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/security.md");
    let doc = std::fs::read_to_string(path).expect("docs/security.md");
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Roles"))
        .expect("a `## Roles` section in docs/security.md");
    let mut lines = section.lines().filter(|l| l.trim_start().starts_with('|'));
    let cells = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let header = cells(lines.next().expect("a table header"));
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no {name:?} column in {header:?}"))
    };
    let roles: Vec<(Role, usize)> = ROLES.iter().map(|r| (*r, column(r.as_str()))).collect();
    let routes_col = column("routes");
    let mut table = BTreeMap::new();
    for line in lines.skip(1) {
        let c = cells(line);
        let action = c[0].trim_matches('`').to_string();
        let allowed = roles
            .iter()
            .filter(|(_, i)| match c[*i].as_str() {
                "yes" => true,
                "no" => false,
                other => panic!("{action}: cell {other:?} is neither yes nor no"),
            })
            .map(|(r, _)| *r)
            .collect();
        let routes = c[routes_col]
            .split("<br>")
            .map(|r| r.trim().trim_matches('`').to_string())
            .filter(|r| !r.is_empty() && r != "—")
            .collect();
        table.insert(action, (allowed, routes));
    }
    table
}

#[test]
fn the_security_doc_route_table_and_core_auth_agree() {
    let doc = documented_roles();
    let mut problems = Vec::new();
    for action in all_actions() {
        let name = format!("{action:?}");
        let Some((allowed, routes)) = doc.get(&name) else {
            problems.push(format!("docs/security.md has no row for {name}"));
            continue;
        };
        let want: Vec<Role> = ROLES
            .iter()
            .copied()
            .filter(|r| *r >= action.min_role())
            .collect();
        if *allowed != want {
            problems.push(format!(
                "{name}: the docs allow {allowed:?}, core::auth allows {want:?}"
            ));
        }
        let mine: BTreeSet<String> = ROUTES
            .iter()
            .filter(|r| matches!(r.access, Access::Key { action: a, .. } if a == action))
            .map(|r| r.to_string())
            .collect();
        if *routes != mine {
            problems.push(format!(
                "{name}: the docs list routes {routes:?}, the route table {mine:?}"
            ));
        }
    }
    let known: BTreeSet<String> = all_actions().iter().map(|a| format!("{a:?}")).collect();
    for name in doc.keys().filter(|n| !known.contains(*n)) {
        problems.push(format!(
            "docs/security.md lists {name}, which core::auth lacks"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
