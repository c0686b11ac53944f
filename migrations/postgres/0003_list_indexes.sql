-- Indexes for the REST API's keyset listings (newest first, `id < cursor`), so a page
-- costs the same on the first and the millionth row.

-- Channels were only indexed by (space_id, name): listing them by ID sorted every row.
CREATE INDEX channels_by_space ON channels (space_id, id);

-- `?unread=true`: a space's few unread notifications among its many read ones.
CREATE INDEX notifications_unread_by_space ON notifications (space_id, id) WHERE read_at IS NULL;
