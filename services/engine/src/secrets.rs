//! Tenant secrets in the clear for a step: a secret that is missing or cannot be read
//! fails the turn, naming what needed it; a store that is unavailable is retried.

use crate::outcome::{StepError, info};
use baton_core::ports::SecretReader;
use baton_core::{StoreError, TenantId};

/// Why the turn fails when a secret it needs is not set.
const SECRET_MISSING: &str = "secret_missing";

/// The tenant's secret `name` in the clear; `what` says what needs it.
pub(crate) async fn reveal(
    secrets: &dyn SecretReader,
    tenant: TenantId,
    name: &str,
    what: &str,
) -> Result<String, StepError> {
    match secrets.reveal(tenant, name).await {
        Ok(Some(value)) => Ok(value),
        Ok(None) => Err(StepError::Turn(info(
            SECRET_MISSING,
            format!("{what} is not set"),
        ))),
        Err(StoreError::Unavailable(m)) => Err(StoreError::Unavailable(m).into()),
        Err(e) => Err(StepError::Turn(info(
            "secret_unreadable",
            format!("{what} cannot be read: {e}"),
        ))),
    }
}
