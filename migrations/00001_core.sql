-- +goose Up
-- Demo users. The bearer token is stored as its SHA-256 hex digest, never in clear.
CREATE TABLE users (
    id          BIGSERIAL PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- stock has no CHECK (stock >= 0) on purpose: the guard this project teaches is the conditional
-- decrement (UPDATE ... WHERE stock >= qty), and lab scenario S5 must be able to show an oversell when
-- that guard is missing. Money is int64 minor units (cents).
CREATE TABLE products (
    id           BIGSERIAL PRIMARY KEY,
    sku          TEXT NOT NULL UNIQUE,
    name         TEXT NOT NULL,
    price_cents  BIGINT NOT NULL CHECK (price_cents > 0),
    currency     CHAR(3) NOT NULL,
    stock        BIGINT NOT NULL
);

CREATE TABLE orders (
    id            BIGSERIAL PRIMARY KEY,
    user_id       BIGINT NOT NULL REFERENCES users (id),
    product_id    BIGINT NOT NULL REFERENCES products (id),
    quantity      INT NOT NULL CHECK (quantity BETWEEN 1 AND 10),
    amount_cents  BIGINT NOT NULL CHECK (amount_cents >= 0),
    currency      CHAR(3) NOT NULL,
    status        TEXT NOT NULL DEFAULT 'PENDING' CHECK (status IN
                  ('PENDING', 'PAYING', 'PAID', 'FAILED', 'CANCELLED', 'REFUND_REQUIRED', 'REFUNDED')),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX orders_user_id_idx ON orders (user_id, id);

-- One row per (user, Idempotency-Key). The UNIQUE constraint is the guard: a second insert of the same
-- pair waits for the first transaction and then conflicts. state is the ladder's state machine; routes
-- whose effect fits in one transaction only ever commit COMPLETED rows, the pay flow uses all four.
-- fence is the highest fencing token that wrote the row; locked_until is the PROCESSING lease.
-- user_id is the key's scope, not a foreign key: the caller is authenticated before the row is written,
-- and an FK check would cost one more lookup on every guarded request. fillfactor leaves room on each
-- page for HOT updates. (Storing the response is not one: it changes state and locked_until, which
-- later migrations index; a DBA helper counted 0 HOT of 30 on 2026-12-07. Kept as it is.)
CREATE TABLE idempotency_keys (
    id               BIGSERIAL PRIMARY KEY,
    user_id          BIGINT NOT NULL,
    idempotency_key  TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    method           TEXT NOT NULL,
    path             TEXT NOT NULL,
    fingerprint      TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN
                     ('PROCESSING', 'COMPLETED', 'FAILED_RETRYABLE', 'FAILED_PERMANENT')),
    response_status  INT,
    response_body    BYTEA,
    fence            BIGINT NOT NULL DEFAULT 0,
    locked_until     TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT idempotency_keys_user_key_uq UNIQUE (user_id, idempotency_key)
) WITH (fillfactor = 90);
-- The reaper deletes by age in bounded batches.
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE orders;
DROP TABLE products;
DROP TABLE users;
