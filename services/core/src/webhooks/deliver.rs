//! The deliverer, on every replica: leases due deliveries, POSTs each (signed, through
//! the egress transport), and records the attempt with its outcome under the lease.

use super::{Webhooks, sign};
use crate::crypto::Aad;
use crate::error::CoreError;
use crate::model::{
    Attempt, AuditAction, AuditEntry, Delivery, DeliveryState, Webhook, WebhookState,
};
use crate::ports::EndpointOutcome;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    /// Deliveries leased.
    pub claimed: u32,
    /// Attempts answered with a 2xx.
    pub delivered: u32,
    /// Attempts that failed.
    pub failed: u32,
}

/// How an attempt went.
enum Outcome {
    Delivered(u16),
    Failed { status: Option<u16>, error: String },
}

impl Webhooks {
    /// Leases the due deliveries (up to `batch`) and attempts each once, concurrently.
    #[tracing::instrument(name = "webhooks.round", skip_all)]
    pub async fn round(&self) -> Result<Round, CoreError> {
        let due = self.claim(self.options.batch).await?;
        let mut round = Round {
            claimed: u32::try_from(due.len()).unwrap_or(u32::MAX),
            ..Round::default()
        };
        let attempts = futures::future::join_all(due.into_iter().map(|d| self.attempt(d))).await;
        for a in attempts {
            match a {
                Ok(true) => round.delivered += 1,
                Ok(false) => round.failed += 1,
                Err(e) => {
                    round.failed += 1;
                    tracing::warn!(error = %e, "a webhook attempt could not be recorded");
                }
            }
        }
        Ok(round)
    }

    /// Leases up to `n` due deliveries to this replica, for two attempt timeouts and 5 s.
    async fn claim(&self, n: u32) -> Result<Vec<Delivery>, CoreError> {
        let now = self.clock.now();
        let lease = self.options.timeout * 2 + Duration::from_secs(5);
        let until = now + TimeDelta::from_std(lease).unwrap_or(TimeDelta::MAX);
        Ok(self
            .store
            .claim_deliveries(&self.replica, now, until, n)
            .await?)
    }

