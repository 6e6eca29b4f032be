-- Stream tickets: short-lived, single-use credentials that open one run's event stream
-- from a browser. Only the SHA-256 of a ticket is stored, like an API key's.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE stream_tickets (
    id          UUID PRIMARY KEY,
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    -- No reference to `runs`: a ticket of a run deleted since opens a stream that finds
    -- no run (404), and run deletion need not know of tickets.
    run_id      UUID NOT NULL,
    token_hash  BYTEA NOT NULL UNIQUE,
    -- The credentials that asked for it: `local`, `key` or `session`, with the hash of
    -- their token (none for `local`).
    issued_by   TEXT NOT NULL CHECK (issued_by IN ('local', 'key', 'session')),
    issuer_hash BYTEA,
    created_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    used_at     TIMESTAMPTZ
);

-- The tenant's expired tickets, forgotten when a new one is made.
CREATE INDEX stream_tickets_by_expiry ON stream_tickets (tenant_id, expires_at);

-- Row-level security as on every tenant table (0006). Redeeming looks a ticket up by its
-- hash before the tenant is known, as an API key's lookup does.
ALTER TABLE stream_tickets ENABLE ROW LEVEL SECURITY;
ALTER TABLE stream_tickets FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stream_tickets
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');
