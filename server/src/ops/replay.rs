//! Replaying failed deliveries (docs §2.7): which deliveries "resend failed" takes and
//! its preview counts, one rule for the REST API (`POST …/deliveries/resend-failed` and
//! `…/resend-failed/preview`) and the console's "Send again all failed".
//!
//! The window is on the delivery's creation time (for a first delivery, when its event
//! was published; for a copy made by a resend, when it was resent): delivery IDs sort
//! by it, so the window is an ID range on the `(space_id, status, id)` index.

use crate::domain::*;
use crate::ops::OpsError;
use crate::storage::DeliveryFilter;

/// What to replay: every field narrows the choice; none of them means every failed
/// delivery of the space.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    pub destination_id: Option<DestinationId>,
    /// Only deliveries of this event type.
    pub event_type: Option<String>,
    /// Only deliveries whose last attempt failed with this class.
    pub error_class: Option<ErrorClass>,
    /// Deliveries created at or after this time (Unix ms).
    pub since: Option<UnixMs>,
    /// Deliveries created before this time (Unix ms).
    pub until: Option<UnixMs>,
}

/// The storage filter of a replay in `space_id`, once its values are checked: the
/// window must not end before it starts, and an event type must be one.
pub fn failed_filter(space_id: SpaceId, r: Replay) -> Result<DeliveryFilter, OpsError> {
    if let (Some(since), Some(until)) = (r.since, r.until) {
        if until < since {
            return Err(OpsError::invalid(
                "invalid_window",
                "the window ends (until) before it starts (since)",
            ));
        }
    }
    if let Some(t) = &r.event_type {
        super::destinations::check_event_type(t)
            .map_err(|e| OpsError::invalid("invalid_event_type", e.message))?;
    }
    Ok(DeliveryFilter {
        space_id: Some(space_id),
        status: Some(DeliveryStatus::Failed),
        destination_id: r.destination_id,
        event_type: r.event_type,
        error_class: r.error_class,
        since: r.since,
        until: r.until,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_selects_the_failed_deliveries_of_its_window() {
        let space = SpaceId::new();
        let f = failed_filter(
            space,
            Replay {
                event_type: Some("order.paid".into()),
                error_class: Some(ErrorClass::Http),
                since: Some(1_000),
                until: Some(2_000),
                ..Replay::default()
            },
        )
        .unwrap();
        assert_eq!(f.space_id, Some(space));
        assert_eq!(f.status, Some(DeliveryStatus::Failed));
        assert_eq!(f.event_type.as_deref(), Some("order.paid"));
        assert_eq!(f.error_class, Some(ErrorClass::Http));
        assert_eq!((f.since, f.until), (Some(1_000), Some(2_000)));
    }

    #[test]
    fn nothing_chosen_means_every_failed_delivery_of_the_space() {
        let f = failed_filter(SpaceId::new(), Replay::default()).unwrap();
        assert_eq!(f.status, Some(DeliveryStatus::Failed));
        assert!(f.destination_id.is_none() && f.since.is_none() && f.until.is_none());
    }

    #[test]
    fn a_window_that_ends_before_it_starts_is_refused() {
        let r = Replay {
            since: Some(2_000),
            until: Some(1_000),
            ..Replay::default()
        };
        match failed_filter(SpaceId::new(), r) {
            Err(OpsError::Invalid { code, .. }) => assert_eq!(code, "invalid_window"),
            other => panic!("{other:?}"),
        }
        let empty = Replay {
            since: Some(1_000),
            until: Some(1_000),
            ..Replay::default()
        };
        assert!(failed_filter(SpaceId::new(), empty).is_ok());
    }

    #[test]
    fn an_event_type_that_is_not_one_is_refused() {
        let r = Replay {
            event_type: Some("no spaces".into()),
            ..Replay::default()
        };
        match failed_filter(SpaceId::new(), r) {
            Err(OpsError::Invalid { code, .. }) => assert_eq!(code, "invalid_event_type"),
            other => panic!("{other:?}"),
        }
    }
}
