-- The per-tenant audit stream: who changed a tenant's members, API keys, secrets, agents
-- and tools, when and from where (services/core/src/audit.rs). Append-only: never edit
-- this file once applied; add a new migration instead.
--
-- An entry is written in the transaction of the change it records. Entries are only ever
-- inserted and read: the policies below allow nothing else, so even a statement of the
-- application that tried to update or delete an entry would find no row.
CREATE TABLE audit_log (
    tenant_id  UUID NOT NULL REFERENCES tenants (id),
    -- A UUIDv7: the stream is read newest first by it.
    id         UUID NOT NULL,
    at         TIMESTAMPTZ NOT NULL,
    -- `key:<id>`, `user:<id>`, `local` or `operator`.
    actor      TEXT NOT NULL,
    -- The client's address; NULL for the command line.
    source     TEXT,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    -- A few facts about the change; never a secret's value.
    details    JSONB NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

-- The stream filtered by action (`GET /v1/audit?action=`).
CREATE INDEX audit_log_by_action ON audit_log (tenant_id, action, id);

-- Row-level security as on every tenant table (0006), with the read and the insert as
-- separate policies and none for UPDATE or DELETE.
ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_log FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON audit_log FOR SELECT
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');
CREATE POLICY tenant_append ON audit_log FOR INSERT
    WITH CHECK (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
                OR current_setting('baton.scope', true) = 'all');

-- The application's role (0006) may not change an entry either: default privileges
-- granted it UPDATE and DELETE on this table when it was created.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'baton_app') THEN
        REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM baton_app;
    END IF;
END
$$;
