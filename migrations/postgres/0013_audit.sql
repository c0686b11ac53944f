-- The audit log (docs D14): one row per change made by a console user or an API key,
-- written in the transaction of the change. `space_id` is NULL for install-wide changes
-- (spaces' creation, users); no foreign keys, so an entry outlives what it names.
-- `actor_label` is what people read (the user's email, the key's ID); `role` is the
-- user's (NULL for a key); `detail` is JSON text (for bulk actions: count and filter);
-- `source` the request's TCP peer address.
CREATE TABLE audit_log (
    id          TEXT PRIMARY KEY,
    space_id    TEXT,
    actor_kind  TEXT NOT NULL,
    actor_id    TEXT NOT NULL,
    actor_label TEXT NOT NULL,
    role        TEXT,
    action      TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_id   TEXT NOT NULL,
    detail      TEXT NOT NULL,
    source      TEXT,
    created_at  BIGINT NOT NULL
);
CREATE INDEX audit_log_by_space ON audit_log (space_id, id);
CREATE INDEX audit_log_by_actor ON audit_log (actor_id, id);
