//! The ports the use cases need. Adapters live in `baton-store` (Postgres, SQLite) and
//! `baton-bus` (NATS, in-process); the engine implements [`RunDriver`]. Every method that
//! touches tenant data takes the [`TenantId`] first and must never return another
//! tenant's rows.

use crate::audit::{AuditEntry, AuditQuery};
use crate::auth::Role;
use crate::error::StoreError;
use crate::model::{Agent, ApiKey, Message, Receipt, RunStatus, RunSummary, Tenant, Tool};
use async_trait::async_trait;
use baton_events::{AgentId, Envelope, NewEvent, RunId, TenantId, ToolId};
use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

/// The stored outcome of a command carrying a client `request_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct IdempotencyRecord {
    pub request_id: String,
    /// The use case that stored it (`post_message`, `create_run`).
    pub command: String,
    /// Hash of the command's input; a reused `request_id` with other input is refused.
    pub fingerprint: String,
    /// The original response, returned again for a repeated request.
    pub response: serde_json::Value,
}

/// A run's lease as held by one replica: the fencing token of its engine appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The replica identity (`name/boot`).
    pub owner: String,
    /// The lease epoch the replica acquired.
    pub epoch: i64,
}

/// A run whose lease a replica just took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRun {
    pub tenant: TenantId,
    pub run: RunId,
    pub epoch: i64,
    /// `new` (no owner before), `adopted` (the owner's lease expired) or `handoff`
    /// (the owner released it while draining).
    pub reason: baton_events::LeaseReason,
}

/// A lease a replica still holds, as its renewal found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    pub tenant: TenantId,
    pub run: RunId,
    pub epoch: i64,
}

/// Events to append to one run's stream, all or nothing.
#[derive(Debug, Clone)]
pub struct AppendRequest {
    pub run: RunId,
    /// The stream version the events were decided against; 0 for a new stream, whose
    /// first event must be `run.created`.
    pub expected_version: i64,
    pub events: Vec<NewEvent>,
    pub at: DateTime<Utc>,
    /// Stored in the same transaction; if the `request_id` exists already, nothing is
    /// appended and the stored record is returned.
    pub idempotency: Option<IdempotencyRecord>,
    /// Engine appends only: the lease they act under. Unless the run's lease is still
    /// exactly this owner and epoch, nothing is written and the append is `Fenced`.
    pub fence: Option<Fence>,
    /// With a fence: give the lease up in the same transaction.
    pub release: Option<Release>,
}

impl AppendRequest {
    /// A client command's append: no lease, no idempotency record.
    pub fn new(
        run: RunId,
        expected_version: i64,
        events: Vec<NewEvent>,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            run,
            expected_version,
            events,
            at,
            idempotency: None,
            fence: None,
            release: None,
        }
    }
}

/// How an append gives its lease up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The run goes idle or ends: nobody needs the lease.
    Idle,
    /// The owner is draining: the next claimer takes the run over as a hand-off.
    HandOff,
}

#[derive(Debug, Clone)]
pub enum AppendOutcome {
    /// The events were stored; `run` is the projection after them.
    Appended {
        run: Box<RunSummary>,
        events: Vec<Envelope>,
    },
    /// The request's `request_id` was already used; nothing was written.
    Duplicate(IdempotencyRecord),
}

/// Filter and cursor for listing runs, newest first.
#[derive(Debug, Clone, Default)]
pub struct RunListQuery {
    pub status: Option<RunStatus>,
    /// Only runs older than this one (the previous page's last id).
    pub before: Option<RunId>,
    pub limit: u32,
}

