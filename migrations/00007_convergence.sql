-- +goose Up
-- Refunds are facts recorded on the order: refunded_cents is how much of amount_cents the platform has
-- given back so far (int64 cents). An order whose refunded_cents reaches amount_cents becomes REFUNDED
-- once it is PAID, whichever of the SUCCESS and the refund the shop learnt of first.
-- reconciled_at is when the reconciler last compared the order with the platform's query API.
ALTER TABLE orders
    ADD COLUMN refunded_cents BIGINT NOT NULL DEFAULT 0 CHECK (refunded_cents >= 0),
    ADD COLUMN reconciled_at TIMESTAMPTZ;

-- One row per REFUNDED event: its primary key makes a resent refund count once towards refunded_cents.
-- The platform gives every refund its own event id; copies and replays of it share that id.
CREATE TABLE order_refund_events (
    event_id      TEXT PRIMARY KEY,
    order_id      BIGINT NOT NULL REFERENCES orders (id),
    amount_cents  BIGINT NOT NULL CHECK (amount_cents > 0),
    received_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX order_refund_events_order_id_idx ON order_refund_events (order_id);

-- The reconciler's scan: orders that may still differ from the platform.
CREATE INDEX orders_reconcile_idx ON orders (updated_at) WHERE status NOT IN ('CANCELLED', 'REFUNDED');

-- 'recorded': the callback's fact was stored (a partial refund, or a refund that came before its
-- payment's SUCCESS) but no status changed yet.
ALTER TABLE payment_callbacks DROP CONSTRAINT payment_callbacks_outcome_check;
ALTER TABLE payment_callbacks ADD CONSTRAINT payment_callbacks_outcome_check
    CHECK (outcome IN ('applied', 'duplicate', 'stale', 'recorded', 'rejected'));

-- How many times the sweeper asked the platform about a PROCESSING record and got no answer. It is
-- not `attempts` (takeovers, which a client's own retries also count): only unanswered questions bound
-- the sweeper (SWEEP_MAX_ATTEMPTS); after that the slower reconciler keeps asking.
ALTER TABLE idempotency_keys ADD COLUMN sweeps INT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN sweeps;
ALTER TABLE payment_callbacks DROP CONSTRAINT payment_callbacks_outcome_check;
ALTER TABLE payment_callbacks ADD CONSTRAINT payment_callbacks_outcome_check
    CHECK (outcome IN ('applied', 'duplicate', 'stale', 'rejected'));
DROP INDEX orders_reconcile_idx;
DROP TABLE order_refund_events;
ALTER TABLE orders DROP COLUMN reconciled_at, DROP COLUMN refunded_cents;
