//! Contract: an endpoint's deliveries are recorded by the append of the events they are
//! about, for enabled endpoints subscribed to the type only; a due delivery is leased to
//! one claimer at a time; an attempt is recorded only under its lease, with what it
//! tells of the endpoint (failures in a row disable it); deliveries read back with their
//! attempts and replay; everything stays in its tenant.

use crate::support::*;
use baton_core::StoreError;
use baton_core::model::{
    Attempt, AuditAction, AuditEntry, DeliveryState, RunStatus, RunSummary, Webhook, WebhookEvent,
    WebhookSecrets, WebhookSpec, WebhookState,
};
use baton_core::ports::{EndpointOutcome, WebhookStore};
use baton_events::{RunCancelled, RunEvent, TenantId, WebhookId};
use chrono::TimeDelta;

fn entry() -> AuditEntry {
    AuditEntry::operator(
        now(),
        AuditAction::WebhookCreated,
        "webhook",
        serde_json::json!({}),
    )
}

fn endpoint(tenant: TenantId, events: &[WebhookEvent]) -> Webhook {
    Webhook {
        id: WebhookId::new(),
        tenant,
        spec: WebhookSpec {
            url: "https://hooks.example.com/in".into(),
            description: None,
            events: events.to_vec(),
        },
        state: WebhookState::Enabled,
        disabled_reason: None,
        consecutive_failures: 0,
        previous_secret_expires_at: None,
        secrets: WebhookSecrets {
            current: vec![1, 2, 3],
            previous: None,
        },
        version: 1,
        created_at: now(),
        updated_at: now(),
    }
}

/// Cancels a new run of `tenant`: one `run.cancelled` event.
async fn cancelled_run<S: Store>(s: &S, tenant: TenantId) -> baton_events::RunId {
    let run = new_run(s, tenant).await;
    let summary: RunSummary = s.get_run(tenant, run).await.expect("read").expect("run");
    let cancel = event(
        tenant,
        RunEvent::RunCancelled(RunCancelled { reason: None }),
    );
    append_ok(s, tenant, request(run, summary.version, vec![cancel])).await;
    run
}

pub async fn deliveries_are_recorded_with_their_events_for_subscribed_enabled_endpoints<
    S: Store + WebhookStore,
>(
    s: &S,
) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let cancels = endpoint(a, &[WebhookEvent::RunCancelled]);
    let completes = endpoint(a, &[WebhookEvent::RunCompleted]);
    let mut off = endpoint(a, &[WebhookEvent::RunCancelled]);
    off.state = WebhookState::Disabled;
    let theirs = endpoint(b, &[WebhookEvent::RunCancelled]);
    for w in [&cancels, &completes, &off, &theirs] {
        s.create_webhook(w, &entry()).await.expect("create");
    }
    let run = cancelled_run(s, a).await;
    let got = s
        .list_deliveries(a, cancels.id, None, None, 10)
        .await
        .expect("list");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event_type, WebhookEvent::RunCancelled);
    assert_eq!(got[0].run_id, Some(run));
    assert_eq!(got[0].state, DeliveryState::Pending);
    assert_eq!(got[0].payload["data"]["run"]["status"], "cancelled");
    for (t, w) in [(a, &completes), (a, &off), (b, &theirs)] {
        let none = s
            .list_deliveries(t, w.id, None, None, 10)
            .await
            .expect("list");
        assert!(none.is_empty(), "{:?}", w.spec.events);
    }
    // Another tenant cannot read or replay A's.
    let id = got[0].id;
    assert!(
        s.get_delivery(b, cancels.id, id)
            .await
            .expect("get")
            .is_none()
    );
    let (d, attempts) = s
        .get_delivery(a, cancels.id, id)
        .await
        .expect("get")
        .expect("there");
    assert_eq!(d, got[0]);
    assert!(attempts.is_empty());
    assert!(
        !s.replay_delivery(b, cancels.id, id, now(), &entry())
            .await
            .expect("replay")
    );
}

pub async fn a_delivery_is_leased_to_one_claimer_and_recorded_only_under_its_lease<
    S: Store + WebhookStore,
