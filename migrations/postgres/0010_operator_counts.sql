-- Counts an operator's metrics read at each scrape, across every tenant: the runs not yet
-- in a final status by status, and the tool calls held uncertain. Partial indexes keep
-- both reads proportional to what they count, not to every run or receipt ever kept.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE INDEX runs_active_by_status ON runs (status)
    WHERE status NOT IN ('completed', 'failed', 'cancelled');
CREATE INDEX receipts_uncertain ON receipts (tenant_id)
    WHERE state = 'uncertain';
