//! The admins' changes: destinations (status, rotate secret), incoming
//! webhooks (status, create), spaces, channels, bots, API keys and users. Secrets
//! handed out here are shown once; only hashes are kept (the destination's signing
//! secret is kept, as it signs every request).

use app::error::ConsoleError;
use app::port::{AdminPort, ListPort};
use app::types::*;

use serde_json::{json, Value};

use super::{
    audit_entry, author, internal, parse_id, refused, require_role, storage_error, Backend,
};
use crate::clock::now_ms;
use crate::domain::Role;
use crate::domain::*;
use crate::ops::credentials::{self, Credential};
use crate::ops::names::{self, NameKind};
use crate::ops::tenants;
use crate::storage::StorageError;

pub(super) fn invalid(msg: impl Into<String>) -> ConsoleError {
    ConsoleError::Invalid(msg.into())
}

#[async_trait::async_trait]
impl AdminPort for Backend {
    async fn set_destination_active(
        &self,
        actor: &SessionUser,
        id: &str,
        active: bool,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
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
        let action = if active {
            AuditAction::DestinationEnable
        } else {
            AuditAction::DestinationDisable
        };
        let entry = audit_entry(actor, action, Some(d.space_id), d.id, Value::Null);
        self.storage
            .set_destination_status(
                d.space_id,
                d.id,
                status,
                reason.as_deref(),
                now_ms(),
                Some(&entry),
            )
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

    async fn rotate_secret(&self, actor: &SessionUser, id: &str) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let id: DestinationId = parse_id(id, "destination")?;
        let mut d = self
            .storage
            .get_destination_by_id(id)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        crate::ops::destinations::rotate_secret(&mut d, now_ms());
        let entry = audit_entry(
            actor,
            AuditAction::DestinationRotateSecret,
            Some(d.space_id),
            d.id,
            Value::Null,
        );
        self.storage
            .update_destination(&d, Some(&entry))
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        Ok(
            Notice::new("Rotated the signing secret; the previous one keeps signing for 24 hours.")
                .with_secret("New signing secret", d.secret.clone()),
        )
    }

