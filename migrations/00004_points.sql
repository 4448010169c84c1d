-- +goose Up
-- One balance per user. The CHECK is the last line of defence for the later redeem feature: a debit
-- that would take the balance below zero fails its whole transaction instead of going negative.
-- A user with no row has balance 0.
CREATE TABLE points_accounts (
    user_id     BIGINT PRIMARY KEY REFERENCES users (id),
    balance     BIGINT NOT NULL DEFAULT 0 CHECK (balance >= 0),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Every change of a balance, written in the same transaction as the balance update. biz_id is the
-- business key of the change ("order-paid:<order id>"; redeem writes its own, with a negative delta)
-- and its UNIQUE index is the consumer's source of truth for dedup (layer 2): a redelivered or
-- republished order.paid inserts nothing, so it credits nothing. The user_id foreign key turns an
-- event for an unknown user into a failed (and, after the delivery limit, dead-lettered) message
-- (dropped in 00009: the account row written with every ledger row does that since).
CREATE TABLE points_ledger (
    id          BIGSERIAL PRIMARY KEY,
    user_id     BIGINT NOT NULL REFERENCES users (id),
    biz_id      TEXT NOT NULL UNIQUE,
    delta       BIGINT NOT NULL,
    reason      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- GET /v1/points lists a user's newest entries first.
CREATE INDEX points_ledger_user_id_idx ON points_ledger (user_id, id);

-- +goose Down
DROP TABLE points_ledger;
DROP TABLE points_accounts;
