//! Send again and Cancel (docs §2.7, §2.8), for chosen deliveries or every one
//! matching a filter. Work goes in chunks of [`CHUNK`], each its own transaction,
//! for about [`ROUND`] per call; the answer's cursor says where to go on, so a
//! selection of any size finishes, with progress shown between rounds.

use std::time::{Duration, Instant};

use app::error::ConsoleError;
use app::port::BulkPort;
use app::types::*;

use super::read::filter_of;
use super::{internal, parse_id, refused, require_role, storage_error, Backend};
use crate::clock::now_ms;
use crate::domain::Role;
use crate::domain::*;
use crate::ops::audit;
use crate::ops::replay::{self, Replay};
use crate::storage::{BulkOutcome, DeliveryFilter, Page};
use serde_json::Value;

/// Deliveries per storage call (and transaction).
pub const CHUNK: usize = 100;
/// Work per call before answering with progress.
const ROUND: Duration = Duration::from_millis(1500);
/// Chosen IDs accepted at once (a page holds 50).
const MAX_CHOSEN: usize = 1000;
/// "All matching" counts stop here (the confirmation then says "at least").
const COUNT_CAP: i64 = 100_000;
/// `resend_failed` per call, as in the REST API.
const RESEND_FAILED_BATCH: i64 = 1000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Resend,
    Cancel,
}

fn op_of(s: &BulkSelection) -> Result<Op, ConsoleError> {
    match s.op.as_str() {
        "resend" => Ok(Op::Resend),
        "cancel" => Ok(Op::Cancel),
        other => Err(ConsoleError::Invalid(format!(
            "{other:?} is not a bulk action."
        ))),
    }
}

/// The chosen IDs: valid ones, each once, in the given order.
fn chosen(s: &BulkSelection) -> Vec<DeliveryId> {
    let mut out: Vec<DeliveryId> = Vec::new();
    for id in s.ids.iter().flat_map(|i| i.split(',')) {
        if let Ok(id) = id.trim().parse::<DeliveryId>() {
            if !out.contains(&id) {
                out.push(id);
            }
        }
        if out.len() == MAX_CHOSEN {
            break;
        }
    }
    out
}

