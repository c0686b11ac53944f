//! What the console needs from the server (server side only), one port per area:
//! [`SessionPort`] (sign-in, first run), [`ReadPort`], [`OverviewPort`], [`BulkPort`]
//! (send again, cancel, mark read), [`AdminPort`] (spaces, credentials, statuses),
//! [`SettingsPort`] (the destination form, test events), [`UserPort`] and
//! [`CatalogPort`] (the event-type catalog), [`AuditPort`] (the audit log), [`SearchPort`]
//! (the search box), [`ListPort`] (long lists, a page at a time). The server
//! implements each one in its console module of that area; [`ConsoleBackend`] is all of
//! them, provided as [`SharedBackend`] in the Leptos context of every request.
//!
//! Every method that acts for someone takes the signed-in user (`actor`, read from
//! the session by the server function, with its typed [`Role`]) and checks the role
//! itself: the server refuses what a role may not do, whatever the page shows.

use std::sync::Arc;

use crate::error::ConsoleError;
use crate::types::*;

/// The session key under which the signed-in user's ID is kept.
pub const SESSION_USER_KEY: &str = "user_id";

type R<T> = Result<T, ConsoleError>;

/// Signing in and the first run: the only port used before anyone is signed in.
#[async_trait::async_trait]
pub trait SessionPort: Send + Sync {
    /// Checks an email and password sent from `peer` (the connection's address, never a
    /// header); `BadCredentials` when they don't match a live user, `Throttled` after too
    /// many failures for this email from this source.
    async fn authenticate(
        &self,
        email: &str,
        password: &str,
        peer: std::net::IpAddr,
    ) -> R<SessionUser>;

    /// The live user with this ID, if any.
    async fn user(&self, id: &str) -> R<Option<SessionUser>>;

    /// True while no console user exists.
    async fn needs_setup(&self) -> R<bool>;
    /// Creates the first admin; refused once any user exists.
    async fn create_first_admin(&self, email: &str, password: &str) -> R<SessionUser>;
}

/// What every role may read: the lists and detail pages.
#[async_trait::async_trait]
pub trait ReadPort: Send + Sync {
    async fn unread_count(&self, actor: &SessionUser) -> R<i64>;
    async fn spaces(&self, actor: &SessionUser) -> R<Vec<SpaceView>>;
    async fn deliveries(&self, actor: &SessionUser, query: &DeliveryQuery) -> R<DeliveryPage>;
    async fn delivery(&self, actor: &SessionUser, id: &str) -> R<DeliveryDetail>;
    async fn destinations(&self, actor: &SessionUser, space: &str) -> R<Vec<DestinationView>>;
    /// The secret is shown to admins only.
    async fn destination(&self, actor: &SessionUser, id: &str) -> R<DestinationDetail>;
    async fn incoming_webhooks(&self, actor: &SessionUser, space: &str) -> R<IncomingPage>;
    async fn notifications(
        &self,
        actor: &SessionUser,
        unread_only: bool,
        before: &str,
    ) -> R<NotificationPage>;
}

/// The overview page's charts (every role).
#[async_trait::async_trait]
pub trait OverviewPort: Send + Sync {
    /// Per space and overall; `window` is `hour` (per-minute bars) or `day` (per-hour bars).
    async fn overview(&self, actor: &SessionUser, window: &str) -> R<Overview>;
}

/// Send again and cancel, one or many, and marking notifications read (admin and support).
#[async_trait::async_trait]
pub trait BulkPort: Send + Sync {
    async fn bulk_preview(&self, actor: &SessionUser, selection: &BulkSelection) -> R<BulkPreview>;
    /// Works through the selection in chunks for about a second; call again with the
    /// answer's cursor and totals until the cursor is `None`.
    async fn bulk_run(
        &self,
        actor: &SessionUser,
        selection: &BulkSelection,
        cursor: Option<String>,
        totals: BulkTotals,
        expected: i64,
    ) -> R<BulkProgress>;
    /// Sends again the failed deliveries of `destination` that `window` chooses (its
    /// since, until, event type and error class; the rest of it is ignored).
    async fn resend_failed(
        &self,
        actor: &SessionUser,
        destination: &str,
        window: &DeliveryQuery,
    ) -> R<Notice>;
    /// How many [`BulkPort::resend_failed`] would send again, without sending.
    async fn preview_resend_failed(
        &self,
        actor: &SessionUser,
        destination: &str,
        window: &DeliveryQuery,
    ) -> R<ResendFailedPreview>;
    async fn mark_read(&self, actor: &SessionUser, id: Option<&str>) -> R<Notice>;
}

