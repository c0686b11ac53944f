//! Types shared by the console in the browser and the server: what server
//! functions take and answer. Values the server owns (IDs, statuses, error
//! classes) travel as the strings the REST API uses.

use serde::{Deserialize, Serialize};

/// A console user's role, on the wire as `admin` or `support` (the names the server
/// stores). Admins may do everything; support staff read, send again and cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Support,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Support => "support",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The person signed in to the console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionUser {
    pub id: String,
    pub email: String,
    pub role: Role,
    /// The request's TCP peer address, for the audit log (set by the server for changes;
    /// never sent to or taken from the browser).
    #[serde(skip)]
    pub source: Option<std::net::IpAddr>,
}

impl SessionUser {
    /// Admins may do everything; support staff read, send again and cancel.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

/// What a console action did, shown to the person who asked for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub message: String,
    /// Values shown once (a new token, key or secret): label and value.
    #[serde(default)]
    pub secrets: Vec<(String, String)>,
    /// Somewhere to go next: label and local path.
    #[serde(default)]
    pub link: Option<(String, String)>,
    /// The state of a bulk action, when this notice reports one.
    #[serde(default)]
    pub bulk: Option<BulkProgress>,
}

impl Notice {
    pub fn new(message: impl Into<String>) -> Self {
        Notice {
            message: message.into(),
            ..Default::default()
        }
    }

    pub fn with_secret(mut self, label: impl Into<String>, value: impl Into<String>) -> Self {
        self.secrets.push((label.into(), value.into()));
        self
    }

    pub fn with_link(mut self, label: impl Into<String>, href: impl Into<String>) -> Self {
        self.link = Some((label.into(), href.into()));
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceView {
    pub id: String,
    pub name: String,
    pub plan: String,
    pub created_at: i64,
}

/// The filters of the deliveries table, as they appear in its URL (`?status=failed&…`).
/// Empty strings mean "any".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryQuery {
    #[serde(default)]
    pub space: String,
    #[serde(default)]
    pub destination: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub error_class: String,
    #[serde(default)]
    pub event_type: String,
    /// A quick range: `15m`, `1h`, `24h`, `7d`, or empty.
    #[serde(default)]
    pub last: String,
    /// `YYYY-MM-DDTHH:MM` in UTC (what `<input type=datetime-local>` sends).
    #[serde(default)]
    pub since: String,
    #[serde(default)]
    pub until: String,
    /// Keyset cursor: only deliveries older than this ID.
    #[serde(default)]
    pub before: String,
}

impl DeliveryQuery {
    /// The filter fields (not the cursor) as `(name, value)` pairs, skipping empty ones.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        [
            ("space", &self.space),
            ("destination", &self.destination),
            ("status", &self.status),
            ("error_class", &self.error_class),
            ("event_type", &self.event_type),
            ("last", &self.last),
            ("since", &self.since),
            ("until", &self.until),
        ]
        .into_iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| (k, v.trim().to_owned()))
        .collect()
    }

    /// The filter as a URL query string (without `?`).
    pub fn to_query_string(&self) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in self.pairs() {
            s.append_pair(k, &v);
        }
        s.finish()
    }

    /// Whether any filter is set.
    pub fn is_filtered(&self) -> bool {
        !self.pairs().is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRow {
    pub id: String,
    pub space_id: String,
    pub space_name: String,
    pub destination_id: String,
    pub destination_url: String,
    pub event_type: String,
    pub status: String,
    pub paused: bool,
    pub attempts: i64,
    pub last_error_class: Option<String>,
    pub last_status_code: Option<i64>,
    pub next_attempt_at: Option<i64>,
    pub created_at: i64,
    pub resent_from: Option<String>,
    pub resent_as: Option<String>,
    /// What its destination is called (its own name, or its URL's host).
    pub destination_name: String,
}

/// A choice in a filter's drop-down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    pub value: String,
    pub label: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryPage {
    pub rows: Vec<DeliveryRow>,
    /// Pass as `before` for the next (older) page.
    pub next_cursor: Option<String>,
    pub spaces: Vec<Choice>,
    pub destinations: Vec<Choice>,
    /// A refused filter value, said in words (the table is then empty).
    pub filter_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptView {
    pub number: i64,
    pub started_at: i64,
    pub duration_ms: i64,
    pub request_url: String,
    pub request_headers: Vec<(String, String)>,
    pub request_body: String,
    pub response_status: Option<i64>,
    pub response_headers: Vec<(String, String)>,
    pub response_body: Option<String>,
    pub error_class: Option<String>,
    pub error_message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryDetail {
    pub row: DeliveryRow,
    /// The Standard Webhooks `webhook-id` (stable across retries and resends).
    pub webhook_id: String,
    pub event_id: String,
    /// The event's payload, pretty-printed JSON (attacker-controlled: shown as text only).
    pub payload: String,
    pub destination_status: String,
    pub attempts: Vec<AttemptView>,
    pub finished_at: Option<i64>,
    /// When its event was scheduled to go out (`deliverAt`); `None` for at once.
    pub deliver_at: Option<i64>,
}

/// Which deliveries a bulk action is about: chosen ones, or every one matching a filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkSelection {
    /// `resend` or `cancel`.
    pub op: String,
    /// Chosen delivery IDs (ignored when `all`).
    pub ids: Vec<String>,
    pub all: bool,
    pub filter: DeliveryQuery,
}

/// What a bulk action found, before it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkPreview {
    pub count: i64,
    /// More match than were counted (`count` is the cap).
    pub capped: bool,
    /// The walk over "all matching" starts below this ID, so what arrives later is left alone.
    pub start: String,
    /// The filter in words, e.g. "status failed, error class timeout".
    pub described: String,
}

/// What "Send again all failed" of one destination would send, before it is confirmed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResendFailedPreview {
    pub destination_id: String,
    pub destination_url: String,
    /// What the destination is called.
    pub destination_name: String,
    /// Failed deliveries not resent before, inside the window, that would be sent again.
    pub count: i64,
    /// The window in words, e.g. "event type order.paid, created since 2026-12-01 10:00".
    pub described: String,
}

