-- Which instance claimed a delivery in `sending`. Only PostgreSQL's claims set it (there
-- several instances share the database, and an instance claims ahead for a destination
-- only while every delivery in flight to it is its own); SQLite is served by one process.
-- Here so both backends have the same tables (`partyflow copy` moves every column).
ALTER TABLE deliveries ADD COLUMN claimed_by TEXT;
