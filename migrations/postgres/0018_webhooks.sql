-- Webhooks: a tenant's endpoints, the event types each is subscribed to, and the
-- deliveries of those events with their attempts. A delivery is inserted in the
-- transaction of the change that causes it (an append, a schedule's pause), one per
-- enabled endpoint subscribed to its type; replicas lease due deliveries to attempt them.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE webhooks (
    tenant_id                   UUID NOT NULL REFERENCES tenants (id),
    id                          UUID NOT NULL,
    -- The definition (`baton_core::model::WebhookSpec`): URL, description, events.
    spec                        JSONB NOT NULL,
    -- `enabled` or `disabled`.
    state                       TEXT NOT NULL,
    disabled_reason             TEXT,
    consecutive_failures        BIGINT NOT NULL DEFAULT 0,
    -- The signing secrets, sealed by the keyring: the current one, and the one before
    -- the last rotation until `previous_secret_expires_at`.
    secret                      BYTEA NOT NULL,
    previous_secret             BYTEA,
    previous_secret_expires_at  TIMESTAMPTZ,
    version                     BIGINT NOT NULL,
    created_at                  TIMESTAMPTZ NOT NULL,
    updated_at                  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

-- Row-level security on all four, as on every tenant table (0006), at the end.

-- Which enabled endpoints an event of a type goes to, found in the transaction that
-- records the event.
CREATE TABLE webhook_subscriptions (
    tenant_id   UUID NOT NULL,
    event_type  TEXT NOT NULL,
    webhook_id  UUID NOT NULL,
    PRIMARY KEY (tenant_id, event_type, webhook_id)
);

CREATE TABLE webhook_deliveries (
    tenant_id         UUID NOT NULL,
    webhook_id        UUID NOT NULL,
    -- The event's id: every attempt's `webhook-id`.
    id                UUID NOT NULL,
    event_type        TEXT NOT NULL,
    run_id            UUID,
    payload           JSONB NOT NULL,
    -- `pending`, `delivered` or `failed`.
    state             TEXT NOT NULL,
    attempts          BIGINT NOT NULL DEFAULT 0,
    -- When a pending delivery is due (Unix milliseconds).
    next_attempt_ms   BIGINT,
    -- The replica attempting it, until when.
    lease_owner       TEXT,
    lease_expires_ms  BIGINT,
    last_status       BIGINT,
    last_error        TEXT,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, webhook_id, id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_ms)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_run ON webhook_deliveries (tenant_id, run_id)
    WHERE run_id IS NOT NULL;

CREATE TABLE webhook_attempts (
    tenant_id    UUID NOT NULL,
    webhook_id   UUID NOT NULL,
    delivery_id  UUID NOT NULL,
    attempt      BIGINT NOT NULL,
    at           TIMESTAMPTZ NOT NULL,
    status       BIGINT,
    error        TEXT,
    -- The start of the answer's body, cut and masked.
    excerpt      TEXT,
    duration_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, webhook_id, delivery_id, attempt)
);

ALTER TABLE webhooks ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhooks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhooks
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE webhook_subscriptions ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhook_subscriptions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhook_subscriptions
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE webhook_deliveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhook_deliveries FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhook_deliveries
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE webhook_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhook_attempts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhook_attempts
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');
