-- Tools, agent versions and tool-call receipts (the run engine). Append-only: never edit
-- this file once applied; add a new migration instead.

-- What a turn waits for (approvals, client tool outputs, uncertain calls).
ALTER TABLE runs ADD COLUMN pending_actions INTEGER NOT NULL DEFAULT 0;

-- Agents gain the tools they may call and the limits of a turn; every version of an
-- agent is kept, because a run keeps using the version it started with.
ALTER TABLE agents ADD COLUMN tools TEXT NOT NULL DEFAULT '[]';
ALTER TABLE agents ADD COLUMN limits TEXT NOT NULL DEFAULT '{}';

CREATE TABLE agent_versions (
    tenant_id     BLOB NOT NULL REFERENCES tenants (id),
    agent_id      BLOB NOT NULL,
    version       INTEGER NOT NULL,
    name          TEXT NOT NULL,
    instructions  TEXT NOT NULL,
    provider      TEXT NOT NULL,
    tools         TEXT NOT NULL,
    limits        TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    PRIMARY KEY (tenant_id, agent_id, version)
) STRICT;

INSERT INTO agent_versions
    (tenant_id, agent_id, version, name, instructions, provider, tools, limits,
     created_at, updated_at)
SELECT tenant_id, id, version, name, instructions, provider, tools, limits,
       created_at, updated_at
FROM agents;

CREATE TABLE tools (
    tenant_id   BLOB NOT NULL REFERENCES tenants (id),
    id          BLOB NOT NULL,
    name        TEXT NOT NULL,
    definition  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT tools_name_per_tenant UNIQUE (tenant_id, name)
) STRICT;

-- The receipts projection: one row per tool call, written in the append transaction.
CREATE TABLE receipts (
    tenant_id        BLOB NOT NULL,
    run_id           BLOB NOT NULL,
    id               BLOB NOT NULL,
    created_version  INTEGER NOT NULL,
    state            TEXT NOT NULL,
    body             TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
) STRICT;

CREATE INDEX receipts_by_run ON receipts (tenant_id, run_id, created_version);

-- Tenant secrets, sealed with AES-256-GCM under the keyring key `key_id` (the envelope in
-- `ciphertext` names it too); never stored in the clear.
CREATE TABLE secrets (
    tenant_id   BLOB NOT NULL REFERENCES tenants (id),
    name        TEXT NOT NULL,
    key_id      TEXT NOT NULL,
    ciphertext  BLOB NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
) STRICT;

-- Sealed snapshots of a run's engine state (conversation, pending calls, counters), each
-- referenced by a checkpoint.saved event. Rebuilding a run starts from the newest one that
-- opens and verifies, plus the events after through_version.
CREATE TABLE checkpoints (
    tenant_id        BLOB NOT NULL,
    run_id           BLOB NOT NULL,
    id               BLOB NOT NULL,
    through_version  INTEGER NOT NULL,
    key_id           TEXT NOT NULL,
    size             INTEGER NOT NULL,
    sha256           TEXT NOT NULL,
    ciphertext       BLOB NOT NULL,
    created_at       TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
) STRICT;

CREATE INDEX checkpoints_by_run ON checkpoints (tenant_id, run_id, through_version);
