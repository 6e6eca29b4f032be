//! Listing a run's checkpoints: metadata only, never their contents.

use crate::error::CoreError;
use crate::model::CheckpointMeta;
use crate::model::{Action, Principal};
use crate::ports::{CheckpointStore, RunReader};
use baton_events::RunId;
use std::sync::Arc;

#[derive(Clone)]
pub struct Checkpoints {
    pub store: Arc<dyn CheckpointStore>,
    pub runs: Arc<dyn RunReader>,
}

impl Checkpoints {
    /// The run's checkpoints, oldest first.
    pub async fn list(&self, p: &Principal, run: RunId) -> Result<Vec<CheckpointMeta>, CoreError> {
        p.require(Action::ReadRuns)?;
        if self.runs.get_run(p.tenant, run).await?.is_none() {
            return Err(CoreError::NotFound("run"));
        }
        Ok(self.store.list_checkpoints(p.tenant, run).await?)
    }
}
