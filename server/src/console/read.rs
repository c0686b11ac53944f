//! What every signed-in role may read: deliveries (filtered, keyset-paginated), one
//! delivery with its attempts, destinations, incoming webhooks and notifications.

use std::collections::HashMap;

use app::error::ConsoleError;
use app::port::ReadPort;
use app::types::*;

use super::{internal, parse_id, require_role, storage_error, views, Backend};
use crate::clock::now_ms;
use crate::domain::Role;
use crate::domain::*;
use crate::storage::{DeliveryFilter, Page};

/// Rows per page of the deliveries table.
pub const PAGE_SIZE: i64 = 50;
/// Rows per page of the notifications list.
const NOTIFICATIONS_PAGE: i64 = 50;

/// The table's filter from its URL fields; `Err` says which value is wrong, in words.
pub fn filter_of(q: &DeliveryQuery, now: UnixMs) -> Result<DeliveryFilter, String> {
    fn opt<T: std::str::FromStr>(v: &str, what: &str) -> Result<Option<T>, String> {
        let v = v.trim();
        if v.is_empty() {
            return Ok(None);
        }
        v.parse()
            .map(Some)
            .map_err(|_| format!("{v:?} is not a valid {what}."))
    }
    let mut since = None;
    let mut until = None;
    if !q.last.trim().is_empty() {
        let span = match q.last.trim() {
            "15m" => 15 * 60_000,
            "1h" => 3_600_000,
            "24h" => 24 * 3_600_000,
            "7d" => 7 * 24 * 3_600_000,
            other => return Err(format!("{other:?} is not a time range.")),
        };
        since = Some(now - span);
    }
    if !q.since.trim().is_empty() {
        since = Some(
            app::components::parse_utc(&q.since)
                .ok_or_else(|| format!("{:?} is not a date and time.", q.since))?,
        );
    }
    if !q.until.trim().is_empty() {
        until = Some(
            app::components::parse_utc(&q.until)
                .ok_or_else(|| format!("{:?} is not a date and time.", q.until))?,
        );
    }
    let event_type = q.event_type.trim();
    Ok(DeliveryFilter {
        space_id: opt(&q.space, "space")?,
        status: opt(&q.status, "status")?,
        destination_id: opt(&q.destination, "destination")?,
        event_type: (!event_type.is_empty()).then(|| event_type.to_owned()),
        error_class: opt(&q.error_class, "error class")?,
        since,
        until,
    })
}

impl Backend {
    pub(super) async fn space_names(&self) -> Result<HashMap<SpaceId, Space>, ConsoleError> {
        Ok(self
            .storage
            .list_all_spaces()
            .await
            .map_err(internal)?
            .into_iter()
            .map(|s| (s.id, s))
            .collect())
    }

    /// Destinations of one space, or of all of them.
    pub(super) async fn destinations_of(
        &self,
        space: Option<SpaceId>,
    ) -> Result<Vec<Destination>, ConsoleError> {
        let spaces = match space {
            Some(s) => vec![s],
            None => self
                .storage
                .list_all_spaces()
                .await
                .map_err(internal)?
                .into_iter()
                .map(|s| s.id)
                .collect(),
        };
        let mut out = Vec::new();
        for s in spaces {
            out.extend(
                self.storage
                    .list_all_destinations(s)
                    .await
                    .map_err(internal)?,
            );
        }
        Ok(out)
    }

    /// The deliveries filter's destination as typed: an ID stays; a part of a URL or
    /// description that matches one destination becomes its ID; otherwise a refusal in
    /// words. With the suggestions for the field (those matching, or the newest).
    async fn pick_filter_destination(
        &self,
        q: &DeliveryQuery,
        space: Option<SpaceId>,
    ) -> Result<(DeliveryQuery, Option<String>, Vec<Choice>), ConsoleError> {
        use crate::ops::search::{pick_destination, DestinationPick};
        let mut q = q.clone();
        let typed = q.destination.trim().to_owned();
        let limit = super::lists::DESTINATION_CHOICES;
        let (error, choices) = match pick_destination(&typed) {
            DestinationPick::Any => (None, self.destination_suggestions(space, None, limit).await?),
            DestinationPick::Id(id) => {
                let mut choices = self.destination_suggestions(space, None, limit).await?;
                if !choices.iter().any(|c| c.value == id.to_string()) {
                    if let Ok(d) = self.storage.get_destination_by_id(id).await {
                        choices.insert(0, super::lists::choice(&d, None));
                    }
                }
                (None, choices)
            }
            DestinationPick::TooShort => (
                Some(format!(
                    "Destination {typed:?}: type at least 2 characters of its URL, or choose a suggestion."
                )),
                self.destination_suggestions(space, None, limit).await?,
            ),
            DestinationPick::Matching(p) => {
                let choices = self.destination_suggestions(space, Some(&p), limit).await?;
                match choices.as_slice() {
                    [one] => {
                        q.destination = one.value.clone();
                        (None, choices)
                    }
                    [] => (
                        Some(format!("No destination's name, URL or description contains {typed:?}.")),
                        choices,
                    ),
                    _ => (
                        Some(format!(
                            "Several destinations match {typed:?}: choose one of the suggestions."
                        )),
                        choices,
                    ),
                }
            }
        };
        if error.is_some() {
            q.destination.clear();
        }
        Ok((q, error, choices))
    }

