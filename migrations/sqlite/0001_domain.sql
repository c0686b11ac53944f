-- The whole domain of SPEC §1. Times are Unix milliseconds (INTEGER) and JSON is
-- TEXT on both backends, so the SQL text is shared wherever the dialects agree.

CREATE TABLE spaces (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    plan        TEXT NOT NULL CHECK (plan IN ('free', 'pro', 'enterprise')),
    created_at  INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    space_id     TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    prefix       TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
);
CREATE INDEX api_keys_by_space ON api_keys (space_id, id);

CREATE TABLE channels (
    id          TEXT PRIMARY KEY,
    space_id    TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (space_id, name)
);

CREATE TABLE messages (
    id           TEXT PRIMARY KEY,
    space_id     TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    channel_id   TEXT NOT NULL REFERENCES channels(id) ON DELETE CASCADE,
    text         TEXT NOT NULL,
    attachments  TEXT,
    source_kind  TEXT NOT NULL CHECK (source_kind IN ('incoming_webhook', 'bot', 'api')),
    source_id    TEXT,
    created_at   INTEGER NOT NULL
);
CREATE INDEX messages_by_channel ON messages (channel_id, id);

CREATE TABLE events (
    id               TEXT PRIMARY KEY,
    space_id         TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    event_type       TEXT NOT NULL,
    payload          TEXT NOT NULL,
    created_at       INTEGER NOT NULL
);
CREATE INDEX events_by_space ON events (space_id, id);
CREATE INDEX events_by_space_type ON events (space_id, event_type, id);

CREATE TABLE idempotency_keys (
    space_id      TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    key           TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    -- The first answer, rebuilt from these on a replay.
    event_id      TEXT NOT NULL,
    deliveries    INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (space_id, key)
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

CREATE TABLE destinations (
    id                          TEXT PRIMARY KEY,
    space_id                    TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    url                         TEXT NOT NULL,
    description                 TEXT NOT NULL DEFAULT '',
    event_types                 TEXT,
    secret                      TEXT NOT NULL,
    previous_secret             TEXT,
    previous_secret_expires_at  INTEGER,
    rate_limit_count            INTEGER,
    rate_limit_period           TEXT CHECK (rate_limit_period IN ('second', 'minute', 'hour')),
    max_attempts                INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 20),
    timeout_seconds             INTEGER NOT NULL CHECK (timeout_seconds BETWEEN 1 AND 60),
    retry_policy                TEXT NOT NULL,
    transformation              TEXT,
    status                      TEXT NOT NULL CHECK (status IN ('active', 'inactive')),
    consecutive_dead_letters    INTEGER NOT NULL DEFAULT 0,
    skipped_events              INTEGER NOT NULL DEFAULT 0,
    disabled_reason             TEXT,
    created_at                  INTEGER NOT NULL,
    updated_at                  INTEGER NOT NULL
);
CREATE INDEX destinations_by_space ON destinations (space_id, id);

CREATE TABLE deliveries (
    id               TEXT PRIMARY KEY,
    space_id         TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    event_id         TEXT NOT NULL REFERENCES events(id) ON DELETE CASCADE,
    destination_id   TEXT NOT NULL REFERENCES destinations(id) ON DELETE CASCADE,
    event_type       TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'sending', 'retrying', 'succeeded', 'failed', 'cancelled')),
    paused           INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    lease_expires_at INTEGER,
    last_error_class TEXT,
    last_status_code INTEGER,
    resent_from      TEXT REFERENCES deliveries(id) ON DELETE SET NULL,
    resent_as        TEXT REFERENCES deliveries(id) ON DELETE SET NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    finished_at      INTEGER
);
-- The engine: due deliveries in order, and leases to reclaim after a crash.
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status IN ('pending', 'retrying') AND paused = FALSE;
CREATE INDEX deliveries_leased ON deliveries (lease_expires_at) WHERE status = 'sending';
-- The console and the API: newest first, by each filter.
CREATE INDEX deliveries_by_space ON deliveries (space_id, id);
CREATE INDEX deliveries_by_space_status ON deliveries (space_id, status, id);
CREATE INDEX deliveries_by_space_destination ON deliveries (space_id, destination_id, id);
CREATE INDEX deliveries_by_space_error ON deliveries (space_id, last_error_class, id);
CREATE INDEX deliveries_by_space_type ON deliveries (space_id, event_type, id);
CREATE INDEX deliveries_by_destination_status ON deliveries (destination_id, status);
CREATE INDEX deliveries_by_event ON deliveries (event_id);
CREATE INDEX deliveries_by_status ON deliveries (status, id);
CREATE INDEX deliveries_by_error ON deliveries (last_error_class, id);

CREATE TABLE attempts (
    id                TEXT PRIMARY KEY,
    delivery_id       TEXT NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
    space_id          TEXT NOT NULL,
    attempt_number    INTEGER NOT NULL,
    started_at        INTEGER NOT NULL,
    duration_ms       INTEGER NOT NULL,
    request_url       TEXT NOT NULL,
    request_headers   TEXT NOT NULL,
    request_body      TEXT NOT NULL,
    response_status   INTEGER,
    response_headers  TEXT,
    response_body     TEXT,
    error_class       TEXT,
    error_message     TEXT
);
CREATE INDEX attempts_by_delivery ON attempts (delivery_id, started_at);

CREATE TABLE incoming_webhooks (
    id                    TEXT PRIMARY KEY,
    space_id              TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    channel_id            TEXT NOT NULL REFERENCES channels(id) ON DELETE CASCADE,
    name                  TEXT NOT NULL,
    token_hash            TEXT NOT NULL,
    signing_secret        TEXT,
    status                TEXT NOT NULL CHECK (status IN ('active', 'disabled')),
    consecutive_failures  INTEGER NOT NULL DEFAULT 0,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    disabled_at           INTEGER
);
CREATE INDEX incoming_webhooks_by_space ON incoming_webhooks (space_id, id);

-- Standard Webhooks `webhook-id`s already accepted by a signed incoming webhook (replay refusal).
CREATE TABLE incoming_replays (
    webhook_id   TEXT NOT NULL REFERENCES incoming_webhooks(id) ON DELETE CASCADE,
    message_id   TEXT NOT NULL,
    seen_at      INTEGER NOT NULL,
    PRIMARY KEY (webhook_id, message_id)
);

CREATE TABLE bots (
    id          TEXT PRIMARY KEY,
    space_id    TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
CREATE INDEX bots_by_space ON bots (space_id, id);

CREATE TABLE users (
    id             TEXT PRIMARY KEY,
    email          TEXT NOT NULL UNIQUE,
    password_hash  TEXT NOT NULL,
    role           TEXT NOT NULL CHECK (role IN ('admin', 'support')),
    created_at     INTEGER NOT NULL,
    disabled_at    INTEGER
);

CREATE TABLE notifications (
    id            TEXT PRIMARY KEY,
    space_id      TEXT REFERENCES spaces(id) ON DELETE CASCADE,
    kind          TEXT NOT NULL,
    subject_kind  TEXT,
    subject_id    TEXT,
    message       TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    read_at       INTEGER
);
CREATE INDEX notifications_unread ON notifications (read_at, id);
CREATE INDEX notifications_by_space ON notifications (space_id, id);
