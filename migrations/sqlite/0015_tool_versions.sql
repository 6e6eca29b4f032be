-- Tool versions: updating a tool makes a new version; a run calls the versions that were
-- current when it was created (named in its `run.created`), as it keeps its agent's.
-- Append-only: never edit this file once applied; add a new migration instead.
ALTER TABLE tools ADD COLUMN version INTEGER NOT NULL DEFAULT 1;

CREATE TABLE tool_versions (
    tenant_id   BLOB NOT NULL REFERENCES tenants (id),
    tool_id     BLOB NOT NULL,
    version     INTEGER NOT NULL,
    name        TEXT NOT NULL,
    definition  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, tool_id, version)
) STRICT;

-- Every tool so far is its version 1.
INSERT INTO tool_versions (tenant_id, tool_id, version, name, definition, created_at, updated_at)
    SELECT tenant_id, id, 1, name, definition, created_at, updated_at FROM tools;
