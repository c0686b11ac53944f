//! The records of the domain (docs §1) as the rest of the server sees them.
//! Storage converts its rows into these; nothing here knows about SQL.

use serde_json::Value;

use super::*;

/// Milliseconds since the Unix epoch; the one time representation in storage.
pub type UnixMs = i64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Space {
    pub id: SpaceId,
    pub name: String,
    pub plan: Plan,
    pub created_at: UnixMs,
    /// The space's own retention (docs D10); `None`: its plan's.
    pub retention: Option<Retention>,
}

/// An API key without its secret; only its hash is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: ApiKeyId,
    pub space_id: SpaceId,
    pub name: String,
    /// The first characters of the key, shown so people can tell keys apart.
    pub prefix: String,
    pub created_at: UnixMs,
    pub last_used_at: Option<UnixMs>,
    pub revoked_at: Option<UnixMs>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    pub id: ChannelId,
    pub space_id: SpaceId,
    pub name: String,
    pub created_at: UnixMs,
}

string_enum!(
    /// Who posted a message.
    MessageSourceKind, "message source" { IncomingWebhook = "incoming_webhook", Bot = "bot", Api = "api" }
);

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub id: MessageId,
    pub space_id: SpaceId,
    pub channel_id: ChannelId,
    pub text: String,
    pub attachments: Option<Value>,
    pub source_kind: MessageSourceKind,
    pub source_id: Option<String>,
    pub created_at: UnixMs,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: EventId,
    pub space_id: SpaceId,
    pub event_type: String,
    pub payload: Value,
    pub created_at: UnixMs,
    /// When its deliveries go out (`deliverAt`, docs §2.1); `None` for at once.
    pub deliver_at: Option<UnixMs>,
}

string_enum!(
    /// The window of a destination's own rate limit.
    RatePeriod, "rate limit period" { Second = "second", Minute = "minute", Hour = "hour" }
);

impl RatePeriod {
    pub fn as_millis(self) -> i64 {
        match self {
            RatePeriod::Second => 1_000,
            RatePeriod::Minute => 60_000,
            RatePeriod::Hour => 3_600_000,
        }
    }
}

/// A destination's own send limit: at most `count` requests per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RateLimit {
    pub count: u32,
    pub period: RatePeriod,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Destination {
    pub id: DestinationId,
    pub space_id: SpaceId,
    pub url: String,
    pub description: String,
    /// `None` subscribes to every event type.
    pub event_types: Option<Vec<String>>,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<UnixMs>,
    pub rate_limit: Option<RateLimit>,
    pub max_attempts: i64,
    pub timeout_seconds: i64,
    /// The destination's retry policy as given (`{"preset": …, overrides}`).
    pub retry_policy: Value,
    pub transformation: Option<String>,
    pub status: DestinationStatus,
    pub consecutive_dead_letters: i64,
    pub skipped_events: i64,
    pub disabled_reason: Option<String>,
    pub created_at: UnixMs,
    pub updated_at: UnixMs,
    /// A jq expression run on each payload at publish: only `true` lets the event
    /// through (`ops::filters`).
    pub filter: Option<String>,
    /// Events its filter kept out.
    pub filtered_events: i64,
    /// `fifo`: one attempt at a time, in the events' publish order (docs D12).
    pub ordering: DeliveryOrdering,
    /// Its own request headers, sent on every attempt (docs §2.9).
    pub headers: CustomHeaders,
    /// Its own name, as given; `None`: it goes by its URL's host ([`Destination::name`]).
    pub name: Option<String>,
}

/// The headers PartyFlow Hooks sets itself or HTTP owns: never a destination's own
/// (docs §2.9). Lowercase; header names compare case-insensitively.
pub const RESERVED_HEADERS: [&str; 9] = [
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "content-type",
    "content-length",
    "host",
    "connection",
    "transfer-encoding",
    "user-agent",
];

/// A destination's own request headers: names as given, in the order of their
/// lowercase names, one value each. The values are secrets (an `Authorization`, a
/// token): `Debug` shows the names only. What makes a valid set is
/// `ops::headers`' rule.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CustomHeaders(Vec<(String, String)>);

