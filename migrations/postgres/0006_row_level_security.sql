-- Row-level security on every tenant table: a statement reads and writes only the rows of
-- the tenant its transaction names, whatever its WHERE clause says, so a query that forgot
-- its tenant filter finds nothing rather than another tenant's rows. Append-only: never
-- edit this file once applied; add a new migration instead.
--
-- The store begins every transaction with (services/store/src/pools.rs)
--     SET LOCAL baton.tenant_id = '<tenant or nothing>'; SET LOCAL baton.scope = '<all or nothing>'
-- Both are transaction-local: they end with the transaction.
--   * `baton.tenant_id` names the one tenant the transaction may touch. Unset (NULL) or
--     empty, NULLIF makes it NULL, and `tenant_id = NULL` holds for no row.
--   * `baton.scope = 'all'` lets the few explicitly cross-tenant paths through: lease
--     claims and renewal across tenants, API key lookups by hash before the tenant is
--     known, a user's memberships in every tenant, and key rotation across tenants.
-- The comparison is an equality with a stable expression: it costs little per row, and
-- the queries' own conditions keep their index scans, with the policy as a filter on them
-- (every operator they use is leakproof, so none has to wait for the policy).
-- A policy with USING only applies it as WITH CHECK too: a row written (inserted, or
-- updated to) with another tenant's id is refused.
--
-- FORCE binds the tables' owner too: a DSN that owns the tables and is neither superuser
-- nor BYPASSRLS is isolated as it is. Superusers and BYPASSRLS roles ignore every policy;
-- for them the store switches its connections to the role `baton_app` made at the end.
-- Every later table with a `tenant_id` needs the same three statements (a test checks).

ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON api_keys
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE agents FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agents
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE agent_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent_versions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agent_versions
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE runs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON runs
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE events ENABLE ROW LEVEL SECURITY;
ALTER TABLE events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON events
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE messages FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON messages
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE idempotency ENABLE ROW LEVEL SECURITY;
ALTER TABLE idempotency FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON idempotency
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE tools ENABLE ROW LEVEL SECURITY;
ALTER TABLE tools FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tools
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE receipts ENABLE ROW LEVEL SECURITY;
ALTER TABLE receipts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON receipts
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE secrets ENABLE ROW LEVEL SECURITY;
ALTER TABLE secrets FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON secrets
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE checkpoints ENABLE ROW LEVEL SECURITY;
ALTER TABLE checkpoints FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON checkpoints
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

ALTER TABLE memberships ENABLE ROW LEVEL SECURITY;
ALTER TABLE memberships FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memberships
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');

-- `tenants`, `users` and `sessions` belong to no tenant and have no policy.

-- The role Baton's connections act as when their login role would bypass the policies
-- (a superuser, or BYPASSRLS): NOLOGIN, no bypass, allowed to read and write the tables
-- and nothing else: no DDL, not the migrations' bookkeeping. Roles are shared by every
-- database of the cluster, so the role is made once and reused; making it needs a
-- superuser or CREATEROLE, and without either this block changes nothing (the migrating
-- role's own connections are then subject to the policies unless it bypasses them, which
-- the store reports at start-up). The grants are this database's.
DO $$
DECLARE
    me pg_roles%ROWTYPE;
    can_set boolean;
BEGIN
    SELECT * INTO me FROM pg_roles WHERE rolname = current_user;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'baton_app') THEN
        IF NOT (me.rolsuper OR me.rolcreaterole) THEN
            RAISE NOTICE 'role baton_app not created: % can create no roles', current_user;
            RETURN;
        END IF;
        BEGIN
            CREATE ROLE baton_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            -- Another database's migration made it at the same moment.
            NULL;
        END;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO baton_app', current_schema());
    EXECUTE format(
        'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO baton_app',
        current_schema());
    REVOKE ALL ON _sqlx_migrations FROM baton_app;
    -- Tables later migrations create (as this role) are granted the same way.
    EXECUTE format(
        'ALTER DEFAULT PRIVILEGES IN SCHEMA %I '
        'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO baton_app',
        current_schema());
    -- A superuser may switch to any role; anyone else needs the membership. From
    -- Postgres 16 on a membership may exist without the right to SET ROLE.
    IF NOT me.rolsuper THEN
        IF current_setting('server_version_num')::int >= 160000 THEN
            can_set := pg_has_role(current_user, 'baton_app', 'SET');
        ELSE
            can_set := pg_has_role(current_user, 'baton_app', 'MEMBER');
        END IF;
        IF NOT can_set THEN
            BEGIN
                GRANT baton_app TO CURRENT_USER;
            EXCEPTION WHEN insufficient_privilege THEN
                RAISE NOTICE 'role baton_app not granted to %: no admin option on it',
                    current_user;
            END;
        END IF;
    END IF;
END
$$;
