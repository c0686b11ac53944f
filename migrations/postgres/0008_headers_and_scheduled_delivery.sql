-- A destination's own request headers, sent on every attempt (docs §2.9): a JSON
-- object of name to value. The values are secrets, shown masked once stored.
ALTER TABLE destinations ADD COLUMN headers TEXT NOT NULL DEFAULT '{}';
-- Scheduled delivery (docs §2.1): when the publisher asked the event to go out
-- (Unix ms), NULL for at once. Its deliveries wait as pending with next_attempt_at
-- at that time; each keeps the time it was scheduled for.
ALTER TABLE events ADD COLUMN deliver_at BIGINT;
ALTER TABLE deliveries ADD COLUMN deliver_at BIGINT;
