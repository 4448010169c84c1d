-- +goose Up
-- Demo users: the bearer token of each is "<name>-token" (alice-token, bob-token, carol-token).
INSERT INTO users (name, token_hash) VALUES
    ('alice', encode(sha256('alice-token'::bytea), 'hex')),
    ('bob',   encode(sha256('bob-token'::bytea), 'hex')),
    ('carol', encode(sha256('carol-token'::bytea), 'hex'));

-- Product 1 has stock 100 and product 2 is the flash-sale item with stock 10 (docs/design.md). No price ends
-- in 13 cents: payments-mock declines such amounts on purpose.
INSERT INTO products (id, sku, name, price_cents, currency, stock) VALUES
    (1, 'MUG-001',     'Idempotent Mug',          1250, 'EUR', 100),
    (2, 'FLASH-001',   'Flash-sale Keyboard',     4900, 'EUR', 10),
    (3, 'TEE-001',     'Exactly-Once T-shirt',    2000, 'EUR', 50),
    (4, 'STICKER-001', 'Fencing Token Sticker',    300, 'EUR', 500);
SELECT setval('products_id_seq', (SELECT max(id) FROM products));

-- +goose Down
DELETE FROM products WHERE id IN (1, 2, 3, 4);
DELETE FROM users WHERE name IN ('alice', 'bob', 'carol');
