-- A tenant's egress allowlist: the hosts its outbound calls (tools, model providers) may
-- reach, within the operator's policy. No row, or an empty list: the operator's policy
-- alone. Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE egress_allowlists (
    tenant_id   BLOB PRIMARY KEY REFERENCES tenants (id),
    -- A JSON array of host rules as `baton_core::egress::HostRule` prints them.
    hosts       TEXT NOT NULL,
    updated_at  TEXT NOT NULL
) STRICT;
