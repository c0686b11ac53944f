//! Incoming webhooks and bots (docs §3, §4): the credentials that post messages.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::events::{checks_of_space, filtering_in};
use super::store::{convert_all, parse, Args, Conn, DbRow, Dialect, SqlArg, SqlValue, Store};
use super::write::Durability;
use super::*;

pub(super) const INCOMING_WEBHOOK: &str =
    "id, space_id, channel_id, name, token_hash, signing_secret, \
    status, consecutive_failures, created_at, updated_at, disabled_at";

pub(super) const BOT: &str = "id, space_id, name, token_hash, created_at, revoked_at";

/// [`BOT`] of the table `b`, each column named `bot_…`, beside another table's.
const BOT_AS_BOT: &str = "b.id AS bot_id, b.space_id AS bot_space_id, \
    b.name AS bot_name, b.token_hash AS bot_token_hash, b.created_at AS bot_created_at, \
    b.revoked_at AS bot_revoked_at";

/// What posting a message through an incoming webhook reads, in one statement
/// ([`IncomingStore::get_incoming_webhook_to_post`]).
#[derive(Debug, Clone)]
pub struct WebhookToPost {
    pub webhook: IncomingWebhook,
    /// Its space's plan: the webhook's rate limit.
    pub plan: Plan,
    pub channel: Channel,
    /// The publish checks of its space for the message's event type.
    pub checks: PublishChecks,
}

