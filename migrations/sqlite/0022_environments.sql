-- A tenant's own execution environments: each narrows one of the operator's (named by
-- `base`, configured on the servers) for the commands of the tools that name it.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE environments (
    tenant_id   BLOB NOT NULL REFERENCES tenants (id),
    name        TEXT NOT NULL,
    -- `baton_core::model::TenantEnvironment` without its name and time, as JSON.
    spec        TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
) STRICT;
