-- Messages posted while a turn runs may wait in the run's queue (`message.queued`
-- events); the projection counts them. Each is taken, in order, in the append that
-- settles the turn before it, so a run never rests idle with a queue. A message posted
-- with `strategy: interrupt` or `rollback` asks the engine to end the turn early.
-- Append-only: never edit this file once applied; add a new migration instead.
ALTER TABLE runs ADD COLUMN queued_messages BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN interrupt_requested BOOLEAN NOT NULL DEFAULT false;
