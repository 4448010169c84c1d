-- +goose Up
-- The reconciler's scan (orders.Repository.ReconcileCandidates) has compared REFUNDED orders since
-- 2026-12-07 (a forged full refund is a refund_drift), and its status list no longer implied the old
-- index's predicate (NOT IN ('CANCELLED', 'REFUNDED')): PostgreSQL read the whole orders table every
-- RECONCILE_INTERVAL (84 ms and 6,648 buffers at 400k orders). The predicate is the query's own list
-- again, and the key is created_at, the lookback's bound: a run reads only the orders created within
-- RECONCILE_LOOKBACK, whatever the table's size (7 ms and 268 buffers at 400k). created_at never
-- changes, so an update that leaves the status alone stays HOT, which updated_at, the old key, prevented.
DROP INDEX orders_reconcile_idx;
CREATE INDEX orders_reconcile_idx ON orders (created_at) WHERE status NOT IN ('PENDING', 'CANCELLED');

-- +goose Down
DROP INDEX orders_reconcile_idx;
CREATE INDEX orders_reconcile_idx ON orders (updated_at) WHERE status NOT IN ('CANCELLED', 'REFUNDED');