/// Running totals of a bulk action; every outcome of `BulkOutcome` has a field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkTotals {
    #[serde(default)]
    pub resent: i64,
    #[serde(default)]
    pub cancelled: i64,
    /// Resend: still waiting or sending (only finished deliveries are sent again).
    #[serde(default)]
    pub unfinished: i64,
    /// Cancel: already sending (an attempt is in flight).
    #[serde(default)]
    pub sending: i64,
    /// Cancel: already finished.
    #[serde(default)]
    pub finished: i64,
    /// Resend: the destination is inactive.
    #[serde(default)]
    pub inactive: i64,
    #[serde(default)]
    pub not_found: i64,
}

impl BulkTotals {
    pub fn done(&self) -> i64 {
        self.resent + self.cancelled + self.skipped()
    }

    pub fn skipped(&self) -> i64 {
        self.unfinished + self.sending + self.finished + self.inactive + self.not_found
    }

    /// E.g. "Sent again 3. Skipped 1: 1 whose destination is inactive (re-enable it first)."
    pub fn summary(&self, op: &str) -> String {
        let mut s = if op == "cancel" {
            format!("Cancelled {}.", self.cancelled)
        } else {
            format!("Sent again {}.", self.resent)
        };
        let mut why = Vec::new();
        if self.unfinished > 0 {
            why.push(format!(
                "{} still waiting or sending (only finished deliveries are sent again)",
                self.unfinished
            ));
        }
        if self.sending > 0 {
            why.push(format!(
                "{} already sending (an attempt is in flight)",
                self.sending
            ));
        }
        if self.finished > 0 {
            why.push(format!("{} already finished", self.finished));
        }
        if self.inactive > 0 {
            why.push(format!(
                "{} whose destination is inactive (re-enable it first)",
                self.inactive
            ));
        }
        if self.not_found > 0 {
            why.push(format!("{} not found", self.not_found));
        }
        if !why.is_empty() {
            s.push_str(&format!(" Skipped {}: {}.", self.skipped(), why.join("; ")));
        }
        s
    }
}

