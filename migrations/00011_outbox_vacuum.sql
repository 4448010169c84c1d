-- +goose Up
-- Every event leaves dead tuples in the outbox: the relay's UPDATE that marks it published (and its
-- entry in outbox_pending_idx, which every poll walks until VACUUM removes it), then the reaper's
-- DELETE after OUTBOX_RETENTION. Autovacuum's default waits for a fifth of the table to be dead,
-- which in an outbox that holds days of events is hours of polls over dead entries; a fixed
-- threshold vacuums it after that many changes, whatever its size (docs/performance.md).
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);

-- The reaper takes the oldest published rows first. Unpublished rows are left out of the index, so an
-- insert adds nothing to it; the mark adds one entry (it already adds one to every other index, since
-- published_at is in outbox_pending_idx's predicate and the UPDATE cannot be HOT). A BRIN index on
-- created_at was tried first: once the reaper's deletes are vacuumed, new rows fill the freed pages,
-- every range then spans the whole retention window, and each run read the whole table. CREATE INDEX
-- holds back writes to the outbox while it reads the table (about a second per million rows here).
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

-- +goose Down
DROP INDEX outbox_published_idx;
ALTER TABLE outbox RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
