-- +goose Up
-- A refund the platform refused is asked again later, not at every sweep: refusals counts the times
-- it was refused, next_attempt_at is when the executor may send it again (REFUND_RETRY_MIN, doubled
-- after each further refusal up to REFUND_RETRY_MAX). A request not yet refused is due at once.
ALTER TABLE refund_requests
    ADD COLUMN refusals INT NOT NULL DEFAULT 0 CHECK (refusals >= 0),
    ADD COLUMN next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now();

-- +goose Down
ALTER TABLE refund_requests DROP COLUMN next_attempt_at, DROP COLUMN refusals;
