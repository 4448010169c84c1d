-- +goose Up
-- How many times a PROCESSING record has been taken over (by a retry or the sweeper). The sweeper's
-- bound is not this count but its own unanswered questions (sweeps, migration 00007).
ALTER TABLE idempotency_keys ADD COLUMN attempts INT NOT NULL DEFAULT 0;
-- The sweeper's scan: PROCESSING records whose lease has run out.
CREATE INDEX idempotency_keys_stuck_idx ON idempotency_keys (locked_until) WHERE state = 'PROCESSING';

-- +goose Down
DROP INDEX idempotency_keys_stuck_idx;
ALTER TABLE idempotency_keys DROP COLUMN attempts;
