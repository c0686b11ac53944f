//! The audit log's records (docs D14): who changed what, where, from which address.
//! One [`AuditEntry`] is written by storage in the transaction of the change it
//! describes; the operations layer builds it (`ops::audit`). Reads are not recorded,
//! nor are publishing events and posting messages, which are the product's own data
//! (docs D15).

use super::{AuditId, InvalidValue, Role, SpaceId, UnixMs};

string_enum!(
    /// Who made a change: a console user or an API key.
    ActorKind, "actor kind" { User = "user", ApiKey = "api_key" }
);

string_enum!(
    /// Every change the REST API and the console can make, by name (`destination.create`).
    AuditAction, "audit action" {
        SpaceCreate = "space.create",
        ChannelCreate = "channel.create",
        ChannelRename = "channel.rename",
        ChannelDelete = "channel.delete",
        DestinationCreate = "destination.create",
        DestinationUpdate = "destination.update",
        DestinationDelete = "destination.delete",
        DestinationEnable = "destination.enable",
        DestinationDisable = "destination.disable",
        DestinationRotateSecret = "destination.rotate_secret",
        EventTypeCreate = "event_type.create",
        EventTypeUpdate = "event_type.update",
        DeliveriesResend = "deliveries.resend",
        DeliveriesCancel = "deliveries.cancel",
        DeliveriesResendFailed = "deliveries.resend_failed",
        IncomingWebhookCreate = "incoming_webhook.create",
        IncomingWebhookEnable = "incoming_webhook.enable",
        IncomingWebhookDisable = "incoming_webhook.disable",
        IncomingWebhookDelete = "incoming_webhook.delete",
        BotCreate = "bot.create",
        BotRevoke = "bot.revoke",
        ApiKeyCreate = "api_key.create",
        ApiKeyRevoke = "api_key.revoke",
        UserCreate = "user.create",
        UserDisable = "user.disable",
        UserEnable = "user.enable",
        UserDelete = "user.delete",
        NotificationRead = "notification.read",
        SpaceRetention = "space.retention",
        AlertSpaceSet = "alert.space_set",
        AlertEmailAdd = "alert.email_add",
        AlertEmailRemove = "alert.email_remove",
        AlertTest = "alert.test",
    }
);

impl AuditAction {
    /// The kind of thing the action changes: the part of its name before the dot
    /// (`deliveries.resend` changes deliveries).
    pub fn target_kind(self) -> &'static str {
        let name = self.as_str();
        name.split_once('.').map_or(name, |(kind, _)| kind)
    }
}

/// Who made a change, as the audit log names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub kind: ActorKind,
    /// The user's ID (`usr_…`) or the key's (`key_…`).
    pub id: String,
    /// What people read: the user's email, or the key's ID.
    pub label: String,
    /// The user's role; `None` for an API key (it acts for its whole space).
    pub role: Option<Role>,
}

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub id: AuditId,
    /// The space changed; `None` for install-wide changes (spaces' creation, users).
    pub space_id: Option<SpaceId>,
    pub actor: Actor,
    pub action: AuditAction,
    pub target_kind: String,
    pub target_id: String,
    /// What else says what happened: for bulk actions the count and the filter used.
    pub detail: serde_json::Value,
    /// The TCP peer address of the request (never a header the client sent).
    pub source: Option<String>,
    pub created_at: UnixMs,
}

impl AuditEntry {
    /// The entry of a bulk action, with the number it changed in `detail.count` (known
    /// only in the transaction that changes them).
    pub fn with_count(&self, count: i64) -> AuditEntry {
        let mut entry = self.clone();
        match &mut entry.detail {
            serde_json::Value::Object(fields) => {
                fields.insert("count".to_owned(), count.into());
            }
            other => *other = serde_json::json!({ "count": count }),
        }
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_names_the_kind_it_changes() {
        assert_eq!(
            AuditAction::DestinationRotateSecret.target_kind(),
            "destination"
        );
        assert_eq!(
            AuditAction::DeliveriesResendFailed.target_kind(),
            "deliveries"
        );
        assert_eq!(AuditAction::ApiKeyRevoke.target_kind(), "api_key");
    }

    #[test]
    fn a_bulk_entry_takes_the_count_it_changed() {
        let entry = AuditEntry {
            id: AuditId::new(),
            space_id: None,
            actor: Actor {
                kind: ActorKind::User,
                id: "usr_1".into(),
                label: "a@example.com".into(),
                role: Some(Role::Admin),
            },
            action: AuditAction::DeliveriesCancel,
            target_kind: "deliveries".into(),
            target_id: String::new(),
            detail: serde_json::json!({"count": 0, "filter": {"status": "pending"}}),
            source: None,
            created_at: 0,
        };
        let counted = entry.with_count(12);
        assert_eq!(
            counted.detail,
            serde_json::json!({"count": 12, "filter": {"status": "pending"}})
        );
        assert_eq!(counted.id, entry.id);
    }

    #[test]
    fn every_action_reads_back_from_its_name() {
        for action in AuditAction::ALL {
            assert_eq!(action.as_str().parse::<AuditAction>().unwrap(), *action);
            assert!(action.as_str().contains('.'), "{action}");
        }
    }
}
