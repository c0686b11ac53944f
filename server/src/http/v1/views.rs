//! The JSON shapes of the REST API (camelCase, RFC 3339 times), made from domain records.

use serde::Serialize;
use serde_json::Value;

use crate::domain::*;

/// RFC 3339 (UTC, milliseconds) for a Unix-milliseconds time.
pub fn rfc3339(ms: UnixMs) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

fn rfc3339_opt(ms: Option<UnixMs>) -> Option<String> {
    ms.map(rfc3339)
}

/// A page of a listing; `nextCursor` is absent on the last page.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageOf<T> {
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationView {
    pub id: DestinationId,
    pub url: String,
    pub description: String,
    pub event_types: Option<Vec<String>>,
    pub rate_limit: Option<RateLimit>,
    pub max_attempts: i64,
    pub timeout_seconds: i64,
    pub retry_policy: Value,
    pub transformation: Option<String>,
    pub status: DestinationStatus,
    pub disabled_reason: Option<String>,
    pub consecutive_dead_letters: i64,
    pub skipped_events: i64,
    pub created_at: String,
    pub updated_at: String,
    /// Only when it is created or rotated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<String>,
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
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub id: EventId,
    #[serde(rename = "type")]
    pub event_type: String,
    pub payload: Value,
    pub created_at: String,
}

impl From<&Event> for EventView {
    fn from(e: &Event) -> Self {
        Self { id: e.id, event_type: e.event_type.clone(), payload: e.payload.clone(), created_at: rfc3339(e.created_at) }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    pub id: DeliveryId,
    pub event_id: EventId,
    pub destination_id: DestinationId,
    pub event_type: String,
    pub status: DeliveryStatus,
    pub paused: bool,
    pub attempt_count: i64,
    pub next_attempt_at: Option<String>,
    pub last_error_class: Option<ErrorClass>,
    pub last_status_code: Option<i64>,
    pub webhook_id: String,
    pub resent_from: Option<DeliveryId>,
    pub resent_as: Option<DeliveryId>,
    pub created_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
    /// The attempt log, oldest first; only when one delivery is read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
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
            next_attempt_at: if d.status.is_waiting() { rfc3339_opt(d.next_attempt_at) } else { None },
            last_error_class: d.last_error_class,
            last_status_code: d.last_status_code,
            webhook_id: d.webhook_id(),
            resent_from: d.resent_from,
            resent_as: d.resent_as,
            created_at: rfc3339(d.created_at),
            updated_at: rfc3339(d.updated_at),
            finished_at: rfc3339_opt(d.finished_at),
            attempts: None,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView {
    pub id: AttemptId,
    pub attempt_number: i64,
    pub started_at: String,
    pub duration_ms: i64,
    pub error_class: Option<ErrorClass>,
    pub error_message: Option<String>,
    pub request: RequestView,
    pub response: Option<ResponseView>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestView {
    pub url: String,
    pub headers: Value,
    pub body: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseView {
    pub status: i64,
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
            request: RequestView { url: a.request_url.clone(), headers: a.request_headers.clone(), body: a.request_body.clone() },
            response: a.response_status.map(|status| ResponseView {
                status,
                headers: a.response_headers.clone().unwrap_or(Value::Null),
                body: a.response_body.clone().unwrap_or_default(),
            }),
        }
    }
}
