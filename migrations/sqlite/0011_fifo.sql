-- Ordered delivery (docs D12): a destination's `ordering` is `none` (the default) or
-- `fifo`. A FIFO destination's delivery is claimed only when no earlier event's delivery
-- to it is still waiting; that check reads this index (event IDs sort in publish order).
ALTER TABLE destinations ADD COLUMN ordering TEXT NOT NULL DEFAULT 'none' CHECK (ordering IN ('none', 'fifo'));
CREATE INDEX destinations_fifo ON destinations (id) WHERE ordering = 'fifo';
CREATE INDEX deliveries_waiting_in_order ON deliveries (destination_id, event_id, id)
    WHERE status IN ('pending', 'retrying');
