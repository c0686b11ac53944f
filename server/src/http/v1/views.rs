//! The JSON shapes of the REST API (camelCase, RFC 3339 times), made from domain records.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::*;

pub use crate::clock::rfc3339;

fn rfc3339_opt(ms: Option<UnixMs>) -> Option<String> {
    ms.map(rfc3339)
}

/// A page of a listing.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PageOf<T> {
    pub data: Vec<T>,
    /// Pass it as `cursor` for the next page; `null` on the last page.
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

/// A destination: where events of the types it subscribes to are sent.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DestinationView {
    pub id: DestinationId,
    #[schema(format = "uri")]
    pub url: String,
    pub description: String,
    /// The event types it subscribes to (`*` for all); `null` subscribes to every type.
    #[schema(required = true)]
    pub event_types: Option<Vec<String>>,
    /// Its own send limit; `null` for none.
    #[schema(required = true)]
    pub rate_limit: Option<RateLimit>,
    /// Attempts in all, the first one included.
    #[schema(minimum = 1, maximum = 20)]
    pub max_attempts: i64,
    #[schema(minimum = 1, maximum = 60)]
    pub timeout_seconds: i64,
    #[schema(value_type = super::openapi::RetryPolicy)]
    pub retry_policy: Value,
    /// A jq program that reshapes each payload before it is sent; `null` for none.
    #[schema(required = true)]
    pub transformation: Option<String>,
    pub status: DestinationStatus,
    /// Why it was disabled; `null` when it never was.
    #[schema(required = true)]
    pub disabled_reason: Option<String>,
    /// Deliveries in a row that failed for good; at the threshold the destination is disabled.
    pub consecutive_dead_letters: i64,
    /// Events not delivered because it was inactive.
    pub skipped_events: i64,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// The signing secret (`whsec_…`); only in the answers that create the destination or
    /// rotate its secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^whsec_")]
    pub secret: Option<String>,
    /// Until when the previous secret keeps signing; only in the answer to a rotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    pub previous_secret_expires_at: Option<String>,
    /// The jq expression each payload must make `true` to be delivered; `null` for none.
    #[schema(required = true)]
    pub filter: Option<String>,
    /// Events its filter kept out (`false` or `null`).
    pub filtered_events: i64,
    pub ordering: DeliveryOrdering,
    /// Its own request headers, sent on every attempt; the values are secrets, always
    /// shown masked (`••••…1234`: the last 4 characters, fewer for short values).
    pub headers: std::collections::BTreeMap<String, String>,
    /// What it is called: its own name, or else its URL's host (with the port when not
    /// the scheme's default).
    #[schema(examples("Orders"))]
    pub name: String,
}

impl DestinationView {
    pub fn new(d: &Destination, policy_json: Value) -> Self {
        Self {
            id: d.id,
            url: d.url.clone(),
            description: d.description.clone(),
            event_types: d.event_types.clone(),
            rate_limit: d.rate_limit,
            max_attempts: d.max_attempts,
            timeout_seconds: d.timeout_seconds,
            retry_policy: policy_json,
            transformation: d.transformation.clone(),
            status: d.status,
            disabled_reason: d.disabled_reason.clone(),
            consecutive_dead_letters: d.consecutive_dead_letters,
            skipped_events: d.skipped_events,
            created_at: rfc3339(d.created_at),
            updated_at: rfc3339(d.updated_at),
            secret: None,
            previous_secret_expires_at: None,
            filter: d.filter.clone(),
            filtered_events: d.filtered_events,
            ordering: d.ordering,
            headers: crate::ops::headers::masked(&d.headers)
                .into_iter()
                .collect(),
            name: d.name(),
        }
    }
}

/// An event as it was published.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub id: EventId,
    #[serde(rename = "type")]
    pub event_type: String,
    /// Any JSON value, as it was published.
    #[schema(value_type = Value, required = true)]
    pub payload: Value,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When its deliveries were scheduled to go out (`deliverAt`); `null` for at once.
    #[schema(required = true, format = DateTime)]
    pub deliver_at: Option<String>,
}