/// The filter in words, e.g. "status failed, error class timeout, created in the last 1h".
fn describe(q: &DeliveryQuery) -> String {
    q.pairs()
        .into_iter()
        .map(|(k, v)| match k {
            "error_class" => format!("error class {v}"),
            "event_type" => format!("event type {v}"),
            "last" => format!("created in the last {v}"),
            "since" => format!("created from {v} UTC"),
            "until" => format!("created before {v} UTC"),
            other => format!("{other} {v}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The window of "Send again all failed": the time range, event type and error class
/// of `q`, nothing else (the destination is the page's, the status is `failed`).
fn window_only(q: &DeliveryQuery) -> DeliveryQuery {
    DeliveryQuery {
        error_class: q.error_class.clone(),
        event_type: q.event_type.clone(),
        last: q.last.clone(),
        since: q.since.clone(),
        until: q.until.clone(),
        ..DeliveryQuery::default()
    }
}

fn tally(t: &mut BulkTotals, op: Op, outcome: BulkOutcome) {
    match outcome {
        BulkOutcome::Resent(_) => t.resent += 1,
        BulkOutcome::Cancelled => t.cancelled += 1,
        BulkOutcome::NotFound => t.not_found += 1,
        BulkOutcome::DestinationInactive => t.inactive += 1,
        BulkOutcome::WrongStatus(_) if op == Op::Resend => t.unfinished += 1,
        BulkOutcome::WrongStatus(DeliveryStatus::Sending) => t.sending += 1,
        BulkOutcome::WrongStatus(_) => t.finished += 1,
    }
}

impl Backend {
    /// The destination and the failed deliveries of it that `window` chooses, by the
    /// rule the REST API's resend-failed uses ([`replay::failed_filter`]).
    async fn replay(
        &self,
        destination: &str,
        window: &DeliveryQuery,
    ) -> Result<(Destination, DeliveryFilter), ConsoleError> {
        let id: DestinationId = parse_id(destination, "destination")?;
        let d = self
            .storage
            .get_destination_by_id(id)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        let f = filter_of(&window_only(window), now_ms()).map_err(ConsoleError::Invalid)?;
        let replay = Replay {
            destination_id: Some(d.id),
            event_type: f.event_type,
            error_class: f.error_class,
            since: f.since,
            until: f.until,
        };
        let filter = replay::failed_filter(d.space_id, replay).map_err(refused)?;
        Ok((d, filter))
    }

    /// Applies `op` to deliveries (of any spaces), chunk by chunk, adding to `t`; each
    /// chunk's transaction records `actor`'s entry with its count and `filter` (docs D14).
    async fn apply(
        &self,
        actor: &SessionUser,
        op: Op,
        deliveries: &[(DeliveryId, SpaceId)],
        filter: &serde_json::Value,
        t: &mut BulkTotals,
    ) -> Result<(), ConsoleError> {
        let mut spaces: Vec<SpaceId> = deliveries.iter().map(|(_, s)| *s).collect();
        spaces.sort();
        spaces.dedup();
        let now = now_ms();
        for space in spaces {
            let ids: Vec<DeliveryId> = deliveries
                .iter()
                .filter(|(_, s)| *s == space)
                .map(|(d, _)| *d)
                .collect();
            let action = match op {
                Op::Resend => AuditAction::DeliveriesResend,
                Op::Cancel => AuditAction::DeliveriesCancel,
            };
            let detail = audit::bulk_detail(0, filter.clone());
            let entry = super::audit_entry(actor, action, Some(space), "", detail);
            let entry = Some(&entry);
            let outcomes = match op {
                Op::Resend => {
                    self.storage
                        .resend_deliveries(space, &ids, now, entry)
                        .await
                }
                Op::Cancel => {
                    self.storage
                        .cancel_deliveries(space, &ids, now, entry)
                        .await
                }
            }
            .map_err(internal)?;
            for (_, outcome) in outcomes {
                if outcome == BulkOutcome::Cancelled {
                    crate::metrics::deliveries_finished(crate::metrics::Outcome::Cancelled, 1);
                }
                tally(t, op, outcome);
            }
        }
        if op == Op::Resend && t.resent > 0 {
            self.engine.wake();
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl BulkPort for Backend {
    async fn bulk_preview(
        &self,
        actor: &SessionUser,
        s: &BulkSelection,
    ) -> Result<BulkPreview, ConsoleError> {
        require_role(actor, Role::Support)?;
        op_of(s)?;
        let now = now_ms();
        let start = DeliveryId::lower_bound_at(now + 1);
        if !s.all {
            return Ok(BulkPreview {
                count: chosen(s).len() as i64,
                capped: false,
                start: start.to_string(),
                described: String::new(),
            });
        }
        let filter = filter_of(&s.filter, now).map_err(ConsoleError::Invalid)?;
        let count = self
            .storage
            .count_deliveries(&filter, Some(start), COUNT_CAP)
            .await
            .map_err(internal)?;
        Ok(BulkPreview {
            count,
            capped: count >= COUNT_CAP,
            start: start.to_string(),
            described: describe(&s.filter),
        })
    }

    async fn bulk_run(
        &self,
        actor: &SessionUser,
        s: &BulkSelection,
        cursor: Option<String>,
        mut totals: BulkTotals,
        expected: i64,
    ) -> Result<BulkProgress, ConsoleError> {
        require_role(actor, Role::Support)?;
        tracing::info!(user.id = %actor.id, op = %s.op, all = s.all, "console bulk action");
        let op = op_of(s)?;
        let deadline = Instant::now() + ROUND;
        let next = if s.all {
            let filter = filter_of(&s.filter, now_ms()).map_err(ConsoleError::Invalid)?;
            let described = audit::delivery_filter_detail(&filter);
            // The walk goes from newest to oldest below the cursor, so the copies a resend
            // makes (newer than everything) are never visited again.
            let mut before = cursor
                .as_deref()
                .map(|c| parse_id::<DeliveryId>(c, "cursor"))
                .transpose()?;
            loop {
                let rows = self
                    .storage
                    .list_deliveries(
                        &filter,
                        Page {
                            before,
                            limit: CHUNK as i64,
                        },
                    )
                    .await
                    .map_err(internal)?;
                let Some(last) = rows.last() else { break None };
                before = Some(last.id);
                let pairs: Vec<_> = rows.iter().map(|d| (d.id, d.space_id)).collect();
                self.apply(actor, op, &pairs, &described, &mut totals)
                    .await?;
                if rows.len() < CHUNK {
                    break None;
                }
                if Instant::now() >= deadline {
                    break before.map(|b| b.to_string());
                }
            }
        } else {
            let ids = chosen(s);
            let mut offset: usize = cursor
                .as_deref()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0)
                .min(ids.len());
            loop {
                let chunk = &ids[offset..(offset + CHUNK).min(ids.len())];
                if chunk.is_empty() {
                    break None;
                }
                let mut pairs = Vec::with_capacity(chunk.len());
                for id in chunk {
                    match self.storage.get_delivery_by_id(*id).await {
                        Ok(d) => pairs.push((d.id, d.space_id)),
                        Err(crate::storage::StorageError::NotFound) => totals.not_found += 1,
                        Err(e) => return Err(internal(e)),
                    }
                }
                let asked: Vec<String> = chunk.iter().map(ToString::to_string).collect();
                let described = serde_json::json!({ "ids": asked });
                self.apply(actor, op, &pairs, &described, &mut totals)
                    .await?;
                offset += chunk.len();
                if offset >= ids.len() {
                    break None;
                }
                if Instant::now() >= deadline {
                    break Some(offset.to_string());
                }
            }
        };
        Ok(BulkProgress {
            selection: s.clone(),
            totals,
            cursor: next,
            expected,
        })
    }

    async fn resend_failed(
        &self,
        actor: &SessionUser,
        destination: &str,
        window: &DeliveryQuery,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Support)?;
        let (d, filter) = self.replay(destination, window).await?;
        if d.status != DestinationStatus::Active {
            return Err(ConsoleError::Invalid(
                "This destination is inactive: re-enable it first, then send its failed deliveries again.".into(),
            ));
        }
        let deadline = Instant::now() + ROUND * 2;
        let mut resent = 0;
        let remaining = loop {
            // One entry per batch (each its own transaction), with the batch's count.
            let entry = super::audit_entry(
                actor,
                AuditAction::DeliveriesResendFailed,
                Some(d.space_id),
                d.id,
                audit::bulk_detail(0, audit::delivery_filter_detail(&filter)),
            );
            let r = self
                .storage
                .resend_failed(&filter, RESEND_FAILED_BATCH, now_ms(), Some(&entry))
                .await
                .map_err(internal)?;
            resent += r.resent;
            if r.remaining == 0 || r.resent == 0 || Instant::now() >= deadline {
                break r.remaining;
            }
        };
        if resent > 0 {
            self.engine.wake();
        }
        tracing::info!(destination.id = %d.id, resent, remaining, "console: sent failed deliveries again");
        let mut message = format!("Sent again {resent} failed deliveries of {}.", d.url);
        if remaining > 0 {
            message.push_str(&format!(
                " {remaining} remain: press “Send again all failed” again to go on."
            ));
        }
        Ok(Notice::new(message).with_link(
            "See them",
            format!("/deliveries?destination={}&space={}", d.id, d.space_id),
        ))
    }

    async fn preview_resend_failed(
        &self,
        actor: &SessionUser,
        destination: &str,
        window: &DeliveryQuery,
    ) -> Result<ResendFailedPreview, ConsoleError> {
        require_role(actor, Role::Support)?;
        let (d, filter) = self.replay(destination, window).await?;
        let count = self
            .storage
            .count_resend_failed(&filter)
            .await
            .map_err(internal)?;
        Ok(ResendFailedPreview {
            destination_id: d.id.to_string(),
            destination_url: d.url.clone(),
            destination_name: d.name(),
            count,
            described: describe(&window_only(window)),
        })
    }

    async fn mark_read(
        &self,
        actor: &SessionUser,
        id: Option<&str>,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Support)?;
        let now = now_ms();
        if let Some(id) = id {
            let id: NotificationId = parse_id(id, "notification")?;
            let entry =
                super::audit_entry(actor, AuditAction::NotificationRead, None, id, Value::Null);
            self.storage
                .mark_notification_read(id, now, Some(&entry))
                .await
                .map_err(|e| storage_error(e, "notification"))?;
            return Ok(Notice::new("Marked read."));
        }
        let mut marked = 0;
        // Bounded: at most 50 rounds of 200.
        for _ in 0..50 {
            let unread = self
                .storage
                .list_notifications(true, Page::first(200))
                .await
                .map_err(internal)?;
            if unread.is_empty() {
                break;
            }
            for n in &unread {
                let detail = serde_json::json!({ "all": true });
                let entry = super::audit_entry(
                    actor,
                    AuditAction::NotificationRead,
                    n.space_id,
                    n.id,
                    detail,
                );
                self.storage
                    .mark_notification_read(n.id, now, Some(&entry))
                    .await
                    .map_err(internal)?;
            }
            marked += unread.len();
        }
        Ok(Notice::new(format!("Marked {marked} notifications read.")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chosen_ids_are_valid_unique_and_capped() {
        let a = DeliveryId::new().to_string();
        let b = DeliveryId::new().to_string();
        let s = BulkSelection {
            op: "resend".into(),
            ids: vec![a.clone(), "garbage".into(), a.clone(), format!("{b},{a}")],
            ..Default::default()
        };
        let ids = chosen(&s);
        assert_eq!(
            ids.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
            vec![a, b]
        );
    }

    #[test]
    fn outcomes_are_counted_with_their_reasons() {
        let mut t = BulkTotals::default();
        tally(&mut t, Op::Cancel, BulkOutcome::Cancelled);
        tally(
            &mut t,
            Op::Cancel,
            BulkOutcome::WrongStatus(DeliveryStatus::Sending),
        );
        tally(
            &mut t,
            Op::Cancel,
            BulkOutcome::WrongStatus(DeliveryStatus::Succeeded),
        );
        tally(
            &mut t,
            Op::Resend,
            BulkOutcome::WrongStatus(DeliveryStatus::Pending),
        );
        tally(&mut t, Op::Resend, BulkOutcome::DestinationInactive);
        tally(&mut t, Op::Resend, BulkOutcome::Resent(DeliveryId::new()));
        assert_eq!(
            (
                t.cancelled,
                t.sending,
                t.finished,
                t.unfinished,
                t.inactive,
                t.resent
            ),
            (1, 1, 1, 1, 1, 1)
        );
        assert!(t.summary("resend").starts_with("Sent again 1. Skipped 4:"));
    }

    #[test]
    fn a_filter_reads_as_words() {
        let q = DeliveryQuery {
            status: "failed".into(),
            error_class: "timeout".into(),
            ..Default::default()
        };
        assert_eq!(describe(&q), "status failed, error class timeout");
    }
}
