//! Webhooks: a tenant's admins register endpoints subscribed to event types; what
//! happens to the tenant's runs and schedules reaches them as signed POSTs (Standard
//! Webhooks, `sign.rs`), each event at least once.
//!
//! **Recorded with its cause.** A delivery is a row written in the transaction of the
//! change that causes it (the append of `run.completed`, the schedule's pause), one per
//! enabled endpoint subscribed to its type at that moment: a committed event is never
//! missed and a rolled-back one never delivered. **Attempted by one replica at a time.**
//! Every replica runs the deliverer (`deliver.rs`): it leases due deliveries, POSTs
//! them through the egress transport, and records each attempt with the lease; a replica
//! killed mid-attempt leaves its lease to expire, and another attempts the delivery
//! again with the same `webhook-id`. Failed attempts are retried with exponential
//! backoff and jitter for a bounded period, then the delivery is `failed`; an endpoint
//! failing too many attempts in a row is disabled with the reason.

mod deliver;
pub mod sign;

pub use deliver::Round;

use crate::crypto::{Aad, Keyring};
use crate::egress_allowlists::EgressAllowlists;
use crate::error::CoreError;
use crate::model::{
    Action, Attempt, AuditAction, AuditEntry, Delivery, DeliveryState, Principal, Webhook,
    WebhookEvent, WebhookSecrets, WebhookSpec, WebhookState,
};
use crate::page::{self, Page};
use crate::ports::{Clock, WebhookStore, WebhookTransport};
use crate::validate;
use baton_events::WebhookId;
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 500;
/// The longest a rotated-out secret keeps signing.
pub const MAX_OVERLAP: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most endpoints one tenant may have.
pub const MAX_ENDPOINTS: u32 = 20;
/// How often a change re-reads and retries after losing a version race.
const MAX_ATTEMPTS: usize = 5;
/// How long a rotated-out secret keeps signing when the rotation does not say.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// How deliveries are attempted.
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    /// The longest the deliverer waits before looking for due deliveries again.
    pub poll: Duration,
    /// Most deliveries one replica leases at a time.
    pub batch: u32,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// The pause after the first failed attempt; it doubles with each (with jitter).
    pub retry_base: Duration,
    /// The longest pause between attempts.
    pub retry_max: Duration,
    /// How long after its event a delivery is retried before it is `failed`.
    pub retry_for: Duration,
    /// Failed attempts in a row (across an endpoint's deliveries) that disable it.
    pub disable_after: u32,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            poll: Duration::from_secs(2),
            batch: 32,
            timeout: Duration::from_secs(10),
            retry_base: Duration::from_secs(5),
            retry_max: Duration::from_secs(3600),
            retry_for: Duration::from_secs(24 * 3600),
            disable_after: 100,
        }
    }
}

/// A new endpoint, with its secret shown this once.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CreatedWebhook {
    pub webhook: Webhook,
    /// The signing secret (`whsec_…`): give it to the receiver's Standard Webhooks
    /// library. Shown this once; a rotation makes a new one.
    pub secret: String,
}

/// A rotation of an endpoint's secret.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// How long the old secret keeps signing deliveries beside the new one, 0 to 604800
    /// seconds (default 86400): receivers switch to the new secret within it.
    pub overlap_secs: Option<u64>,
}

/// A delivery with its attempts.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DeliveryDetail {
    pub delivery: Delivery,
    pub attempts: Vec<Attempt>,
}

/// The webhook use cases and the deliverer.
#[derive(Clone)]
pub struct Webhooks {
    pub store: Arc<dyn WebhookStore>,
    pub keyring: Arc<Keyring>,
    /// The egress policy and the tenants' allowlists: an endpoint's URL is checked when
    /// it is set and at every attempt.
    pub egress: EgressAllowlists,
    pub transport: Arc<dyn WebhookTransport>,
    pub clock: Arc<dyn Clock>,
    /// This replica: the owner of the deliveries it leases.
    pub replica: String,
    pub options: WebhookOptions,
}

impl Webhooks {
    /// Registers an endpoint (admin), with a new secret shown this once.
    #[tracing::instrument(name = "webhooks.create", skip_all)]
    pub async fn create(
        &self,
        p: &Principal,
        spec: WebhookSpec,
    ) -> Result<CreatedWebhook, CoreError> {
        p.require(Action::ManageWebhooks)?;
        let spec = self.check(p, spec).await?;
        let existing = self
            .store
            .list_webhooks(p.tenant, None, MAX_ENDPOINTS)
            .await?;
        if existing.len() >= MAX_ENDPOINTS as usize {
            return Err(CoreError::invalid(format!(
                "the tenant has {MAX_ENDPOINTS} webhook endpoints, the most it may have; \
                 delete one first"
            )));
        }
        let now = self.clock.now();
        let id = WebhookId::new();
        let secret = sign::new_secret();
        let webhook = Webhook {
            id,
            tenant: p.tenant,
            spec,
            state: WebhookState::Enabled,
            disabled_reason: None,
            consecutive_failures: 0,
            previous_secret_expires_at: None,
            secrets: WebhookSecrets {
                current: self.seal(&webhook_aad(p, id), &secret)?,
                previous: None,
            },
            version: 1,
            created_at: now,
            updated_at: now,
        };
        let audit = audit(p, now, AuditAction::WebhookCreated, &webhook);
        self.store.create_webhook(&webhook, &audit).await?;
        Ok(CreatedWebhook {
            webhook,
            secret: sign::show(&secret),
        })
    }

