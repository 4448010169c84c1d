-- +goose Up
-- The reaper takes the oldest published rows first, through an index of the published rows by
-- published_at. It replaces 00011's BRIN index on created_at, which stops helping after the first
-- retention window: once the reaper's deletes are vacuumed, new rows fill the freed pages, every
-- range then spans the whole window, and each run read the whole table (docs/performance.md, ninth
-- session). Unpublished rows are left out of the index, so an insert adds nothing to it; the mark
-- adds one entry (it already adds one to every other index, since published_at is in
-- outbox_pending_idx's predicate and the UPDATE cannot be HOT). CREATE INDEX holds back writes to the
-- outbox while it reads the table (about a second per million rows here).
DROP INDEX outbox_created_brin;
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

-- +goose Down
DROP INDEX outbox_published_idx;
CREATE INDEX outbox_created_brin ON outbox USING brin (created_at) WITH (autosummarize = on);
