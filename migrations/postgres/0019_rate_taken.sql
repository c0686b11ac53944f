-- Each rate key keeps how many slots its window holds (`taken`: its rows in
-- rate_events), so taking a slot reads one row instead of counting the window, which
-- at a thousand sends a second was a thousand index entries per claim. The triggers
-- (once per statement, over its rows) keep it true for every writer: the slots taken,
-- the window's old slots deleted, the retention task's clean-up (which deletes the
-- key's row first; its events then find no row to update). Writers create the key's
-- row, and lock it, before its first slot.
ALTER TABLE rate_keys ADD COLUMN taken BIGINT NOT NULL DEFAULT 0;
UPDATE rate_keys SET taken = (SELECT COUNT(*) FROM rate_events e WHERE e.key = rate_keys.key);

-- One function for both triggers: each names the rows it saw `changed`, added or gone.
CREATE FUNCTION rate_events_taken() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE rate_keys k SET taken = k.taken + CASE TG_OP WHEN 'INSERT' THEN n.c ELSE -n.c END
    FROM (SELECT key, COUNT(*) AS c FROM changed GROUP BY key) n
    WHERE k.key = n.key;
    RETURN NULL;
END $$;
CREATE TRIGGER rate_events_taken_insert AFTER INSERT ON rate_events
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION rate_events_taken();
CREATE TRIGGER rate_events_taken_delete AFTER DELETE ON rate_events
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION rate_events_taken();
