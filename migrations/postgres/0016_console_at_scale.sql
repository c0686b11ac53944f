-- The console's search box and its pages at scale (docs §6, issue 16 items 3 and 6).
-- An idempotency key looked up in every space the user may see (the primary key
-- begins with the space).
CREATE INDEX idempotency_keys_by_key ON idempotency_keys (key);