/// The admins' changes: spaces and what they hold (channels, bots, API keys, incoming
/// webhooks), a destination's status and secret, new users (admin only).
#[async_trait::async_trait]
pub trait AdminPort: Send + Sync {
    async fn set_destination_active(
        &self,
        actor: &SessionUser,
        id: &str,
        active: bool,
    ) -> R<Notice>;
    async fn rotate_secret(&self, actor: &SessionUser, id: &str) -> R<Notice>;
    async fn set_incoming_active(&self, actor: &SessionUser, id: &str, active: bool) -> R<Notice>;
    /// The notice shows the webhook's URL, on the server's public URL (never the `Host`
    /// the browser sent), and its token.
    async fn create_incoming_webhook(
        &self,
        actor: &SessionUser,
        channel: &str,
        name: &str,
    ) -> R<Notice>;
    async fn space(&self, actor: &SessionUser, id: &str) -> R<SpaceDetail>;
    async fn create_space(&self, actor: &SessionUser, name: &str, plan: &str) -> R<Notice>;
    async fn create_channel(&self, actor: &SessionUser, space: &str, name: &str) -> R<Notice>;
    async fn create_bot(&self, actor: &SessionUser, space: &str, name: &str) -> R<Notice>;
    async fn revoke_bot(&self, actor: &SessionUser, space: &str, id: &str) -> R<Notice>;
    async fn create_api_key(&self, actor: &SessionUser, space: &str, name: &str) -> R<Notice>;
    async fn revoke_api_key(&self, actor: &SessionUser, space: &str, id: &str) -> R<Notice>;
    /// `role` is the form's value (`admin` or `support`), checked by the server.
    async fn create_user(
        &self,
        actor: &SessionUser,
        email: &str,
        password: &str,
        role: &str,
    ) -> R<Notice>;
    /// The space's own retention (`30d`); empty goes back to its plan's.
    async fn set_space_retention(
        &self,
        actor: &SessionUser,
        space: &str,
        retention: &str,
    ) -> R<Notice>;
}

/// A destination's settings: the create and edit forms, and test events (admin only).
#[async_trait::async_trait]
pub trait SettingsPort: Send + Sync {
    async fn create_destination(&self, actor: &SessionUser, form: &DestinationForm) -> R<Notice>;
    /// A destination's current settings, as the values of its edit form.
    async fn destination_edit(&self, actor: &SessionUser, id: &str) -> R<DestinationEdit>;
    /// Changes a destination's settings (`form.id`), checked by the same rules as the REST API.
    async fn update_destination(&self, actor: &SessionUser, form: &DestinationForm) -> R<Notice>;
    /// Publishes a `partyflow.test` event delivered to this destination only, through the
    /// engine like any other; the notice links to the delivery.
    async fn send_test_event(&self, actor: &SessionUser, id: &str) -> R<Notice>;
    /// Runs a filter and a transformation as typed in the form (not saved) on a sample
    /// payload, in the server's sandbox: the "Try it" box.
    async fn try_destination(
        &self,
        actor: &SessionUser,
        filter: &str,
        transformation: &str,
        sample: &str,
    ) -> R<TryOutcome>;
}

/// The console's users: the list, disabling and deleting (admin only).
#[async_trait::async_trait]
pub trait UserPort: Send + Sync {
    async fn users(&self, actor: &SessionUser) -> R<Vec<UserView>>;
    /// Disables (ending the user's sessions) or re-enables a user. Refused for oneself
    /// and for the last active admin.
    async fn set_user_disabled(&self, actor: &SessionUser, id: &str, disabled: bool) -> R<Notice>;
    /// Deletes a user and ends their sessions; refused for oneself and the last active admin.
    async fn delete_user(&self, actor: &SessionUser, id: &str) -> R<Notice>;
}

/// The event-type catalog: support staff read it, admins add and change types.
#[async_trait::async_trait]
pub trait CatalogPort: Send + Sync {
    /// The catalog of one space (`space` an ID), or of every space (`space` empty), by name.
    async fn event_types(&self, actor: &SessionUser, space: &str) -> R<Vec<CatalogEntry>>;
    /// Adds a type, or changes one (`form.existing`), by the REST API's rules.
    async fn save_event_type(&self, actor: &SessionUser, form: &CatalogForm) -> R<Notice>;
}

