//! The ports the use cases need, one file per port. The store adapters implement them in
//! `baton-store` (`store/src/adapter/<port>.rs` mirrors `ports/<port>.rs`), the bus
//! adapters in `baton-bus`, the engine [`RunDriver`]. Every method that touches tenant data
//! takes the [`TenantId`](crate::TenantId) first and must never return another tenant's
//! rows.

mod agents;
mod api_keys;
mod append;
mod audit;
mod bus;
mod checkpoints;
mod clock;
mod delegation;
mod egress_allowlists;
mod environments;
mod invitations;
mod leases;
mod mcp;
mod retention;
mod runs;
mod schedules;
mod sealed;
mod secrets;
mod stats;
mod stream_tickets;
mod tenants;
mod tools;
mod users;
mod webhooks;
mod workspace;

pub use agents::AgentStore;
pub use api_keys::ApiKeyStore;
pub use append::{AppendOutcome, AppendRequest, EventLog, Fence, Release};
pub use audit::{AuditQuery, AuditStore};
pub use bus::{Control, ControlMessage, EventBus, RunDriver, Subscription};
pub use checkpoints::{CheckpointStore, StoredCheckpoint};
pub use clock::{Clock, SystemClock};
pub use delegation::{Child, Delegation, Delegator, DelegatorSlot};
pub use egress_allowlists::EgressAllowlistStore;
pub use environments::EnvironmentStore;
pub use invitations::{Decided, InvitationStore};
pub use leases::{ClaimedRun, HeldLease, LeaseStore};
pub use mcp::{ClientCredentials, ListedTools, MCP_DISCOVERIES_KEPT, McpLister, McpServerStore};
pub use retention::{JobLease, JobStatus, RetentionStore};
pub use runs::{IdempotencyRecord, RunFilter, RunListQuery, RunReader, fold_title};
pub use schedules::ScheduleStore;
pub use sealed::{KeyUsage, SealedRecord, SealedRef, SealedStore, SealedSwap};
pub use secrets::{SealedSecret, SecretReader, SecretStore};
pub use stats::StatsStore;
pub use stream_tickets::StreamTicketStore;
pub use tenants::TenantStore;
pub use tools::ToolStore;
pub use users::{MemberChange, UserCredentials, UserStore};
pub use webhooks::{EndpointOutcome, PostAnswer, WebhookStore, WebhookTransport};
pub use workspace::{Blob, PathState, WorkspaceStore};