    /// One endpoint (admin).
    #[tracing::instrument(name = "webhooks.get", skip_all)]
    pub async fn get(&self, p: &Principal, id: WebhookId) -> Result<Webhook, CoreError> {
        p.require(Action::ManageWebhooks)?;
        self.load(p, id).await
    }

    /// A page of the tenant's endpoints, newest first (admin).
    #[tracing::instrument(name = "webhooks.list", skip_all)]
    pub async fn list(
        &self,
        p: &Principal,
        cursor: Option<WebhookId>,
        limit: Option<u32>,
    ) -> Result<Page<Webhook>, CoreError> {
        p.require(Action::ManageWebhooks)?;
        let limit = page::limit(limit)?;
        let items = self.store.list_webhooks(p.tenant, cursor, limit).await?;
        Ok(Page::of(items, limit, |w| w.id.to_string()))
    }

    /// Replaces an endpoint's URL, description and events (admin); its secret stays.
    #[tracing::instrument(name = "webhooks.update", skip_all)]
    pub async fn update(
        &self,
        p: &Principal,
        id: WebhookId,
        spec: WebhookSpec,
    ) -> Result<Webhook, CoreError> {
        p.require(Action::ManageWebhooks)?;
        let spec = self.check(p, spec).await?;
        self.change(p, id, AuditAction::WebhookUpdated, |w, _| {
            w.spec = spec.clone();
            Ok(())
        })
        .await
    }

    /// Enables an endpoint again (admin), its failures forgotten.
    #[tracing::instrument(name = "webhooks.enable", skip_all)]
    pub async fn enable(&self, p: &Principal, id: WebhookId) -> Result<Webhook, CoreError> {
        p.require(Action::ManageWebhooks)?;
        self.change(p, id, AuditAction::WebhookEnabled, |w, _| {
            w.state = WebhookState::Enabled;
            w.disabled_reason = None;
            w.consecutive_failures = 0;
            Ok(())
        })
        .await
    }

    /// Makes a new secret (admin), shown this once; the old one keeps signing beside it
    /// for the overlap.
    #[tracing::instrument(name = "webhooks.rotate_secret", skip_all)]
    pub async fn rotate_secret(
        &self,
        p: &Principal,
        id: WebhookId,
        rotation: RotateSecret,
    ) -> Result<CreatedWebhook, CoreError> {
        p.require(Action::ManageWebhooks)?;
        let overlap = rotation
            .overlap_secs
            .map_or(DEFAULT_OVERLAP, Duration::from_secs);
        if overlap > MAX_OVERLAP {
            return Err(CoreError::invalid(format!(
                "overlap_secs must be between 0 and {}, got {}",
                MAX_OVERLAP.as_secs(),
                overlap.as_secs()
            )));
        }
        let secret = sign::new_secret();
        let sealed = self.seal(&webhook_aad(p, id), &secret)?;
        let webhook = self
            .change(p, id, AuditAction::WebhookSecretRotated, |w, now| {
                let old = std::mem::replace(&mut w.secrets.current, sealed.clone());
                let until = now + TimeDelta::from_std(overlap).unwrap_or(TimeDelta::zero());
                w.secrets.previous = (!overlap.is_zero()).then_some(old);
                w.previous_secret_expires_at = (!overlap.is_zero()).then_some(until);
                Ok(())
            })
            .await?;
        Ok(CreatedWebhook {
            webhook,
            secret: sign::show(&secret),
        })
    }

    /// Deletes an endpoint with its deliveries (admin).
    #[tracing::instrument(name = "webhooks.delete", skip_all)]
    pub async fn delete(&self, p: &Principal, id: WebhookId) -> Result<(), CoreError> {
        p.require(Action::ManageWebhooks)?;
        let w = self.load(p, id).await?;
        let audit = audit(p, self.clock.now(), AuditAction::WebhookDeleted, &w);
        if !self.store.delete_webhook(p.tenant, id, &audit).await? {
            return Err(CoreError::NotFound("webhook"));
        }
        Ok(())
    }