impl CustomHeaders {
    /// The headers, sorted by their lowercase names.
    pub fn new(mut headers: Vec<(String, String)>) -> Self {
        headers.sort_by_key(|(name, _)| name.to_ascii_lowercase());
        Self(headers)
    }

    /// `(name, value)`, in the order of their lowercase names.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The value of `name` (any case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// How a custom header's value is shown once stored: `••••…1234`, its last 4
/// characters, fewer for a short value (one per 4 characters it has), none under 4.
pub fn mask_header_value(value: &str) -> String {
    let chars: Vec<char> = value.chars().collect();
    let shown = (chars.len() / 4).min(4);
    if shown == 0 {
        "••••".to_owned()
    } else {
        let tail: String = chars[chars.len() - shown..].iter().collect();
        format!("••••…{tail}")
    }
}

impl std::fmt::Debug for CustomHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(n, _)| (n, "<secret>")))
            .finish()
    }
}

impl Destination {
    /// The name it is shown by: its own, or else its URL's host ([`default_name`]).
    pub fn name(&self) -> String {
        shown_name(self.name.as_deref(), &self.url)
    }

    /// Whether an event of `event_type` goes to this destination (status aside).
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        subscribes(self.event_types.as_deref(), event_type)
    }
}

/// A destination's name as shown: `own` when it has one, else its URL's host
/// ([`default_name`]). The one place the default is applied (storage keeps `NULL` for
/// "no name of its own", so a changed URL changes the name shown).
pub fn shown_name(own: Option<&str>, url: &str) -> String {
    match own {
        Some(name) => name.to_owned(),
        None => default_name(url),
    }
}

/// The name of a destination that was given none: its URL's host, with the port when it
/// is not the scheme's default (`https://shop.example/hooks` → `shop.example`,
/// `http://127.0.0.1:8080/h` → `127.0.0.1:8080`). A URL that does not parse (never
/// stored: URLs are checked on save) is its own name.
pub fn default_name(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else {
        return url.to_owned();
    };
    match (parsed.host_str(), parsed.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => url.to_owned(),
    }
}

/// The notification of a destination `streak` dead-letters into a row that will be
/// disabled at `after` (docs §2.6): named, with its URL beside the name.
pub fn failing_destination_text(name: &str, url: &str, streak: i64, after: i64) -> String {
    format!(
        "Destination \u{201c}{name}\u{201d} ({url}) has dead-lettered {streak} deliveries in a row; \
         it will be disabled at {after}."
    )
}

/// The notification of a destination disabled for `reason` (docs §2.6).
pub fn disabled_destination_text(name: &str, url: &str, reason: &str) -> String {
    format!(
        "Destination \u{201c}{name}\u{201d} ({url}) was disabled after {reason}. New events are not \
         delivered to it; waiting deliveries are paused until an admin re-enables it."
    )
}

/// The subscription entry that takes every event type.
pub const EVERY_TYPE: &str = "*";

/// The prefix of the product's own event types (`partyflow.test`, `partyflow.alert`):
/// nobody else may publish them.
pub const PRODUCT_EVENT_PREFIX: &str = "partyflow.";

/// The event type of alerts (docs D16): sent to the destinations that name it.
pub const ALERT_EVENT_TYPE: &str = "partyflow.alert";

/// Whether `event_type` is one of the product's own (see [`PRODUCT_EVENT_PREFIX`]).
pub fn is_product_event_type(event_type: &str) -> bool {
    event_type.starts_with(PRODUCT_EVENT_PREFIX)
}

/// Whether a destination of `event_types` (`None`: every type of the space's own) takes
/// an event of `event_type`: [`Destination::subscribes_to`].
pub fn subscribes(event_types: Option<&[String]>, event_type: &str) -> bool {
    match event_types {
        None => !is_product_event_type(event_type),
        Some(patterns) => {
            let keys = subscription_keys(event_type);
            patterns.iter().any(|p| keys.contains(p))
        }
    }
}

