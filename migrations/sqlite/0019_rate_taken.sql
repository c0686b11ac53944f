-- Each rate key keeps how many slots its window holds (`taken`: its rows in
-- rate_events), so taking a slot reads one row instead of counting the window, which
-- at a thousand sends a second was a thousand index entries per claim. The triggers
-- keep it true for every writer: the slots taken, the window's old slots deleted, the
-- retention task's clean-up (which deletes the key's row first; its events then find
-- no row to update). Writers create the key's row before its first slot.
ALTER TABLE rate_keys ADD COLUMN taken INTEGER NOT NULL DEFAULT 0;
UPDATE rate_keys SET taken = (SELECT COUNT(*) FROM rate_events e WHERE e.key = rate_keys.key);
CREATE TRIGGER rate_events_taken_insert AFTER INSERT ON rate_events
BEGIN
    UPDATE rate_keys SET taken = taken + 1 WHERE key = NEW.key;
END;
CREATE TRIGGER rate_events_taken_delete AFTER DELETE ON rate_events
BEGIN
    UPDATE rate_keys SET taken = taken - 1 WHERE key = OLD.key;
END;
