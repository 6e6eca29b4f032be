-- Users, their memberships in tenants, and login sessions. Append-only: never edit this
-- file once applied; add a new migration instead.

-- A user belongs to no tenant: it acts in tenants through memberships.
CREATE TABLE users (
    id             UUID PRIMARY KEY,
    -- Trimmed and lower-cased by the application: one account per address. Sorted
    -- byte-wise ("C"), as SQLite sorts, so both list members in one order.
    email          TEXT COLLATE "C" NOT NULL UNIQUE,
    -- The argon2id PHC string: algorithm, parameters, salt and hash. Never the password.
    password_hash  TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL
);

-- A user's role in a tenant. Tenant-scoped like every tenant table: the tenant first.
CREATE TABLE memberships (
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    user_id     UUID NOT NULL REFERENCES users (id),
    role        TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);

-- A user's tenants: at login, for `GET /v1/me`, and to pick a session's tenant.
CREATE INDEX memberships_by_user ON memberships (user_id);

-- Login sessions. Only the SHA-256 of a session token is stored, like an API key's.
CREATE TABLE sessions (
    id          UUID PRIMARY KEY,
    user_id     UUID NOT NULL REFERENCES users (id),
    token_hash  BYTEA NOT NULL UNIQUE,
    created_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ
);

-- A user's sessions, to purge the expired ones at the next login.
CREATE INDEX sessions_by_user ON sessions (user_id, expires_at);
