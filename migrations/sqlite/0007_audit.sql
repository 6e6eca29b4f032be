-- The per-tenant audit stream: who changed a tenant's members, API keys, secrets, agents
-- and tools, when and from where (services/core/src/audit.rs). Append-only: never edit
-- this file once applied; add a new migration instead. (0006 is Postgres's row-level
-- security, which SQLite has no counterpart of.)
--
-- An entry is written in the transaction of the change it records; the store only ever
-- inserts and reads entries.
CREATE TABLE audit_log (
    tenant_id  BLOB NOT NULL REFERENCES tenants (id),
    -- A UUIDv7: the stream is read newest first by it.
    id         BLOB NOT NULL,
    at         TEXT NOT NULL,
    -- `key:<id>`, `user:<id>`, `local` or `operator`.
    actor      TEXT NOT NULL,
    -- The client's address; NULL for the command line.
    source     TEXT,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    -- A few facts about the change; never a secret's value.
    details    TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
) STRICT;

-- The stream filtered by action (`GET /v1/audit?action=`).
CREATE INDEX audit_log_by_action ON audit_log (tenant_id, action, id);

-- Entries are never changed.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit entries are never changed');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit entries are never deleted');
END;
