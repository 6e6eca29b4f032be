//! Reading a tenant's audit stream (admins). The entries are written by the store in the
//! same transaction as the change each records ([`crate::model::AuditEntry`]).

use crate::error::CoreError;
use crate::model::{Action, AuditAction, AuditEntry, Principal};
use crate::page::{self, Page};
use crate::ports::{AuditQuery, AuditStore};
use std::sync::Arc;
use uuid::Uuid;

/// Reading the tenant's audit stream (admins).
#[derive(Clone)]
pub struct Audit {
    pub store: Arc<dyn AuditStore>,
}

impl Audit {
    /// The caller's tenant's entries, newest first, of one action when given.
    #[tracing::instrument(name = "audit.list", skip_all)]
    pub async fn list(
        &self,
        p: &Principal,
        before: Option<Uuid>,
        action: Option<AuditAction>,
        limit: Option<u32>,
    ) -> Result<Page<AuditEntry>, CoreError> {
        p.require(Action::ReadAudit)?;
        let limit = page::limit(limit)?;
        let query = AuditQuery {
            before,
            action,
            limit,
        };
        let items = self.store.list_audit(p.tenant, &query).await?;
        Ok(Page::of(items, limit, |e| e.id.to_string()))
    }
}
