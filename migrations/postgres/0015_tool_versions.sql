-- Tool versions: updating a tool makes a new version; a run calls the versions that were
-- current when it was created (named in its `run.created`), as it keeps its agent's.
-- Append-only: never edit this file once applied; add a new migration instead.
ALTER TABLE tools ADD COLUMN version BIGINT NOT NULL DEFAULT 1;

CREATE TABLE tool_versions (
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    tool_id     UUID NOT NULL,
    version     BIGINT NOT NULL,
    name        TEXT NOT NULL,
    definition  JSONB NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, tool_id, version)
);

-- Every tool so far is its version 1. The tables' policies let this transaction see and
-- write every tenant's rows.
SELECT set_config('baton.scope', 'all', true);
INSERT INTO tool_versions (tenant_id, tool_id, version, name, definition, created_at, updated_at)
    SELECT tenant_id, id, 1, name, definition, created_at, updated_at FROM tools;

ALTER TABLE tool_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE tool_versions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tool_versions
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');
