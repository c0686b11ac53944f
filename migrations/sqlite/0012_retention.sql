-- Retention (docs D10, issue 13): a space's own retention, a duration such as `30days`
-- (humantime's form, as the API shows it); NULL keeps its plan's (`[retention]`).
ALTER TABLE spaces ADD COLUMN retention TEXT;

-- The purge deletes old finished deliveries; deliveries point at each other when one is
-- resent (`ON DELETE SET NULL`), and each deleted row looks its referrers up: without
-- these, a full scan of the deliveries per deleted row. Only resent ones are indexed.
CREATE INDEX deliveries_resent_from ON deliveries (resent_from) WHERE resent_from IS NOT NULL;
CREATE INDEX deliveries_resent_as ON deliveries (resent_as) WHERE resent_as IS NOT NULL;

-- Read notifications older than the retention, a space's at a time, without stepping
-- over its unread ones.
CREATE INDEX notifications_read_by_space ON notifications (space_id, id) WHERE read_at IS NOT NULL;

-- Expired console sessions.
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
