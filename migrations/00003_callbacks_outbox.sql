-- +goose Up
-- The platform's payment id, recorded when the pay flow creates the payment or a callback applies.
ALTER TABLE orders ADD COLUMN payment_id TEXT;

-- Every payment callback received, applied or not: an operator can see "3 received, 1 applied".
-- order_id is what the callback claimed (merchant_order_no), not a foreign key: callbacks for unknown
-- orders are recorded too.
CREATE TABLE payment_callbacks (
    id            BIGSERIAL PRIMARY KEY,
    event_id      TEXT,
    payment_id    TEXT,
    order_id      BIGINT,
    status        TEXT,
    amount_cents  BIGINT,
    currency      TEXT,
    signature_ok  BOOLEAN NOT NULL,
    applied       BOOLEAN NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN ('applied', 'duplicate', 'stale', 'rejected')),
    reason        TEXT NOT NULL,
    received_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX payment_callbacks_order_id_idx ON payment_callbacks (order_id);

-- Transactional outbox: rows are inserted in the same transaction as the state change they announce,
-- and a relay publishes them to RabbitMQ (exchange idemshop.events, routing key = routing_key) and sets
-- published_at after the broker's confirm. Delivery is at least once. There is no unique index per order
-- on purpose: the state-machine UPDATE is the guard, and lab scenario S1 must be able to show what
-- happens without it.
CREATE TABLE outbox (
    id            BIGSERIAL PRIMARY KEY,
    event_id      UUID NOT NULL UNIQUE,
    routing_key   TEXT NOT NULL,
    payload       JSONB NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at  TIMESTAMPTZ,
    attempts      INT NOT NULL DEFAULT 0,
    last_error    TEXT
);
CREATE INDEX outbox_pending_idx ON outbox (id) WHERE published_at IS NULL;

-- Refunds the shop owes: recorded in the callback transaction (stock gone at payment time, or a
-- success for an order that had already failed), sent later by the sweeper (refunds.Executor) to the
-- platform, which is idempotent on refund_no.
CREATE TABLE refund_requests (
    id            BIGSERIAL PRIMARY KEY,
    order_id      BIGINT NOT NULL REFERENCES orders (id),
    payment_id    TEXT NOT NULL,
    refund_no     TEXT NOT NULL UNIQUE,
    amount_cents  BIGINT NOT NULL CHECK (amount_cents > 0),
    reason        TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'REQUESTED', 'DONE')),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE refund_requests;
DROP TABLE outbox;
DROP TABLE payment_callbacks;
ALTER TABLE orders DROP COLUMN payment_id;