    /// Attempts `d` once and records the attempt; whether it was delivered.
    async fn attempt(&self, mut d: Delivery) -> Result<bool, CoreError> {
        let started = self.clock.now();
        let clock = std::time::Instant::now();
        let Some(webhook) = self.store.get_webhook(d.tenant, d.webhook_id).await? else {
            return Ok(false);
        };
        let (outcome, excerpt) = if webhook.state == WebhookState::Disabled {
            let why = "the endpoint is disabled".to_string();
            (outcome_failed(None, why), None)
        } else {
            // What fails before the request is sent (a secret the keyring cannot open,
            // the allowlist unreadable) is a failed attempt too: it backs off, counts
            // towards disabling the endpoint and ends in `failed`, never loops unseen.
            self.post(&webhook, &d, started).await.unwrap_or_else(|e| {
                tracing::warn!(webhook = %webhook.id, error = %e, "a webhook attempt could not be made");
                (outcome_failed(None, not_sent(&e)), None)
            })
        };
        let elapsed = u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX);
        d.attempts += 1;
        let attempt = Attempt {
            attempt: d.attempts,
            at: started,
            status: match &outcome {
                Outcome::Delivered(s) => Some(*s),
                Outcome::Failed { status, .. } => *status,
            },
            error: match &outcome {
                Outcome::Delivered(_) => None,
                Outcome::Failed { error, .. } => Some(error.clone()),
            },
            excerpt,
            duration_ms: elapsed,
        };
        let now = self.clock.now();
        d.updated_at = now;
        d.last_status = attempt.status;
        d.last_error = attempt.error.clone();
        let endpoint = match &outcome {
            Outcome::Delivered(_) => {
                d.state = DeliveryState::Delivered;
                d.next_attempt_at = None;
                EndpointOutcome::Succeeded
            }
            Outcome::Failed { error, .. } => {
                let pause = backoff(d.attempts, &self.options);
                let next = now + TimeDelta::from_std(pause).unwrap_or(TimeDelta::MAX);
                let deadline = d.created_at
                    + TimeDelta::from_std(self.options.retry_for).unwrap_or(TimeDelta::MAX);
                if webhook.state == WebhookState::Disabled || next > deadline {
                    d.state = DeliveryState::Failed;
                    d.next_attempt_at = None;
                } else {
                    d.next_attempt_at = Some(next);
                }
                let n = self.options.disable_after;
                let reason = format!("{n} attempts in a row failed; the last: {error}");
                EndpointOutcome::Failed {
                    disable_after: n,
                    audit: AuditEntry::webhooks(
                        now,
                        AuditAction::WebhookDisabled,
                        webhook.id.to_string(),
                        json!({"url": webhook.spec.url, "reason": reason}),
                    ),
                    reason,
                }
            }
        };
        let endpoint = (webhook.state == WebhookState::Enabled).then_some(&endpoint);
        let recorded = self
            .store
            .finish_delivery(&d, &attempt, &self.replica, endpoint)
            .await?;
        if !recorded {
            tracing::warn!(delivery = %d.id, "a webhook attempt outlived its lease; another replica took the delivery");
        }
        let delivered = matches!(outcome, Outcome::Delivered(_));
        let result = if delivered { "delivered" } else { "failed" };
        metrics::counter!("baton_webhook_attempts_total", "result" => result).increment(1);
        if d.state == DeliveryState::Failed && recorded {
            metrics::counter!("baton_webhook_deliveries_failed_total").increment(1);
        }
        if delivered {
            let age = (now - d.created_at).to_std().unwrap_or_default();
            metrics::histogram!("baton_webhook_delivery_latency_seconds").record(age.as_secs_f64());
        }
        Ok(delivered)
    }

    /// POSTs `d` to its endpoint, signed with the secrets in force at `now`.
    async fn post(
        &self,
        webhook: &Webhook,
        d: &Delivery,
        now: DateTime<Utc>,
    ) -> Result<(Outcome, Option<String>), CoreError> {
        let aad = Aad::webhook_secret(webhook.tenant, webhook.id);
        let mut secrets = vec![self.open(&aad, &webhook.secrets.current)?];
        if let (Some(previous), Some(until)) = (
            &webhook.secrets.previous,
            webhook.previous_secret_expires_at,
        ) && until > now
        {
            secrets.push(self.open(&aad, previous)?);
        }
        let Ok(url) = url::Url::parse(&webhook.spec.url) else {
            let why = "the endpoint's URL is not valid".to_string();
            return Ok((outcome_failed(None, why), None));
        };
        let body = serde_json::to_vec(&d.payload)
            .map_err(|e| CoreError::Internal(format!("a delivery's payload: {e}")))?;
        let id = d.id.to_string();
        let timestamp = now.timestamp();
        let headers = vec![
            ("webhook-id", id.clone()),
            ("webhook-timestamp", timestamp.to_string()),
            (
                "webhook-signature",
                sign::header(&secrets, &id, timestamp, &body),
            ),
        ];
        let hosts = self.egress.rules(webhook.tenant).await?;
        let shown: Vec<String> = secrets.iter().map(|s| sign::show(s)).collect();
        let answer = self
            .transport
            .post(hosts, &url, headers, body, self.options.timeout, &shown)
            .await;
        Ok(match answer {
            Ok(a) if (200..300).contains(&a.status) => {
                (Outcome::Delivered(a.status), Some(a.excerpt))
            }
            Ok(a) => (
                outcome_failed(
                    Some(a.status),
                    format!("the endpoint answered {}", a.status),
                ),
                Some(a.excerpt),
            ),
            Err(why) => (outcome_failed(None, why), None),
        })
    }

    fn open(&self, aad: &Aad, sealed: &[u8]) -> Result<Vec<u8>, CoreError> {
        self.keyring
            .open(aad, sealed)
            .map_err(|e| CoreError::Internal(format!("opening a webhook secret: {e}")))
    }

    /// Attempts due deliveries until `shutdown`, up to `batch` at once: a slot freed by
    /// one attempt is filled at the next look (at once while deliveries keep coming, else
    /// every `poll`), so a slow endpoint holds one slot, not the whole batch. At shutdown
    /// the attempts in flight get one attempt timeout to finish; one cut off after it
    /// sent is attempted again (same `webhook-id`) once its lease lapses.
    pub async fn run(self, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.options.batch as usize));
        let mut attempts = JoinSet::new();
        loop {
            while attempts.try_join_next().is_some() {}
            let free = u32::try_from(slots.available_permits()).unwrap_or(0);
            let mut full = false;
            if free > 0 {
                match self.claim(free).await {
                    Ok(due) => {
                        full = due.len() >= free as usize;
                        for d in due {
                            let Ok(slot) = slots.clone().acquire_owned().await else {
                                return;
                            };
                            let me = self.clone();
                            attempts.spawn(async move {
                                let _slot = slot;
                                if let Err(e) = me.attempt(d).await {
                                    tracing::warn!(error = %e, "a webhook attempt could not be recorded");
                                }
                            });
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the webhook deliverer could not lease deliveries");
                    }
                }
            }
            let pause = if full {
                Duration::ZERO
            } else {
                self.options.poll
            };
            tokio::select! {
                () = shutdown.cancelled() => {
                    let _ = tokio::time::timeout(self.options.timeout, async {
                        while attempts.join_next().await.is_some() {}
                    })
                    .await;
                    return;
                }
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// What an attempt that could not be made says, in a few words a tenant may read.
fn not_sent(e: &CoreError) -> String {
    match e {
        CoreError::Internal(m) if m.contains("webhook secret") => {
            "the endpoint's secret cannot be opened: rotate it".to_string()
        }
        _ => "the attempt could not be made".to_string(),
    }
}

fn outcome_failed(status: Option<u16>, error: String) -> Outcome {
    Outcome::Failed { status, error }
}

/// The pause after `attempts` failed attempts: `retry_base` doubled each time, at most
/// `retry_max`, then 80 to 120% of that at random so retries of many deliveries spread.
fn backoff(attempts: u32, o: &super::WebhookOptions) -> Duration {
    let doubled = o
        .retry_base
        .saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
    let pause = doubled.min(o.retry_max);
    pause.mul_f64(rand::random_range(0.8..=1.2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::WebhookOptions;

    #[test]
    fn retries_back_off_exponentially_with_jitter_up_to_the_maximum() {
        let o = WebhookOptions {
            retry_base: Duration::from_secs(5),
            retry_max: Duration::from_secs(60),
            ..WebhookOptions::default()
        };
        for (attempts, nominal) in [
            (1, 5.0),
            (2, 10.0),
            (3, 20.0),
            (4, 40.0),
            (5, 60.0),
            (40, 60.0),
        ] {
            for _ in 0..20 {
                let p = backoff(attempts, &o).as_secs_f64();
                assert!(
                    (nominal * 0.8..=nominal * 1.2).contains(&p),
                    "attempt {attempts}: {p} s, not about {nominal} s"
                );
            }
        }
    }
}