/// Event streams with their projections (runs, messages) and idempotency records.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Appends with optimistic concurrency: `Conflict` when the stream is not at
    /// `expected_version`; projections are updated in the same transaction.
    async fn append(
        &self,
        tenant: TenantId,
        req: AppendRequest,
    ) -> Result<AppendOutcome, StoreError>;

    /// Events of a stream with `version > after`, in order, at most `limit`.
    async fn read_stream(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Envelope>, StoreError>;

    async fn get_run(&self, tenant: TenantId, run: RunId)
    -> Result<Option<RunSummary>, StoreError>;

    async fn list_runs(
        &self,
        tenant: TenantId,
        query: &RunListQuery,
    ) -> Result<Vec<RunSummary>, StoreError>;

    /// Messages with `seq > after`, in order, at most `limit`.
    async fn list_messages(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Message>, StoreError>;

    async fn find_idempotency(
        &self,
        tenant: TenantId,
        request_id: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError>;

    /// The run's tool-call receipts in the order they were created.
    async fn list_receipts(&self, tenant: TenantId, run: RunId)
    -> Result<Vec<Receipt>, StoreError>;

    /// Cheap connectivity check for readiness.
    async fn ping(&self) -> Result<(), StoreError>;
}

/// Run leases: only the holder of a run's lease drives it. Expiry is
/// `now + ttl`; an expired lease may be taken by anyone, which bumps the epoch and so
/// fences the previous holder's appends.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes the lease of runs that need driving (a turn in progress or a cancel
    /// pending) whose lease is free or expired, oldest first, at most `limit`; concurrent
    /// claimers skip each other's rows. With `only`, considers that one run alone.
    async fn claim_runs(
        &self,
        owner: &str,
        ttl: std::time::Duration,
        now: DateTime<Utc>,
        limit: u32,
        only: Option<(TenantId, RunId)>,
    ) -> Result<Vec<ClaimedRun>, StoreError>;

    /// Extends every lease `owner` holds, in ONE statement, and returns the leases it
    /// still holds; a run missing from the answer was lost (taken after expiry).
    async fn renew_leases(
        &self,
        owner: &str,
        ttl: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<Vec<HeldLease>, StoreError>;

    /// Gives a lease up if it is still `fence`'s; returns whether it was.
    async fn release_lease(
        &self,
        tenant: TenantId,
        run: RunId,
        fence: &Fence,
    ) -> Result<bool, StoreError>;
}

/// Agent definitions, every version kept: a run uses the version it started with.
///
/// Every method that changes something takes the [`AuditEntry`] recording the change and
/// writes it in the same transaction, only when the change is written (so for the other
/// stores below).
#[async_trait]
pub trait AgentStore: Send + Sync {
    /// Stores version 1 (`agent.version` must be 1).
    async fn create_agent(
        &self,
        tenant: TenantId,
        agent: &Agent,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// Stores `agent` as its new current version, which must be exactly one above the
    /// current one (`Conflict` otherwise: another update won).
    async fn update_agent(
        &self,
        tenant: TenantId,
        agent: &Agent,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// The current version.
    async fn get_agent(&self, tenant: TenantId, id: AgentId) -> Result<Option<Agent>, StoreError>;
    /// One stored version.
    async fn get_agent_version(
        &self,
        tenant: TenantId,
        id: AgentId,
        version: i64,
    ) -> Result<Option<Agent>, StoreError>;
    /// Agents newest first, older than `before` when given.
    async fn list_agents(
        &self,
        tenant: TenantId,
        before: Option<AgentId>,
        limit: u32,
    ) -> Result<Vec<Agent>, StoreError>;
}

/// A tenant's tool definitions. Names are unique within a tenant (`Conflict` on a
/// duplicate).
#[async_trait]
pub trait ToolStore: Send + Sync {
    async fn create_tool(
        &self,
        tenant: TenantId,
        tool: &Tool,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    async fn get_tool(&self, tenant: TenantId, id: ToolId) -> Result<Option<Tool>, StoreError>;
    /// Tools newest first, older than `before` when given.
    async fn list_tools(
        &self,
        tenant: TenantId,
        before: Option<ToolId>,
        limit: u32,
    ) -> Result<Vec<Tool>, StoreError>;
}

/// Tenant secrets in the clear, for the engine alone (model API keys, tool headers).
/// Whatever implements it never logs what it reveals.
#[async_trait]
pub trait SecretReader: Send + Sync {
    /// `Ok(None)` when the tenant has no secret of that name; an error when it exists
    /// but cannot be read (its key is gone, the ciphertext was tampered with).
    async fn reveal(&self, tenant: TenantId, name: &str) -> Result<Option<String>, StoreError>;
}

/// What may be shown of a tenant secret: never its value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct SecretMeta {
    /// `[A-Za-z0-9_-]{1,64}`, unique in the tenant.
    pub name: String,
    /// The id of the keyring key the value is sealed under.
    pub key_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A tenant secret as stored: its metadata and the sealed envelope of its value
/// ([`crate::crypto::Keyring::seal`], bound to [`crate::crypto::Aad::secret`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub meta: SecretMeta,
    pub ciphertext: Vec<u8>,
}

/// Tenant secrets, sealed: the store never sees a value in the clear. Names are unique
/// within a tenant.
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// Stores `sealed` under `name`, replacing the value of an existing secret of that name
    /// (which keeps its `created_at`; `updated_at` becomes `at`). Returns the metadata as
    /// stored. An unknown tenant is `NotFound`.
    async fn put_secret(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: &crate::crypto::Sealed,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<SecretMeta, StoreError>;

    async fn get_secret(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> Result<Option<SealedSecret>, StoreError>;

    /// Metadata of the tenant's secrets in name order (byte-wise), after `after` when
    /// given, at most `limit`.
    async fn list_secrets(
        &self,
        tenant: TenantId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SecretMeta>, StoreError>;

    /// Deletes the secret; returns whether it existed (the entry is written only then).
    async fn delete_secret(
        &self,
        tenant: TenantId,
        name: &str,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
}

/// What may be shown of a checkpoint: never its contents.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct CheckpointMeta {
    pub id: baton_events::CheckpointId,
    /// The snapshot holds the run's engine state after this stream version.
    pub through_version: i64,
    /// The keyring key the snapshot is sealed under.
    pub key_id: String,
    /// Size of the snapshot in the clear, in bytes.
    pub size: u64,
    /// Hex SHA-256 of the snapshot in the clear.
    pub sha256: String,
    pub created_at: DateTime<Utc>,
}

/// A checkpoint as stored: its metadata and the sealed snapshot
/// ([`crate::crypto::Aad::checkpoint`] binds it to its tenant, run and id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    pub meta: CheckpointMeta,
    pub ciphertext: Vec<u8>,
}

/// Sealed snapshots of runs' engine state. Writes go through their own small pool, so a
/// burst of checkpoints never delays requests.
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    async fn save_checkpoint(
        &self,
        tenant: TenantId,
        run: RunId,
        checkpoint: &StoredCheckpoint,
    ) -> Result<(), StoreError>;

    /// The run's newest checkpoints (highest `through_version` first), at most `limit`.
    async fn latest_checkpoints(
        &self,
        tenant: TenantId,
        run: RunId,
        limit: u32,
    ) -> Result<Vec<StoredCheckpoint>, StoreError>;

    /// Metadata of the run's checkpoints, oldest first.
    async fn list_checkpoints(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<Vec<CheckpointMeta>, StoreError>;
}

/// Where a sealed record lives: what addresses its row and, with the tenant, makes its
/// associated data ([`crate::crypto::Aad`]). Orders as the rows are paged (by kind, then
/// by primary key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SealedRef {
    /// A tenant secret, by name.
    Secret { tenant: TenantId, name: String },
    /// A run checkpoint.
    Checkpoint {
        tenant: TenantId,
        run: RunId,
        id: baton_events::CheckpointId,
    },
}

impl SealedRef {
    pub fn tenant(&self) -> TenantId {
        match self {
            SealedRef::Secret { tenant, .. } | SealedRef::Checkpoint { tenant, .. } => *tenant,
        }
    }

    /// The associated data the record is sealed with.
    pub fn aad(&self) -> crate::crypto::Aad {
        match self {
            SealedRef::Secret { tenant, name } => crate::crypto::Aad::secret(*tenant, name),
            SealedRef::Checkpoint { tenant, run, id } => {
                crate::crypto::Aad::checkpoint(*tenant, *run, *id)
            }
        }
    }
}

/// Names the record without its tenant (`secret NAME`, `checkpoint RUN/ID`): ids only,
/// never contents.
impl std::fmt::Display for SealedRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SealedRef::Secret { name, .. } => write!(f, "secret {name}"),
            SealedRef::Checkpoint { run, id, .. } => write!(f, "checkpoint {run}/{id}"),
        }
    }
}

/// A sealed record as key rotation reads it: where it is, the key id its row records and
/// the envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedRecord {
    pub at: SealedRef,
    pub key_id: String,
    pub ciphertext: Vec<u8>,
}