    async fn set_incoming_active(
        &self,
        actor: &SessionUser,
        id: &str,
        active: bool,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
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
        let action = if active {
            AuditAction::IncomingWebhookEnable
        } else {
            AuditAction::IncomingWebhookDisable
        };
        let entry = audit_entry(actor, action, Some(w.space_id), w.id, Value::Null);
        self.storage
            .set_incoming_webhook_status(w.space_id, w.id, status, now_ms(), Some(&entry))
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

    async fn create_incoming_webhook(
        &self,
        actor: &SessionUser,
        channel: &str,
        name_: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let channel_id: ChannelId = parse_id(channel, "channel")?;
        let channel = self
            .storage
            .get_channel_by_id(channel_id)
            .await
            .map_err(|e| storage_error(e, "channel"))?;
        let name = names::parse(NameKind::IncomingWebhook, name_).map_err(refused)?;
        let minted = Credential::IncomingWebhookToken.mint();
        let now = now_ms();
        let w = IncomingWebhook {
            id: IncomingWebhookId::new(),
            space_id: channel.space_id,
            channel_id: channel.id,
            name,
            token_hash: minted.hash,
            signing_secret: None,
            status: IncomingWebhookStatus::Active,
            consecutive_failures: 0,
            created_at: now,
            updated_at: now,
            disabled_at: None,
        };
        let entry = audit_entry(
            actor,
            AuditAction::IncomingWebhookCreate,
            Some(w.space_id),
            w.id,
            json!({ "name": w.name, "channelId": w.channel_id.to_string() }),
        );
        self.storage
            .create_incoming_webhook(&w, Some(&entry))
            .await
            .map_err(|e| storage_error(e, "incoming webhook"))?;
        Ok(Notice::new(format!(
            "Created the incoming webhook “{}” for #{}.",
            w.name, channel.name
        ))
        .with_secret(
            "URL",
            self.public_url
                .join(&crate::http::hooks::path(w.id, &minted.secret)),
        )
        .with_secret("Token", minted.secret))
    }

    async fn space(&self, actor: &SessionUser, id: &str) -> Result<SpaceDetail, ConsoleError> {
        // The first page of each of its lists (`console::lists`).
        let page = self
            .space_page(actor, id, &SpaceListQuery::default())
            .await?;
        Ok(SpaceDetail {
            channels: page.channels.rows,
            bots: page.bots.rows,
            api_keys: page.api_keys.rows,
            ..page.detail
        })
    }

    async fn create_space(
        &self,
        actor: &SessionUser,
        name_: &str,
        plan: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let plan: Plan = plan
            .trim()
            .parse()
            .map_err(|e: InvalidValue| invalid(e.to_string()))?;
        let created =
            tenants::create_space_as(self.storage.as_ref(), name_, plan, Some(&author(actor)))
                .await
                .map_err(refused)?;
        Ok(Notice::new(format!(
            "Created the space {} ({} plan) with a first API key.",
            created.space.name,
            plan.as_str()
        ))
        .with_secret("API key", created.api_key)
        .with_link("Open the space", format!("/spaces/{}", created.space.id)))
    }

    async fn create_channel(
        &self,
        actor: &SessionUser,
        space: &str,
        name_: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space_id: SpaceId = parse_id(space, "space")?;
        let name =
            names::parse(NameKind::Channel, name_.trim_start_matches('#')).map_err(refused)?;
        let channel = Channel {
            id: ChannelId::new(),
            space_id,
            name,
            created_at: now_ms(),
        };
        let entry = audit_entry(
            actor,
            AuditAction::ChannelCreate,
            Some(space_id),
            channel.id,
            Value::Null,
        );
        match self.storage.create_channel(&channel, Some(&entry)).await {
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

    async fn create_bot(
        &self,
        actor: &SessionUser,
        space: &str,
        name_: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space_id: SpaceId = parse_id(space, "space")?;
        let (bot, minted) = credentials::new_bot(space_id, name_, now_ms()).map_err(refused)?;
        let entry = audit_entry(
            actor,
            AuditAction::BotCreate,
            Some(space_id),
            bot.id,
            json!({ "name": bot.name }),
        );
        self.storage
            .create_bot(&bot, Some(&entry))
            .await
            .map_err(|e| storage_error(e, "bot"))?;
        Ok(Notice::new(format!("Created the bot {}.", bot.name))
            .with_secret("Bot token", minted.secret))
    }

    async fn revoke_bot(
        &self,
        actor: &SessionUser,
        space: &str,
        id: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space_id: SpaceId = parse_id(space, "space")?;
        let by = author(actor);
        credentials::revoke_bot(self.storage.as_ref(), space_id, id.trim(), now_ms(), &by)
            .await
            .map_err(refused)?;
        Ok(Notice::new("Revoked the bot's token."))
    }

    async fn create_api_key(
        &self,
        actor: &SessionUser,
        space: &str,
        name_: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space_id: SpaceId = parse_id(space, "space")?;
        let by = author(actor);
        let (record, minted) = credentials::create_api_key(
            self.storage.as_ref(),
            space_id,
            name_,
            now_ms(),
            Some(&by),
        )
        .await
        .map_err(|e| match e {
            crate::ops::OpsError::Storage(e) => storage_error(e, "space"),
            other => refused(other),
        })?;
        Ok(Notice::new(format!("Created the API key {}.", record.name))
            .with_secret("API key", minted.secret))
    }

    async fn revoke_api_key(
        &self,
        actor: &SessionUser,
        space: &str,
        id: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space_id: SpaceId = parse_id(space, "space")?;
        let by = author(actor);
        credentials::revoke_api_key(self.storage.as_ref(), space_id, id.trim(), now_ms(), &by)
            .await
            .map_err(refused)?;
        Ok(Notice::new(
            "Revoked the API key; calls with it are refused from now on.",
        ))
    }

    async fn create_user(
        &self,
        actor: &SessionUser,
        email: &str,
        password: &str,
        role: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let role: Role = role
            .trim()
            .parse()
            .map_err(|e: InvalidValue| invalid(e.to_string()))?;
        let by = author(actor);
        let user = tenants::create_user_as(self.storage.as_ref(), email, password, role, Some(&by))
            .await
            .map_err(refused)?;
        Ok(Notice::new(format!(
            "Created {} ({}).",
            user.email,
            user.role.as_str()
        )))
    }

    async fn set_space_retention(
        &self,
        actor: &SessionUser,
        space: &str,
        retention: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space_id: SpaceId = parse_id(space, "space")?;
        let chosen = crate::ops::retention::parse_optional(retention).map_err(refused)?;
        let space =
            crate::ops::retention::set(self.storage.as_ref(), space_id, chosen, &author(actor))
                .await
                .map_err(refused)?;
        let effective = crate::ops::retention::effective(&space, &self.config.retention.per_plan());
        Ok(Notice::new(match chosen {
            Some(own) => format!("{} now keeps finished deliveries for {own}.", space.name),
            None => format!(
                "{} keeps finished deliveries for its plan's {effective} again.",
                space.name
            ),
        }))
    }
}
