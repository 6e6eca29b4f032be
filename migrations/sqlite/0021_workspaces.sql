-- Run workspaces: file contents as blobs named by their SHA-256, stored once per tenant
-- and counted by the files holding them (`refs`; a blob goes when its count reaches 0),
-- and each run's files as a projection of its `workspace.changed` events, written in the
-- same transaction. A removed file keeps its row without content (`sha256` NULL) and the
-- version that removed it, so a later change set can tell the path changed meanwhile.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE blobs (
    tenant_id   BLOB NOT NULL REFERENCES tenants (id),
    sha256      TEXT NOT NULL,
    size        INTEGER NOT NULL,
    content     BLOB NOT NULL,
    refs        INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, sha256)
) STRICT;

CREATE TABLE workspace_files (
    tenant_id   BLOB NOT NULL,
    run_id      BLOB NOT NULL,
    path        TEXT NOT NULL,
    sha256      TEXT,
    size        INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, path),
    FOREIGN KEY (tenant_id, sha256) REFERENCES blobs (tenant_id, sha256)
) STRICT;

CREATE INDEX workspace_files_by_blob ON workspace_files (tenant_id, sha256);
