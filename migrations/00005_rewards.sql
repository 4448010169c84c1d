-- +goose Up
-- The rewards catalogue: what a user can buy with points. cost_points is int64 like every amount here.
CREATE TABLE rewards (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    cost_points  BIGINT NOT NULL CHECK (cost_points > 0)
);
INSERT INTO rewards (id, name, cost_points) VALUES
    ('coupon-10', '1 EUR off your next order', 10),
    ('coupon-50', '6 EUR off your next order', 50);

-- One coupon per redeemed form. form_token_id is the one-time form token that paid for it, and its
-- UNIQUE constraint is the database's last guard: whatever Redis says (a lease that expired while the
-- first submit was still in its transaction, a Redis that lost its data), a second transaction for the
-- same token conflicts here and rolls back, debit included. balance_after is the balance the redeem
-- left, so the first answer can be rebuilt byte for byte from the database when Redis lost it.
CREATE TABLE coupons (
    id             BIGSERIAL PRIMARY KEY,
    user_id        BIGINT NOT NULL REFERENCES users (id),
    reward         TEXT NOT NULL REFERENCES rewards (id),
    code           TEXT NOT NULL UNIQUE,
    form_token_id  TEXT NOT NULL,
    balance_after  BIGINT NOT NULL CHECK (balance_after >= 0),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT coupons_form_token_id_uq UNIQUE (form_token_id)
);
-- The storefront lists a user's newest coupons first.
CREATE INDEX coupons_user_id_idx ON coupons (user_id, id);

-- +goose Down
DROP TABLE coupons;
DROP TABLE rewards;
