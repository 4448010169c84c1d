-- +goose Up
-- Every event leaves dead tuples in the outbox: the relay's UPDATE that marks it published (and its
-- entry in outbox_pending_idx, which every poll walks until VACUUM removes it), then the reaper's
-- DELETE after OUTBOX_RETENTION. Autovacuum's default waits for a fifth of the table to be dead,
-- which in an outbox that holds days of events is hours of polls over dead entries; a fixed
-- threshold vacuums it after that many changes, whatever its size (docs/performance.md).
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);

-- +goose Down
ALTER TABLE outbox RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
