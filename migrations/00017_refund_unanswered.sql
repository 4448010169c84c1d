-- +goose Up
-- How many times the platform left a refund request unanswered (a timeout, a 5xx, no connection). The
-- request stays owed and is sent again at every sweep; once the count reaches SWEEP_MAX_ATTEMPTS the
-- sweeper raises one alert (refund_unanswered), as it gives up on a pay record after as many unanswered
-- questions, and unanswered_alerted records that it did: one alert per request, whichever sweeper gets
-- there first and whatever its SWEEP_MAX_ATTEMPTS. Until 2026-12-07 such a refund was a WARN line at
-- every sweep, for as long as it lasted.
ALTER TABLE refund_requests ADD COLUMN unanswered INT NOT NULL DEFAULT 0;
ALTER TABLE refund_requests ADD COLUMN unanswered_alerted BOOLEAN NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE refund_requests DROP COLUMN unanswered_alerted;
ALTER TABLE refund_requests DROP COLUMN unanswered;
