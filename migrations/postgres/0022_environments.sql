-- A tenant's own execution environments: each narrows one of the operator's (named by
-- `base`, configured on the servers) for the commands of the tools that name it.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE environments (
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    name        TEXT NOT NULL,
    -- `baton_core::model::TenantEnvironment` without its name and time, as JSON.
    spec        JSONB NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

-- Row-level security as on every tenant table (0006).
ALTER TABLE environments ENABLE ROW LEVEL SECURITY;
ALTER TABLE environments FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON environments
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');
