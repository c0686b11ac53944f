-- Alerts (docs §6, D16): every admin notification also goes out, to the alert webhooks
-- (destinations subscribed to `partyflow.alert`, sent by the engine) of its space and of
-- the install's alert space, and by e-mail to the space's and the install's addresses.
-- The relay takes notifications whose `alerted_at` is NULL, oldest first; those that
-- existed before alerts did count as sent.
ALTER TABLE notifications ADD COLUMN alerted_at INTEGER;
UPDATE notifications SET alerted_at = created_at;
CREATE INDEX notifications_to_alert ON notifications (id) WHERE alerted_at IS NULL;

-- Install-wide alert settings: `alert_space` = the space whose alert webhooks get every
-- space's alerts.
CREATE TABLE alert_settings (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);

-- Where alerts are e-mailed: a space's addresses, or every space's (space_id NULL).
CREATE TABLE alert_emails (
    id          TEXT PRIMARY KEY,
    space_id    TEXT REFERENCES spaces(id) ON DELETE CASCADE,
    address     TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX alert_emails_once ON alert_emails (COALESCE(space_id, ''), address);

-- E-mails waiting to be sent (one per notification and address); a sent one is deleted,
-- one that failed for good keeps its last error with next_attempt_at NULL.
CREATE TABLE alert_outbox (
    id               TEXT PRIMARY KEY,
    notification_id  TEXT NOT NULL,
    space_id         TEXT REFERENCES spaces(id) ON DELETE CASCADE,
    address          TEXT NOT NULL,
    subject          TEXT NOT NULL,
    body             TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    last_error       TEXT,
    created_at       INTEGER NOT NULL
);
CREATE UNIQUE INDEX alert_outbox_once ON alert_outbox (notification_id, address);
CREATE INDEX alert_outbox_due ON alert_outbox (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
