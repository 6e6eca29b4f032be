-- Finished webhook deliveries by age, for the retention job's pruning.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE INDEX webhook_deliveries_over_by_age ON webhook_deliveries (updated_at)
    WHERE state <> 'pending';
