-- +goose Up
-- The reaper takes the oldest published rows first, through outbox_published_idx, a B-tree of the
-- published rows by published_at (see 00011). 00011 first landed with a BRIN index on created_at
-- instead, which stops helping after the first retention window: once the reaper's deletes are
-- vacuumed, new rows fill the freed pages, every range then spans the whole window, and each run read
-- the whole table (docs/performance.md, ninth session). 00011 was then changed in place to the B-tree,
-- so a database may have been migrated with either text. This brings both to the same indexes: it
-- drops the BRIN index where there is one and creates the B-tree where there is none; on a database
-- migrated with 00011 as it is now, it does nothing.
DROP INDEX IF EXISTS outbox_created_brin;
CREATE INDEX IF NOT EXISTS outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

-- +goose Down
-- Nothing: 00011 as it is now creates outbox_published_idx, and its Down drops it. The BRIN index of
-- 00011's first text is not brought back.
SELECT 1;
