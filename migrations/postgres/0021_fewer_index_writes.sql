-- Indexes of `deliveries` that hold only the rows their readers look for (docs §7). Every
-- index a write touches costs a page written (on SQLite a WAL frame, on PostgreSQL an
-- index tuple), and most deliveries go pending -> sending -> succeeded at once.
--
-- The error classes: a delivery has an entry only while it has an error class. Before,
-- every delivery had one, written when it was published and rewritten by its record
-- (which sets the column, if only to NULL again). The filter of the console and the API
-- (`last_error_class = …`) implies `IS NOT NULL`, so it still reads these.
DROP INDEX deliveries_by_space_error;
DROP INDEX deliveries_by_error;
CREATE INDEX deliveries_by_space_error ON deliveries (space_id, last_error_class, id)
    WHERE last_error_class IS NOT NULL;
CREATE INDEX deliveries_by_error ON deliveries (last_error_class, id)
    WHERE last_error_class IS NOT NULL;
-- A destination's deliveries by status: read only for those in flight (the claims' count
-- under the cap) and those failed (the count to resend). Before, a delivery was written
-- into it when published, moved when claimed and moved again when it succeeded; now it is
-- added when claimed and removed when it succeeds. The deliveries waiting for a
-- destination are read through `deliveries_waiting_in_order`. Written as an OR, not an
-- IN: SQLite's planner sees that `status = 'sending'` implies an OR of equalities.
DROP INDEX deliveries_by_destination_status;
CREATE INDEX deliveries_by_destination_status ON deliveries (destination_id, status)
    WHERE status = 'sending' OR status = 'failed';
