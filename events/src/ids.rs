//! Newtype identifiers shared by every layer. All are UUIDs; new ones are UUIDv7 so
//! they sort by creation time (cursor pagination relies on that).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
            utoipa::ToSchema,
        )]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh, time-ordered id (UUIDv7).
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            pub fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }

        impl From<Uuid> for $name {
            fn from(u: Uuid) -> Self {
                Self(u)
            }
        }
    };
}

id_type!(
    /// A tenant: the unit of isolation. Every query is scoped by one.
    TenantId
);
id_type!(
    /// A run, which is also the id of its event stream.
    RunId
);
id_type!(
    /// An agent definition.
    AgentId
);
id_type!(
    /// One event.
    EventId
);
id_type!(
    /// One message of a run.
    MessageId
);
id_type!(
    /// A tool definition of a tenant.
    ToolId
);
id_type!(
    /// A schedule of a tenant: an agent's runs started on a timetable.
    ScheduleId
);
id_type!(
    /// A webhook endpoint of a tenant.
    WebhookId
);
id_type!(
    /// A Model Context Protocol server a tenant's tools are called on.
    McpServerId
);
id_type!(
    /// One tool call's receipt: the write-ahead record of a side effect. Also sent to
    /// HTTP tools as the `Idempotency-Key`.
    ReceiptId
);
id_type!(
    /// An approval asked of a member before a tool runs.
    ApprovalId
);
id_type!(
    /// A saved snapshot of a run's engine state.
    CheckpointId
);
