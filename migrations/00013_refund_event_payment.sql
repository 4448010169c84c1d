-- +goose Up
-- Which payment a refund event gave money back for. A refund can arrive before the order knows its
-- payment (its SUCCESS delayed), and a platform may hold more than one payment for one order number: a
-- refund recorded then may be another payment's. When the order learns its payment, the events of
-- other payments are taken out of its refunded total (orders.Repository.OwnRefunds). NULL on rows
-- recorded before this column: they count as the order's payment's, as they did.
ALTER TABLE order_refund_events ADD COLUMN payment_id TEXT;

-- +goose Down
ALTER TABLE order_refund_events DROP COLUMN payment_id;
