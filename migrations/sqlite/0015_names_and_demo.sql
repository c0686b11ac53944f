-- Destination names (issue 16): a destination's own name, as given (1-100 characters,
-- trimmed). NULL: it has none of its own and goes by its URL's host, computed where it
-- is read (`domain::shown_name`), so existing destinations need no backfill and a
-- changed URL changes the name shown.
ALTER TABLE destinations ADD COLUMN name TEXT;

-- The demo space (issue 16, docs D17): `demo_until` is set on the one space
-- `partyflow demo` made; the server sends its sample traffic until then (ms).
ALTER TABLE spaces ADD COLUMN demo_until INTEGER;
