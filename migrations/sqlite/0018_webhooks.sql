-- Webhooks: a tenant's endpoints, the event types each is subscribed to, and the
-- deliveries of those events with their attempts. A delivery is inserted in the
-- transaction of the change that causes it (an append, a schedule's pause), one per
-- enabled endpoint subscribed to its type; replicas lease due deliveries to attempt them.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE webhooks (
    tenant_id                   BLOB NOT NULL REFERENCES tenants (id),
    id                          BLOB NOT NULL,
    -- The definition (`baton_core::model::WebhookSpec`): URL, description, events.
    spec                        TEXT NOT NULL,
    -- `enabled` or `disabled`.
    state                       TEXT NOT NULL,
    disabled_reason             TEXT,
    consecutive_failures        INTEGER NOT NULL DEFAULT 0,
    -- The signing secrets, sealed by the keyring: the current one, and the one before
    -- the last rotation until `previous_secret_expires_at`.
    secret                      BLOB NOT NULL,
    previous_secret             BLOB,
    previous_secret_expires_at  TEXT,
    version                     INTEGER NOT NULL,
    created_at                  TEXT NOT NULL,
    updated_at                  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
) STRICT;

-- Which enabled endpoints an event of a type goes to, found in the transaction that
-- records the event.
CREATE TABLE webhook_subscriptions (
    tenant_id   BLOB NOT NULL,
    event_type  TEXT NOT NULL,
    webhook_id  BLOB NOT NULL,
    PRIMARY KEY (tenant_id, event_type, webhook_id)
) STRICT;

CREATE TABLE webhook_deliveries (
    tenant_id         BLOB NOT NULL,
    webhook_id        BLOB NOT NULL,
    -- The event's id: every attempt's `webhook-id`.
    id                BLOB NOT NULL,
    event_type        TEXT NOT NULL,
    run_id            BLOB,
    payload           TEXT NOT NULL,
    -- `pending`, `delivered` or `failed`.
    state             TEXT NOT NULL,
    attempts          INTEGER NOT NULL DEFAULT 0,
    -- When a pending delivery is due (Unix milliseconds).
    next_attempt_ms   INTEGER,
    -- The replica attempting it, until when.
    lease_owner       TEXT,
    lease_expires_ms  INTEGER,
    last_status       INTEGER,
    last_error        TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    PRIMARY KEY (tenant_id, webhook_id, id)
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_ms)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_run ON webhook_deliveries (tenant_id, run_id)
    WHERE run_id IS NOT NULL;

CREATE TABLE webhook_attempts (
    tenant_id    BLOB NOT NULL,
    webhook_id   BLOB NOT NULL,
    delivery_id  BLOB NOT NULL,
    attempt      INTEGER NOT NULL,
    at           TEXT NOT NULL,
    status       INTEGER,
    error        TEXT,
    -- The start of the answer's body, cut and masked.
    excerpt      TEXT,
    duration_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, webhook_id, delivery_id, attempt)
) STRICT;