    /// A page of an endpoint's deliveries, newest first (admin).
    #[tracing::instrument(name = "webhooks.list_deliveries", skip_all)]
    pub async fn list_deliveries(
        &self,
        p: &Principal,
        id: WebhookId,
        state: Option<DeliveryState>,
        cursor: Option<uuid::Uuid>,
        limit: Option<u32>,
    ) -> Result<Page<Delivery>, CoreError> {
        p.require(Action::ManageWebhooks)?;
        let limit = page::limit(limit)?;
        self.load(p, id).await?;
        let items = self
            .store
            .list_deliveries(p.tenant, id, state, cursor, limit)
            .await?;
        Ok(Page::of(items, limit, |d| d.id.to_string()))
    }

    /// One delivery with its attempts (admin).
    #[tracing::instrument(name = "webhooks.get_delivery", skip_all)]
    pub async fn get_delivery(
        &self,
        p: &Principal,
        id: WebhookId,
        delivery: uuid::Uuid,
    ) -> Result<DeliveryDetail, CoreError> {
        p.require(Action::ManageWebhooks)?;
        let (delivery, attempts) = self
            .store
            .get_delivery(p.tenant, id, delivery)
            .await?
            .ok_or(CoreError::NotFound("delivery"))?;
        Ok(DeliveryDetail { delivery, attempts })
    }

    /// Delivers again (admin): the delivery is pending and due now, with the same
    /// `webhook-id`, whatever its state was.
    #[tracing::instrument(name = "webhooks.replay", skip_all)]
    pub async fn replay(
        &self,
        p: &Principal,
        id: WebhookId,
        delivery: uuid::Uuid,
    ) -> Result<DeliveryDetail, CoreError> {
        p.require(Action::ManageWebhooks)?;
        let now = self.clock.now();
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::WebhookReplayed,
            id.to_string(),
            json!({"delivery": delivery}),
        );
        if !self
            .store
            .replay_delivery(p.tenant, id, delivery, now, &audit)
            .await?
        {
            return Err(CoreError::NotFound("delivery"));
        }
        self.get_delivery(p, id, delivery).await
    }

    async fn load(&self, p: &Principal, id: WebhookId) -> Result<Webhook, CoreError> {
        self.store
            .get_webhook(p.tenant, id)
            .await?
            .ok_or(CoreError::NotFound("webhook"))
    }

    /// Applies `edit` (given the time) to the stored endpoint and writes it with its
    /// audit entry, again from a fresh read when a delivery's outcome won the race.
    async fn change(
        &self,
        p: &Principal,
        id: WebhookId,
        action: AuditAction,
        edit: impl Fn(&mut Webhook, DateTime<Utc>) -> Result<(), CoreError>,
    ) -> Result<Webhook, CoreError> {
        for _ in 0..MAX_ATTEMPTS {
            let current = self.load(p, id).await?;
            let now = self.clock.now();
            let mut w = current.clone();
            edit(&mut w, now)?;
            w.version = current.version + 1;
            w.updated_at = now;
            let audit = audit(p, now, action, &w);
            if self
                .store
                .update_webhook(&w, current.version, &audit)
                .await?
            {
                return Ok(w);
            }
        }
        Err(CoreError::Conflict)
    }

    /// A definition's URL (under the egress policy and the tenant's allowlist), its
    /// description and its events (at least one, each once, sorted).
    async fn check(&self, p: &Principal, mut spec: WebhookSpec) -> Result<WebhookSpec, CoreError> {
        let url = validate::http_url("url", &spec.url)?;
        self.egress.check_definition(p.tenant, "url", &url).await?;
        if let Some(d) = &spec.description {
            validate::text("description", d, MAX_DESCRIPTION_CHARS)?;
        }
        if spec.events.is_empty() {
            return Err(CoreError::invalid(format!(
                "events must name at least one of {}",
                WebhookEvent::ALL.map(|e| e.as_str()).join(", ")
            )));
        }
        spec.events.sort_unstable();
        if let Some(w) = spec.events.windows(2).find(|w| w[0] == w[1]) {
            return Err(CoreError::invalid(format!(
                "events lists {} twice",
                w[0].as_str()
            )));
        }
        Ok(spec)
    }

    fn seal(&self, aad: &Aad, secret: &[u8]) -> Result<Vec<u8>, CoreError> {
        self.keyring
            .seal(aad, secret)
            .map(|s| s.bytes)
            .map_err(|e| CoreError::Internal(format!("sealing a webhook secret: {e}")))
    }
}

fn webhook_aad(p: &Principal, id: WebhookId) -> Aad {
    Aad::webhook_secret(p.tenant, id)
}

fn audit(p: &Principal, at: DateTime<Utc>, action: AuditAction, w: &Webhook) -> AuditEntry {
    AuditEntry::by(
        p,
        at,
        action,
        w.id.to_string(),
        json!({"url": w.spec.url, "version": w.version, "state": w.state.as_str()}),
    )
}
