//! Route handlers, thin: parse the request, call one use case, map the result.

pub mod actions;
pub mod agents;
pub mod api_keys;
pub mod audit;
pub mod egress;
pub mod encryption_keys;
pub mod environments;
pub mod events;
pub mod files;
pub mod health;
pub mod invitations;
pub mod mcp_servers;
pub mod members;
pub mod retention;
pub mod runs;
pub mod schedules;
pub mod secrets;
pub mod sessions;
pub mod tools;
pub mod webhooks;

use crate::error::{ApiError, Code};
use serde::Serialize;

/// Declares the answer of a list route: a page of `$item`s and the cursor of the next
/// page. One named type per item type, so the document names each page and refers to its
/// items by their own schema.
macro_rules! page {
    ($(#[$doc:meta])* $name:ident of $item:ty) => {
        $(#[$doc])*
        #[derive(Serialize, utoipa::ToSchema)]
        pub struct $name {
            pub items: Vec<$item>,
            /// Pass as `cursor` to get the next page; null on the last page.
            pub next_cursor: Option<String>,
        }

        impl From<baton_core::page::Page<$item>> for $name {
            fn from(p: baton_core::page::Page<$item>) -> Self {
                Self {
                    items: p.items,
                    next_cursor: p.next_cursor,
                }
            }
        }
    };
}

page!(/// A page of agents, newest first.
    AgentPage of baton_core::model::Agent);
page!(/// A page of tools, newest first.
    ToolPage of baton_core::model::Tool);
page!(/// A page of runs, newest first.
    RunPage of baton_core::model::RunSummary);
page!(/// A page of a run's messages, in order.
    MessagePage of baton_core::model::Message);
page!(/// A page of secrets (metadata only), in name order.
    SecretPage of baton_core::model::SecretMeta);
page!(/// A page of API keys (never a token), newest first.
    ApiKeyPage of baton_core::api_keys::ApiKeyMeta);
page!(/// A page of members, in email order.
    MemberPage of baton_core::model::Member);
page!(/// A page of invitations, newest first.
    InvitationPage of baton_core::model::Invitation);
page!(/// A page of schedules, newest first.
    SchedulePage of baton_core::model::Schedule);
page!(/// A page of webhook endpoints, newest first.
    WebhookPage of baton_core::model::Webhook);
page!(/// A page of an endpoint's deliveries, newest first.
    DeliveryPage of baton_core::model::Delivery);
page!(/// A page of MCP servers, newest first.
    McpServerPage of baton_core::model::McpServer);
page!(/// A page of a run's files, in path order.
    FilePage of baton_core::model::WorkspaceFile);
page!(/// The execution environments: the operator's, then the tenant's, each in name
    /// order (one page: `next_cursor` is always null).
    EnvironmentPage of baton_core::model::EnvironmentView);
page!(/// A page of audit entries, newest first.
    AuditEntryPage of baton_core::model::AuditEntry);

/// The query of a list with no filter: where the page starts and how long it is.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

/// Parses a list cursor (the id of the previous page's last item).
pub(crate) fn parse_cursor<T: std::str::FromStr>(
    cursor: Option<&str>,
) -> Result<Option<T>, ApiError> {
    cursor
        .map(|c| {
            c.parse().map_err(|_| {
                ApiError::new(
                    Code::InvalidCursor,
                    "cursor is not valid: pass back the next_cursor of a previous page",
                )
            })
        })
        .transpose()
}
