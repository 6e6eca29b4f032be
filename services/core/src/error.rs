//! Typed errors: what a store adapter may report, and what a use case may answer.
//! The API maps [`CoreError`] to HTTP in exactly one place.

use thiserror::Error;

/// Errors a store adapter reports. Driver errors are classified by each adapter in one
/// function; a unique violation on a stream version becomes [`StoreError::Conflict`].
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("version conflict: expected {expected}, stream is at {actual}")]
    Conflict { expected: i64, actual: i64 },
    #[error("not found")]
    NotFound,
    #[error("fenced: the lease on this run is held by another owner")]
    Fenced,
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Stored data this build cannot read (written by a newer version): leave it to a
    /// build that can.
    #[error("unreadable data: {0}")]
    Unreadable(String),
    #[error("store error: {0}")]
    Other(String),
}

/// Errors a use case answers. Each variant has a stable public code in the API.
#[derive(Debug, Error)]
pub enum CoreError {
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    Invalid(String),
    #[error("the caller's role may not {0}")]
    Forbidden(&'static str),
    /// The credentials are missing, malformed, unknown, revoked or expired.
    #[error("{0}")]
    Unauthenticated(String),
    /// The credentials are good but may not act in the tenant the request names.
    #[error("{0}")]
    NoAccess(String),
    #[error("the run is busy with a turn; wait for it to finish or cancel it")]
    RunBusy,
    /// A message to enqueue on a run whose queue holds its agent's
    /// `limits.max_queued_messages` already.
    #[error(
        "the run's queue holds {0} messages, its agent's limits.max_queued_messages; wait for a turn to take one"
    )]
    QueueFull(u32),
    #[error("the run has ended ({0}) and accepts no more commands")]
    RunEnded(&'static str),
    #[error("request_id {0:?} was already used for a different request")]
    IdempotencyKeyReused(String),
    #[error("the run changed concurrently; retry the request")]
    Conflict,
    /// The resource is not in a state that allows the command (e.g. an approval that
    /// was already decided).
    #[error("{0}")]
    WrongState(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// A deletion of something a live run (or an agent in use) still uses.
    #[error("{0}")]
    InUse(String),
    /// An outbound URL the egress policy refuses: the field and the rule, never an
    /// address a name resolved to.
    #[error("{0}")]
    EgressDenied(String),
    /// A server the tenant named (an MCP server being discovered) did not answer as it
    /// should: what went wrong in a few words, never an address or a secret.
    #[error("{0}")]
    Upstream(String),
    /// A path a tenant named (a workspace file's) that is not a plain relative path.
    #[error("{0}")]
    InvalidPath(String),
    /// One upload larger than the installation takes.
    #[error("{0}")]
    TooLarge(String),
    /// A write that would take the run's or the tenant's storage past its quota.
    #[error("{0}")]
    QuotaExceeded(String),
    /// A conditional request (`If-Match`, `If-None-Match`) whose condition does not hold.
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("service unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for CoreError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict { .. } | StoreError::Fenced => CoreError::Conflict,
            StoreError::NotFound => CoreError::NotFound("resource"),
            StoreError::Unavailable(m) => CoreError::Unavailable(m),
            StoreError::Unreadable(m) => CoreError::Internal(m),
            StoreError::Other(m) => CoreError::Internal(m),
        }
    }
}

impl CoreError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        CoreError::Invalid(msg.into())
    }
}