/// Incoming webhooks and bots: their management (REST API, console) and the look-ups
/// and streak counting of the requests they authenticate.
#[async_trait]
pub trait IncomingStore: Send + Sync + std::fmt::Debug {
    async fn create_incoming_webhook(
        &self,
        webhook: &IncomingWebhook,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    async fn get_incoming_webhook_by_id(&self, id: IncomingWebhookId) -> Result<IncomingWebhook>;
    /// The webhook with all that posting through it reads, in one read ([`WebhookToPost`]):
    /// its space's plan, its channel, and the publish checks of its space for
    /// `event_type` (four reads before).
    async fn get_incoming_webhook_to_post(
        &self,
        id: IncomingWebhookId,
        event_type: &str,
    ) -> Result<WebhookToPost>;
    /// A page of the space's incoming webhooks, newest first (the REST API).
    async fn list_incoming_webhooks(
        &self,
        space_id: SpaceId,
        page: Page<IncomingWebhookId>,
    ) -> Result<Vec<IncomingWebhook>>;
    /// Every incoming webhook of the space, oldest first (the console).
    async fn list_all_incoming_webhooks(&self, space_id: SpaceId) -> Result<Vec<IncomingWebhook>>;
    /// Enables (resetting the streak) or disables an incoming webhook.
    async fn set_incoming_webhook_status(
        &self,
        space_id: SpaceId,
        id: IncomingWebhookId,
        status: IncomingWebhookStatus,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<IncomingWebhook>;
    async fn delete_incoming_webhook(
        &self,
        space_id: SpaceId,
        id: IncomingWebhookId,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// Counts an incoming webhook request: a success resets the streak; a failure grows it and,
    /// at `disable_after` in a row, disables the webhook and notifies admins.
    async fn record_incoming_result(
        &self,
        id: IncomingWebhookId,
        success: bool,
        disable_after: i64,
        now: UnixMs,
    ) -> Result<IncomingEffects>;
    async fn create_bot(&self, bot: &Bot, audit: Option<&AuditEntry>) -> Result<()>;
    /// The live bot whose token hashes to `token_hash` (`NotFound` otherwise), its space's
    /// channel `channel_id` (`None`: no such channel there, or no ID), and
    /// [`Self::publish_checks`] of its space for `event_type`, in one read: all a bot's
    /// message reads before it writes (three round trips before).
    async fn find_bot_to_post(
        &self,
        token_hash: &str,
        channel_id: Option<ChannelId>,
        event_type: &str,
    ) -> Result<(Bot, Option<Channel>, PublishChecks)>;
    /// A page of the space's bots, newest first (the REST API).
    async fn list_bots(&self, space_id: SpaceId, page: Page<BotId>) -> Result<Vec<Bot>>;
    /// Every bot of the space (revoked ones too), oldest first (the console).
    async fn list_all_bots(&self, space_id: SpaceId) -> Result<Vec<Bot>>;
    async fn revoke_bot(
        &self,
        space_id: SpaceId,
        id: BotId,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// A page of incoming webhooks, of one space or all,, newest first, for the console's list: with `pattern` only
    /// those whose lower-cased name is `LIKE` it (`Store::search_page`).
    async fn search_incoming_webhooks(
        &self,
        space_id: Option<SpaceId>,
        pattern: Option<&str>,
        page: Page<IncomingWebhookId>,
    ) -> Result<Vec<IncomingWebhook>>;
    /// A page of the bots of `space_id`, newest first, for the console's list: with `pattern` only
    /// those whose lower-cased name is `LIKE` it (`Store::search_page`).
    async fn search_bots(
        &self,
        space_id: SpaceId,
        pattern: Option<&str>,
        page: Page<BotId>,
    ) -> Result<Vec<Bot>>;
}

#[async_trait]
impl<D: Dialect> IncomingStore for Store<D>
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
    async fn create_incoming_webhook(
        &self,
        w: &IncomingWebhook,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO incoming_webhooks (id, space_id, channel_id, name, token_hash, signing_secret, status, \
             consecutive_failures, created_at, updated_at, disabled_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(w.id.to_string())
        .bind(w.space_id.to_string())
        .bind(w.channel_id.to_string())
        .bind(&w.name)
        .bind(&w.token_hash)
        .bind(&w.signing_secret)
        .bind(w.status.as_str())
        .bind(w.consecutive_failures)
        .bind(w.created_at)
        .bind(w.updated_at)
        .bind(w.disabled_at);
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn get_incoming_webhook_by_id(&self, id: IncomingWebhookId) -> Result<IncomingWebhook> {
        let sql = format!(
            "SELECT {} FROM incoming_webhooks WHERE id = $1",
            INCOMING_WEBHOOK
        );
        sqlx::query_as::<_, IncomingWebhookRow>(&sql)
            .bind(id.to_string())
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn get_incoming_webhook_to_post(
        &self,
        id: IncomingWebhookId,
        event_type: &str,
    ) -> Result<WebhookToPost> {
        // The checks' rows, each with the webhook's columns (named `hook_…`), its space's
        // plan and its channel's; none without the webhook.
        let columns: Vec<String> = INCOMING_WEBHOOK
            .split(',')
            .map(|c| format!("w.{c} AS hook_{c}", c = c.trim()))
            .collect();
        let sql = format!(
            "SELECT {}, s.plan AS space_plan, c.name AS channel_name, \
               c.created_at AS channel_created_at, {} \
             FROM incoming_webhooks w JOIN spaces s ON s.id = w.space_id \
               JOIN channels c ON c.id = w.channel_id {} \
             WHERE w.id = $1",
            columns.join(", "),
            checks_of_space("w.space_id", "$2"),
            filtering_in("w.space_id"),
        );
        let rows = sqlx::query(&sql)
            .bind(id.to_string())
            .bind(event_type)
            .fetch_all(&self.read)
            .await?;
        let Some(row) = rows.first() else {
            return Err(StorageError::NotFound);
        };
        let get = |column: &str| sqlx::Row::try_get::<String, _>(row, column);
        let webhook: IncomingWebhook = IncomingWebhookRow {
            id: get("hook_id")?,
            space_id: get("hook_space_id")?,
            channel_id: get("hook_channel_id")?,
            name: get("hook_name")?,
            token_hash: get("hook_token_hash")?,
            signing_secret: sqlx::Row::try_get(row, "hook_signing_secret")?,
            status: get("hook_status")?,
            consecutive_failures: sqlx::Row::try_get(row, "hook_consecutive_failures")?,
            created_at: sqlx::Row::try_get(row, "hook_created_at")?,
            updated_at: sqlx::Row::try_get(row, "hook_updated_at")?,
            disabled_at: sqlx::Row::try_get(row, "hook_disabled_at")?,
        }
        .try_into()?;
        let channel = Channel {
            id: webhook.channel_id,
            space_id: webhook.space_id,
            name: get("channel_name")?,
            created_at: sqlx::Row::try_get(row, "channel_created_at")?,
        };
        Ok(WebhookToPost {
            plan: parse("spaces.plan", &get("space_plan")?)?,
            channel,
            checks: Self::checks_of(&rows)?,
            webhook,
        })
    }

    async fn list_incoming_webhooks(
        &self,
        space_id: SpaceId,
        page: Page<IncomingWebhookId>,
    ) -> Result<Vec<IncomingWebhook>> {
        let rows: Vec<IncomingWebhookRow> = self
            .keyset_page(
                (INCOMING_WEBHOOK, "incoming_webhooks"),
                ("space_id", space_id.to_string()),
                "",
                page,
            )
            .await?;
        convert_all(rows)
    }

    async fn list_all_incoming_webhooks(&self, space_id: SpaceId) -> Result<Vec<IncomingWebhook>> {
        let rows: Vec<IncomingWebhookRow> = self
            .all_of_space((INCOMING_WEBHOOK, "incoming_webhooks"), space_id, "id")
            .await?;
        convert_all(rows)
    }

    async fn set_incoming_webhook_status(
        &self,
        space_id: SpaceId,
        id: IncomingWebhookId,
        status: IncomingWebhookStatus,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<IncomingWebhook> {
        let query = sqlx::query(
            "UPDATE incoming_webhooks SET status = $1, updated_at = $2, \
               consecutive_failures = CASE WHEN $1 = 'active' THEN 0 ELSE consecutive_failures END, \
               disabled_at = CASE WHEN $1 = 'active' THEN NULL ELSE $2 END \
             WHERE id = $3 AND space_id = $4",
        )
        .bind(status.as_str())
        .bind(now)
        .bind(id.to_string())
        .bind(space_id.to_string());
        self.write_one_audited(query, audit).await?;
        self.get_incoming_webhook_by_id(id).await
    }

    async fn delete_incoming_webhook(
        &self,
        space_id: SpaceId,
        id: IncomingWebhookId,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        self.write_one_audited(
            sqlx::query("DELETE FROM incoming_webhooks WHERE id = $1 AND space_id = $2")
                .bind(id.to_string())
                .bind(space_id.to_string()),
            audit,
        )
        .await
    }

    async fn record_incoming_result(
        &self,
        id: IncomingWebhookId,
        success: bool,
        disable_after: i64,
        now: UnixMs,
    ) -> Result<IncomingEffects> {
        if success {
            // One statement, a transaction of its own: one round trip.
            self.execute(
                Durability::Full,
                sqlx::query(
                    "UPDATE incoming_webhooks SET consecutive_failures = 0 \
                     WHERE id = $1 AND consecutive_failures <> 0",
                )
                .bind(id.to_string()),
            )
            .await?;
            return Ok(IncomingEffects::default());
        }
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        let (failures, status, name, space_id): (i64, String, String, String) = sqlx::query_as(
            "UPDATE incoming_webhooks SET consecutive_failures = consecutive_failures + 1, updated_at = $1 \
             WHERE id = $2 RETURNING consecutive_failures, status, name, space_id",
        )
        .bind(now)
        .bind(id.to_string())
        .fetch_one(&mut *tx)
        .await?;
        let mut effects = IncomingEffects {
            consecutive_failures: failures,
            disabled: false,
        };
        if failures >= disable_after && status == IncomingWebhookStatus::Active.as_str() {
            effects.disabled = true;
            sqlx::query(
                "UPDATE incoming_webhooks SET status = 'disabled', disabled_at = $1 WHERE id = $2",
            )
            .bind(now)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO notifications (id, space_id, kind, subject_kind, subject_id, message, created_at) \
                 VALUES ($1, $2, 'incoming_webhook.disabled', 'incoming_webhook', $3, $4, $5)",
            )
            .bind(NotificationId::new().to_string())
            .bind(&space_id)
            .bind(id.to_string())
            .bind(format!(
                "Incoming webhook \"{name}\" was disabled after {failures} failed requests in a row; \
                 senders get 410 Gone until an admin re-enables it."
            ))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(effects)
    }

    async fn create_bot(&self, b: &Bot, audit: Option<&AuditEntry>) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO bots (id, space_id, name, token_hash, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(b.id.to_string())
        .bind(b.space_id.to_string())
        .bind(&b.name)
        .bind(&b.token_hash)
        .bind(b.created_at)
        .bind(b.revoked_at);
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn find_bot_to_post(
        &self,
        token_hash: &str,
        channel_id: Option<ChannelId>,
        event_type: &str,
    ) -> Result<(Bot, Option<Channel>, PublishChecks)> {
        // The checks' rows, each with the bot's and the channel's columns; none without
        // the bot.
        let sql = format!(
            "SELECT {BOT_AS_BOT}, c.name AS channel_name, c.created_at AS channel_created_at, {} \
             FROM bots AS b LEFT JOIN channels AS c ON c.id = $3 AND c.space_id = b.space_id {} \
             WHERE b.token_hash = $1 AND b.revoked_at IS NULL",
            checks_of_space("b.space_id", "$2"),
            filtering_in("b.space_id")
        );
        let rows = sqlx::query(&sql)
            .bind(token_hash)
            .bind(event_type)
            .bind(channel_id.map(|c| c.to_string()))
            .fetch_all(&self.read)
            .await?;
        let Some(first) = rows.first() else {
            return Err(StorageError::NotFound);
        };
        let get = |column: &str| sqlx::Row::try_get::<String, _>(first, column);
        let bot: Bot = BotRow {
            id: get("bot_id")?,
            space_id: get("bot_space_id")?,
            name: get("bot_name")?,
            token_hash: get("bot_token_hash")?,
            created_at: sqlx::Row::try_get(first, "bot_created_at")?,
            revoked_at: sqlx::Row::try_get(first, "bot_revoked_at")?,
        }
        .try_into()?;
        let channel = match (
            channel_id,
            sqlx::Row::try_get::<Option<String>, _>(first, "channel_name")?,
        ) {
            (Some(id), Some(name)) => Some(Channel {
                id,
                space_id: bot.space_id,
                name,
                created_at: sqlx::Row::try_get(first, "channel_created_at")?,
            }),
            _ => None,
        };
        Ok((bot, channel, Self::checks_of(&rows)?))
    }

    async fn list_bots(&self, space_id: SpaceId, page: Page<BotId>) -> Result<Vec<Bot>> {
        let rows: Vec<BotRow> = self
            .keyset_page((BOT, "bots"), ("space_id", space_id.to_string()), "", page)
            .await?;
        convert_all(rows)
    }

    async fn list_all_bots(&self, space_id: SpaceId) -> Result<Vec<Bot>> {
        let rows: Vec<BotRow> = self.all_of_space((BOT, "bots"), space_id, "id").await?;
        convert_all(rows)
    }

    async fn revoke_bot(
        &self,
        space_id: SpaceId,
        id: BotId,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        self.write_one_audited(
            sqlx::query("UPDATE bots SET revoked_at = $1 WHERE id = $2 AND space_id = $3 AND revoked_at IS NULL")
            .bind(now)
            .bind(id.to_string())
            .bind(space_id.to_string()),
            audit,
        )
        .await
    }

    async fn search_incoming_webhooks(
        &self,
        space_id: Option<SpaceId>,
        pattern: Option<&str>,
        page: Page<IncomingWebhookId>,
    ) -> Result<Vec<IncomingWebhook>> {
        let rows: Vec<IncomingWebhookRow> = self
            .search_page(
                (INCOMING_WEBHOOK, "incoming_webhooks"),
                space_id.map(|s| ("space_id", s.to_string())),
                (&["name"], pattern),
                page,
            )
            .await?;
        convert_all(rows)
    }

    async fn search_bots(
        &self,
        space_id: SpaceId,
        pattern: Option<&str>,
        page: Page<BotId>,
    ) -> Result<Vec<Bot>> {
        let rows: Vec<BotRow> = self
            .search_page(
                (BOT, "bots"),
                Some(("space_id", space_id.to_string())),
                (&["name"], pattern),
                page,
            )
            .await?;
        convert_all(rows)
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct IncomingWebhookRow {
    id: String,
    space_id: String,
    channel_id: String,
    name: String,
    token_hash: String,
    signing_secret: Option<String>,
    status: String,
    consecutive_failures: i64,
    created_at: i64,
    updated_at: i64,
    disabled_at: Option<i64>,
}

impl TryFrom<IncomingWebhookRow> for IncomingWebhook {
    type Error = StorageError;
    fn try_from(r: IncomingWebhookRow) -> Result<Self, StorageError> {
        Ok(IncomingWebhook {
            id: parse("incoming_webhooks.id", &r.id)?,
            space_id: parse("incoming_webhooks.space_id", &r.space_id)?,
            channel_id: parse("incoming_webhooks.channel_id", &r.channel_id)?,
            name: r.name,
            token_hash: r.token_hash,
            signing_secret: r.signing_secret,
            status: parse("incoming_webhooks.status", &r.status)?,
            consecutive_failures: r.consecutive_failures,
            created_at: r.created_at,
            updated_at: r.updated_at,
            disabled_at: r.disabled_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct BotRow {
    id: String,
    space_id: String,
    name: String,
    token_hash: String,
    created_at: i64,
    revoked_at: Option<i64>,
}

impl TryFrom<BotRow> for Bot {
    type Error = StorageError;
    fn try_from(r: BotRow) -> Result<Self, StorageError> {
        Ok(Bot {
            id: parse("bots.id", &r.id)?,
            space_id: parse("bots.space_id", &r.space_id)?,
            name: r.name,
            token_hash: r.token_hash,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
        })
    }
}
