//! The console's alert settings (admins only, docs D16): the install's alert space, alert
//! webhooks (destinations subscribed to `partyflow.alert`, made through the destination
//! form's rules), e-mail addresses, and a test alert.

use app::error::ConsoleError;
use app::port::{AlertPort, SettingsPort};
use app::types::*;

use super::manage::invalid;
use super::{audit_entry, internal, parse_id, require_role, storage_error, Backend};
use crate::alerts::{check_address, SLACK_TRANSFORMATION, TEST_KIND};
use crate::clock::now_ms;
use crate::domain::Role;
use crate::domain::*;

/// The failed e-mails the page shows.
const FAILED_SHOWN: i64 = 20;

impl Backend {
    /// `space` empty is `None`; otherwise a space that exists.
    async fn optional_space(&self, space: &str) -> Result<Option<Space>, ConsoleError> {
        if space.trim().is_empty() {
            return Ok(None);
        }
        let id: SpaceId = parse_id(space, "space")?;
        let space = self
            .storage
            .get_space(id)
            .await
            .map_err(|e| storage_error(e, "space"))?;
        Ok(Some(space))
    }
}

#[async_trait::async_trait]
impl AlertPort for Backend {
    async fn alerts(&self, actor: &SessionUser) -> Result<AlertSettings, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let names = self.space_names().await?;
        let name = |s: &SpaceId| names.get(s).map(|s| s.name.clone()).unwrap_or_default();
        let webhooks = self
            .storage
            .list_subscribers_of(ALERT_EVENT_TYPE)
            .await
            .map_err(internal)?
            .into_iter()
            .map(|d| AlertWebhookView {
                id: d.id.to_string(),
                space_id: d.space_id.to_string(),
                space_name: name(&d.space_id),
                slack: d.transformation.as_deref() == Some(SLACK_TRANSFORMATION),
                url: d.url,
                status: d.status.as_str().to_owned(),
            })
            .collect();
        let emails = self
            .storage
            .list_alert_emails()
            .await
            .map_err(internal)?
            .into_iter()
            .map(|e| AlertEmailView {
                id: e.id.to_string(),
                space_id: e.space_id.map(|s| s.to_string()).unwrap_or_default(),
                space_name: e.space_id.as_ref().map(name).unwrap_or_default(),
                address: e.address,
            })
            .collect();
        let failed_mails = self
            .storage
            .list_failed_alert_mails(FAILED_SHOWN)
            .await
            .map_err(internal)?
            .into_iter()
            .map(|m| FailedMailView {
                address: m.address,
                subject: m.subject,
                error: m.last_error.unwrap_or_default(),
                attempts: m.attempts,
                created_at: m.created_at,
            })
            .collect();
        Ok(AlertSettings {
            alert_space: self
                .storage
                .alert_space()
                .await
                .map_err(internal)?
                .map(|s| s.to_string())
                .unwrap_or_default(),
            webhooks,
            emails,
            smtp: !self.config.alerts.smtp_url.trim().is_empty(),
            failed_mails,
        })
    }

    async fn set_alert_space(
        &self,
        actor: &SessionUser,
        space: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space = self.optional_space(space).await?;
        let space_id = space.as_ref().map(|s| s.id);
        let entry = audit_entry(
            actor,
            AuditAction::AlertSpaceSet,
            space_id,
            space_id.map(|s| s.to_string()).unwrap_or_default(),
            serde_json::json!({ "space": space_id.map(|s| s.to_string()) }),
        );
        self.storage
            .set_alert_space(space_id, Some(&entry))
            .await
            .map_err(internal)?;
        tracing::info!(user.id = %actor.id, space.id = ?space.as_ref().map(|s| s.id), "console: alert space set");
        Ok(Notice::new(match space {
            Some(s) => format!(
                "The alert webhooks of {} now get the alerts of every space.",
                s.name
            ),
            None => "No alert space: each space's alerts go only to its own alert webhooks.".into(),
        }))
    }

    async fn add_alert_webhook(
        &self,
        actor: &SessionUser,
        space: &str,
        url: &str,
        format: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let transformation = match format {
            "slack" => SLACK_TRANSFORMATION,
            "json" => "",
            other => {
                return Err(invalid(format!(
                    "{other:?} is not a format: slack or json."
                )))
            }
        };
        if space.trim().is_empty() {
            return Err(invalid("Choose the space of the alert webhook."));
        }
        let form = DestinationForm {
            space: space.to_owned(),
            url: url.to_owned(),
            description: format!(
                "Alert webhook ({})",
                if transformation.is_empty() {
                    "JSON"
                } else {
                    "Slack"
                }
            ),
            event_types: ALERT_EVENT_TYPE.to_owned(),
            transformation: transformation.to_owned(),
            ..Default::default()
        };
        let created = self.create_destination(actor, &form).await?;
        Ok(Notice {
            message: format!("Added the alert webhook {}.", url.trim()),
            ..created
        })
    }

    async fn add_alert_email(
        &self,
        actor: &SessionUser,
        space: &str,
        address: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let address = check_address(address).map_err(|m| invalid(format!("Address: {m}.")))?;
        let space = self.optional_space(space).await?;
        let email = AlertEmail {
            id: AlertEmailId::new(),
            space_id: space.as_ref().map(|s| s.id),
            address: address.clone(),
            created_at: now_ms(),
        };
        let entry = audit_entry(
            actor,
            AuditAction::AlertEmailAdd,
            email.space_id,
            email.id,
            serde_json::json!({ "address": email.address }),
        );
        self.storage
            .add_alert_email(&email, Some(&entry))
            .await
            .map_err(|e| match e {
                crate::storage::StorageError::Conflict(_) => {
                    invalid(format!("Address: {address} already gets these alerts."))
                }
                other => internal(other),
            })?;
        tracing::info!(user.id = %actor.id, "console: alert address added");
        Ok(Notice::new(match space {
            Some(s) => format!("{address} now gets the alerts of {}.", s.name),
            None => format!("{address} now gets the alerts of every space."),
        }))
    }

    async fn remove_alert_email(
        &self,
        actor: &SessionUser,
        id: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let id: AlertEmailId = parse_id(id, "alert address")?;
        let entry = audit_entry(
            actor,
            AuditAction::AlertEmailRemove,
            None,
            id,
            serde_json::Value::Null,
        );
        self.storage
            .remove_alert_email(id, Some(&entry))
            .await
            .map_err(|e| storage_error(e, "alert address"))?;
        tracing::info!(user.id = %actor.id, "console: alert address removed");
        Ok(Notice::new("Removed the address: it gets no more alerts."))
    }

    async fn send_test_alert(
        &self,
        actor: &SessionUser,
        space: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space = self.optional_space(space).await?;
        let notification = Notification {
            id: NotificationId::new(),
            space_id: space.as_ref().map(|s| s.id),
            kind: TEST_KIND.into(),
            subject_kind: None,
            subject_id: None,
            message: format!(
                "A test alert sent by {} from the console: if you read this, alerts reach you.",
                actor.email
            ),
            created_at: now_ms(),
            read_at: None,
        };
        let entry = audit_entry(
            actor,
            AuditAction::AlertTest,
            notification.space_id,
            notification.id,
            serde_json::Value::Null,
        );
        self.storage
            .create_alert_test(&notification, Some(&entry))
            .await
            .map_err(internal)?;
        Ok(Notice::new(
            "Sent a test alert: it goes out within a few seconds, as every alert does.",
        ))
    }
}
