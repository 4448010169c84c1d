-- +goose Up
-- The callback audit's reaper (callback.AuditReaper, CALLBACK_AUDIT_RETENTION) deletes the oldest rows
-- first; without this index each of its batches read the whole table, which grows by a row for every
-- callback copy and every forged POST.
CREATE INDEX payment_callbacks_received_idx ON payment_callbacks (received_at);

-- +goose Down
DROP INDEX payment_callbacks_received_idx;
