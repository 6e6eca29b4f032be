-- Fenced leases on runs (DESIGN.md §3). Only the replica holding a run's lease drives it.
-- `lease_epoch` is the fencing token: it grows with every acquisition, and every engine
-- append checks it. Expiry is in Unix milliseconds so both databases compare it alike.
ALTER TABLE runs ADD COLUMN lease_owner TEXT;
ALTER TABLE runs ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN lease_expires_ms BIGINT;

-- Renewal: one statement per replica renews every lease it holds.
CREATE INDEX runs_by_lease_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL;
