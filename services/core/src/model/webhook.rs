//! Webhooks: a tenant's endpoints, told of what happens to its runs and schedules by
//! signed HTTP requests (Standard Webhooks), each event delivered at least once.

use baton_events::{RunId, WebhookId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What an endpoint may subscribe to.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
pub enum WebhookEvent {
    /// A run completed (`run.completed`).
    #[serde(rename = "run.completed")]
    RunCompleted,
    /// A run failed for good (`run.failed`).
    #[serde(rename = "run.failed")]
    RunFailed,
    #[serde(rename = "run.cancelled")]
    RunCancelled,
    /// A run's turn waits for a member or the API client: an approval, a client tool's
    /// output, or a decision on an uncertain call (one delivery per action awaited).
    #[serde(rename = "run.requires_action")]
    RunRequiresAction,
    /// A tool call cut off after it may have taken effect is held for a member.
    #[serde(rename = "tool.uncertain")]
    ToolUncertain,
    /// A schedule was paused (by a member, or by itself with the reason).
    #[serde(rename = "schedule.paused")]
    SchedulePaused,
}

impl WebhookEvent {
    pub const ALL: [WebhookEvent; 6] = [
        WebhookEvent::RunCompleted,
        WebhookEvent::RunFailed,
        WebhookEvent::RunCancelled,
        WebhookEvent::RunRequiresAction,
        WebhookEvent::ToolUncertain,
        WebhookEvent::SchedulePaused,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            WebhookEvent::RunCompleted => "run.completed",
            WebhookEvent::RunFailed => "run.failed",
            WebhookEvent::RunCancelled => "run.cancelled",
            WebhookEvent::RunRequiresAction => "run.requires_action",
            WebhookEvent::ToolUncertain => "tool.uncertain",
            WebhookEvent::SchedulePaused => "schedule.paused",
        }
    }

    pub fn parse(s: &str) -> Option<WebhookEvent> {
        WebhookEvent::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// The webhook events a run event of type `event_type` (with its `data`) is: a run's
    /// end, an action it awaits, an uncertain call. Most run events are none.
    pub fn of_run_event(event_type: &str, data: &serde_json::Value) -> &'static [WebhookEvent] {
        match event_type {
            "run.completed" => &[WebhookEvent::RunCompleted],
            "run.failed" => &[WebhookEvent::RunFailed],
            "run.cancelled" => &[WebhookEvent::RunCancelled],
            "approval.requested" => &[WebhookEvent::RunRequiresAction],
            "tool.uncertain" => &[WebhookEvent::ToolUncertain, WebhookEvent::RunRequiresAction],
            "tool.intent" if data["kind"] == "client" => &[WebhookEvent::RunRequiresAction],
            _ => &[],
        }
    }
}

/// An endpoint's definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSpec {
    /// Where deliveries are POSTed: `https://` (or `http://` where the installation's
    /// egress policy lets it), under the egress policy and the tenant's allowlist.
    #[schema(max_length = 2048, example = "https://hooks.example.com/baton")]
    pub url: String,
    /// At most 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500)]
    pub description: Option<String>,
    /// The event types delivered to it: at least one, each once.
    #[schema(min_items = 1)]
    pub events: Vec<WebhookEvent>,
}

/// Whether an endpoint gets deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookState {
    Enabled,
    /// Disabled after failing too many attempts in a row (`disabled_reason`): it gets no
    /// new deliveries until a member enables it again.
    Disabled,
}

impl WebhookState {
    pub fn as_str(&self) -> &'static str {
        match self {
            WebhookState::Enabled => "enabled",
            WebhookState::Disabled => "disabled",
        }
    }

    pub fn parse(s: &str) -> Option<WebhookState> {
        match s {
            "enabled" => Some(WebhookState::Enabled),
            "disabled" => Some(WebhookState::Disabled),
            _ => None,
        }
    }
}

/// An endpoint, without its secrets.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Webhook {
    pub id: WebhookId,
    #[serde(skip)]
    pub tenant: baton_events::TenantId,
    pub spec: WebhookSpec,
    pub state: WebhookState,
    pub disabled_reason: Option<String>,
    /// Attempts failed in a row, across its deliveries; a success resets it.
    pub consecutive_failures: u32,
    /// Until when the secret before the last rotation still signs deliveries too.
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    #[serde(skip)]
    pub secrets: WebhookSecrets,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An endpoint's signing secrets, sealed by the keyring: the current one, and the one
/// before the last rotation while its overlap lasts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookSecrets {
    pub current: Vec<u8>,
    pub previous: Option<Vec<u8>>,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not delivered yet: attempted at `next_attempt_at`.
    Pending,
    /// An attempt got a 2xx answer.
    Delivered,
    /// Every attempt failed for the retry period, or the endpoint was disabled: a member
    /// may replay it.
    Failed,
}

impl DeliveryState {
    pub fn as_str(&self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryState> {
        match s {
            "pending" => Some(DeliveryState::Pending),
            "delivered" => Some(DeliveryState::Delivered),
            "failed" => Some(DeliveryState::Failed),
            _ => None,
        }
    }
}

/// One event for one endpoint. Its `id` (the event's) is the `webhook-id` of every
/// attempt, so a receiver recognises a repeat.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    pub id: uuid::Uuid,
    pub webhook_id: WebhookId,
    #[serde(skip)]
    pub tenant: baton_events::TenantId,
    pub event_type: WebhookEvent,
    /// The run it is about, when it is about one.
    pub run_id: Option<RunId>,
    pub state: DeliveryState,
    pub attempts: u32,
    /// When it is attempted next, while pending.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The last attempt's HTTP status, if it got an answer.
    pub last_status: Option<u16>,
    /// Why the last attempt failed, if it did.
    pub last_error: Option<String>,
    /// The body sent (the same on every attempt).
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Attempt {
    /// 1 for the first.
    pub attempt: u32,
    pub at: DateTime<Utc>,
    /// The answer's status, when there was one.
    pub status: Option<u16>,
    /// Why it failed without a 2xx answer, in a few words.
    pub error: Option<String>,
    /// The start of the answer's body (at most 200 characters, control characters and
    /// the endpoint's secrets masked).
    pub excerpt: Option<String>,
    pub duration_ms: u64,
}

/// An event to deliver to the endpoints of a tenant subscribed to its type, recorded in
/// the transaction of the change that causes it.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookMessage {
    /// The event's id: the deliveries' `webhook-id`.
    pub id: uuid::Uuid,
    pub event_type: WebhookEvent,
    pub run_id: Option<RunId>,
    /// The body: `{"type", "timestamp", "data"}`.
    pub payload: serde_json::Value,
}

impl WebhookMessage {
    /// A message of `event_type` at `at` carrying `data`.
    pub fn new(
        id: uuid::Uuid,
        event_type: WebhookEvent,
        run_id: Option<RunId>,
        at: DateTime<Utc>,
        data: serde_json::Value,
    ) -> WebhookMessage {
        WebhookMessage {
            id,
            event_type,
            run_id,
            payload: serde_json::json!({
                "type": event_type.as_str(),
                "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "data": data,
            }),
        }
    }
}