/// A record re-sealed under another key: written only while the row still holds exactly
/// what was read (`read.key_id` and `read.ciphertext`).
#[derive(Debug, Clone)]
pub struct SealedSwap {
    pub read: SealedRecord,
    pub sealed: crate::crypto::Sealed,
}

/// How many records one key id seals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUsage {
    pub key_id: String,
    pub secrets: u64,
    pub checkpoints: u64,
}

/// The sealed records (secrets and checkpoints) by the key that sealed them, for key
/// rotation. `tenant` scopes a call to one tenant's records; `None` means every tenant's,
/// which only the operator's command line asks for.
#[async_trait]
pub trait SealedStore: Send + Sync {
    /// Per key id, how many secrets and checkpoints its rows record, in key id order.
    async fn key_usage(&self, tenant: Option<TenantId>) -> Result<Vec<KeyUsage>, StoreError>;

    /// Secrets whose key id is not `key_id`, in (tenant, name) order after `after`, at
    /// most `limit`.
    async fn secrets_not_under(
        &self,
        tenant: Option<TenantId>,
        key_id: &str,
        after: Option<(TenantId, &str)>,
        limit: u32,
    ) -> Result<Vec<SealedRecord>, StoreError>;

    /// Checkpoints whose key id is not `key_id`, in (run, id) order after `after`, at
    /// most `limit`.
    async fn checkpoints_not_under(
        &self,
        tenant: Option<TenantId>,
        key_id: &str,
        after: Option<(RunId, baton_events::CheckpointId)>,
        limit: u32,
    ) -> Result<Vec<SealedRecord>, StoreError>;

