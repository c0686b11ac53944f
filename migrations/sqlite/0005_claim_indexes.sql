-- The engine's claims (see storage/shared.rs `claim_sql` and `claim_for`).
-- The time-ordered scan of due deliveries reads only this index: the destination and
-- status are in it, so stepping over a destination at its in-flight cap costs no table reads.
DROP INDEX deliveries_due;
CREATE INDEX deliveries_due ON deliveries (next_attempt_at, id, destination_id, status)
    WHERE status IN ('pending', 'retrying') AND paused = FALSE;
-- A claim for named destinations (woken by a publish or a freed slot) takes each one's
-- earliest due deliveries straight from here, whatever waits for other destinations.
CREATE INDEX deliveries_due_by_destination ON deliveries (destination_id, next_attempt_at, id)
    WHERE status IN ('pending', 'retrying') AND paused = FALSE;
