//! Installation-wide counts, for operators' metrics.

use crate::error::StoreError;
use crate::model::RunStatus;
use async_trait::async_trait;

/// Counts over every tenant for `/metrics`: never broken down by tenant, never handed to
/// a tenant.
#[async_trait]
pub trait StatsStore: Send + Sync {
    /// How many runs are in each status that is not final; statuses without runs are
    /// left out.
    async fn active_runs_by_status(&self) -> Result<Vec<(RunStatus, u64)>, StoreError>;

    /// How many tool calls are held `uncertain`, waiting for a member's decision.
    async fn uncertain_receipts(&self) -> Result<u64, StoreError>;
}
