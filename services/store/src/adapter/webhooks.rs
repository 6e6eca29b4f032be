//! `WebhookStore`: endpoints in `webhooks` with their subscriptions in
//! `webhook_subscriptions`; deliveries in `webhook_deliveries`, inserted by [`enqueue`] in
//! the transaction of the change that causes them (the append, a schedule's pause), and
//! their attempts in `webhook_attempts`. The deliverer's lease of due deliveries is
//! cross-tenant (`Scope::CrossTenant`, skipping rows another replica is claiming on
//! Postgres); recording an attempt is the tenant's, fenced by the lease's owner.

use super::Result;
use super::audit::insert_entry;
use super::reads::commit;
use crate::backend::Backend;
use crate::plan::{AppendPlan, micros};
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::to_json;
use crate::rows::webhooks::{
    AttemptRow, DeliveryRow, WebhookRow, attempt_columns, delivery_columns, webhook_columns,
};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::{
    Attempt, AuditEntry, Delivery, DeliveryState, Webhook, WebhookEvent, WebhookMessage,
    WebhookState,
};
use baton_core::ports::{EndpointOutcome, WebhookStore};
use baton_events::{TenantId, WebhookId};
use chrono::{DateTime, Utc};
use sqlx::Transaction;
use sqlx::types::Json;
use uuid::Uuid;

/// An endpoint's row, by tenant and id (bound by the caller).
const WEBHOOK: &str = concat!("SELECT ", webhook_columns!(), " FROM webhooks");

/// The deliveries of the tenant's endpoint (`$1`, `$2`), to narrow further.
const DELIVERIES: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    " FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2"
);

fn deliveries_of<B: Backend>(tenant: TenantId, webhook: WebhookId) -> Query<B> {
    Query::new(DELIVERIES)
        .bind(tenant.as_uuid())
        .bind(webhook.as_uuid())
}

const ATTEMPTS: &str = concat!(
    "SELECT ",
    attempt_columns!(),
    " FROM webhook_attempts WHERE tenant_id = $1 AND webhook_id = $2 AND delivery_id = $3 \
     ORDER BY attempt"
);

/// Records `m` for delivery to each enabled endpoint of `tenant` subscribed to its type,
/// on `tx`, the transaction of the change that causes it, due at once.
pub(crate) async fn enqueue<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    m: &WebhookMessage,
    at: DateTime<Utc>,
) -> Result<u64> {
    Query::new(
        "INSERT INTO webhook_deliveries (tenant_id, webhook_id, id, event_type, run_id, \
         payload, state, attempts, next_attempt_ms, created_at, updated_at) \
         SELECT s.tenant_id, s.webhook_id, $2, $3, $4, $5, 'pending', 0, $6, $7, $7 \
         FROM webhook_subscriptions s JOIN webhooks w \
           ON w.tenant_id = s.tenant_id AND w.id = s.webhook_id \
         WHERE s.tenant_id = $1 AND s.event_type = $3 AND w.state = 'enabled'",
    )
    .bind(tenant.as_uuid())
    .bind(m.id)
    .bind(m.event_type.as_str())
    .bind(m.run_id.map(|r| r.as_uuid()))
    .bind(Json(&m.payload))
    .bind(at.timestamp_millis())
    .bind(micros(at))
    .execute(tx)
    .await
}

fn secret_expiry(w: &Webhook) -> Option<DateTime<Utc>> {
    w.previous_secret_expires_at.map(micros)
}

