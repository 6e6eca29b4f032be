-- Invitations to join a tenant: an admin invites an email with a role, and the user of
-- that email accepts (or declines) while logged in; only acceptance makes a membership.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE invitations (
    tenant_id   BLOB NOT NULL REFERENCES tenants (id),
    id          BLOB NOT NULL,
    -- Trimmed and lower-cased by the application, as users' emails are.
    email       TEXT NOT NULL,
    role        TEXT NOT NULL,
    -- Who invited: `key:<id>`, `user:<id>` or `local`.
    invited_by  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    -- `pending`, `accepted`, `declined` or `revoked`.
    state       TEXT NOT NULL,
    decided_at  TEXT,
    PRIMARY KEY (tenant_id, id)
) STRICT;

-- At most one pending invitation per email in a tenant.
CREATE UNIQUE INDEX invitations_one_pending ON invitations (tenant_id, email)
    WHERE state = 'pending';
-- A user's invitations, across tenants (the lookup a logged-in user makes).
CREATE INDEX invitations_by_email ON invitations (email, state);