impl From<&Event> for EventView {
    fn from(e: &Event) -> Self {
        Self {
            id: e.id,
            event_type: e.event_type.clone(),
            payload: e.payload.clone(),
            created_at: rfc3339(e.created_at),
            deliver_at: rfc3339_opt(e.deliver_at),
        }
    }
}

/// One event on its way to one destination.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    pub id: DeliveryId,
    pub event_id: EventId,
    pub destination_id: DestinationId,
    pub event_type: String,
    pub status: DeliveryStatus,
    /// Held while its destination is inactive.
    pub paused: bool,
    /// Attempts made so far.
    pub attempt_count: i64,
    /// When the next attempt is due; `null` unless it is `pending` or `retrying`.
    #[schema(required = true, format = DateTime)]
    pub next_attempt_at: Option<String>,
    #[schema(required = true)]
    pub last_error_class: Option<ErrorClass>,
    /// The HTTP status of the last answer, `null` when there was none.
    #[schema(required = true)]
    pub last_status_code: Option<i64>,
    /// The `webhook-id` header every attempt carries; a resend keeps it.
    pub webhook_id: String,
    /// The delivery this one is a resend of.
    #[schema(required = true)]
    pub resent_from: Option<DeliveryId>,
    /// The resend of this delivery.
    #[schema(required = true)]
    pub resent_as: Option<DeliveryId>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    #[schema(required = true, format = DateTime)]
    pub finished_at: Option<String>,
    /// The attempt log, oldest first; only when one delivery is read.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub attempts: Option<Vec<AttemptView>>,
    /// The time its event was scheduled for (`deliverAt`): the first attempt is not made
    /// before; `null` when it was to go out at once (resends too).
    #[schema(required = true, format = DateTime)]
    pub deliver_at: Option<String>,
}

impl From<&Delivery> for DeliveryView {
    fn from(d: &Delivery) -> Self {
        Self {
            id: d.id,
            event_id: d.event_id,
            destination_id: d.destination_id,
            event_type: d.event_type.clone(),
            status: d.status,
            paused: d.paused,
            attempt_count: d.attempts,
            next_attempt_at: if d.status.is_waiting() {
                rfc3339_opt(d.next_attempt_at)
            } else {
                None
            },
            last_error_class: d.last_error_class,
            last_status_code: d.last_status_code,
            webhook_id: d.webhook_id(),
            resent_from: d.resent_from,
            resent_as: d.resent_as,
            created_at: rfc3339(d.created_at),
            updated_at: rfc3339(d.updated_at),
            finished_at: rfc3339_opt(d.finished_at),
            attempts: None,
            deliver_at: rfc3339_opt(d.deliver_at),
        }
    }
}

/// One HTTP request to the destination and what came back.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView {
    pub id: AttemptId,
    /// 1 for the first attempt.
    pub attempt_number: i64,
    #[schema(format = DateTime)]
    pub started_at: String,
    pub duration_ms: i64,
    /// `null` when it succeeded.
    #[schema(required = true)]
    pub error_class: Option<ErrorClass>,
    #[schema(required = true)]
    pub error_message: Option<String>,
    pub request: RequestView,
    /// `null` when no answer came (timeout, connection error, blocked address).
    #[schema(required = true)]
    pub response: Option<ResponseView>,
}

/// The request as it was sent.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestView {
    pub url: String,
    /// Header names to values.
    #[schema(value_type = std::collections::HashMap<String, String>)]
    pub headers: Value,
    pub body: String,
}

/// The destination's answer.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResponseView {
    /// Its HTTP status.
    pub status: i64,
    /// Header names to values.
    #[schema(value_type = std::collections::HashMap<String, String>)]
    pub headers: Value,
    /// The first 64 KiB.
    pub body: String,
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> Self {
        Self {
            id: a.id,
            attempt_number: a.attempt_number,
            started_at: rfc3339(a.started_at),
            duration_ms: a.duration_ms,
            error_class: a.error_class,
            error_message: a.error_message.clone(),
            request: RequestView {
                url: a.request_url.clone(),
                headers: a.request_headers.clone(),
                body: a.request_body.clone(),
            },
            response: a.response_status.map(|status| ResponseView {
                status,
                headers: a.response_headers.clone().unwrap_or(Value::Null),
                body: a.response_body.clone().unwrap_or_default(),
            }),
        }
    }
}
