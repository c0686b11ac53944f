-- Which destinations subscribe to which event type, one row per (type, destination);
-- `*` for a destination that takes every type (event_types NULL or containing "*").
-- A publish finds its destinations here by index, however many the space has.
CREATE TABLE subscriptions (
    space_id       TEXT NOT NULL,
    event_type     TEXT NOT NULL,
    destination_id TEXT NOT NULL REFERENCES destinations(id) ON DELETE CASCADE,
    PRIMARY KEY (space_id, event_type, destination_id)
);
CREATE INDEX subscriptions_by_destination ON subscriptions (destination_id);

INSERT INTO subscriptions (space_id, event_type, destination_id)
    SELECT space_id, '*', id FROM destinations WHERE event_types IS NULL;
INSERT OR IGNORE INTO subscriptions (space_id, event_type, destination_id)
    SELECT d.space_id, j.value, d.id FROM destinations d, json_each(d.event_types) j
    WHERE d.event_types IS NOT NULL;
