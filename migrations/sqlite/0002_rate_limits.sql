-- Sliding-window rate limits kept in the database, so every server instance
-- sharing it enforces one limit together (SPEC §2.5, §3, §4).
CREATE TABLE rate_keys (
    key         TEXT PRIMARY KEY,
    touched_at  INTEGER NOT NULL
);

CREATE TABLE rate_events (
    key  TEXT NOT NULL,
    at   INTEGER NOT NULL
);
CREATE INDEX rate_events_by_key ON rate_events (key, at);