/// Where a bulk action stands: totals so far and, when not finished, where to go on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkProgress {
    pub selection: BulkSelection,
    pub totals: BulkTotals,
    /// `None` when finished; otherwise pass it back to continue.
    pub cursor: Option<String>,
    /// What the confirmation said would be touched (for a progress bar).
    pub expected: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationView {
    pub id: String,
    pub space_id: String,
    pub space_name: String,
    pub url: String,
    pub description: String,
    /// `None`: every event type.
    pub event_types: Option<Vec<String>>,
    pub status: String,
    pub disabled_reason: Option<String>,
    pub consecutive_dead_letters: i64,
    pub skipped_events: i64,
    /// E.g. "50 per second"; `None` when only the plan limits it.
    pub rate_limit: Option<String>,
    pub max_attempts: i64,
    pub timeout_seconds: i64,
    /// E.g. "partyflow: 5 s → 1 h, ±20 %, Retry-After replaces".
    pub policy: String,
    /// Waiting deliveries held while inactive; they resume on re-enable.
    pub paused: i64,
    /// Failed deliveries not sent again yet.
    pub failed_unresent: i64,
    pub has_transformation: bool,
    pub created_at: i64,
    /// The jq expression a payload must make `true`; `None` for none.
    pub filter: Option<String>,
    /// Events the filter kept out.
    pub filtered_events: i64,
    /// `fifo` or `none`.
    pub ordering: String,
    /// Its own request headers, values masked (`••••…1234`).
    pub headers: Vec<(String, String)>,
    /// What it is called: its own name, or else its URL's host.
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationDetail {
    pub view: DestinationView,
    /// The signing secret; only for admins.
    pub secret: Option<String>,
    pub previous_secret_expires_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingWebhookView {
    pub id: String,
    pub space_id: String,
    pub space_name: String,
    pub channel_id: String,
    pub channel_name: String,
    pub name: String,
    pub status: String,
    pub consecutive_failures: i64,
    /// Messages per second it accepts, from the space's plan.
    pub rate_per_second: i64,
    pub signed: bool,
    pub created_at: i64,
    pub disabled_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingPage {
    pub hooks: Vec<IncomingWebhookView>,
    /// Channels a new webhook may write to, labelled "space / #channel".
    pub channels: Vec<Choice>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationView {
    pub id: String,
    pub space_name: Option<String>,
    pub kind: String,
    pub message: String,
    pub created_at: i64,
    pub read: bool,
    /// Where what it is about lives in the console.
    pub link: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationPage {
    pub rows: Vec<NotificationView>,
    pub next_cursor: Option<String>,
    pub unread: i64,
}

/// Deliveries created in one time bucket, by what became of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub start: i64,
    pub succeeded: i64,
    pub failed: i64,
    /// Failed at least once, waiting for the next attempt.
    pub retrying: i64,
    /// Pending or sending.
    pub waiting: i64,
    pub cancelled: i64,
}

impl Bucket {
    pub fn total(&self) -> i64 {
        self.succeeded + self.failed + self.retrying + self.waiting + self.cancelled
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceStats {
    /// `None` for all spaces together.
    pub space_id: Option<String>,
    pub name: String,
    pub buckets: Vec<Bucket>,
    /// Last error class of unsuccessful deliveries in the window, most frequent first.
    pub error_classes: Vec<(String, i64)>,
    /// Pending or retrying now (of which `paused` are held by an inactive destination).
    pub waiting: i64,
    pub paused: i64,
    pub sending: i64,
    pub failing_destinations: i64,
}

impl SpaceStats {
    pub fn total(&self) -> Bucket {
        self.buckets.iter().fold(Bucket::default(), |mut t, b| {
            t.succeeded += b.succeeded;
            t.failed += b.failed;
            t.retrying += b.retrying;
            t.waiting += b.waiting;
            t.cancelled += b.cancelled;
            t
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overview {
    /// `hour` (per-minute buckets) or `day` (per-hour buckets).
    pub window: String,
    pub bucket_ms: i64,
    pub since: i64,
    pub overall: SpaceStats,
    pub spaces: Vec<SpaceStats>,
    pub failing: Vec<DestinationView>,
    pub unread: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelView {
    pub id: String,
    pub name: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BotView {
    pub id: String,
    pub name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyView {
    pub id: String,
    pub name: String,
    pub prefix: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// One space with everything managed inside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceDetail {
    pub space: SpaceView,
    pub channels: Vec<ChannelView>,
    pub bots: Vec<BotView>,
    pub api_keys: Vec<ApiKeyView>,
    /// The space's own retention (`30days`), empty when it keeps its plan's.
    pub retention: String,
    /// The retention that applies (its own, else its plan's).
    pub effective_retention: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserView {
    pub id: String,
    pub email: String,
    pub role: Role,
    pub created_at: i64,
    pub disabled: bool,
}

/// A destination's settings as the console's forms post them (every field is text,
/// as typed); the same for a new destination (`space`) and a change (`id`).
/// Empty fields take the default: for the retry fields, the chosen preset's value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationForm {
    /// The space of a new destination.
    #[serde(default)]
    pub space: String,
    /// The destination being changed.
    #[serde(default)]
    pub id: String,
    pub url: String,
    #[serde(default)]
    pub description: String,
    /// Comma- or space-separated; empty for every type.
    #[serde(default)]
    pub event_types: String,
    #[serde(default)]
    pub max_attempts: String,
    #[serde(default)]
    pub timeout_seconds: String,
    /// `partyflow` or `standard`.
    #[serde(default)]
    pub preset: String,
    /// Overrides of the preset: the first delay and the longest one, in seconds.
    #[serde(default)]
    pub initial_seconds: String,
    #[serde(default)]
    pub max_seconds: String,
    /// 0 to 100.
    #[serde(default)]
    pub jitter_percent: String,
    /// `replace`, `extend`, or empty for the preset's.
    #[serde(default)]
    pub retry_after: String,
    /// Empty for none, else a count with `rate_period`.
    #[serde(default)]
    pub rate_count: String,
    #[serde(default)]
    pub rate_period: String,
    /// A jq program; empty for none.
    #[serde(default)]
    pub transformation: String,
    /// A jq expression on the payload; empty for none.
    #[serde(default)]
    pub filter: String,
    /// `fifo` or `none` (empty: `none`).
    #[serde(default)]
    pub ordering: String,
    /// Its own request headers, `Name: value` a line. Filled from a destination, the
    /// values are masked (`••••…1234`); a line left so keeps the value, a new value
    /// replaces it, a line removed removes the header.
    #[serde(default)]
    pub headers: SecretText,
    /// Its own name; empty: it goes by its URL's host.
    #[serde(default)]
    pub name: String,
}

/// What a filter says of a sample payload, in the destination form's "Try it" box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FilterVerdict {
    /// `true`: the event would be delivered.
    Passes,
    /// `false` or `null`: no delivery.
    FilteredOut,
    /// The filter failed: the delivery would fail with this message.
    Failed(String),
}

/// The "Try it" box's answer: the filter's verdict and the transformation's output
/// (or why it failed), each `None` when the form has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TryOutcome {
    pub filter: Option<FilterVerdict>,
    pub transformed: Option<Result<String, String>>,
}

/// Text that holds secrets (a destination form's header lines): `Debug` hides it,
/// so no log shows it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretText(pub String);

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretText({} bytes)", self.0.len())
    }
}

/// What the edit page of a destination shows: its current settings as the form's values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationEdit {
    pub form: DestinationForm,
    pub space_name: String,
    pub status: String,
}

/// A catalogued event type, as the catalog page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CatalogEntry {
    pub space_id: String,
    pub space_name: String,
    pub name: String,
    pub description: String,
    pub deprecated: bool,
    /// The JSON Schema, pretty-printed; empty for none.
    pub schema: String,
    /// The example payload, pretty-printed; empty for none.
    pub example: String,
    pub updated_at: i64,
}

/// The catalog's form (admins): a new type, or, with `existing`, changes to the type
/// `name` of `space`. `schema` and `example` are JSON text; empty means none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CatalogForm {
    pub space: String,
    pub name: String,
    pub description: String,
    pub schema: String,
    pub example: String,
    pub deprecated: bool,
    pub existing: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_crosses_the_wire_as_the_name_the_server_stores() {
        for (role, name) in [(Role::Admin, "admin"), (Role::Support, "support")] {
            assert_eq!(role.as_str(), name);
            assert_eq!(serde_json::to_string(&role).unwrap(), format!("\"{name}\""));
            assert_eq!(
                serde_json::from_str::<Role>(&format!("\"{name}\"")).unwrap(),
                role
            );
        }
        assert!(serde_json::from_str::<Role>("\"root\"").is_err());
    }
}

/// The alert settings (admins only, docs D16): where admin notifications also go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertSettings {
    /// The space whose alert webhooks get every space's alerts; empty for none.
    pub alert_space: String,
    /// Destinations subscribed to `partyflow.alert`, in every space.
    pub webhooks: Vec<AlertWebhookView>,
    pub emails: Vec<AlertEmailView>,
    /// Whether an SMTP server is configured (`[alerts] smtp_url`).
    pub smtp: bool,
    /// E-mails given up on, newest first.
    pub failed_mails: Vec<FailedMailView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertWebhookView {
    pub id: String,
    pub space_id: String,
    pub space_name: String,
    pub url: String,
    /// Sent in Slack's shape (`{"text"}`) rather than as the whole alert.
    pub slack: bool,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertEmailView {
    pub id: String,
    /// Empty: every space's alerts.
    pub space_id: String,
    pub space_name: String,
    pub address: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedMailView {
    pub address: String,
    pub subject: String,
    pub error: String,
    pub attempts: i64,
    pub created_at: i64,
}

/// The audit log page's filters, as in its URL (`?actor=usr_…&action=…`). Empty
/// strings mean "any". Support staff see only their own entries whatever `actor` says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    /// A user's ID.
    #[serde(default)]
    pub actor: String,
    /// e.g. `destination.update`.
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub space: String,
    /// `YYYY-MM-DDTHH:MM` in UTC (what `<input type=datetime-local>` sends).
    #[serde(default)]
    pub since: String,
    #[serde(default)]
    pub until: String,
    /// Keyset cursor: only entries older than this ID.
    #[serde(default)]
    pub before: String,
}

impl AuditQuery {
    /// The filter fields (not the cursor) as `(name, value)` pairs, skipping empty ones.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        [
            ("actor", &self.actor),
            ("action", &self.action),
            ("space", &self.space),
            ("since", &self.since),
            ("until", &self.until),
        ]
        .into_iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| (k, v.trim().to_owned()))
        .collect()
    }
}

/// One entry of the audit log, as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRow {
    pub id: String,
    pub created_at: i64,
    /// `user` or `api_key`.
    pub actor_kind: String,
    pub actor_id: String,
    /// The user's email or the key's ID.
    pub actor_label: String,
    pub role: Option<String>,
    pub action: String,
    pub space_id: Option<String>,
    pub space_name: Option<String>,
    pub target_kind: String,
    pub target_id: String,
    /// The entry's detail, as compact JSON (empty when there is none).
    pub detail: String,
    pub source: Option<String>,
}

/// A page of the audit log, with the filters' choices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    pub rows: Vec<AuditRow>,
    /// Pass as `before` for the next (older) page.
    pub next_cursor: Option<String>,
    /// The people to filter by (admins only; empty for support staff).
    pub people: Vec<Choice>,
    pub spaces: Vec<Choice>,
    pub actions: Vec<String>,
    /// Only the reader's own entries are shown (support staff).
    pub own_only: bool,
    /// A refused filter value, said in words (the table is then empty).
    pub filter_error: Option<String>,
}

// ---- Search (issue 16 item 3) ---------------------------------------------------------

/// One thing the search box found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchHit {
    /// `delivery` or `destination`.
    pub kind: String,
    pub id: String,
    /// The console page of the thing.
    pub href: String,
    /// What it is, in a line: a delivery's destination URL, a destination's URL.
    pub title: String,
    /// A second line: a delivery's event type and status, a destination's description.
    pub detail: String,
    pub space_name: String,
    pub created_at: i64,
}

/// What a search found, and how the query was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResults {
    pub query: String,
    /// How the query was looked up, in words ("a delivery ID", "an idempotency key", …).
    pub looked_up_as: String,
    pub hits: Vec<SearchHit>,
    /// More matched than are shown.
    pub more: bool,
    /// Exactly one thing matched: its page, where the search goes at once.
    pub go: Option<String>,
}

