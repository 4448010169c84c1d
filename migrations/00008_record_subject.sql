-- +goose Up
-- What a record is about, in columns: kind ('pay', 'create_order') and, for a pay record, the order it
-- pays. The sweeper and the reconciler find pay records by kind and read the order from order_id, never
-- by matching the URL; the path stays only as part of the request (and its fingerprint). NULL for rows of
-- other routes. Existing rows are backfilled from their path.
ALTER TABLE idempotency_keys ADD COLUMN kind TEXT, ADD COLUMN order_id BIGINT;
UPDATE idempotency_keys
   SET kind = 'pay', order_id = substring(path FROM '^/v1/orders/([0-9]{1,18})/pay$')::BIGINT
 WHERE path ~ '^/v1/orders/[0-9]{1,18}/pay$';
UPDATE idempotency_keys SET kind = 'create_order' WHERE method = 'POST' AND path = '/v1/orders';
-- The sweeper's and the reconciler's lookups: unfinished records of one kind.
CREATE INDEX idempotency_keys_kind_state_idx ON idempotency_keys (kind, state, locked_until)
    WHERE state IN ('PROCESSING', 'FAILED_RETRYABLE');

-- +goose Down
DROP INDEX idempotency_keys_kind_state_idx;
ALTER TABLE idempotency_keys DROP COLUMN order_id, DROP COLUMN kind;
