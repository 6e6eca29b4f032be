-- MCP servers: a tenant's Model Context Protocol servers, and each discovery of their
-- tools (numbered from 1 per server, kept whole as the server listed them). Tools enabled
-- from a server are ordinary rows of `tools` (kind `mcp`).
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE mcp_servers (
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    id          UUID NOT NULL,
    name        TEXT NOT NULL,
    -- The definition (`baton_core::model::McpServer` but its keys and times): URL,
    -- secret headers, timeout.
    definition  JSONB NOT NULL,
    version     BIGINT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, name)
);

CREATE TABLE mcp_discoveries (
    tenant_id      UUID NOT NULL,
    server_id      UUID NOT NULL,
    number         BIGINT NOT NULL,
    discovered_at  TIMESTAMPTZ NOT NULL,
    -- `baton_core::model::McpDiscovery`: protocol version, server info, tools.
    result         JSONB NOT NULL,
    PRIMARY KEY (tenant_id, server_id, number),
    FOREIGN KEY (tenant_id, server_id) REFERENCES mcp_servers (tenant_id, id) ON DELETE CASCADE
);

ALTER TABLE mcp_servers ENABLE ROW LEVEL SECURITY;
ALTER TABLE mcp_servers FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mcp_servers
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE mcp_discoveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE mcp_discoveries FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mcp_discoveries
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');
