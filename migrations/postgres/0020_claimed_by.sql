-- Which instance claimed a delivery in `sending` (its store's random ID), so an instance
-- claims ahead for a destination (more than its in-flight cap, the rest waiting in its
-- memory for a slot) only while every delivery in flight to it is its own: the cap of
-- five in flight then holds across instances. Read only where status = 'sending'; never
-- cleared (a finished delivery's is meaningless). No default: adding it rewrites nothing.
ALTER TABLE deliveries ADD COLUMN claimed_by TEXT;
