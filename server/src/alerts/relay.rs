//! The alert relay: takes each notification that has not gone out yet, publishes it as
//! a `partyflow.alert` event where someone listens, queues its e-mails, and marks it.
//!
//! Each step can be repeated without doing anything twice, so a crash in between (or
//! two instances at once) sends nothing twice: the events carry the idempotency key
//! `partyflow.alert:{notification}`, and the outbox takes one e-mail per notification and
//! address, written in the same transaction that marks the notification.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::config::PublicUrl;
use crate::dispatch::engine::EngineHandle;
use crate::domain::{Event, EventId, Notification, SpaceId, ALERT_EVENT_TYPE};
use crate::sandbox::Sandbox;
use crate::storage::{NewEvent, Published, Storage};

/// Notifications taken per round.
const BATCH: i64 = 100;

pub struct Relay {
    pub storage: Arc<dyn Storage>,
    pub engine: EngineHandle,
    pub sandbox: Sandbox,
    pub public_url: PublicUrl,
    pub poll: Duration,
}

impl Relay {
    /// Relays until `shutdown`; a failed round is logged and tried again at the next poll.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            let more = match self.round().await {
                Ok(done) => done as i64 == BATCH,
                Err(e) => {
                    tracing::warn!(error = %e, "alerts: relaying notifications failed; trying again");
                    false
                }
            };
            if more {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.poll) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// One round: up to [`BATCH`] notifications sent out. Answers how many.
    pub async fn round(&self) -> anyhow::Result<usize> {
        let due = self.storage.notifications_to_alert(BATCH).await?;
        if due.is_empty() {
            return Ok(0);
        }
        let alert_space = self.storage.alert_space().await?;
        for n in &due {
            self.relay(n, alert_space).await?;
        }
        Ok(due.len())
    }

    async fn relay(&self, n: &Notification, alert_space: Option<SpaceId>) -> anyhow::Result<()> {
        let space = match n.space_id {
            Some(id) => match self.storage.get_space(id).await {
                Ok(space) => Some(space),
                // Deleted since: its notifications go with it, but this one was read.
                Err(crate::storage::StorageError::NotFound) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let link = super::console_link(&self.public_url, n);
        let payload = super::payload(n, space.as_ref(), &link);
        let mut targets: Vec<SpaceId> = n.space_id.into_iter().collect();
        if let Some(install) = alert_space.filter(|s| !targets.contains(s)) {
            targets.push(install);
        }
        for target in targets {
            if !self
                .storage
                .has_active_subscribers(target, ALERT_EVENT_TYPE)
                .await?
            {
                continue;
            }
            self.publish(n, target, payload.clone()).await?;
        }
        let now = now_ms();
        let mails: Vec<_> = self
            .storage
            .alert_recipients(n.space_id)
            .await?
            .iter()
            .map(|address| super::mail(n, space.as_ref(), &link, address, now))
            .collect();
        self.storage.record_alerted(n.id, &mails, now).await?;
        tracing::info!(
            notification.id = %n.id,
            kind = %n.kind,
            emails = mails.len(),
            "alerts: notification sent out"
        );
        Ok(())
    }

    async fn publish(
        &self,
        n: &Notification,
        space_id: SpaceId,
        payload: serde_json::Value,
    ) -> anyhow::Result<()> {
        let now = now_ms();
        let event = Event {
            id: EventId::new_in_order(),
            space_id,
            event_type: ALERT_EVENT_TYPE.into(),
            payload,
            created_at: now,
            deliver_at: None,
        };
        let filters = crate::ops::filters::verdicts(self.storage.as_ref(), &self.sandbox, &event)
            .await
            .map_err(|e| anyhow::anyhow!("the alert destinations' filters: {e:?}"))?;
        let new = NewEvent {
            event,
            idempotency_key: Some(format!("{ALERT_EVENT_TYPE}:{}", n.id)),
            request_hash: n.id.to_string(),
            filters,
            claim: None,
            subscribers: None,
        };
        let published = self
            .storage
            .publish_events(std::slice::from_ref(&new), now)
            .await?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("publishing an alert answered nothing"))??;
        if let Published::Created { destinations, .. } = published {
            self.engine.due_now(destinations);
        }
        Ok(())
    }
}
