-- Stream tickets: short-lived, single-use credentials that open one run's event stream
-- from a browser. Only the SHA-256 of a ticket is stored, like an API key's.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE stream_tickets (
    id          BLOB PRIMARY KEY,
    tenant_id   BLOB NOT NULL REFERENCES tenants (id),
    -- No reference to `runs`: a ticket of a run deleted since opens a stream that finds
    -- no run (404), and run deletion need not know of tickets.
    run_id      BLOB NOT NULL,
    token_hash  BLOB NOT NULL UNIQUE,
    -- The credentials that asked for it: `local`, `key` or `session`, with the hash of
    -- their token (none for `local`).
    issued_by   TEXT NOT NULL CHECK (issued_by IN ('local', 'key', 'session')),
    issuer_hash BLOB,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    used_at     TEXT
) STRICT;

-- The tenant's expired tickets, forgotten when a new one is made.
CREATE INDEX stream_tickets_by_expiry ON stream_tickets (tenant_id, expires_at);
