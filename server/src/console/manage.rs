//! The admins' changes: destinations (status, rotate secret), incoming
//! webhooks (status, create), spaces, channels, bots, API keys and users. Secrets
//! handed out here are shown once; only hashes are kept (the destination's signing
//! secret is kept, as it signs every request).

use app::error::ConsoleError;
use app::types::*;

use super::{internal, parse_id, storage_error, views, Backend};
use crate::auth;
use crate::clock::now_ms;
use crate::domain::*;
use crate::storage::StorageError;

pub(super) fn invalid(msg: impl Into<String>) -> ConsoleError {
    ConsoleError::Invalid(msg.into())
}

/// A name: trimmed, 1 to `max` characters, no control characters.
fn name(value: &str, what: &str, max: usize) -> Result<String, ConsoleError> {
    let v = value.trim();
    let n = v.chars().count();
    if n == 0 || n > max || v.chars().any(char::is_control) {
        return Err(invalid(format!("A {what} needs 1 to {max} characters.")));
    }
    Ok(v.to_owned())
}

/// The error of [`crate::admin::create_user`] in words; its own messages are meant for people.
pub(super) fn user_error(e: anyhow::Error) -> ConsoleError {
    if e.downcast_ref::<StorageError>().is_some() {
        internal(e)
    } else {
        invalid(format!("{}.", capitalise(&e.to_string())))
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

impl Backend {
    pub(super) async fn destination_status(
        &self,
        actor: &SessionUser,
        id: &str,
        active: bool,
    ) -> Result<Notice, ConsoleError> {
        let id: DestinationId = parse_id(id, "destination")?;
        let d = self
            .storage
            .get_destination_by_id(id)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        let paused = self.storage.count_paused(d.id).await.map_err(internal)?;
        let (status, reason) = if active {
            (DestinationStatus::Active, None)
        } else {
            (
                DestinationStatus::Inactive,
                Some(format!("disabled in the console by {}", actor.email)),
            )
        };
        self.storage
            .set_destination_status(d.space_id, d.id, status, reason.as_deref(), now_ms())
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        tracing::info!(destination.id = %d.id, user.id = %actor.id, active, "console: destination status changed");
        if active {
            self.engine.wake();
            Ok(Notice::new(format!(
                "Re-enabled {}: {paused} paused deliveries resume.",
                d.url
            )))
        } else {
            Ok(Notice::new(format!(
                "Disabled {}: new events are skipped and waiting deliveries are paused until it is re-enabled.",
                d.url
            )))
        }
    }

    pub(super) async fn rotate(&self, id: &str) -> Result<Notice, ConsoleError> {
        let id: DestinationId = parse_id(id, "destination")?;
        let mut d = self
            .storage
            .get_destination_by_id(id)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        crate::destinations::rotate_secret(&mut d, now_ms());
        self.storage
            .update_destination(&d)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        Ok(
            Notice::new("Rotated the signing secret; the previous one keeps signing for 24 hours.")
                .with_secret("New signing secret", d.secret.clone()),
        )
    }

    pub(super) async fn incoming_status(
        &self,
        id: &str,
        active: bool,
    ) -> Result<Notice, ConsoleError> {
        let id: IncomingWebhookId = parse_id(id, "incoming webhook")?;
        let w = self
            .storage
            .get_incoming_webhook_by_id(id)
            .await
            .map_err(|e| storage_error(e, "incoming webhook"))?;
        let status = if active {
            IncomingWebhookStatus::Active
        } else {
            IncomingWebhookStatus::Disabled
        };
        self.storage
            .set_incoming_webhook_status(w.space_id, w.id, status, now_ms())
            .await
            .map_err(|e| storage_error(e, "incoming webhook"))?;
        Ok(Notice::new(if active {
            format!(
                "Re-enabled the incoming webhook “{}”: senders are accepted again.",
                w.name
            )
        } else {
            format!(
                "Disabled the incoming webhook “{}”: senders get 410 Gone.",
                w.name
            )
        }))
    }

    pub(super) async fn new_incoming_webhook(
        &self,
        channel: &str,
        name_: &str,
    ) -> Result<Notice, ConsoleError> {
        let channel_id: ChannelId = parse_id(channel, "channel")?;
        let channel = self
            .storage
            .get_channel_by_id(channel_id)
            .await
            .map_err(|e| storage_error(e, "channel"))?;
        let name = name(name_, "webhook name", 100)?;
        let token = auth::new_token("pfh");
        let now = now_ms();
        let w = IncomingWebhook {
            id: IncomingWebhookId::new(),
            space_id: channel.space_id,
            channel_id: channel.id,
            name,
            token_hash: auth::hash_token(&token),
            signing_secret: None,
            status: IncomingWebhookStatus::Active,
            consecutive_failures: 0,
            created_at: now,
            updated_at: now,
            disabled_at: None,
        };
        self.storage
            .create_incoming_webhook(&w)
            .await
            .map_err(|e| storage_error(e, "incoming webhook"))?;
        Ok(Notice::new(format!(
            "Created the incoming webhook “{}” for #{}.",
            w.name, channel.name
        ))
        .with_secret(
            "URL",
            self.public_url
                .join(&crate::http::hooks::path(w.id, &token)),
        )
        .with_secret("Token", token))
    }

    pub(super) async fn space_detail(&self, id: &str) -> Result<SpaceDetail, ConsoleError> {
        let id: SpaceId = parse_id(id, "space")?;
        let space = self
            .storage
            .get_space(id)
            .await
            .map_err(|e| storage_error(e, "space"))?;
        let channels = self.storage.list_all_channels(id).await.map_err(internal)?;
        let bots = self.storage.list_all_bots(id).await.map_err(internal)?;
        let keys = self.storage.list_all_api_keys(id).await.map_err(internal)?;
        Ok(SpaceDetail {
            space: views::space(&space),
            channels: channels
                .iter()
                .map(|c| ChannelView {
                    id: c.id.to_string(),
                    name: c.name.clone(),
                    created_at: c.created_at,
                })
                .collect(),
            bots: bots
                .iter()
                .map(|b| BotView {
                    id: b.id.to_string(),
                    name: b.name.clone(),
                    created_at: b.created_at,
                    revoked_at: b.revoked_at,
                })
                .collect(),
            api_keys: keys
                .iter()
                .map(|k| ApiKeyView {
                    id: k.id.to_string(),
                    name: k.name.clone(),
                    prefix: k.prefix.clone(),
                    created_at: k.created_at,
                    last_used_at: k.last_used_at,
                    revoked_at: k.revoked_at,
                })
                .collect(),
        })
    }

    pub(super) async fn new_space(&self, name_: &str, plan: &str) -> Result<Notice, ConsoleError> {
        let name = name(name_, "space name", 200)?;
        let plan: Plan = plan
            .trim()
            .parse()
            .map_err(|e: InvalidValue| invalid(e.to_string()))?;
        let created = crate::admin::create_space(self.storage.as_ref(), &name, plan)
            .await
            .map_err(internal)?;
        Ok(Notice::new(format!(
            "Created the space {} ({} plan) with a first API key.",
            created.space.name,
            plan.as_str()
        ))
        .with_secret("API key", created.api_key)
        .with_link("Open the space", format!("/spaces/{}", created.space.id)))
    }

    pub(super) async fn new_channel(
        &self,
        space: &str,
        name_: &str,
    ) -> Result<Notice, ConsoleError> {
        let space_id: SpaceId = parse_id(space, "space")?;
        let name = name(name_.trim_start_matches('#'), "channel name", 80)?;
        let channel = Channel {
            id: ChannelId::new(),
            space_id,
            name,
            created_at: now_ms(),
        };
        match self.storage.create_channel(&channel).await {
            Ok(()) => Ok(Notice::new(format!(
                "Created the channel #{}.",
                channel.name
            ))),
            Err(StorageError::Conflict(_)) => Err(invalid(format!(
                "A channel named #{} exists already.",
                channel.name
            ))),
            Err(e) => Err(storage_error(e, "space")),
        }
    }

    pub(super) async fn new_bot(&self, space: &str, name_: &str) -> Result<Notice, ConsoleError> {
        let space_id: SpaceId = parse_id(space, "space")?;
        let name = name(name_, "bot name", 100)?;
        let token = auth::new_token("pfb");
        let bot = Bot {
            id: BotId::new(),
            space_id,
            name,
            token_hash: auth::hash_token(&token),
            created_at: now_ms(),
            revoked_at: None,
        };
        self.storage
            .create_bot(&bot)
            .await
            .map_err(|e| storage_error(e, "bot"))?;
        Ok(Notice::new(format!("Created the bot {}.", bot.name)).with_secret("Bot token", token))
    }

    pub(super) async fn bot_revoke(&self, space: &str, id: &str) -> Result<Notice, ConsoleError> {
        let space_id: SpaceId = parse_id(space, "space")?;
        let id: BotId = parse_id(id, "bot")?;
        self.storage
            .revoke_bot(space_id, id, now_ms())
            .await
            .map_err(|e| storage_error(e, "bot"))?;
        Ok(Notice::new("Revoked the bot's token."))
    }

    pub(super) async fn new_api_key(
        &self,
        space: &str,
        name_: &str,
    ) -> Result<Notice, ConsoleError> {
        let space_id: SpaceId = parse_id(space, "space")?;
        let name = name(name_, "key name", 100)?;
        let key = auth::new_token("pfk");
        let record = ApiKey {
            id: ApiKeyId::new(),
            space_id,
            name,
            prefix: key[..12].to_owned(),
            created_at: now_ms(),
            last_used_at: None,
            revoked_at: None,
        };
        self.storage
            .create_api_key(&record, &auth::hash_token(&key))
            .await
            .map_err(|e| storage_error(e, "space"))?;
        Ok(
            Notice::new(format!("Created the API key {}.", record.name))
                .with_secret("API key", key),
        )
    }

    pub(super) async fn api_key_revoke(
        &self,
        space: &str,
        id: &str,
    ) -> Result<Notice, ConsoleError> {
        let space_id: SpaceId = parse_id(space, "space")?;
        let id: ApiKeyId = parse_id(id, "API key")?;
        self.storage
            .revoke_api_key(space_id, id, now_ms())
            .await
            .map_err(|e| storage_error(e, "API key"))?;
        Ok(Notice::new(
            "Revoked the API key; calls with it are refused from now on.",
        ))
    }

    pub(super) async fn new_user(
        &self,
        email: &str,
        password: &str,
        role: &str,
    ) -> Result<Notice, ConsoleError> {
        let role: Role = role
            .trim()
            .parse()
            .map_err(|e: InvalidValue| invalid(e.to_string()))?;
        let user = crate::admin::create_user(self.storage.as_ref(), email, password, role)
            .await
            .map_err(user_error)?;
        Ok(Notice::new(format!(
            "Created {} ({}).",
            user.email,
            user.role.as_str()
        )))
    }
}
