-- +goose Up
-- How many times the platform left a refund request unanswered (a timeout, a 5xx, no connection). The
-- request stays owed and is sent again at every sweep; once the count reaches SWEEP_MAX_ATTEMPTS the
-- sweeper raises one alert (refund_unanswered), as it gives up on a pay record after as many unanswered
-- questions. Until 2026-12-07 such a refund was a WARN line at every sweep, for as long as it lasted.
ALTER TABLE refund_requests ADD COLUMN unanswered INT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE refund_requests DROP COLUMN unanswered;