    /// Writes each swap's envelope and key id, in one transaction, to the rows that still
    /// hold what was read (a record rewritten or deleted since is left alone). Returns,
    /// per swap, whether it was written.
    async fn swap_sealed(&self, swaps: &[SealedSwap]) -> Result<Vec<bool>, StoreError>;
}

/// An API key as stored, without its token or hash: the key and its bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyRecord {
    pub key: ApiKey,
    /// The actor label of whoever created it (`key:<id>`, `local`); `None` for a key made
    /// outside the API (the owner key of `baton admin create-tenant`).
    pub created_by: Option<String>,
    /// When it last authenticated a request, to within [`crate::api_keys::LAST_USE_INTERVAL`].
    pub last_used_at: Option<DateTime<Utc>>,
}

/// Tenants and API keys.
#[async_trait]
pub trait TenantStore: Send + Sync {
    async fn create_tenant(&self, tenant: &Tenant) -> Result<(), StoreError>;
    async fn get_tenant(&self, id: TenantId) -> Result<Option<Tenant>, StoreError>;
    /// The tenant with this exact name, if any (used for the embedded tier's default).
    async fn find_tenant_by_name(&self, name: &str) -> Result<Option<Tenant>, StoreError>;
    /// Stores a key nobody in the tenant created (`created_by` stays empty): the owner key
    /// that bootstraps a tenant, audited as the operator's.
    async fn create_api_key(
        &self,
        key: &ApiKey,
        hash: &[u8],
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// Stores a key created through the API by the entry's actor (its `created_by`). A
    /// reused id or hash is `Conflict`, an unknown tenant `NotFound`.
    async fn create_api_key_by(
        &self,
        key: &ApiKey,
        hash: &[u8],
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// The key whose token hashes to `hash`, whatever its state, with its bookkeeping
    /// (creator, last use) in the same single read: what authentication needs to decide
    /// whether to record a use. Callers check expiry and revocation.
    async fn lookup_api_key(&self, hash: &[u8]) -> Result<Option<ApiKeyRecord>, StoreError>;
    /// [`TenantStore::lookup_api_key`] without the bookkeeping.
    async fn find_api_key(&self, hash: &[u8]) -> Result<Option<ApiKey>, StoreError> {
        Ok(self.lookup_api_key(hash).await?.map(|r| r.key))
    }
    /// One of the tenant's keys, whatever its state; another tenant's is `None`.
    async fn get_api_key(
        &self,
        tenant: TenantId,
        id: uuid::Uuid,
    ) -> Result<Option<ApiKeyRecord>, StoreError>;
    /// The tenant's keys (revoked and expired ones too), newest first, older than
    /// `before` when given, at most `limit`.
    async fn list_api_keys(
        &self,
        tenant: TenantId,
        before: Option<uuid::Uuid>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>, StoreError>;
    /// Marks the tenant's key revoked at `at`, unless it already is (its first revocation
    /// time stays). Returns whether this call revoked it; another tenant's key is never
    /// touched. Authentication reads the key on every request, so it fails at once.
    async fn revoke_api_key(
        &self,
        tenant: TenantId,
        id: uuid::Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
    /// Records a use of the key at `at`, only if its last recorded use is older than
    /// `stale_before` (or there is none): one conditional write, so replicas racing to
    /// record the same minute write once. Returns whether it wrote.
    async fn touch_api_key(
        &self,
        tenant: TenantId,
        id: uuid::Uuid,
        at: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
}

/// A user as stored, with what logging in checks: the argon2id hash of the password.
#[derive(Clone, PartialEq, Eq)]
pub struct UserCredentials {
    pub user: crate::users::User,
    /// The PHC string (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`).
    pub password_hash: String,
}

impl std::fmt::Debug for UserCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserCredentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// What a change of a membership (a new role, a removal) came to. The store decides the
/// last-owner rule in the same transaction as the write, so two owners demoting each other
/// at once cannot leave a tenant without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberChange {
    /// Written.
    Done,
    /// The user is not a member of the tenant.
    NotFound,
    /// The member's role is no longer the one the change was decided against (another
    /// change came first): nothing was written.
    Stale,
    /// The member is the tenant's last owner, and the change would leave it with none:
    /// nothing was written.
    LastOwner,
}

/// Users, their memberships in tenants and their login sessions. Users and sessions
/// belong to no tenant: a user may be a member of several. Finding a user by email, a
/// session by its hash and a user's memberships are the lookups not scoped by a tenant
/// (they are how a login finds its tenants); everything about a tenant's members takes
/// the tenant first.
#[async_trait]
pub trait UserStore: Send + Sync {
    /// Stores a user with its password hash. A taken email or id is `Conflict`.
    async fn create_user(
        &self,
        user: &crate::users::User,
        password_hash: &str,
    ) -> Result<(), StoreError>;
    /// The user with exactly this (normalized) email, and its password hash.
    async fn find_user_by_email(&self, email: &str) -> Result<Option<UserCredentials>, StoreError>;
    async fn get_user(&self, id: uuid::Uuid) -> Result<Option<crate::users::User>, StoreError>;
    /// Makes the user a member of the tenant with `member.role`. An existing membership
    /// is `Conflict`; an unknown tenant or user is `NotFound`.
    async fn add_member(
        &self,
        tenant: TenantId,
        member: &crate::users::Member,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// The tenant's membership of the user; `None` when it is not one (or the tenant is
    /// another's).
    async fn get_member(
        &self,
        tenant: TenantId,
        user: uuid::Uuid,
    ) -> Result<Option<crate::users::Member>, StoreError>;
    /// The tenant's members in email order (byte-wise), after `after` when given, at
    /// most `limit`.
    async fn list_members(
        &self,
        tenant: TenantId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<crate::users::Member>, StoreError>;
    /// Gives the member the role `to` if its role is still `from`. Demoting an owner
    /// (`from` is owner, `to` is not) is refused as [`MemberChange::LastOwner`] when no
    /// other member of the tenant is an owner.
    async fn change_member_role(
        &self,
        tenant: TenantId,
        user: uuid::Uuid,
        from: Role,
        to: Role,
        audit: &AuditEntry,
    ) -> Result<MemberChange, StoreError>;
    /// Removes the membership if its role is still `from`; removing the last owner is
    /// refused as [`MemberChange::LastOwner`].
    async fn remove_member(
        &self,
        tenant: TenantId,
        user: uuid::Uuid,
        from: Role,
        audit: &AuditEntry,
    ) -> Result<MemberChange, StoreError>;
    /// The user's memberships with their tenants' names, in tenant id order, at most
    /// `limit`.
    async fn memberships_of(
        &self,
        user: uuid::Uuid,
        limit: u32,
    ) -> Result<Vec<crate::users::TenantRole>, StoreError>;
    /// Stores a session whose token hashes to `hash`, and deletes the user's sessions
    /// that expired before `session.created_at` (nothing can use them any more). A
    /// reused hash is `Conflict`, an unknown user `NotFound`.
    async fn create_session(
        &self,
        session: &crate::users::Session,
        hash: &[u8],
    ) -> Result<(), StoreError>;
    /// The session whose token hashes to `hash`, whatever its state; callers check
    /// expiry and revocation.
    async fn lookup_session(
        &self,
        hash: &[u8],
    ) -> Result<Option<crate::users::Session>, StoreError>;
    /// Marks the session revoked at `at` unless it already is. Returns whether this call
    /// revoked it. Authentication reads the session on every request, so it fails at once.
    async fn revoke_session(&self, id: uuid::Uuid, at: DateTime<Utc>) -> Result<bool, StoreError>;
}

/// The per-tenant audit stream ([`crate::audit`]). The changes it records write their
/// entries themselves, through the ports above; this appends an entry of its own (what no
/// single transaction changes, such as a reseal) and reads the stream.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends one entry to the tenant's stream. A reused id is `Conflict`, an unknown
    /// tenant `NotFound`.
    async fn append_audit(&self, tenant: TenantId, entry: &AuditEntry) -> Result<(), StoreError>;
    /// The tenant's entries, newest first (by id), filtered and paged by `query`.
    async fn list_audit(
        &self,
        tenant: TenantId,
        query: &AuditQuery,
    ) -> Result<Vec<AuditEntry>, StoreError>;
}

/// A live feed of one run's durable events, bounded: when the subscriber falls behind
/// the feed is closed (the receiver yields `None`) and the client resumes from its cursor.
/// Dropping it runs the bus's release hooks, so the bus forgets the subscriber at once.
///
/// Beside it, `deltas` carries the run's ephemeral events (token deltas) through a buffer
/// of its own: deltas that do not fit are dropped, they never close the durable feed. A
/// feed built without deltas (or whose bus forgot it) has a `deltas` that yields `None`.
pub struct Subscription {
    pub events: mpsc::Receiver<Envelope>,
    pub deltas: mpsc::Receiver<baton_events::MessageDelta>,
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Subscription {
    /// A feed the bus need not be told about when it goes away.
    pub fn new(events: mpsc::Receiver<Envelope>) -> Self {
        Self {
            events,
            deltas: Self::no_deltas(),
            release: None,
        }
    }

    /// A feed that calls `release` once, when it is dropped (the bus unregisters it).
    pub fn with_release(
        events: mpsc::Receiver<Envelope>,
        release: impl FnOnce() + Send + Sync + 'static,
    ) -> Self {
        Self {
            events,
            deltas: Self::no_deltas(),
            release: Some(Box::new(release)),
        }
    }

    /// The same feed, with the run's deltas arriving on `deltas`.
    #[must_use]
    pub fn with_deltas(mut self, deltas: mpsc::Receiver<baton_events::MessageDelta>) -> Self {
        self.deltas = deltas;
        self
    }

    /// The same feed, calling `release` too when it is dropped (after the hook it
    /// already had).
    #[must_use]
    pub fn and_release(mut self, release: impl FnOnce() + Send + Sync + 'static) -> Self {
        self.release = Some(match self.release.take() {
            Some(first) => Box::new(move || {
                first();
                release();
            }),
            None => Box::new(release),
        });
        self
    }

    /// A delta receiver that never yields one.
    fn no_deltas() -> mpsc::Receiver<baton_events::MessageDelta> {
        mpsc::channel(1).1
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("events", &self.events)
            .field("deltas", &self.deltas)
            .field("release", &self.release.is_some())
            .finish()
    }
}

/// What one replica tells the others over the bus (wake a driver, adopt now). Best effort:
/// a lost message costs latency (the lease and adoption loops catch up), never work.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Control {
    /// A client command changed the run: its driver, wherever it is, should look again.
    Wake { tenant: TenantId, run: RunId },
    /// Leases were released (a replica drained): claim what needs driving now rather
    /// than at the next adoption round.
    Adopt,
}

/// A [`Control`] and the replica that sent it (receivers ignore their own).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ControlMessage {
    pub from: String,
    #[serde(flatten)]
    pub control: Control,
}

/// Publishes committed events and feeds subscribers. The database stays the source of
/// truth: a failed publish is logged and costs latency, never an event.
#[async_trait]
pub trait EventBus: Send + Sync {
    async fn publish(&self, events: &[Envelope]);
    /// Subscribes to one run's events published from now on.
    async fn subscribe(&self, tenant: TenantId, run: RunId) -> Result<Subscription, StoreError>;
    async fn ping(&self) -> Result<(), StoreError>;
    /// Sends an ephemeral event (a token delta) to the run's live subscribers on every
    /// replica. Never stored, never waits: a delta that cannot go out at once is dropped
    /// (the durable `model.completed` carries the whole reply).
    fn publish_delta(&self, tenant: TenantId, run: RunId, delta: baton_events::MessageDelta);
    /// Tells every replica (this one included); never waits on the bus.
    async fn publish_control(&self, msg: &ControlMessage);
    /// Control messages published from now on; a receiver that falls behind loses
    /// messages (they are hints).
    async fn subscribe_control(&self) -> Result<mpsc::Receiver<ControlMessage>, StoreError>;
    /// At shutdown: hands what is queued to the bus, waiting at most `timeout`.
    async fn close(&self, _timeout: std::time::Duration) {}
}

/// Whoever drives runs (the engine): told when a run may need work.
pub trait RunDriver: Send + Sync {
    fn wake(&self, tenant: TenantId, run: RunId);
}

/// Time, behind a port so tests control it.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// Now, at microsecond precision: what both databases store without rounding.
    fn now(&self) -> DateTime<Utc> {
        use chrono::SubsecRound;
        Utc::now().trunc_subsecs(6)
    }
}
