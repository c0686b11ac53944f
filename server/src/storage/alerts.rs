//! Alerts (docs D16): which notifications still have to go out, the install's alert
//! space, the addresses alerts are e-mailed to, and the outbox of alert e-mails.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::destinations::{DestinationRow, DESTINATION};
use super::notifications::{NotificationRow, NOTIFICATION};
use super::store::{
    convert_all, parse, parse_opt, Args, Conn, DbRow, Dialect, SqlArg, SqlValue, Store,
};
use super::write::Durability;
use super::*;

const ALERT_EMAIL: &str = "id, space_id, address, created_at";
const ALERT_MAIL: &str = "id, notification_id, space_id, address, subject, body, attempts, \
                          next_attempt_at, last_error, created_at";
/// The `alert_settings` key naming the space whose alert webhooks get every space's alerts.
const ALERT_SPACE: &str = "alert_space";

/// What the alert relay and the console's alert settings read and write.
#[async_trait]
pub trait AlertStore: Send + Sync + std::fmt::Debug {
    /// Notifications that have not gone out as alerts yet, oldest first.
    async fn notifications_to_alert(&self, limit: i64) -> Result<Vec<Notification>>;
    /// Records that a notification went out: its e-mails queued (an address that already
    /// has one for it is skipped) and the notification marked, in one transaction, so
    /// doing it twice queues nothing twice.
    async fn record_alerted(
        &self,
        notification: NotificationId,
        mails: &[AlertMail],
        now: UnixMs,
    ) -> Result<()>;
    /// Adds a notification made on purpose (the console's test alert).
    async fn create_alert_test(
        &self,
        notification: &Notification,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// Whether an active destination of `space` names `event_type` in its subscriptions
    /// (the relay publishes an alert only where someone listens).
    async fn has_active_subscribers(&self, space: SpaceId, event_type: &str) -> Result<bool>;

    /// Every space's destinations that name `event_type` in their subscriptions, by
    /// space and URL (the console's alert webhooks).
    async fn list_subscribers_of(&self, event_type: &str) -> Result<Vec<Destination>>;

    /// The space whose alert webhooks get every space's alerts, if one is chosen.
    async fn alert_space(&self) -> Result<Option<SpaceId>>;
    async fn set_alert_space(
        &self,
        space: Option<SpaceId>,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;

    /// Every alert address, the install's first, then by space and address.
    async fn list_alert_emails(&self) -> Result<Vec<AlertEmail>>;
    /// `Conflict` when that scope has the address already.
    async fn add_alert_email(&self, email: &AlertEmail, audit: Option<&AuditEntry>) -> Result<()>;
    async fn remove_alert_email(&self, id: AlertEmailId, audit: Option<&AuditEntry>) -> Result<()>;
    /// The addresses an alert about `space` goes to: the space's and the install's, once.
    async fn alert_recipients(&self, space: Option<SpaceId>) -> Result<Vec<String>>;

    /// Alert e-mails due at `now`, oldest first.
    async fn due_alert_mails(&self, now: UnixMs, limit: i64) -> Result<Vec<AlertMail>>;
    /// A sent e-mail leaves the outbox.
    async fn alert_mail_sent(&self, id: AlertMailId) -> Result<()>;
    /// An attempt that failed: tried again at `next`, or given up on (`None`).
    async fn alert_mail_failed(
        &self,
        id: AlertMailId,
        error: &str,
        next: Option<UnixMs>,
    ) -> Result<()>;
    /// E-mails given up on, newest first (the console shows them).
    async fn list_failed_alert_mails(&self, limit: i64) -> Result<Vec<AlertMail>>;
}

#[async_trait]
impl<D: Dialect> AlertStore for Store<D>
where
    for<'c> &'c mut Conn<D>: Executor<'c, Database = D::DB>,
    for<'q> Args<'q, D>: IntoArguments<'q, D::DB>,
    for<'q> &'q str: SqlArg<'q, D::DB> + ColumnIndex<DbRow<D>>,
    for<'q> Option<&'q str>: SqlArg<'q, D::DB>,
    usize: ColumnIndex<DbRow<D>>,
    i64: SqlValue<D::DB>,
    Option<i64>: SqlValue<D::DB>,
    bool: SqlValue<D::DB>,
    String: SqlValue<D::DB>,
    Option<String>: SqlValue<D::DB>,
{
    async fn notifications_to_alert(&self, limit: i64) -> Result<Vec<Notification>> {
        let sql = format!(
            "SELECT {NOTIFICATION} FROM notifications WHERE alerted_at IS NULL ORDER BY id LIMIT $1"
        );
        let rows = sqlx::query_as::<_, NotificationRow>(&sql)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn record_alerted(
        &self,
        notification: NotificationId,
        mails: &[AlertMail],
        now: UnixMs,
    ) -> Result<()> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        for m in mails {
            sqlx::query(
                "INSERT INTO alert_outbox (id, notification_id, space_id, address, subject, body, \
                 attempts, next_attempt_at, last_error, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (notification_id, address) DO NOTHING",
            )
            .bind(m.id.to_string())
            .bind(m.notification_id.to_string())
            .bind(m.space_id.map(|s| s.to_string()))
            .bind(&m.address)
            .bind(&m.subject)
            .bind(&m.body)
            .bind(m.attempts)
            .bind(m.next_attempt_at)
            .bind(&m.last_error)
            .bind(m.created_at)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "UPDATE notifications SET alerted_at = $1 WHERE id = $2 AND alerted_at IS NULL",
        )
        .bind(now)
        .bind(notification.to_string())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn create_alert_test(&self, n: &Notification, audit: Option<&AuditEntry>) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO notifications (id, space_id, kind, subject_kind, subject_id, message, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(n.id.to_string())
        .bind(n.space_id.map(|s| s.to_string()))
        .bind(&n.kind)
        .bind(&n.subject_kind)
        .bind(&n.subject_id)
        .bind(&n.message)
        .bind(n.created_at);
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn has_active_subscribers(&self, space: SpaceId, event_type: &str) -> Result<bool> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT s.destination_id FROM subscriptions s JOIN destinations d ON d.id = s.destination_id \
             WHERE s.space_id = $1 AND s.event_type = $2 AND d.status = 'active' LIMIT 1",
        )
        .bind(space.to_string())
        .bind(event_type)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.is_some())
    }

    async fn list_subscribers_of(&self, event_type: &str) -> Result<Vec<Destination>> {
        let sql = format!(
            "SELECT {DESTINATION} FROM destinations WHERE id IN \
             (SELECT destination_id FROM subscriptions WHERE event_type = $1) \
             ORDER BY space_id, url"
        );
        let rows = sqlx::query_as::<_, DestinationRow>(&sql)
            .bind(event_type)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn alert_space(&self) -> Result<Option<SpaceId>> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT value FROM alert_settings WHERE key = $1")
                .bind(ALERT_SPACE)
                .fetch_optional(&self.read)
                .await?;
        row.map(|(v,)| parse("alert_settings.value", &v))
            .transpose()
    }

    async fn set_alert_space(
        &self,
        space: Option<SpaceId>,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        let query = match space {
            Some(space) => sqlx::query(
                "INSERT INTO alert_settings (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .bind(ALERT_SPACE)
            .bind(space.to_string()),
            None => sqlx::query("DELETE FROM alert_settings WHERE key = $1").bind(ALERT_SPACE),
        };
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn list_alert_emails(&self) -> Result<Vec<AlertEmail>> {
        let sql = format!(
            "SELECT {ALERT_EMAIL} FROM alert_emails \
             ORDER BY space_id IS NOT NULL, space_id, address"
        );
        let rows = sqlx::query_as::<_, AlertEmailRow>(&sql)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn add_alert_email(&self, e: &AlertEmail, audit: Option<&AuditEntry>) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO alert_emails (id, space_id, address, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(e.id.to_string())
        .bind(e.space_id.map(|s| s.to_string()))
        .bind(&e.address)
        .bind(e.created_at);
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn remove_alert_email(&self, id: AlertEmailId, audit: Option<&AuditEntry>) -> Result<()> {
        self.write_one_audited(
            sqlx::query("DELETE FROM alert_emails WHERE id = $1").bind(id.to_string()),
            audit,
        )
        .await
    }

    async fn alert_recipients(&self, space: Option<SpaceId>) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT DISTINCT address FROM alert_emails \
             WHERE space_id IS NULL OR space_id = $1 ORDER BY address",
        )
        .bind(space.map(|s| s.to_string()))
        .fetch_all(&self.read)
        .await?;
        Ok(rows.into_iter().map(|(a,)| a).collect())
    }

    async fn due_alert_mails(&self, now: UnixMs, limit: i64) -> Result<Vec<AlertMail>> {
        let sql = format!(
            "SELECT {ALERT_MAIL} FROM alert_outbox \
             WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= $1 \
             ORDER BY next_attempt_at LIMIT $2"
        );
        let rows = sqlx::query_as::<_, AlertMailRow>(&sql)
            .bind(now)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn alert_mail_sent(&self, id: AlertMailId) -> Result<()> {
        let query = sqlx::query("DELETE FROM alert_outbox WHERE id = $1").bind(id.to_string());
        self.execute(Durability::Full, query).await?;
        Ok(())
    }

    async fn alert_mail_failed(
        &self,
        id: AlertMailId,
        error: &str,
        next: Option<UnixMs>,
    ) -> Result<()> {
        let query = sqlx::query(
            "UPDATE alert_outbox SET attempts = attempts + 1, last_error = $1, next_attempt_at = $2 \
             WHERE id = $3",
        )
        .bind(error)
        .bind(next)
        .bind(id.to_string());
        self.execute(Durability::Full, query).await?;
        Ok(())
    }

    async fn list_failed_alert_mails(&self, limit: i64) -> Result<Vec<AlertMail>> {
        let sql = format!(
            "SELECT {ALERT_MAIL} FROM alert_outbox WHERE next_attempt_at IS NULL \
             ORDER BY id DESC LIMIT $1"
        );
        let rows = sqlx::query_as::<_, AlertMailRow>(&sql)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }
}

#[derive(sqlx::FromRow)]
struct AlertEmailRow {
    id: String,
    space_id: Option<String>,
    address: String,
    created_at: i64,
}

impl TryFrom<AlertEmailRow> for AlertEmail {
    type Error = StorageError;
    fn try_from(r: AlertEmailRow) -> Result<Self, StorageError> {
        Ok(AlertEmail {
            id: parse("alert_emails.id", &r.id)?,
            space_id: parse_opt("alert_emails.space_id", r.space_id)?,
            address: r.address,
            created_at: r.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct AlertMailRow {
    id: String,
    notification_id: String,
    space_id: Option<String>,
    address: String,
    subject: String,
    body: String,
    attempts: i64,
    next_attempt_at: Option<i64>,
    last_error: Option<String>,
    created_at: i64,
}

impl TryFrom<AlertMailRow> for AlertMail {
    type Error = StorageError;
    fn try_from(r: AlertMailRow) -> Result<Self, StorageError> {
        Ok(AlertMail {
            id: parse("alert_outbox.id", &r.id)?,
            notification_id: parse("alert_outbox.notification_id", &r.notification_id)?,
            space_id: parse_opt("alert_outbox.space_id", r.space_id)?,
            address: r.address,
            subject: r.subject,
            body: r.body,
            attempts: r.attempts,
            next_attempt_at: r.next_attempt_at,
            last_error: r.last_error,
            created_at: r.created_at,
        })
    }
}