>(
    s: &S,
) {
    let a = tenant(s).await;
    let w = endpoint(a, &[WebhookEvent::RunCancelled]);
    s.create_webhook(&w, &entry()).await.expect("create");
    cancelled_run(s, a).await;
    // Due times are kept to the millisecond.
    let at =
        chrono::DateTime::from_timestamp_millis((now() + TimeDelta::seconds(1)).timestamp_millis())
            .expect("in range");
    let until = at + TimeDelta::seconds(30);
    let (first, second) = tokio::join!(
        s.claim_deliveries("replica-1", at, until, 10),
        s.claim_deliveries("replica-2", at, until, 10)
    );
    let (first, second) = (first.expect("claim"), second.expect("claim"));
    assert_eq!(
        first.len() + second.len(),
        1,
        "one claimer: {first:?} {second:?}"
    );
    let (owner, mut d) = if first.is_empty() {
        ("replica-2", second[0].clone())
    } else {
        ("replica-1", first[0].clone())
    };
    let other = if owner == "replica-1" {
        "replica-2"
    } else {
        "replica-1"
    };
    d.attempts = 1;
    d.last_status = Some(503);
    d.last_error = Some("the endpoint answered 503".into());
    d.next_attempt_at = Some(at + TimeDelta::seconds(5));
    d.updated_at = at;
    let attempt = Attempt {
        attempt: 1,
        at,
        status: Some(503),
        error: d.last_error.clone(),
        excerpt: Some("down".into()),
        duration_ms: 12,
    };
    let failed = EndpointOutcome::Failed {
        disable_after: 1,
        reason: "1 attempts in a row failed".into(),
        audit: entry(),
    };
    assert!(
        !s.finish_delivery(&d, &attempt, other, Some(&failed))
            .await
            .expect("finish"),
        "not the lease's owner"
    );
    assert!(
        s.finish_delivery(&d, &attempt, owner, Some(&failed))
            .await
            .expect("finish")
    );
    let (read, attempts) = s
        .get_delivery(a, w.id, d.id)
        .await
        .expect("get")
        .expect("there");
    assert_eq!(read.attempts, 1);
    assert_eq!(read.next_attempt_at, d.next_attempt_at);
    assert_eq!(attempts, vec![attempt]);
    let disabled = s.get_webhook(a, w.id).await.expect("get").expect("there");
    assert_eq!(disabled.state, WebhookState::Disabled);
    assert_eq!(disabled.consecutive_failures, 1);
    // Not due until its next attempt; then free to claim again.
    assert!(
        s.claim_deliveries("replica-3", at, until, 10)
            .await
            .expect("claim")
            .is_empty()
    );
    let later = at + TimeDelta::seconds(6);
    let again = s
        .claim_deliveries("replica-3", later, later + TimeDelta::seconds(30), 10)
        .await
        .expect("claim");
    assert_eq!(again.len(), 1);
    // A replay makes it due now, whatever its state.
    assert!(
        s.replay_delivery(a, w.id, d.id, later, &entry())
            .await
            .expect("replay")
    );
    assert!(s.delete_webhook(a, w.id, &entry()).await.expect("delete"));
    assert!(s.get_delivery(a, w.id, d.id).await.expect("get").is_none());
}

/// An endpoint of `tenant` with a delivery and one attempt of it: a row in each webhook
/// table.
pub async fn with_a_delivery_and_an_attempt<S: Store + WebhookStore>(s: &S, tenant: TenantId) {
    let w = endpoint(tenant, &[WebhookEvent::RunCancelled]);
    s.create_webhook(&w, &entry()).await.expect("create");
    cancelled_run(s, tenant).await;
    deliver_one(s, tenant, Some(&EndpointOutcome::Succeeded)).await;
}

/// Leases `tenant`'s due deliveries and records one of them delivered at its first
/// attempt, telling the store `endpoint`; returns it.
async fn deliver_one<S: Store + WebhookStore>(
    s: &S,
    tenant: TenantId,
    endpoint: Option<&EndpointOutcome>,
) -> baton_core::model::Delivery {
    let at = now() + TimeDelta::seconds(1);
    let mut claimed = s
        .claim_deliveries("deliverer", at, at + TimeDelta::seconds(30), 100)
        .await
        .expect("claim");
    claimed.retain(|d| d.tenant == tenant);
    let mut d = claimed.pop().expect("a delivery");
    d.attempts = 1;
    d.state = DeliveryState::Delivered;
    let attempt = Attempt {
        attempt: 1,
        at,
        status: Some(200),
        error: None,
        excerpt: None,
        duration_ms: 1,
    };
    assert!(
        s.finish_delivery(&d, &attempt, "deliverer", endpoint)
            .await
            .expect("finish")
    );
    d
}

pub async fn finished_deliveries_past_their_window_are_pruned_and_pending_ones_stay<
    S: Store + WebhookStore,
>(
    s: &S,
) {
    let a = tenant(s).await;
    let w = endpoint(a, &[WebhookEvent::RunCancelled]);
    s.create_webhook(&w, &entry()).await.expect("create");
    cancelled_run(s, a).await;
    cancelled_run(s, a).await;
    let done = deliver_one(s, a, None).await;
    // Not past the window yet: nothing goes.
    assert_eq!(
        baton_core::ports::RetentionStore::prune_deliveries(s, now() - TimeDelta::days(1), 10)
            .await
            .expect("prune"),
        0
    );
    let later = now() + TimeDelta::days(1);
    assert_eq!(
        baton_core::ports::RetentionStore::prune_deliveries(s, later, 10)
            .await
            .expect("prune"),
        1
    );
    assert!(
        s.get_delivery(a, w.id, done.id)
            .await
            .expect("get")
            .is_none()
    );
    let left = s
        .list_deliveries(a, w.id, None, None, 10)
        .await
        .expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].state, DeliveryState::Pending, "pending ones stay");
}

