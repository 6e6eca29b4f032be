-- MCP servers: a tenant's Model Context Protocol servers, and each discovery of their
-- tools (numbered from 1 per server, kept whole as the server listed them). Tools enabled
-- from a server are ordinary rows of `tools` (kind `mcp`).
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE mcp_servers (
    tenant_id   BLOB NOT NULL REFERENCES tenants (id),
    id          BLOB NOT NULL,
    name        TEXT NOT NULL,
    -- The definition (`baton_core::model::McpServer` but its keys and times): URL,
    -- secret headers, timeout.
    definition  TEXT NOT NULL,
    version     INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, name)
) STRICT;

CREATE TABLE mcp_discoveries (
    tenant_id      BLOB NOT NULL,
    server_id      BLOB NOT NULL,
    number         INTEGER NOT NULL,
    discovered_at  TEXT NOT NULL,
    -- `baton_core::model::McpDiscovery`: protocol version, server info, tools.
    result         TEXT NOT NULL,
    PRIMARY KEY (tenant_id, server_id, number),
    FOREIGN KEY (tenant_id, server_id) REFERENCES mcp_servers (tenant_id, id) ON DELETE CASCADE
) STRICT;
