-- A tenant's egress allowlist: the hosts its outbound calls (tools, model providers) may
-- reach, within the operator's policy. No row, or an empty list: the operator's policy
-- alone. Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE egress_allowlists (
    tenant_id   UUID PRIMARY KEY REFERENCES tenants (id),
    -- A JSON array of host rules as `baton_core::egress::HostRule` prints them.
    hosts       JSONB NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);

-- Row-level security as on every tenant table (0006).
ALTER TABLE egress_allowlists ENABLE ROW LEVEL SECURITY;
ALTER TABLE egress_allowlists FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON egress_allowlists
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');
