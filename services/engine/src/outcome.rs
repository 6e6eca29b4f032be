//! How a driver's step ends: the loop goes on or idles ([`Next`]), or the step fails
//! ([`StepError`]) — the store, a lost lease, data this build cannot read, or the
//! turn's own failure, which the step records as `turn.failed`.

use baton_core::StoreError;
use baton_events::ErrorInfo;

/// What a step asks the loop to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    Continue,
    Idle,
}

/// Why a step did not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StepError {
    /// Another replica holds the run's lease now: the driver stops at once.
    #[error("fenced: the lease on this run is held by another owner")]
    Fenced,
    /// Data this build cannot read (a newer replica's agent or event): the run is
    /// parked under its lease.
    #[error("unreadable data: {0}")]
    Unreadable(String),
    /// Any other store failure: the step is tried again after a pause.
    #[error(transparent)]
    Store(StoreError),
    /// The turn fails with this error (a missing agent version or secret, a model
    /// error): recorded as `turn.failed`, never retried.
    #[error("the turn failed: {}: {}", .0.code, .0.message)]
    Turn(ErrorInfo),
}

impl From<StoreError> for StepError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Fenced => Self::Fenced,
            StoreError::Unreadable(reason) => Self::Unreadable(reason),
            e => Self::Store(e),
        }
    }
}

/// An [`ErrorInfo`] with a stable `code`.
pub(crate) fn info(code: &str, message: impl Into<String>) -> ErrorInfo {
    ErrorInfo {
        code: code.into(),
        message: message.into(),
    }
}
