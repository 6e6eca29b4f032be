//! Webhooks: the tenants' endpoints, their deliveries and attempts (recorded with the
//! changes that cause them: see `WebhookMessage`), leased to one replica at a time to
//! attempt; and the transport that POSTs them.

use crate::egress::HostRule;
use crate::error::StoreError;
use crate::model::{Attempt, AuditEntry, Delivery, DeliveryState, Webhook};
use async_trait::async_trait;
use baton_events::{TenantId, WebhookId};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// What an attempt tells of its endpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum EndpointOutcome {
    /// A 2xx answer: its run of failures ends.
    Succeeded,
    /// No 2xx answer: one more failure in a row; at `disable_after` in a row the endpoint
    /// is disabled with `reason`, audited with `audit`.
    Failed {
        disable_after: u32,
        reason: String,
        audit: AuditEntry,
    },
}

#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// Stores a new endpoint and its subscriptions, with its audit entry.
    async fn create_webhook(&self, w: &Webhook, audit: &AuditEntry) -> Result<(), StoreError>;

    /// One of the tenant's endpoints; another tenant's is `None`.
    async fn get_webhook(
        &self,
        tenant: TenantId,
        id: WebhookId,
    ) -> Result<Option<Webhook>, StoreError>;

    /// The tenant's endpoints, newest first, older than `before` when given.
    async fn list_webhooks(
        &self,
        tenant: TenantId,
        before: Option<WebhookId>,
        limit: u32,
    ) -> Result<Vec<Webhook>, StoreError>;

    /// Replaces the endpoint (and its subscriptions) by `w`, whose `version` is the new
    /// one, if its stored version is still `expected`, with its audit entry; `false` when
    /// it moved or is gone. Its count of failures in a row is the deliverer's: written
    /// only to reset it (`w` enabled with none).
    async fn update_webhook(
        &self,
        w: &Webhook,
        expected: i64,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    /// Deletes the endpoint with its subscriptions, deliveries and attempts; `false` when
    /// there was none.
    async fn delete_webhook(
        &self,
        tenant: TenantId,
        id: WebhookId,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    /// The endpoint's deliveries, newest first, in `state` when given, older than
    /// `before` (a delivery id) when given.
    async fn list_deliveries(
        &self,
        tenant: TenantId,
        webhook: WebhookId,
        state: Option<DeliveryState>,
        before: Option<uuid::Uuid>,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError>;

    /// One delivery with its attempts, oldest first.
    async fn get_delivery(
        &self,
        tenant: TenantId,
        webhook: WebhookId,
        id: uuid::Uuid,
    ) -> Result<Option<(Delivery, Vec<Attempt>)>, StoreError>;

    /// Makes a delivery pending again, due at `at` (its attempts stay), with its audit
    /// entry; `false` when there is none.
    async fn replay_delivery(
        &self,
        tenant: TenantId,
        webhook: WebhookId,
        id: uuid::Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    /// Across tenants, soonest first: up to `limit` pending deliveries due at `now` and
    /// held by no live lease, leased to `owner` until `until`.
    async fn claim_deliveries(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError>;

    /// Records `attempt` of the delivery `owner` holds, its new state (`d`: state,
    /// attempts, next attempt, last status and error) with the lease released, and what
    /// it tells of the endpoint, in one transaction; `false` (nothing written) when the
    /// lease was lost.
    async fn finish_delivery(
        &self,
        d: &Delivery,
        attempt: &Attempt,
        owner: &str,
        endpoint: Option<&EndpointOutcome>,
    ) -> Result<bool, StoreError>;
}

/// The answer to a POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostAnswer {
    pub status: u16,
    /// The start of the body: at most 200 characters, control characters and the
    /// masked values replaced.
    pub excerpt: String,
}

/// POSTs deliveries, under the egress policy.
#[async_trait]
pub trait WebhookTransport: Send + Sync {
    /// POSTs `body` as JSON to `url` with `headers`, under the installation's egress
    /// policy narrowed by `hosts`, within `timeout`; the answer, or in a few words why
    /// there was none (never an address). `mask` values never appear in the excerpt.
    async fn post(
        &self,
        hosts: Vec<HostRule>,
        url: &url::Url,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
        timeout: Duration,
        mask: &[String],
    ) -> Result<PostAnswer, String>;
}
