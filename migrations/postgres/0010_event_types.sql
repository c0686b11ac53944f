-- The event-type catalog (docs §1, "Event types"): one row per (space, name), with an optional JSON
-- Schema (draft 2020-12, JSON text) that payloads of the type must match, an optional
-- example payload, and whether the type is deprecated.
CREATE TABLE event_types (
    id          TEXT PRIMARY KEY,
    space_id    TEXT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL,
    schema      TEXT,
    example     TEXT,
    deprecated  BOOLEAN NOT NULL DEFAULT FALSE,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    UNIQUE (space_id, name)
);
CREATE INDEX event_types_by_space ON event_types (space_id, id);
