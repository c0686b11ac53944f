//! Row shapes as both backends return them, and their conversion to domain records.
//! A value that does not parse back is reported as [`StorageError::Corrupt`], never a panic.

use serde_json::Value;

use super::StorageError;
use crate::domain::*;

fn parse<T: std::str::FromStr>(what: &str, s: &str) -> Result<T, StorageError>
where
    T::Err: std::fmt::Display,
{
    s.parse()
        .map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))
}

fn parse_opt<T: std::str::FromStr>(what: &str, s: Option<String>) -> Result<Option<T>, StorageError>
where
    T::Err: std::fmt::Display,
{
    s.map(|s| parse(what, &s)).transpose()
}

fn json(what: &str, s: &str) -> Result<Value, StorageError> {
    serde_json::from_str(s).map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))
}

fn json_opt(what: &str, s: Option<String>) -> Result<Option<Value>, StorageError> {
    s.map(|s| json(what, &s)).transpose()
}

#[derive(sqlx::FromRow)]
pub struct SpaceRow {
    id: String,
    name: String,
    plan: String,
    created_at: i64,
}

impl TryFrom<SpaceRow> for Space {
    type Error = StorageError;
    fn try_from(r: SpaceRow) -> Result<Self, StorageError> {
        Ok(Space {
            id: parse("spaces.id", &r.id)?,
            name: r.name,
            plan: parse("spaces.plan", &r.plan)?,
            created_at: r.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct ApiKeyRow {
    id: String,
    space_id: String,
    name: String,
    prefix: String,
    created_at: i64,
    last_used_at: Option<i64>,
    revoked_at: Option<i64>,
}

impl TryFrom<ApiKeyRow> for ApiKey {
    type Error = StorageError;
    fn try_from(r: ApiKeyRow) -> Result<Self, StorageError> {
        Ok(ApiKey {
            id: parse("api_keys.id", &r.id)?,
            space_id: parse("api_keys.space_id", &r.space_id)?,
            name: r.name,
            prefix: r.prefix,
            created_at: r.created_at,
            last_used_at: r.last_used_at,
            revoked_at: r.revoked_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct ChannelRow {
    id: String,
    space_id: String,
    name: String,
    created_at: i64,
}

impl TryFrom<ChannelRow> for Channel {
    type Error = StorageError;
    fn try_from(r: ChannelRow) -> Result<Self, StorageError> {
        Ok(Channel {
            id: parse("channels.id", &r.id)?,
            space_id: parse("channels.space_id", &r.space_id)?,
            name: r.name,
            created_at: r.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct MessageRow {
    id: String,
    space_id: String,
    channel_id: String,
    text: String,
    attachments: Option<String>,
    source_kind: String,
    source_id: Option<String>,
    created_at: i64,
}

impl TryFrom<MessageRow> for Message {
    type Error = StorageError;
    fn try_from(r: MessageRow) -> Result<Self, StorageError> {
        Ok(Message {
            id: parse("messages.id", &r.id)?,
            space_id: parse("messages.space_id", &r.space_id)?,
            channel_id: parse("messages.channel_id", &r.channel_id)?,
            text: r.text,
            attachments: json_opt("messages.attachments", r.attachments)?,
            source_kind: parse("messages.source_kind", &r.source_kind)?,
            source_id: r.source_id,
            created_at: r.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct EventRow {
    id: String,
    space_id: String,
    event_type: String,
    payload: String,
    created_at: i64,
}

impl TryFrom<EventRow> for Event {
    type Error = StorageError;
    fn try_from(r: EventRow) -> Result<Self, StorageError> {
        Ok(Event {
            id: parse("events.id", &r.id)?,
            space_id: parse("events.space_id", &r.space_id)?,
            event_type: r.event_type,
            payload: json("events.payload", &r.payload)?,
            created_at: r.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct DestinationRow {
    id: String,
    space_id: String,
    url: String,
    description: String,
    event_types: Option<String>,
    secret: String,
    previous_secret: Option<String>,
    previous_secret_expires_at: Option<i64>,
    rate_limit_count: Option<i64>,
    rate_limit_period: Option<String>,
    max_attempts: i64,
    timeout_seconds: i64,
    retry_policy: String,
    transformation: Option<String>,
    status: String,
    consecutive_dead_letters: i64,
    skipped_events: i64,
    disabled_reason: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<DestinationRow> for Destination {
    type Error = StorageError;
    fn try_from(r: DestinationRow) -> Result<Self, StorageError> {
        let event_types = match r.event_types {
            None => None,
            Some(s) => Some(
                serde_json::from_str(&s)
                    .map_err(|e| StorageError::Corrupt(format!("destinations.event_types: {e}")))?,
            ),
        };
        let rate_limit = match (r.rate_limit_count, r.rate_limit_period) {
            (Some(count), Some(period)) => Some(RateLimit {
                count: u32::try_from(count).map_err(|e| {
                    StorageError::Corrupt(format!("destinations.rate_limit_count: {e}"))
                })?,
                period: parse("destinations.rate_limit_period", &period)?,
            }),
            _ => None,
        };
        Ok(Destination {
            id: parse("destinations.id", &r.id)?,
            space_id: parse("destinations.space_id", &r.space_id)?,
            url: r.url,
            description: r.description,
            event_types,
            secret: r.secret,
            previous_secret: r.previous_secret,
            previous_secret_expires_at: r.previous_secret_expires_at,
            rate_limit,
            max_attempts: r.max_attempts,
            timeout_seconds: r.timeout_seconds,
            retry_policy: json("destinations.retry_policy", &r.retry_policy)?,
            transformation: r.transformation,
            status: parse("destinations.status", &r.status)?,
            consecutive_dead_letters: r.consecutive_dead_letters,
            skipped_events: r.skipped_events,
            disabled_reason: r.disabled_reason,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct DeliveryRow {
    id: String,
    space_id: String,
    event_id: String,
    destination_id: String,
    event_type: String,
    status: String,
    paused: bool,
    attempts: i64,
    next_attempt_at: Option<i64>,
    lease_expires_at: Option<i64>,
    last_error_class: Option<String>,
    last_status_code: Option<i64>,
    resent_from: Option<String>,
    resent_as: Option<String>,
    created_at: i64,
    updated_at: i64,
    finished_at: Option<i64>,
}

impl TryFrom<DeliveryRow> for Delivery {
    type Error = StorageError;
    fn try_from(r: DeliveryRow) -> Result<Self, StorageError> {
        Ok(Delivery {
            id: parse("deliveries.id", &r.id)?,
            space_id: parse("deliveries.space_id", &r.space_id)?,
            event_id: parse("deliveries.event_id", &r.event_id)?,
            destination_id: parse("deliveries.destination_id", &r.destination_id)?,
            event_type: r.event_type,
            status: parse("deliveries.status", &r.status)?,
            paused: r.paused,
            attempts: r.attempts,
            next_attempt_at: r.next_attempt_at,
            lease_expires_at: r.lease_expires_at,
            last_error_class: parse_opt("deliveries.last_error_class", r.last_error_class)?,
            last_status_code: r.last_status_code,
            resent_from: parse_opt("deliveries.resent_from", r.resent_from)?,
            resent_as: parse_opt("deliveries.resent_as", r.resent_as)?,
            created_at: r.created_at,
            updated_at: r.updated_at,
            finished_at: r.finished_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct AttemptRow {
    id: String,
    delivery_id: String,
    space_id: String,
    attempt_number: i64,
    started_at: i64,
    duration_ms: i64,
    request_url: String,
    request_headers: String,
    request_body: String,
    response_status: Option<i64>,
    response_headers: Option<String>,
    response_body: Option<String>,
    error_class: Option<String>,
    error_message: Option<String>,
}

impl TryFrom<AttemptRow> for Attempt {
    type Error = StorageError;
    fn try_from(r: AttemptRow) -> Result<Self, StorageError> {
        Ok(Attempt {
            id: parse("attempts.id", &r.id)?,
            delivery_id: parse("attempts.delivery_id", &r.delivery_id)?,
            space_id: parse("attempts.space_id", &r.space_id)?,
            attempt_number: r.attempt_number,
            started_at: r.started_at,
            duration_ms: r.duration_ms,
            request_url: r.request_url,
            request_headers: json("attempts.request_headers", &r.request_headers)?,
            request_body: r.request_body,
            response_status: r.response_status,
            response_headers: json_opt("attempts.response_headers", r.response_headers)?,
            response_body: r.response_body,
            error_class: parse_opt("attempts.error_class", r.error_class)?,
            error_message: r.error_message,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct IncomingWebhookRow {
    id: String,
    space_id: String,
    channel_id: String,
    name: String,
    token_hash: String,
    signing_secret: Option<String>,
    status: String,
    consecutive_failures: i64,
    created_at: i64,
    updated_at: i64,
    disabled_at: Option<i64>,
}

impl TryFrom<IncomingWebhookRow> for IncomingWebhook {
    type Error = StorageError;
    fn try_from(r: IncomingWebhookRow) -> Result<Self, StorageError> {
        Ok(IncomingWebhook {
            id: parse("incoming_webhooks.id", &r.id)?,
            space_id: parse("incoming_webhooks.space_id", &r.space_id)?,
            channel_id: parse("incoming_webhooks.channel_id", &r.channel_id)?,
            name: r.name,
            token_hash: r.token_hash,
            signing_secret: r.signing_secret,
            status: parse("incoming_webhooks.status", &r.status)?,
            consecutive_failures: r.consecutive_failures,
            created_at: r.created_at,
            updated_at: r.updated_at,
            disabled_at: r.disabled_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct BotRow {
    id: String,
    space_id: String,
    name: String,
    token_hash: String,
    created_at: i64,
    revoked_at: Option<i64>,
}

impl TryFrom<BotRow> for Bot {
    type Error = StorageError;
    fn try_from(r: BotRow) -> Result<Self, StorageError> {
        Ok(Bot {
            id: parse("bots.id", &r.id)?,
            space_id: parse("bots.space_id", &r.space_id)?,
            name: r.name,
            token_hash: r.token_hash,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct UserRow {
    id: String,
    email: String,
    password_hash: String,
    role: String,
    created_at: i64,
    disabled_at: Option<i64>,
}

impl TryFrom<UserRow> for User {
    type Error = StorageError;
    fn try_from(r: UserRow) -> Result<Self, StorageError> {
        Ok(User {
            id: parse("users.id", &r.id)?,
            email: r.email,
            password_hash: r.password_hash,
            role: parse("users.role", &r.role)?,
            created_at: r.created_at,
            disabled_at: r.disabled_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct NotificationRow {
    id: String,
    space_id: Option<String>,
    kind: String,
    subject_kind: Option<String>,
    subject_id: Option<String>,
    message: String,
    created_at: i64,
    read_at: Option<i64>,
}

impl TryFrom<NotificationRow> for Notification {
    type Error = StorageError;
    fn try_from(r: NotificationRow) -> Result<Self, StorageError> {
        Ok(Notification {
            id: parse("notifications.id", &r.id)?,
            space_id: parse_opt("notifications.space_id", r.space_id)?,
            kind: r.kind,
            subject_kind: r.subject_kind,
            subject_id: r.subject_id,
            message: r.message,
            created_at: r.created_at,
            read_at: r.read_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct IdempotencyRow {
    pub request_hash: String,
    pub event_id: String,
    pub deliveries: i64,
}

/// Converts every row, failing on the first that does not parse.
pub fn convert_all<R, T>(rows: Vec<R>) -> Result<Vec<T>, StorageError>
where
    T: TryFrom<R, Error = StorageError>,
{
    rows.into_iter().map(T::try_from).collect()
}