/// The subscription entries that take an event of `event_type`: the type itself, `*`,
/// and one trailing wildcard per dot (`order.refund.done` → `order.*`, `order.refund.*`).
/// The product's own types are taken only by their name: a destination that asked for
/// every type of a tenant's events does not get admin alerts.
/// The one matching rule: a publish looks these up in `subscriptions` with `IN (…)`, and
/// [`Destination::subscribes_to`] asks whether one of its entries is among them.
pub fn subscription_keys(event_type: &str) -> Vec<String> {
    if is_product_event_type(event_type) {
        return vec![event_type.to_owned()];
    }
    let mut keys = vec![event_type.to_owned(), EVERY_TYPE.to_owned()];
    keys.extend(
        event_type
            .match_indices('.')
            .map(|(dot, _)| format!("{}*", &event_type[..=dot])),
    );
    keys
}

/// A catalogued event type of a space (docs §1): what it means, the JSON Schema its
/// payloads must match (if any), an example payload, and whether it is deprecated.
#[derive(Debug, Clone, PartialEq)]
pub struct EventType {
    pub id: EventTypeId,
    pub space_id: SpaceId,
    pub name: String,
    pub description: String,
    /// A JSON Schema (draft 2020-12).
    pub schema: Option<Value>,
    /// A payload of the type; it matches `schema` when both are given.
    pub example: Option<Value>,
    pub deprecated: bool,
    pub created_at: UnixMs,
    pub updated_at: UnixMs,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: DeliveryId,
    pub space_id: SpaceId,
    pub event_id: EventId,
    pub destination_id: DestinationId,
    pub event_type: String,
    pub status: DeliveryStatus,
    /// Waiting, but held because its destination is inactive (docs D6).
    pub paused: bool,
    pub attempts: i64,
    pub next_attempt_at: Option<UnixMs>,
    pub lease_expires_at: Option<UnixMs>,
    pub last_error_class: Option<ErrorClass>,
    pub last_status_code: Option<i64>,
    pub resent_from: Option<DeliveryId>,
    pub resent_as: Option<DeliveryId>,
    pub created_at: UnixMs,
    pub updated_at: UnixMs,
    pub finished_at: Option<UnixMs>,
    /// When its event was scheduled to go out (`deliverAt`, docs §2.1); `None` for at once.
    pub deliver_at: Option<UnixMs>,
}

impl Delivery {
    /// The Standard Webhooks `webhook-id`: the event's ID, so it is stable across retries and resends.
    pub fn webhook_id(&self) -> String {
        self.event_id.to_string()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub id: AttemptId,
    pub delivery_id: DeliveryId,
    pub space_id: SpaceId,
    pub attempt_number: i64,
    pub started_at: UnixMs,
    pub duration_ms: i64,
    pub request_url: String,
    pub request_headers: Value,
    pub request_body: String,
    pub response_status: Option<i64>,
    pub response_headers: Option<Value>,
    pub response_body: Option<String>,
    pub error_class: Option<ErrorClass>,
    pub error_message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingWebhook {
    pub id: IncomingWebhookId,
    pub space_id: SpaceId,
    pub channel_id: ChannelId,
    pub name: String,
    pub token_hash: String,
    pub signing_secret: Option<String>,
    pub status: IncomingWebhookStatus,
    pub consecutive_failures: i64,
    pub created_at: UnixMs,
    pub updated_at: UnixMs,
    pub disabled_at: Option<UnixMs>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bot {
    pub id: BotId,
    pub space_id: SpaceId,
    pub name: String,
    pub token_hash: String,
    pub created_at: UnixMs,
    pub revoked_at: Option<UnixMs>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: UserId,
    pub email: String,
    pub password_hash: String,
    pub role: Role,
    pub created_at: UnixMs,
    pub disabled_at: Option<UnixMs>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub id: NotificationId,
    pub space_id: Option<SpaceId>,
    /// e.g. `destination.disabled`, `incoming_webhook.disabled`.
    pub kind: String,
    /// What it is about, so the console can link to it: `destination`, `incoming_webhook`, …
    pub subject_kind: Option<String>,
    pub subject_id: Option<String>,
    pub message: String,
    pub created_at: UnixMs,
    pub read_at: Option<UnixMs>,
}

impl Notification {
    /// Where its subject lives in the console (a path below the console's base): what
    /// the notifications page and the alerts link to.
    pub fn console_path(&self) -> Option<String> {
        let id = self.subject_id.as_deref()?;
        match self.subject_kind.as_deref()? {
            "destination" => Some(format!("/destinations/{id}")),
            "incoming_webhook" => {
                let space = self
                    .space_id
                    .map(|s| format!("?space={s}"))
                    .unwrap_or_default();
                Some(format!("/incoming-webhooks{space}#{id}"))
            }
            "delivery" => Some(format!("/deliveries/{id}")),
            _ => None,
        }
    }
}

/// An address that admin notifications are e-mailed to (docs D16): a space's, or every
/// space's (`space_id` `None`, the install's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertEmail {
    pub id: AlertEmailId,
    pub space_id: Option<SpaceId>,
    pub address: String,
    pub created_at: UnixMs,
}

/// An alert e-mail waiting to be sent, or given up on (`next_attempt_at` `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertMail {
    pub id: AlertMailId,
    pub notification_id: NotificationId,
    pub space_id: Option<SpaceId>,
    pub address: String,
    pub subject: String,
    pub body: String,
    pub attempts: i64,
    pub next_attempt_at: Option<UnixMs>,
    pub last_error: Option<String>,
    pub created_at: UnixMs,
}

/// When a destination is switched off for failing (docs §2.6): after `after`
/// dead-lettered deliveries in a row, with early warnings for admins at `warn_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoDisable {
    pub after: i64,
    pub warn_at: Vec<i64>,
}