pub async fn an_event_that_is_two_webhook_events_is_delivered_as_each<S: Store + WebhookStore>(
    s: &S,
) {
    use baton_events::{ReceiptId, ToolEffect, ToolId, ToolIntent, ToolKind, ToolUncertain};
    let a = tenant(s).await;
    let both = endpoint(
        a,
        &[WebhookEvent::ToolUncertain, WebhookEvent::RunRequiresAction],
    );
    s.create_webhook(&both, &entry()).await.expect("create");
    let (run, version) = run_in_turn(s, a).await;
    let receipt = ReceiptId::new();
    let intent = ToolIntent {
        receipt_id: receipt,
        turn: 1,
        call_id: "call-1".into(),
        tool_id: ToolId::new(),
        tool: "transfer".into(),
        kind: ToolKind::Http,
        effect: ToolEffect::Mutation,
        idempotent: false,
        arguments: serde_json::json!({}),
        idempotency_key: receipt.to_string(),
    };
    let uncertain = ToolUncertain {
        receipt_id: receipt,
        reason: "cut off".into(),
    };
    append_ok(
        s,
        a,
        request(
            run,
            version,
            vec![
                event(a, RunEvent::ToolIntent(intent)),
                event(a, RunEvent::ToolUncertain(uncertain)),
            ],
        ),
    )
    .await;
    let got = s
        .list_deliveries(a, both.id, None, None, 10)
        .await
        .expect("list");
    let mut types: Vec<WebhookEvent> = got.iter().map(|d| d.event_type).collect();
    types.sort();
    assert_eq!(
        types,
        [WebhookEvent::RunRequiresAction, WebhookEvent::ToolUncertain],
        "an http intent is no action awaited; the uncertain call is both"
    );
    assert_ne!(got[0].id, got[1].id);
    assert!(got.iter().all(|d| d.run_id == Some(run)));
}

/// An append whose events are webhook events asks in its projection `UPDATE` whether an
/// endpoint wants them, and records deliveries only then: with no endpoint, with one
/// subscribed to another type or disabled, it records none (and, read as false on both
/// backends, skips the enqueue); a refused `UPDATE` records none either.
pub async fn an_append_enqueues_only_when_its_update_finds_a_subscribed_endpoint<
    S: Store + WebhookStore,
>(
    s: &S,
) {
    let a = tenant(s).await;
    let cancel_with_base = |run, base: &RunSummary| {
        let cancel = event(a, RunEvent::RunCancelled(RunCancelled { reason: None }));
        let mut req = request(run, base.version, vec![cancel]);
        req.base = Some(Box::new(base.clone()));
        req
    };
    let cancel_new_run = || async {
        let run = new_run(s, a).await;
        let base = s.get_run(a, run).await.expect("read").expect("run");
        let (ended, _) = append_ok(s, a, cancel_with_base(run, &base)).await;
        assert_eq!(ended.status, RunStatus::Cancelled);
        (run, base)
    };

    // No endpoint at all, then one for another type, then a disabled one for this type.
    cancel_new_run().await;
    let completes = endpoint(a, &[WebhookEvent::RunCompleted]);
    let mut off = endpoint(a, &[WebhookEvent::RunCancelled]);
    off.state = WebhookState::Disabled;
    for w in [&completes, &off] {
        s.create_webhook(w, &entry()).await.expect("create");
    }
    cancel_new_run().await;
    for w in [&completes, &off] {
        let none = s
            .list_deliveries(a, w.id, None, None, 10)
            .await
            .expect("list");
        assert!(none.is_empty(), "{:?} {:?}", w.state, w.spec.events);
    }

    // Subscribed and enabled: one delivery per append that is the event.
    let cancels = endpoint(a, &[WebhookEvent::RunCancelled]);
    s.create_webhook(&cancels, &entry()).await.expect("create");
    let (run, base) = cancel_new_run().await;
    let got = s
        .list_deliveries(a, cancels.id, None, None, 10)
        .await
        .expect("list");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].run_id, Some(run));

    // The same append again, against a base the run has moved past: refused, nothing
    // recorded.
    match s.append(a, cancel_with_base(run, &base)).await {
        Err(StoreError::Conflict { .. }) => {}
        other => panic!("expected Conflict, got {other:?}"),
    }
    let after = s
        .list_deliveries(a, cancels.id, None, None, 10)
        .await
        .expect("list");
    assert_eq!(after.len(), 1, "a refused append records no delivery");
}
