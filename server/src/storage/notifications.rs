//! Notifications for admins (docs D6): the console's list and the REST API's per-space view.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::store::{
    convert_all, parse, parse_opt, Args, Conn, DbRow, Dialect, Sql, SqlArg, SqlValue, Store,
};
use super::*;

pub(super) const NOTIFICATION: &str =
    "id, space_id, kind, subject_kind, subject_id, message, created_at, read_at";

/// Notifications: the console's (every space) and a space's own (the REST API).
#[async_trait]
pub trait NotificationStore: Send + Sync + std::fmt::Debug {
    async fn list_notifications(
        &self,
        unread_only: bool,
        page: Page<NotificationId>,
    ) -> Result<Vec<Notification>>;
    async fn count_unread_notifications(&self) -> Result<i64>;
    async fn mark_notification_read(
        &self,
        id: NotificationId,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// The notifications about one space (what its API key may see): all of them, or only
    /// the unread (`Some(true)`) or the read ones (`Some(false)`).
    async fn list_space_notifications(
        &self,
        space_id: SpaceId,
        unread: Option<bool>,
        page: Page<NotificationId>,
    ) -> Result<Vec<Notification>>;
    async fn mark_space_notification_read(
        &self,
        space_id: SpaceId,
        id: NotificationId,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
}

#[async_trait]
impl<D: Dialect> NotificationStore for Store<D>
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
    async fn list_notifications(
        &self,
        unread_only: bool,
        page: Page<NotificationId>,
    ) -> Result<Vec<Notification>> {
        // Conditions added only when they apply, so each reads as an index range
        // (`notifications_unread`, or the primary key).
        let mut q = Sql::<D>::new(format!(
            "SELECT {} FROM notifications WHERE TRUE",
            NOTIFICATION
        ));
        if unread_only {
            q.push(" AND read_at IS NULL");
        }
        if let Some(before) = page.before {
            q.push(" AND id < ").push_bind(before.to_string());
        }
        q.push(" ORDER BY id DESC LIMIT ").push_bind(page.limit);
        let (sql, args) = q.into_parts()?;
        let rows = sqlx::query_as_with::<_, NotificationRow, _>(&sql, args)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn count_unread_notifications(&self) -> Result<i64> {
        let (n,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM notifications WHERE read_at IS NULL")
                .fetch_one(&self.read)
                .await?;
        Ok(n)
    }

    async fn mark_notification_read(
        &self,
        id: NotificationId,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        self.write_one_audited(
            sqlx::query("UPDATE notifications SET read_at = COALESCE(read_at, $1) WHERE id = $2")
                .bind(now)
                .bind(id.to_string()),
            audit,
        )
        .await
    }

    async fn list_space_notifications(
        &self,
        space_id: SpaceId,
        unread: Option<bool>,
        page: Page<NotificationId>,
    ) -> Result<Vec<Notification>> {
        // Unread ones through the partial index `notifications_unread_by_space`.
        let only = match unread {
            None => "",
            Some(true) => " AND read_at IS NULL",
            Some(false) => " AND read_at IS NOT NULL",
        };
        let rows: Vec<NotificationRow> = self
            .keyset_page(
                (NOTIFICATION, "notifications"),
                ("space_id", space_id.to_string()),
                only,
                page,
            )
            .await?;
        convert_all(rows)
    }

    async fn mark_space_notification_read(
        &self,
        space_id: SpaceId,
        id: NotificationId,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        self.write_one_audited(
            sqlx::query(
            "UPDATE notifications SET read_at = COALESCE(read_at, $1) WHERE id = $2 AND space_id = $3",
        )
        .bind(now)
        .bind(id.to_string())
        .bind(space_id.to_string()),
            audit,
        )
        .await
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct NotificationRow {
    id: String,
    space_id: Option<String>,
    kind: String,
    subject_kind: Option<String>,
    subject_id: Option<String>,
    message: String,
    created_at: i64,
    read_at: Option<i64>,
}

impl TryFrom<NotificationRow> for Notification {
    type Error = StorageError;
    fn try_from(r: NotificationRow) -> Result<Self, StorageError> {
        Ok(Notification {
            id: parse("notifications.id", &r.id)?,
            space_id: parse_opt("notifications.space_id", r.space_id)?,
            kind: r.kind,
            subject_kind: r.subject_kind,
            subject_id: r.subject_id,
            message: r.message,
            created_at: r.created_at,
            read_at: r.read_at,
        })
    }
}
