//! `StatsStore`: counts across every tenant (scope `all`) on the `app` pool, as a request
//! would read (never the `control` pool, where a scrape could delay a lease renewal).

use super::Result;
use crate::backend::Backend;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::runs::{CountRow, StatusCountRow};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::RunStatus;
use baton_core::ports::StatsStore;

/// Runs by status, final statuses left out (the predicate of `runs_active_by_status`).
const ACTIVE_RUNS: &str = "SELECT status, COUNT(*) AS n FROM runs \
     WHERE status NOT IN ('completed', 'failed', 'cancelled') GROUP BY status";

/// Receipts held uncertain (the predicate of `receipts_uncertain`).
const UNCERTAIN: &str = "SELECT COUNT(*) AS n FROM receipts WHERE state = 'uncertain'";

#[async_trait]
impl<B: Backend> StatsStore for Store<B> {
    #[tracing::instrument(name = "store.active_runs_by_status", skip_all)]
    async fn active_runs_by_status(&self) -> Result<Vec<(RunStatus, u64)>> {
        let q = Query::new(ACTIVE_RUNS);
        self.read_all::<StatusCountRow, _>(PoolKind::App, Scope::CrossTenant, q)
            .await
    }

    #[tracing::instrument(name = "store.uncertain_receipts", skip_all)]
    async fn uncertain_receipts(&self) -> Result<u64> {
        let q = Query::new(UNCERTAIN);
        let n = self
            .read_optional::<CountRow, u64>(PoolKind::App, Scope::CrossTenant, q)
            .await?;
        Ok(n.unwrap_or(0))
    }
}
