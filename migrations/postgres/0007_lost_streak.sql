-- How many times in a row a delivery's attempt was lost because the process
-- sending it died (its lease ran out). At 3 the delivery fails with class
-- `lost` instead of being tried again: no input can cause an endless crash loop.
ALTER TABLE deliveries ADD COLUMN lost_streak BIGINT NOT NULL DEFAULT 0;