/// Alerts (admin only): the install's alert space, alert webhooks and e-mail addresses,
/// and a test alert.
#[async_trait::async_trait]
pub trait AlertPort: Send + Sync {
    async fn alerts(&self, actor: &SessionUser) -> R<AlertSettings>;
    /// `space` an ID, or empty for none.
    async fn set_alert_space(&self, actor: &SessionUser, space: &str) -> R<Notice>;
    /// A destination of `space` subscribed to `partyflow.alert`; `format` is `json` or
    /// `slack`.
    async fn add_alert_webhook(
        &self,
        actor: &SessionUser,
        space: &str,
        url: &str,
        format: &str,
    ) -> R<Notice>;
    /// `space` an ID, or empty for every space's alerts.
    async fn add_alert_email(&self, actor: &SessionUser, space: &str, address: &str) -> R<Notice>;
    async fn remove_alert_email(&self, actor: &SessionUser, id: &str) -> R<Notice>;
    /// A notification made to try the alerts: of `space`, or of the install (empty).
    async fn send_test_alert(&self, actor: &SessionUser, space: &str) -> R<Notice>;
}

/// The audit log: admins read every entry, support staff only their own (the server
/// decides, whatever the query asks).
#[async_trait::async_trait]
pub trait AuditPort: Send + Sync {
    async fn audit_log(&self, actor: &SessionUser, query: &AuditQuery) -> R<AuditPage>;
}

/// The search box (every role): a delivery, event or destination ID, a `webhook-id`, an
/// idempotency key or a fragment of a destination's name, URL or description, within the
/// spaces the user may see.
#[async_trait::async_trait]
pub trait SearchPort: Send + Sync {
    async fn search(&self, actor: &SessionUser, query: &str) -> R<SearchResults>;
}

/// The long lists a page at a time, with their search fields (every role).
#[async_trait::async_trait]
pub trait ListPort: Send + Sync {
    /// A page of destinations (50), newest first, of a space or all, searched by URL or
    /// description.
    async fn destination_list(&self, actor: &SessionUser, query: &ListQuery) -> R<DestinationList>;
    /// At most 50 destinations of `space` (or every space) whose name, URL or description
    /// contains `typed`, newest first, for the deliveries page's destination field.
    async fn destination_choices(
        &self,
        actor: &SessionUser,
        space: &str,
        typed: &str,
    ) -> R<Vec<Choice>>;
    /// A page of the spaces (50), newest first, searched by name.
    async fn space_list(&self, actor: &SessionUser, query: &ListQuery) -> R<ListPage<SpaceView>>;
    /// A page of the console users (admins only), newest first, searched by email.
    async fn user_list(&self, actor: &SessionUser, query: &ListQuery) -> R<ListPage<UserView>>;
    /// A page of the incoming webhooks of a space or all, newest first, searched by name.
    async fn incoming_list(&self, actor: &SessionUser, query: &ListQuery) -> R<IncomingList>;
    /// A page of the event types of a space or all, newest first, searched by name or
    /// description.
    async fn event_type_list(
        &self,
        actor: &SessionUser,
        query: &ListQuery,
    ) -> R<ListPage<CatalogEntry>>;
    /// A space (admins only) with a page of each of its channels, bots and API keys,
    /// searched by name (and an API key's prefix).
    async fn space_page(
        &self,
        actor: &SessionUser,
        id: &str,
        query: &SpaceListQuery,
    ) -> R<SpacePage>;
}

/// Every area of the console at once: what the server provides in the Leptos context.
/// Implemented for anything that implements every port; server functions call each
/// area's methods on it.
pub trait ConsoleBackend:
    SessionPort
    + ReadPort
    + OverviewPort
    + BulkPort
    + AdminPort
    + SettingsPort
    + UserPort
    + CatalogPort
    + AlertPort
    + AuditPort
    + SearchPort
    + ListPort
    + 'static
{
}

impl<T> ConsoleBackend for T where
    T: SessionPort
        + ReadPort
        + OverviewPort
        + BulkPort
        + AdminPort
        + SettingsPort
        + UserPort
        + CatalogPort
        + AlertPort
        + AuditPort
        + SearchPort
        + ListPort
        + 'static
{
}

pub type SharedBackend = Arc<dyn ConsoleBackend>;

/// The backend from the request's context.
pub fn backend() -> Result<SharedBackend, ConsoleError> {
    leptos::prelude::use_context::<SharedBackend>().ok_or(ConsoleError::Internal)
}
