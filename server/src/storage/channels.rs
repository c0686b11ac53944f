//! Channels and their messages (docs §3, §4).

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::store::{
    convert_all, json_opt, parse, Args, Conn, DbRow, Dialect, SqlArg, SqlValue, Store,
};
use super::*;

pub(super) const CHANNEL: &str = "id, space_id, name, created_at";

pub(super) const MESSAGE: &str =
    "id, space_id, channel_id, text, attachments, source_kind, source_id, created_at";

/// Channels and the messages posted to them (the REST API and the console).
#[async_trait]
pub trait ChannelStore: Send + Sync + std::fmt::Debug {
    async fn create_channel(&self, channel: &Channel, audit: Option<&AuditEntry>) -> Result<()>;
    async fn get_channel(&self, space_id: SpaceId, id: ChannelId) -> Result<Channel>;
    async fn get_channel_by_id(&self, id: ChannelId) -> Result<Channel>;
    /// Renames a channel (`Conflict` when the space has one of that name already).
    async fn rename_channel(
        &self,
        space_id: SpaceId,
        id: ChannelId,
        name: &str,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// Deletes a channel with its messages and incoming webhooks.
    async fn delete_channel(
        &self,
        space_id: SpaceId,
        id: ChannelId,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// A page of the space's channels, newest first (the REST API).
    async fn list_channels(&self, space_id: SpaceId, page: Page<ChannelId>)
        -> Result<Vec<Channel>>;
    /// Every channel of the space, by name (the console).
    async fn list_all_channels(&self, space_id: SpaceId) -> Result<Vec<Channel>>;
    async fn list_messages(
        &self,
        channel_id: ChannelId,
        page: Page<MessageId>,
    ) -> Result<Vec<Message>>;
    /// A page of the channels of `space_id`, newest first, for the console's list: with `pattern` only
    /// those whose lower-cased name is `LIKE` it (`Store::search_page`).
    async fn search_channels(
        &self,
        space_id: SpaceId,
        pattern: Option<&str>,
        page: Page<ChannelId>,
    ) -> Result<Vec<Channel>>;
}

#[async_trait]
impl<D: Dialect> ChannelStore for Store<D>
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
    async fn create_channel(&self, c: &Channel, audit: Option<&AuditEntry>) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO channels (id, space_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(c.id.to_string())
        .bind(c.space_id.to_string())
        .bind(&c.name)
        .bind(c.created_at);
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn get_channel(&self, space_id: SpaceId, id: ChannelId) -> Result<Channel> {
        let sql = format!(
            "SELECT {} FROM channels WHERE id = $1 AND space_id = $2",
            CHANNEL
        );
        sqlx::query_as::<_, ChannelRow>(&sql)
            .bind(id.to_string())
            .bind(space_id.to_string())
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn get_channel_by_id(&self, id: ChannelId) -> Result<Channel> {
        let sql = format!("SELECT {} FROM channels WHERE id = $1", CHANNEL);
        sqlx::query_as::<_, ChannelRow>(&sql)
            .bind(id.to_string())
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn rename_channel(
        &self,
        space_id: SpaceId,
        id: ChannelId,
        name: &str,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        self.write_one_audited(
            sqlx::query("UPDATE channels SET name = $1 WHERE id = $2 AND space_id = $3")
                .bind(name)
                .bind(id.to_string())
                .bind(space_id.to_string()),
            audit,
        )
        .await
    }

    async fn delete_channel(
        &self,
        space_id: SpaceId,
        id: ChannelId,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        // Its messages and incoming webhooks go with it (ON DELETE CASCADE).
        self.write_one_audited(
            sqlx::query("DELETE FROM channels WHERE id = $1 AND space_id = $2")
                .bind(id.to_string())
                .bind(space_id.to_string()),
            audit,
        )
        .await
    }

    async fn list_channels(
        &self,
        space_id: SpaceId,
        page: Page<ChannelId>,
    ) -> Result<Vec<Channel>> {
        let rows: Vec<ChannelRow> = self
            .keyset_page(
                (CHANNEL, "channels"),
                ("space_id", space_id.to_string()),
                "",
                page,
            )
            .await?;
        convert_all(rows)
    }

    async fn list_all_channels(&self, space_id: SpaceId) -> Result<Vec<Channel>> {
        let rows: Vec<ChannelRow> = self
            .all_of_space((CHANNEL, "channels"), space_id, "name")
            .await?;
        convert_all(rows)
    }

    async fn list_messages(
        &self,
        channel_id: ChannelId,
        page: Page<MessageId>,
    ) -> Result<Vec<Message>> {
        let rows: Vec<MessageRow> = self
            .keyset_page(
                (MESSAGE, "messages"),
                ("channel_id", channel_id.to_string()),
                "",
                page,
            )
            .await?;
        convert_all(rows)
    }

    async fn search_channels(
        &self,
        space_id: SpaceId,
        pattern: Option<&str>,
        page: Page<ChannelId>,
    ) -> Result<Vec<Channel>> {
        let rows: Vec<ChannelRow> = self
            .search_page(
                (CHANNEL, "channels"),
                Some(("space_id", space_id.to_string())),
                (&["name"], pattern),
                page,
            )
            .await?;
        convert_all(rows)
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct ChannelRow {
    id: String,
    space_id: String,
    name: String,
    created_at: i64,
}

impl TryFrom<ChannelRow> for Channel {
    type Error = StorageError;
    fn try_from(r: ChannelRow) -> Result<Self, StorageError> {
        Ok(Channel {
            id: parse("channels.id", &r.id)?,
            space_id: parse("channels.space_id", &r.space_id)?,
            name: r.name,
            created_at: r.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct MessageRow {
    id: String,
    space_id: String,
    channel_id: String,
    text: String,
    attachments: Option<String>,
    source_kind: String,
    source_id: Option<String>,
    created_at: i64,
}

impl TryFrom<MessageRow> for Message {
    type Error = StorageError;
    fn try_from(r: MessageRow) -> Result<Self, StorageError> {
        Ok(Message {
            id: parse("messages.id", &r.id)?,
            space_id: parse("messages.space_id", &r.space_id)?,
            channel_id: parse("messages.channel_id", &r.channel_id)?,
            text: r.text,
            attachments: json_opt("messages.attachments", r.attachments)?,
            source_kind: parse("messages.source_kind", &r.source_kind)?,
            source_id: r.source_id,
            created_at: r.created_at,
        })
    }
}