/// Writes the endpoint's subscriptions anew on `tx`.
async fn subscribe<B: Backend>(tx: &mut Transaction<'static, B>, w: &Webhook) -> Result<()> {
    Query::new("DELETE FROM webhook_subscriptions WHERE tenant_id = $1 AND webhook_id = $2")
        .bind(w.tenant.as_uuid())
        .bind(w.id.as_uuid())
        .execute(&mut *tx)
        .await?;
    for e in &w.spec.events {
        Query::new(
            "INSERT INTO webhook_subscriptions (tenant_id, event_type, webhook_id) \
             VALUES ($1, $2, $3)",
        )
        .bind(w.tenant.as_uuid())
        .bind(e.as_str())
        .bind(w.id.as_uuid())
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

fn i64_of(n: u32) -> i64 {
    i64::from(n)
}

#[async_trait]
impl<B: Backend> WebhookStore for Store<B> {
    #[tracing::instrument(name = "store.create_webhook", skip_all)]
    async fn create_webhook(&self, w: &Webhook, audit: &AuditEntry) -> Result<()> {
        let spec = to_json("a webhook", &w.spec)?;
        let mut change = self.audited(w.tenant, audit).await?;
        Query::new(
            "INSERT INTO webhooks (tenant_id, id, spec, state, disabled_reason, \
             consecutive_failures, secret, previous_secret, previous_secret_expires_at, \
             version, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(w.tenant.as_uuid())
        .bind(w.id.as_uuid())
        .bind(Json(spec))
        .bind(w.state.as_str())
        .bind(w.disabled_reason.clone())
        .bind(i64_of(w.consecutive_failures))
        .bind(w.secrets.current.clone())
        .bind(w.secrets.previous.clone())
        .bind(secret_expiry(w))
        .bind(w.version)
        .bind(micros(w.created_at))
        .bind(micros(w.updated_at))
        .execute(&mut change.tx)
        .await?;
        subscribe(&mut change.tx, w).await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.get_webhook", skip_all)]
    async fn get_webhook(&self, tenant: TenantId, id: WebhookId) -> Result<Option<Webhook>> {
        self.one_by_id::<WebhookRow, _>(tenant, WEBHOOK, id.as_uuid())
            .await
    }

    #[tracing::instrument(name = "store.list_webhooks", skip_all)]
    async fn list_webhooks(
        &self,
        tenant: TenantId,
        before: Option<WebhookId>,
        limit: u32,
    ) -> Result<Vec<Webhook>> {
        self.newest_first::<WebhookRow, _>(
            tenant,
            WEBHOOK,
            None,
            "",
            before.map(|b| b.as_uuid()),
            limit,
        )
        .await
    }

    #[tracing::instrument(name = "store.update_webhook", skip_all)]
    async fn update_webhook(&self, w: &Webhook, expected: i64, audit: &AuditEntry) -> Result<bool> {
        let spec = to_json("a webhook", &w.spec)?;
        let mut change = self.audited(w.tenant, audit).await?;
        let changed = Query::new(
            "UPDATE webhooks SET spec = $1, state = $2, disabled_reason = $3, \
             consecutive_failures = CASE WHEN $4 THEN 0 ELSE consecutive_failures END, \
             secret = $5, previous_secret = $6, \
             previous_secret_expires_at = $7, version = $8, updated_at = $9 \
             WHERE tenant_id = $10 AND id = $11 AND version = $12",
        )
        .bind(Json(spec))
        .bind(w.state.as_str())
        .bind(w.disabled_reason.clone())
        // The deliverer counts failures without a version: a change writes the count
        // only to reset it (an enable), never a count it read earlier.
        .bind(w.consecutive_failures == 0 && w.state == WebhookState::Enabled)
        .bind(w.secrets.current.clone())
        .bind(w.secrets.previous.clone())
        .bind(secret_expiry(w))
        .bind(w.version)
        .bind(micros(w.updated_at))
        .bind(w.tenant.as_uuid())
        .bind(w.id.as_uuid())
        .bind(expected)
        .execute(&mut change.tx)
        .await?;
        if changed != 1 {
            change.rollback().await;
            return Ok(false);
        }
        subscribe(&mut change.tx, w).await?;
        change.commit().await?;
        Ok(true)
    }

    #[tracing::instrument(name = "store.delete_webhook", skip_all)]
    async fn delete_webhook(
        &self,
        tenant: TenantId,
        id: WebhookId,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        for table in [
            "DELETE FROM webhook_attempts WHERE tenant_id = $1 AND webhook_id = $2",
            "DELETE FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2",
            "DELETE FROM webhook_subscriptions WHERE tenant_id = $1 AND webhook_id = $2",
        ] {
            Query::new(table)
                .bind(tenant.as_uuid())
                .bind(id.as_uuid())
                .execute(&mut change.tx)
                .await?;
        }
        let changed = Query::new("DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_uuid())
            .bind(id.as_uuid())
            .execute(&mut change.tx)
            .await?;
        change.commit_if(changed == 1).await?;
        Ok(changed == 1)
    }

    #[tracing::instrument(name = "store.list_deliveries", skip_all)]
    async fn list_deliveries(
        &self,
        tenant: TenantId,
        webhook: WebhookId,
        state: Option<DeliveryState>,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Delivery>> {
        let mut q = deliveries_of::<B>(tenant, webhook);
        if let Some(state) = state {
            q.push(" AND state = ").push_bind(state.as_str());
        }
        if let Some(before) = before {
            q.push(" AND id < ").push_bind(before);
        }
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit));
        self.tenant_rows::<DeliveryRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.get_delivery", skip_all)]
    async fn get_delivery(
        &self,
        tenant: TenantId,
        webhook: WebhookId,
        id: Uuid,
    ) -> Result<Option<(Delivery, Vec<Attempt>)>> {
        let mut q = deliveries_of::<B>(tenant, webhook);
        q.push(" AND id = ").push_bind(id);
        let Some(delivery) = self.tenant_row::<DeliveryRow, Delivery>(tenant, q).await? else {
            return Ok(None);
        };
        let attempts = Query::new(ATTEMPTS)
            .bind(tenant.as_uuid())
            .bind(webhook.as_uuid())
            .bind(id);
        let attempts = self
            .tenant_rows::<AttemptRow, Attempt>(tenant, attempts)
            .await?;
        Ok(Some((delivery, attempts)))
    }

    #[tracing::instrument(name = "store.replay_delivery", skip_all)]
    async fn replay_delivery(
        &self,
        tenant: TenantId,
        webhook: WebhookId,
        id: Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        let changed = Query::new(
            "UPDATE webhook_deliveries SET state = 'pending', next_attempt_ms = $1, \
             lease_owner = NULL, lease_expires_ms = NULL, updated_at = $2 \
             WHERE tenant_id = $3 AND webhook_id = $4 AND id = $5",
        )
        .bind(at.timestamp_millis())
        .bind(micros(at))
        .bind(tenant.as_uuid())
        .bind(webhook.as_uuid())
        .bind(id)
        .execute(&mut change.tx)
        .await?;
        change.commit_if(changed == 1).await?;
        Ok(changed == 1)
    }

    #[tracing::instrument(name = "store.claim_deliveries", skip_all)]
    async fn claim_deliveries(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Delivery>> {
        let mut tx = self.pools.write(PoolKind::App, Scope::CrossTenant).await?;
        let mut q = Query::new(
            "UPDATE webhook_deliveries SET lease_owner = $1, lease_expires_ms = $2 \
             WHERE (tenant_id, webhook_id, id) IN (\
               SELECT tenant_id, webhook_id, id FROM webhook_deliveries \
               WHERE state = 'pending' AND next_attempt_ms <= $3 \
                 AND (lease_owner IS NULL OR lease_expires_ms < $3) \
               ORDER BY next_attempt_ms LIMIT $4",
        )
        .bind(owner)
        .bind(until.timestamp_millis())
        .bind(now.timestamp_millis())
        .bind(i64::from(limit));
        q.push(B::SKIP_LOCKED)
            .push(concat!(") RETURNING ", delivery_columns!()));
        let rows: Vec<DeliveryRow> = q.fetch_all(&mut tx).await?;
        commit(tx).await?;
        // A delivery this build cannot read (a newer build's event type) stays leased
        // until its lease lapses, and the others are attempted.
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                Delivery::try_from(r)
                    .inspect_err(|e| tracing::warn!(error = %e, "a due delivery is unreadable"))
                    .ok()
            })
            .collect())
    }

    #[tracing::instrument(name = "store.finish_delivery", skip_all)]
    async fn finish_delivery(
        &self,
        d: &Delivery,
        attempt: &Attempt,
        owner: &str,
        endpoint: Option<&EndpointOutcome>,
    ) -> Result<bool> {
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(d.tenant))
            .await?;
        let (tenant, webhook) = (d.tenant.as_uuid(), d.webhook_id.as_uuid());
        let changed = Query::new(
            "UPDATE webhook_deliveries SET state = $1, attempts = $2, next_attempt_ms = $3, \
             last_status = $4, last_error = $5, updated_at = $6, lease_owner = NULL, \
             lease_expires_ms = NULL \
             WHERE tenant_id = $7 AND webhook_id = $8 AND id = $9 AND lease_owner = $10",
        )
        .bind(d.state.as_str())
        .bind(i64_of(d.attempts))
        .bind(d.next_attempt_at.map(|t| t.timestamp_millis()))
        .bind(d.last_status.map(i64::from))
        .bind(d.last_error.clone())
        .bind(micros(d.updated_at))
        .bind(tenant)
        .bind(webhook)
        .bind(d.id)
        .bind(owner)
        .execute(&mut tx)
        .await?;
        if changed != 1 {
            let _ = tx.rollback().await;
            return Ok(false);
        }
        Query::new(
            "INSERT INTO webhook_attempts (tenant_id, webhook_id, delivery_id, attempt, at, \
             status, error, excerpt, duration_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(tenant)
        .bind(webhook)
        .bind(d.id)
        .bind(i64_of(attempt.attempt))
        .bind(micros(attempt.at))
        .bind(attempt.status.map(i64::from))
        .bind(attempt.error.clone())
        .bind(attempt.excerpt.clone())
        .bind(i64::try_from(attempt.duration_ms).unwrap_or(i64::MAX))
        .execute(&mut tx)
        .await?;
        match endpoint {
            None => {}
            Some(EndpointOutcome::Succeeded) => {
                Query::new(
                    "UPDATE webhooks SET consecutive_failures = 0 \
                     WHERE tenant_id = $1 AND id = $2 AND consecutive_failures <> 0",
                )
                .bind(tenant)
                .bind(webhook)
                .execute(&mut tx)
                .await?;
            }
            Some(EndpointOutcome::Failed {
                disable_after,
                reason,
                audit,
            }) => {
                let failures: Option<(i64,)> = Query::new(
                    "UPDATE webhooks SET consecutive_failures = consecutive_failures + 1 \
                     WHERE tenant_id = $1 AND id = $2 AND state = 'enabled' \
                     RETURNING consecutive_failures",
                )
                .bind(tenant)
                .bind(webhook)
                .fetch_optional(&mut tx)
                .await?;
                if failures.is_some_and(|(n,)| n >= i64::from(*disable_after)) {
                    Query::new(
                        "UPDATE webhooks SET state = $1, disabled_reason = $2, \
                         version = version + 1, updated_at = $3 \
                         WHERE tenant_id = $4 AND id = $5",
                    )
                    .bind(WebhookState::Disabled.as_str())
                    .bind(reason.clone())
                    .bind(micros(d.updated_at))
                    .bind(tenant)
                    .bind(webhook)
                    .execute(&mut tx)
                    .await?;
                    insert_entry(&mut tx, d.tenant, audit).await?;
                }
            }
        }
        commit(tx).await?;
        Ok(true)
    }
}

/// The webhook events the planned events are (`WebhookEvent::of_run_event`), each with
/// the index of its event in the plan. Most appends have none.
pub(crate) fn run_event_kinds(plan: &AppendPlan) -> Vec<(usize, WebhookEvent)> {
    plan.events
        .iter()
        .enumerate()
        .flat_map(|(i, e)| {
            WebhookEvent::of_run_event(e.event_type, &e.data)
                .iter()
                .map(move |kind| (i, *kind))
        })
        .collect()
}

/// Appends ` RETURNING` whether `tenant` has an enabled endpoint subscribed to any of
/// `kinds` to `q`, a statement of the append's transaction: when none is, the append
/// skips [`enqueue_run_events`] and its statement.
pub(crate) fn return_subscribed<B: Backend>(
    q: &mut Query<B>,
    tenant: TenantId,
    kinds: &[(usize, WebhookEvent)],
) {
    q.push(
        " RETURNING EXISTS (SELECT 1 FROM webhook_subscriptions s JOIN webhooks w \
         ON w.tenant_id = s.tenant_id AND w.id = s.webhook_id \
         WHERE w.state = 'enabled' AND s.tenant_id = ",
    )
    .push_bind(tenant.as_uuid())
    .push(" AND s.event_type IN (");
    for (n, (_, kind)) in kinds.iter().enumerate() {
        if n > 0 {
            q.push(", ");
        }
        q.push_bind(kind.as_str());
    }
    q.push("))");
}

/// Records, on the append's transaction, a delivery of each of `kinds` (from
/// [`run_event_kinds`]) to the endpoints subscribed to it.
pub(crate) async fn enqueue_run_events<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    plan: &AppendPlan,
    kinds: &[(usize, WebhookEvent)],
) -> Result<()> {
    for (i, kind) in kinds {
        let e = &plan.events[*i];
        let data = serde_json::json!({
            "run": &plan.summary,
            "event": {"id": e.id, "type": e.event_type, "version": e.version, "data": &e.data},
        });
        let m = WebhookMessage::new(Uuid::now_v7(), *kind, Some(plan.summary.id), plan.at, data);
        enqueue(tx, tenant, &m, plan.at).await?;
    }
    Ok(())
}
