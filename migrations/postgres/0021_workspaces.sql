-- Run workspaces: file contents as blobs named by their SHA-256, stored once per tenant
-- and counted by the files holding them (`refs`; a blob goes when its count reaches 0),
-- and each run's files as a projection of its `workspace.changed` events, written in the
-- same transaction. A removed file keeps its row without content (`sha256` NULL) and the
-- version that removed it, so a later change set can tell the path changed meanwhile.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE blobs (
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    sha256      TEXT NOT NULL,
    size        BIGINT NOT NULL,
    content     BYTEA NOT NULL,
    refs        BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, sha256)
);

CREATE TABLE workspace_files (
    tenant_id   UUID NOT NULL,
    run_id      UUID NOT NULL,
    path        TEXT COLLATE "C" NOT NULL,
    sha256      TEXT,
    size        BIGINT NOT NULL,
    version     BIGINT NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, run_id, path),
    FOREIGN KEY (tenant_id, sha256) REFERENCES blobs (tenant_id, sha256)
);

CREATE INDEX workspace_files_by_blob ON workspace_files (tenant_id, sha256);

ALTER TABLE blobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE blobs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON blobs
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE workspace_files ENABLE ROW LEVEL SECURITY;
ALTER TABLE workspace_files FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON workspace_files
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');
