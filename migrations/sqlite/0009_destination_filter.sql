-- A destination's payload filter (issue 15, `filter` in the API): a jq expression run on each event's
-- payload at publish; only `true` lets the event through. `filtered_events` counts
-- the events it kept out (as `skipped_events` counts those missed while inactive).
ALTER TABLE destinations ADD COLUMN payload_filter TEXT;
ALTER TABLE destinations ADD COLUMN filtered_events INTEGER NOT NULL DEFAULT 0;
-- Publishing looks up a space's filtered destinations; most spaces have none, and
-- this index answers that at once.
CREATE INDEX destinations_filtered ON destinations (space_id) WHERE payload_filter IS NOT NULL;
