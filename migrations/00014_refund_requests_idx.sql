-- +goose Up
-- refund_requests only grows: a request ends DONE and stays, as the record of a refund the shop owed.
-- Without these, every statement on it read the whole table:
--   - refunds.ListPending, at every sweep (SWEEP_INTERVAL): the due PENDING requests, oldest first.
--     refund_requests_pending_idx holds only the PENDING ones, in the order the sweep takes them;
--   - refunds.Cap and refunds.CloseAll, in the transaction of a refund callback: an order's open
--     requests. refund_requests_order_id_idx finds them by order.
-- Figures: docs/performance.md ("refund_requests' indexes").
CREATE INDEX refund_requests_pending_idx ON refund_requests (updated_at, id) WHERE status = 'PENDING';
CREATE INDEX refund_requests_order_id_idx ON refund_requests (order_id);

-- +goose Down
DROP INDEX refund_requests_order_id_idx;
DROP INDEX refund_requests_pending_idx;