// ---- Long lists, a page at a time (issue 16 item 6) -----------------------------------

/// Which page of a long list: its space, its search and its keyset cursor, all from the
/// page's URL (a GET form).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQuery {
    /// A space ID, or empty for every space.
    #[serde(default)]
    pub space: String,
    /// Part of a URL, a description or a name; empty for all.
    #[serde(default)]
    pub q: String,
    /// Keyset cursor: only rows older than this ID.
    #[serde(default)]
    pub before: String,
}

impl ListQuery {
    /// The space and the search (not the cursor) as `(name, value)` pairs, skipping empty ones.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        [("space", &self.space), ("q", &self.q)]
            .into_iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| (k, v.trim().to_owned()))
            .collect()
    }
}

/// A page of one of the console's long lists (destinations, spaces, users, incoming
/// webhooks, event types; a space's channels, bots and API keys): 50 rows, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage<T> {
    pub rows: Vec<T>,
    /// Pass as `before` for the next (older) page.
    pub next_cursor: Option<String>,
    /// A refused search, said in words (the list is then empty).
    pub filter_error: Option<String>,
}

impl<T> Default for ListPage<T> {
    fn default() -> Self {
        Self {
            rows: Vec::new(),
            next_cursor: None,
            filter_error: None,
        }
    }
}

/// A page of the destinations list.
pub type DestinationList = ListPage<DestinationView>;

/// A page of the incoming webhooks, with the channels a new one may write to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingList {
    pub hooks: ListPage<IncomingWebhookView>,
    /// Channels a new webhook may write to, labelled "space / #channel" (at most 50 a
    /// space, newest first).
    pub channels: Vec<Choice>,
}

/// Which page of a space's channels, bots and API keys: one search for the three, a
/// cursor each (`?q=&channels_before=&bots_before=&keys_before=`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceListQuery {
    #[serde(default)]
    pub q: String,
    #[serde(default)]
    pub channels_before: String,
    #[serde(default)]
    pub bots_before: String,
    #[serde(default)]
    pub keys_before: String,
}

/// A space with a page of each of its channels, bots and API keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpacePage {
    pub detail: SpaceDetail,
    pub channels: ListPage<ChannelView>,
    pub bots: ListPage<BotView>,
    pub api_keys: ListPage<ApiKeyView>,
}