    pub(super) async fn destination_view(
        &self,
        d: &Destination,
        space_name: &str,
    ) -> Result<DestinationView, ConsoleError> {
        let paused = self.storage.count_paused(d.id).await.map_err(internal)?;
        let failed = self
            .storage
            .count_failed_unresent(d.id)
            .await
            .map_err(internal)?;
        Ok(views::destination(d, space_name, paused, failed))
    }
}

#[async_trait::async_trait]
impl ReadPort for Backend {
    async fn unread_count(&self, actor: &SessionUser) -> Result<i64, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.storage
            .count_unread_notifications()
            .await
            .map_err(internal)
    }

    async fn spaces(&self, actor: &SessionUser) -> Result<Vec<SpaceView>, ConsoleError> {
        require_role(actor, Role::Support)?;
        Ok(self
            .storage
            .list_all_spaces()
            .await
            .map_err(internal)?
            .iter()
            .map(views::space)
            .collect())
    }

    async fn deliveries(
        &self,
        actor: &SessionUser,
        q: &DeliveryQuery,
    ) -> Result<DeliveryPage, ConsoleError> {
        require_role(actor, Role::Support)?;
        let spaces = self.space_names().await?;
        let mut space_choices: Vec<Choice> = spaces
            .values()
            .map(|s| Choice {
                value: s.id.to_string(),
                label: s.name.clone(),
            })
            .collect();
        space_choices.sort_by(|a, b| a.label.cmp(&b.label));
        // The destination field takes an ID or a part of a URL (issue 16 item 6): its
        // suggestions are a bounded search, never every destination.
        let chosen_space = q.space.trim().parse::<SpaceId>().ok();
        let (q, destination_error, destination_choices) =
            self.pick_filter_destination(q, chosen_space).await?;
        let filter = filter_of(&q, now_ms()).and_then(|f| match destination_error {
            Some(why) => Err(why),
            None => Ok(f),
        });
        let space_name = |id: &SpaceId| {
            spaces
                .get(id)
                .map(|s| s.name.as_str())
                .unwrap_or("(deleted)")
        };
        let mut page = DeliveryPage {
            rows: Vec::new(),
            next_cursor: None,
            spaces: space_choices,
            destinations: destination_choices,
            filter_error: None,
        };
        let filter = match filter {
            Ok(f) => f,
            Err(why) => {
                page.filter_error = Some(why);
                return Ok(page);
            }
        };
        let before = match q.before.trim() {
            "" => None,
            b => Some(parse_id::<DeliveryId>(b, "page cursor")?),
        };
        let rows = self
            .storage
            .list_deliveries(
                &filter,
                Page {
                    before,
                    limit: PAGE_SIZE,
                },
            )
            .await
            .map_err(internal)?;
        page.next_cursor = (rows.len() as i64 == PAGE_SIZE)
            .then(|| rows.last().map(|d| d.id.to_string()))
            .flatten();
        // Each row's destination: its URL and the name it is shown by.
        let mut shown: HashMap<DestinationId, (String, String)> = HashMap::new();
        for d in &rows {
            if let std::collections::hash_map::Entry::Vacant(slot) = shown.entry(d.destination_id) {
                let found = self
                    .storage
                    .get_destination(d.space_id, d.destination_id)
                    .await
                    .map(|x| (x.url.clone(), x.name()))
                    .unwrap_or_else(|_| ("(deleted)".to_owned(), "(deleted)".to_owned()));
                slot.insert(found);
            }
        }
        page.rows = rows
            .iter()
            .map(|d| {
                let (url, name) = shown
                    .get(&d.destination_id)
                    .map_or(("(deleted)", "(deleted)"), |(u, n)| {
                        (u.as_str(), n.as_str())
                    });
                views::delivery_row(d, space_name(&d.space_id), (url, name))
            })
            .collect();
        Ok(page)
    }

    async fn delivery(
        &self,
        actor: &SessionUser,
        id: &str,
    ) -> Result<DeliveryDetail, ConsoleError> {
        require_role(actor, Role::Support)?;
        let id: DeliveryId = parse_id(id, "delivery")?;
        let d = self
            .storage
            .get_delivery_by_id(id)
            .await
            .map_err(|e| storage_error(e, "delivery"))?;
        let space = self.storage.get_space(d.space_id).await.map_err(internal)?;
        let destination = self
            .storage
            .get_destination(d.space_id, d.destination_id)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        let event = self
            .storage
            .get_event(d.space_id, d.event_id)
            .await
            .map_err(|e| storage_error(e, "event"))?;
        let attempts = self
            .storage
            .list_all_attempts(d.id)
            .await
            .map_err(internal)?;
        Ok(DeliveryDetail {
            row: views::delivery_row(&d, &space.name, (&destination.url, &destination.name())),
            webhook_id: d.webhook_id(),
            event_id: d.event_id.to_string(),
            payload: serde_json::to_string_pretty(&event.payload)
                .unwrap_or_else(|_| event.payload.to_string()),
            destination_status: destination.status.as_str().to_owned(),
            attempts: attempts.iter().map(views::attempt).collect(),
            finished_at: d.finished_at,
            deliver_at: d.deliver_at,
        })
    }

    async fn destinations(
        &self,
        actor: &SessionUser,
        space: &str,
    ) -> Result<Vec<DestinationView>, ConsoleError> {
        require_role(actor, Role::Support)?;
        let space = match space.trim() {
            "" => None,
            s => Some(parse_id::<SpaceId>(s, "space")?),
        };
        let spaces = self.space_names().await?;
        let mut out = Vec::new();
        for d in self.destinations_of(space).await? {
            let name = spaces
                .get(&d.space_id)
                .map(|s| s.name.as_str())
                .unwrap_or("");
            out.push(self.destination_view(&d, name).await?);
        }
        Ok(out)
    }

    async fn destination(
        &self,
        actor: &SessionUser,
        id: &str,
    ) -> Result<DestinationDetail, ConsoleError> {
        require_role(actor, Role::Support)?;
        let admin = actor.is_admin();
        let id: DestinationId = parse_id(id, "destination")?;
        let d = self
            .storage
            .get_destination_by_id(id)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        let space = self.storage.get_space(d.space_id).await.map_err(internal)?;
        Ok(DestinationDetail {
            view: self.destination_view(&d, &space.name).await?,
            secret: admin.then(|| d.secret.clone()),
            previous_secret_expires_at: d.previous_secret_expires_at.filter(|t| *t > now_ms()),
        })
    }

    async fn incoming_webhooks(
        &self,
        actor: &SessionUser,
        space: &str,
    ) -> Result<IncomingPage, ConsoleError> {
        // The first page (`console::lists`).
        let query = ListQuery {
            space: space.to_owned(),
            ..ListQuery::default()
        };
        let list = app::port::ListPort::incoming_list(self, actor, &query).await?;
        Ok(IncomingPage {
            hooks: list.hooks.rows,
            channels: list.channels,
        })
    }

    async fn notifications(
        &self,
        actor: &SessionUser,
        unread_only: bool,
        before: &str,
    ) -> Result<NotificationPage, ConsoleError> {
        require_role(actor, Role::Support)?;
        let before = match before.trim() {
            "" => None,
            b => Some(parse_id::<NotificationId>(b, "page cursor")?),
        };
        let rows = self
            .storage
            .list_notifications(
                unread_only,
                Page {
                    before,
                    limit: NOTIFICATIONS_PAGE,
                },
            )
            .await
            .map_err(internal)?;
        let spaces = self.space_names().await?;
        let unread = self
            .storage
            .count_unread_notifications()
            .await
            .map_err(internal)?;
        Ok(NotificationPage {
            next_cursor: (rows.len() as i64 == NOTIFICATIONS_PAGE)
                .then(|| rows.last().map(|n| n.id.to_string()))
                .flatten(),
            rows: rows
                .iter()
                .map(|n| NotificationView {
                    id: n.id.to_string(),
                    space_name: n
                        .space_id
                        .and_then(|s| spaces.get(&s))
                        .map(|s| s.name.clone()),
                    kind: n.kind.clone(),
                    message: n.message.clone(),
                    created_at: n.created_at,
                    read: n.read_at.is_some(),
                    link: views::notification_link(n),
                })
                .collect(),
            unread,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_filter_becomes_a_storage_filter_or_says_what_is_wrong() {
        let q = DeliveryQuery {
            status: "failed".into(),
            error_class: "http".into(),
            last: "1h".into(),
            ..Default::default()
        };
        let f = filter_of(&q, 10_000_000).unwrap();
        assert_eq!(f.status, Some(DeliveryStatus::Failed));
        assert_eq!(f.error_class, Some(ErrorClass::Http));
        assert_eq!(f.since, Some(10_000_000 - 3_600_000));
        let bad = DeliveryQuery {
            error_class: "nope".into(),
            ..Default::default()
        };
        assert!(filter_of(&bad, 0).unwrap_err().contains("error class"));
        let dates = DeliveryQuery {
            since: "1970-01-01T00:01".into(),
            until: "1970-01-01T00:02".into(),
            ..Default::default()
        };
        let f = filter_of(&dates, 0).unwrap();
        assert_eq!((f.since, f.until), (Some(60_000), Some(120_000)));
    }
}