impl Default for AutoDisable {
    fn default() -> Self {
        Self {
            after: 100,
            warn_at: vec![50, 90],
        }
    }
}

/// What a destination's dead-letter streak calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreakStep {
    Nothing,
    Warn,
    Disable,
}

impl AutoDisable {
    /// The step for a streak that has just reached `consecutive` dead-letters.
    pub fn step(&self, consecutive: i64) -> StreakStep {
        if consecutive == self.after {
            StreakStep::Disable
        } else if consecutive < self.after && self.warn_at.contains(&consecutive) {
            StreakStep::Warn
        } else {
            StreakStep::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_is_disabled_at_exactly_the_hundredth_dead_letter_with_warnings_before() {
        let rule = AutoDisable::default();
        assert_eq!(rule.step(1), StreakStep::Nothing);
        assert_eq!(rule.step(50), StreakStep::Warn);
        assert_eq!(rule.step(90), StreakStep::Warn);
        assert_eq!(rule.step(99), StreakStep::Nothing);
        assert_eq!(rule.step(100), StreakStep::Disable);
        // Past the threshold (already disabled) nothing more happens.
        assert_eq!(rule.step(101), StreakStep::Nothing);
    }

    fn subscribed(patterns: &[&str]) -> Destination {
        Destination {
            id: DestinationId::new(),
            space_id: SpaceId::new(),
            url: "https://example.com".into(),
            description: String::new(),
            event_types: Some(patterns.iter().map(|p| p.to_string()).collect()),
            secret: String::new(),
            previous_secret: None,
            previous_secret_expires_at: None,
            rate_limit: None,
            max_attempts: 1,
            timeout_seconds: 30,
            retry_policy: Value::Null,
            transformation: None,
            status: DestinationStatus::Active,
            consecutive_dead_letters: 0,
            skipped_events: 0,
            disabled_reason: None,
            created_at: 0,
            updated_at: 0,
            filter: None,
            filtered_events: 0,
            ordering: DeliveryOrdering::Unordered,
            headers: CustomHeaders::default(),
            name: None,
        }
    }

    #[test]
    fn a_destination_without_a_name_goes_by_its_urls_host_with_a_port_that_is_not_the_default() {
        assert_eq!(
            default_name("https://shop.example/hooks?x=1"),
            "shop.example"
        );
        assert_eq!(
            default_name("https://shop.example:443/hooks"),
            "shop.example"
        );
        assert_eq!(default_name("http://shop.example:80/"), "shop.example");
        assert_eq!(
            default_name("https://shop.example:8443/h"),
            "shop.example:8443"
        );
        assert_eq!(
            default_name("http://127.0.0.1:33743/hook"),
            "127.0.0.1:33743"
        );
        assert_eq!(
            default_name("http://user:pw@hooks.example/h"),
            "hooks.example"
        );
        assert_eq!(default_name("http://[::1]:8080/h"), "[::1]:8080");
        assert_eq!(default_name("not a url"), "not a url");
    }

    #[test]
    fn its_own_name_wins_over_the_host() {
        let mut d = subscribed(&["*"]);
        assert_eq!(d.name(), "example.com");
        d.name = Some("Orders".into());
        assert_eq!(d.name(), "Orders");
    }

    #[test]
    fn the_notifications_name_the_destination_with_its_url_beside_it() {
        assert_eq!(
            failing_destination_text("Orders", "https://shop.example/hooks", 50, 100),
            "Destination \u{201c}Orders\u{201d} (https://shop.example/hooks) has dead-lettered 50 \
             deliveries in a row; it will be disabled at 100."
        );
        let disabled = disabled_destination_text(
            "Orders",
            "https://shop.example/hooks",
            "3 dead-lettered deliveries in a row",
        );
        assert!(disabled.starts_with("Destination \u{201c}Orders\u{201d} (https://shop.example/hooks) was disabled after 3 dead-lettered deliveries in a row."), "{disabled}");
    }

    #[test]
    fn an_event_type_is_looked_up_as_itself_every_type_and_one_wildcard_per_dot() {
        assert_eq!(
            subscription_keys("order.refund.done"),
            ["order.refund.done", "*", "order.*", "order.refund.*"]
        );
        assert_eq!(subscription_keys("ping"), ["ping", "*"]);
    }

    #[test]
    fn the_products_own_types_are_taken_only_by_their_name() {
        assert_eq!(subscription_keys(ALERT_EVENT_TYPE), [ALERT_EVENT_TYPE]);
        assert!(subscribed(&[ALERT_EVENT_TYPE]).subscribes_to(ALERT_EVENT_TYPE));
        assert!(!subscribed(&["*"]).subscribes_to(ALERT_EVENT_TYPE));
        assert!(!subscribed(&["partyflow.*"]).subscribes_to(ALERT_EVENT_TYPE));
        let mut everything = subscribed(&[]);
        everything.event_types = None;
        assert!(everything.subscribes_to("order.created"));
        assert!(!everything.subscribes_to(ALERT_EVENT_TYPE));
    }

    #[test]
    fn a_trailing_wildcard_takes_every_type_below_its_prefix_and_nothing_else() {
        let orders = subscribed(&["order.*"]);
        assert!(orders.subscribes_to("order.created"));
        assert!(orders.subscribes_to("order.refund.done"));
        assert!(!orders.subscribes_to("order"));
        assert!(!orders.subscribes_to("orders.created"));
        assert!(!orders.subscribes_to("invoice.paid"));
        assert!(!orders.subscribes_to("invoice.order.created"));

        let refunds = subscribed(&["order.refund.*", "invoice.paid"]);
        assert!(refunds.subscribes_to("order.refund.done"));
        assert!(!refunds.subscribes_to("order.created"));
        assert!(refunds.subscribes_to("invoice.paid"));

        assert!(subscribed(&["*"]).subscribes_to("anything.at.all"));
        let mut every = subscribed(&[]);
        every.event_types = None;
        assert!(every.subscribes_to("x"));
    }

    #[test]
    fn a_header_value_is_masked_to_its_last_four_characters_fewer_when_short() {
        assert_eq!(
            mask_header_value("Basic dXNlcjpwYXNzd29yZDEyMzQ="),
            "••••…MzQ="
        );
        assert_eq!(mask_header_value("12345678901234567"), "••••…4567");
        assert_eq!(mask_header_value("abcdefgh"), "••••…gh");
        assert_eq!(mask_header_value("abcd"), "••••…d");
        assert_eq!(mask_header_value("abc"), "••••");
        assert_eq!(mask_header_value(""), "••••");
    }
}
