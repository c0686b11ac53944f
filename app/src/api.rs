//! The console's server functions: thin doors to the console's ports ([`crate::port`]).
//!
//! Each one finds out who is asking (from the session), and each change also checks
//! that the request came from the console's own pages (CSRF). The role checks live in
//! the backend, so they hold however the function is called. Changes answer a
//! [`Notice`]; posted as a plain HTML form (no JavaScript) they redirect back to the
//! page instead, which then shows the notice ([`crate::guard::answer`]).

// Form fields map one to one onto arguments (so plain HTML forms can post them);
// the `#[server]` macro copies them into generated functions as well.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;

use crate::error::ConsoleError;
use crate::types::*;

// ---- Reading -----------------------------------------------------------------------

/// Unread notifications, for the badge in the navigation.
#[server(endpoint = "unread")]
pub async fn unread_count() -> Result<i64, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.unread_count(&user).await
}

/// The result of a plain form post, kept in the session (see [`crate::guard::answer`]).
#[server(endpoint = "flash")]
pub async fn flash_notice(id: String) -> Result<Option<Notice>, ConsoleError> {
    crate::guard::signed_in().await?;
    crate::guard::flash(&id).await
}

#[server(endpoint = "spaces")]
pub async fn list_spaces() -> Result<Vec<SpaceView>, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.spaces(&user).await
}

#[server(endpoint = "overview")]
pub async fn get_overview(window: String) -> Result<Overview, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.overview(&user, &window).await
}

#[server(endpoint = "deliveries")]
pub async fn list_deliveries(query: DeliveryQuery) -> Result<DeliveryPage, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.deliveries(&user, &query).await
}

#[server(endpoint = "delivery")]
pub async fn get_delivery(id: String) -> Result<DeliveryDetail, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.delivery(&user, &id).await
}

/// How many deliveries a bulk action would touch. `selection` is a [`BulkSelection`] as JSON.
#[server(endpoint = "bulk_preview")]
pub async fn preview_bulk(selection: String) -> Result<BulkPreview, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    let selection = parse_selection(&selection)?;
    crate::port::backend()?
        .bulk_preview(&user, &selection)
        .await
}

#[server(endpoint = "destinations")]
pub async fn list_destinations(space: String) -> Result<Vec<DestinationView>, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.destinations(&user, &space).await
}

#[server(endpoint = "destination")]
pub async fn get_destination(id: String) -> Result<DestinationDetail, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.destination(&user, &id).await
}

#[server(endpoint = "incoming_webhooks")]
pub async fn list_incoming_webhooks(space: String) -> Result<IncomingPage, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?
        .incoming_webhooks(&user, &space)
        .await
}

#[server(endpoint = "notifications")]
pub async fn list_notifications(
    unread_only: bool,
    before: String,
) -> Result<NotificationPage, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?
        .notifications(&user, unread_only, &before)
        .await
}

/// The audit log: every entry for admins, one's own for support staff (the backend decides).
#[server(endpoint = "audit_log")]
pub async fn list_audit_log(query: AuditQuery) -> Result<AuditPage, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.audit_log(&user, &query).await
}

#[server(endpoint = "space")]
pub async fn get_space(id: String) -> Result<SpaceDetail, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.space(&user, &id).await
}

/// A destination's settings as its edit form's values (admins only).
#[server(endpoint = "destination_edit")]
pub async fn get_destination_edit(id: String) -> Result<DestinationEdit, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.destination_edit(&user, &id).await
}

#[server(endpoint = "users")]
pub async fn list_users() -> Result<Vec<UserView>, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.users(&user).await
}

// ---- Send again and cancel (admin and support) ----------------------------------------

/// Runs a bulk Send again or Cancel for about a second. `selection` is a
/// [`BulkSelection`] as JSON; `state` is the previous answer's [`BulkProgress`] as JSON
/// (empty at first). The answer's `bulk.cursor` says whether to call again.
#[server(endpoint = "bulk")]
pub async fn bulk(selection: String, state: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let selection = parse_selection(&selection)?;
    let (cursor, totals, expected) = if state.trim().is_empty() {
        (None, BulkTotals::default(), 0)
    } else {
        let p: BulkProgress = serde_json::from_str(&state)
            .map_err(|_| ConsoleError::Invalid("The bulk action's state is unreadable.".into()))?;
        (p.cursor, p.totals, p.expected)
    };
    let progress = crate::port::backend()?
        .bulk_run(&user, &selection, cursor, totals, expected)
        .await?;
    let mut message = progress.totals.summary(&selection.op);
    if progress.cursor.is_some() {
        message = format!("Working… {message}");
    }
    let notice = Notice {
        message,
        bulk: Some(progress),
        ..Default::default()
    };
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "resend_delivery")]
pub async fn resend_delivery(id: String) -> Result<Notice, ConsoleError> {
    one_delivery("resend", id).await
}

#[server(endpoint = "cancel_delivery")]
pub async fn cancel_delivery(id: String) -> Result<Notice, ConsoleError> {
    one_delivery("cancel", id).await
}

#[cfg(feature = "ssr")]
async fn one_delivery(op: &str, id: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let selection = BulkSelection {
        op: op.into(),
        ids: vec![id],
        all: false,
        filter: DeliveryQuery::default(),
    };
    let progress = crate::port::backend()?
        .bulk_run(&user, &selection, None, BulkTotals::default(), 1)
        .await?;
    let t = progress.totals;
    let notice =
        match (op, t.resent, t.cancelled) {
            ("resend", 1, _) => Notice::new("Sent again as a new delivery."),
            ("cancel", _, 1) => Notice::new("Cancelled; it will not be sent."),
            ("resend", ..) if t.unfinished > 0 => return Err(ConsoleError::Invalid(
                "Only a finished delivery can be sent again; this one is still waiting or sending."
                    .into(),
            )),
            ("resend", ..) if t.inactive > 0 => {
                return Err(ConsoleError::Invalid(
                    "Its destination is inactive; re-enable the destination first.".into(),
                ))
            }
            ("cancel", ..) if t.sending > 0 => {
                return Err(ConsoleError::Invalid(
                    "An attempt is in flight; it can no longer be cancelled.".into(),
                ))
            }
            ("cancel", ..) if t.finished > 0 => {
                return Err(ConsoleError::Invalid("It has already finished.".into()))
            }
            _ => return Err(ConsoleError::NotFound("no such delivery".into())),
        };
    crate::guard::answer(notice, None).await
}

/// Sends again the failed deliveries of a destination inside the window (since, until:
/// `YYYY-MM-DDTHH:MM` UTC; last: `15m`, `1h`, `24h`, `7d`), of one event type or error class.
#[server(endpoint = "resend_failed")]
pub async fn resend_failed(
    destination: String,
    #[server(default)] since: String,
    #[server(default)] until: String,
    #[server(default)] last: String,
    #[server(default)] event_type: String,
    #[server(default)] error_class: String,
) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let window = DeliveryQuery {
        since,
        until,
        last,
        event_type,
        error_class,
        ..DeliveryQuery::default()
    };
    let notice = crate::port::backend()?
        .resend_failed(&user, &destination, &window)
        .await?;
    crate::guard::answer(notice, None).await
}

/// How many failed deliveries [`resend_failed`] would send again with the same window.
#[server(endpoint = "resend_failed_preview")]
pub async fn preview_resend_failed(
    destination: String,
    window: DeliveryQuery,
) -> Result<ResendFailedPreview, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?
        .preview_resend_failed(&user, &destination, &window)
        .await
}

/// Marks one notification read, or all of them when `id` is empty.
#[server(endpoint = "mark_read")]
pub async fn mark_read(id: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let id = id.trim();
    let notice = crate::port::backend()?
        .mark_read(&user, (!id.is_empty()).then_some(id))
        .await?;
    crate::guard::answer(notice, None).await
}

// ---- Changes (admin only) ----------------------------------------------------------

/// `status`: `active` (re-enable: paused deliveries resume) or `inactive`.
#[server(endpoint = "set_destination_status")]
pub async fn set_destination_status(id: String, status: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .set_destination_active(&user, &id, status == "active")
        .await?;
    crate::guard::answer(notice, None).await
}

/// A new destination from the console's form; the fields are [`DestinationForm`]'s.
#[server(endpoint = "create_destination")]
pub async fn create_destination(
    space: String,
    url: String,
    #[server(default)] description: String,
    #[server(default)] event_types: String,
    #[server(default)] max_attempts: String,
    #[server(default)] timeout_seconds: String,
    #[server(default)] preset: String,
    #[server(default)] initial_seconds: String,
    #[server(default)] max_seconds: String,
    #[server(default)] jitter_percent: String,
    #[server(default)] retry_after: String,
    #[server(default)] rate_count: String,
    #[server(default)] rate_period: String,
    #[server(default)] transformation: String,
    #[server(default)] filter: String,
    #[server(default)] ordering: String,
    #[server(default)] headers: String,
    #[server(default)] name: String,
) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let form = DestinationForm {
        space,
        id: String::new(),
        url,
        description,
        event_types,
        max_attempts,
        timeout_seconds,
        preset,
        initial_seconds,
        max_seconds,
        jitter_percent,
        retry_after,
        rate_count,
        rate_period,
        transformation,
        filter,
        ordering,
        headers: SecretText(headers),
        name,
    };
    let notice = crate::port::backend()?
        .create_destination(&user, &form)
        .await?;
    crate::guard::answer(notice, None).await
}

/// Changes a destination's settings; every field of the edit form is posted, and an
/// empty one means "none" or "the preset's" (see [`DestinationForm`]).
#[server(endpoint = "update_destination")]
pub async fn update_destination(
    id: String,
    url: String,
    #[server(default)] description: String,
    #[server(default)] event_types: String,
    #[server(default)] max_attempts: String,
    #[server(default)] timeout_seconds: String,
    #[server(default)] preset: String,
    #[server(default)] initial_seconds: String,
    #[server(default)] max_seconds: String,
    #[server(default)] jitter_percent: String,
    #[server(default)] retry_after: String,
    #[server(default)] rate_count: String,
    #[server(default)] rate_period: String,
    #[server(default)] transformation: String,
    #[server(default)] filter: String,
    #[server(default)] ordering: String,
    #[server(default)] headers: String,
    #[server(default)] name: String,
) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let form = DestinationForm {
        space: String::new(),
        id,
        url,
        description,
        event_types,
        max_attempts,
        timeout_seconds,
        preset,
        initial_seconds,
        max_seconds,
        jitter_percent,
        retry_after,
        rate_count,
        rate_period,
        transformation,
        filter,
        ordering,
        headers: SecretText(headers),
        name,
    };
    let notice = crate::port::backend()?
        .update_destination(&user, &form)
        .await?;
    crate::guard::answer(notice, None).await
}

/// The destination form's "Try it" box: the filter and transformation as typed, run on
/// `sample` in the server's sandbox (admins only, as editing is; the sample is bounded).
#[server(endpoint = "try_destination")]
pub async fn try_destination(
    #[server(default)] filter: String,
    #[server(default)] transformation: String,
    sample: String,
) -> Result<TryOutcome, ConsoleError> {
    let user = crate::guard::for_change().await?;
    crate::port::backend()?
        .try_destination(&user, &filter, &transformation, &sample)
        .await
}

/// Sends a `partyflow.test` event to this destination only; the notice links to its delivery.
#[server(endpoint = "send_test_event")]
pub async fn send_test_event(id: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?.send_test_event(&user, &id).await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "rotate_secret")]
pub async fn rotate_secret(id: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?.rotate_secret(&user, &id).await?;
    crate::guard::answer(notice, None).await
}

/// `status`: `active` (re-enable) or `disabled`.
#[server(endpoint = "set_incoming_status")]
pub async fn set_incoming_status(id: String, status: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .set_incoming_active(&user, &id, status == "active")
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "create_incoming_webhook")]
pub async fn create_incoming_webhook(
    channel: String,
    name: String,
) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .create_incoming_webhook(&user, &channel, &name)
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "create_space")]
pub async fn create_space(name: String, plan: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .create_space(&user, &name, &plan)
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "create_channel")]
pub async fn create_channel(space: String, name: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .create_channel(&user, &space, &name)
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "create_bot")]
pub async fn create_bot(space: String, name: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .create_bot(&user, &space, &name)
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "revoke_bot")]
pub async fn revoke_bot(space: String, id: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .revoke_bot(&user, &space, &id)
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "create_api_key")]
pub async fn create_api_key(space: String, name: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .create_api_key(&user, &space, &name)
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "revoke_api_key")]
pub async fn revoke_api_key(space: String, id: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .revoke_api_key(&user, &space, &id)
        .await?;
    crate::guard::answer(notice, None).await
}

/// `retention`: a duration such as `30d`; empty goes back to the plan's.
#[server(endpoint = "set_space_retention")]
pub async fn set_space_retention(space: String, retention: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .set_space_retention(&user, &space, &retention)
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "create_user")]
pub async fn create_user(
    email: String,
    password: String,
    role: String,
) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .create_user(&user, &email, &password, &role)
        .await?;
    crate::guard::answer(notice, None).await
}

/// `status`: `disabled` (the user can no longer sign in; their sessions end) or `active`.
#[server(endpoint = "set_user_status")]
pub async fn set_user_status(id: String, status: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let disabled = match status.as_str() {
        "disabled" => true,
        "active" => false,
        _ => {
            return Err(ConsoleError::Invalid(
                "The status must be active or disabled.".into(),
            ))
        }
    };
    let notice = crate::port::backend()?
        .set_user_disabled(&user, &id, disabled)
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "delete_user")]
pub async fn delete_user(id: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?.delete_user(&user, &id).await?;
    crate::guard::answer(notice, None).await
}

// ---- Helpers -------------------------------------------------------------------------

#[cfg(feature = "ssr")]
fn parse_selection(json: &str) -> Result<BulkSelection, ConsoleError> {
    serde_json::from_str(json).map_err(|_| {
        ConsoleError::Invalid("The selection is unreadable; go back and choose again.".into())
    })
}

// ---- The event-type catalog --------------------------------------------------------

/// The catalog of one space, or of every space (`space` empty).
#[server(endpoint = "event_types")]
pub async fn list_event_types(space: String) -> Result<Vec<CatalogEntry>, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.event_types(&user, &space).await
}

/// Adds an event type to a space's catalog, or changes one (`existing` non-empty). The
/// fields are [`CatalogForm`]'s; an unchecked `deprecated` box sends nothing.
#[server(endpoint = "save_event_type")]
pub async fn save_event_type(
    space: String,
    name: String,
    #[server(default)] description: String,
    #[server(default)] schema: String,
    #[server(default)] example: String,
    #[server(default)] deprecated: String,
    #[server(default)] existing: String,
) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let form = CatalogForm {
        space,
        name,
        description,
        schema,
        example,
        deprecated: !deprecated.is_empty(),
        existing: !existing.is_empty(),
    };
    let notice = crate::port::backend()?
        .save_event_type(&user, &form)
        .await?;
    crate::guard::answer(notice, None).await
}

// ---- Alerts (admin only) -----------------------------------------------------------------

#[server(endpoint = "alerts")]
pub async fn get_alerts() -> Result<AlertSettings, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.alerts(&user).await
}

#[server(endpoint = "set_alert_space")]
pub async fn set_alert_space(space: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .set_alert_space(&user, &space)
        .await?;
    crate::guard::answer(notice, None).await
}

/// `format`: `json` (the whole alert) or `slack` (`{"text"}`).
#[server(endpoint = "add_alert_webhook")]
pub async fn add_alert_webhook(
    space: String,
    url: String,
    format: String,
) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .add_alert_webhook(&user, &space, &url, &format)
        .await?;
    crate::guard::answer(notice, None).await
}

/// `space` empty: the address gets every space's alerts.
#[server(endpoint = "add_alert_email")]
pub async fn add_alert_email(space: String, address: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .add_alert_email(&user, &space, &address)
        .await?;
    crate::guard::answer(notice, None).await
}

#[server(endpoint = "remove_alert_email")]
pub async fn remove_alert_email(id: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .remove_alert_email(&user, &id)
        .await?;
    crate::guard::answer(notice, None).await
}

/// `space` empty: a test alert of the install (its alert space and addresses).
#[server(endpoint = "send_test_alert")]
pub async fn send_test_alert(space: String) -> Result<Notice, ConsoleError> {
    let user = crate::guard::for_change().await?;
    let notice = crate::port::backend()?
        .send_test_alert(&user, &space)
        .await?;
    crate::guard::answer(notice, None).await
}

/// What was typed into the last form posted to the server function at `path` and
/// refused, without JavaScript (see [`crate::guard::keep_typed`]).
#[server(endpoint = "typed")]
pub async fn typed_form(path: String) -> Result<Option<Vec<(String, String)>>, ConsoleError> {
    crate::guard::signed_in().await?;
    crate::guard::typed(&path).await
}

// ---- Search (issue 16 item 3) ---------------------------------------------------------

/// The search box: what `q` finds within the spaces the user may see.
#[server(endpoint = "search")]
pub async fn search(q: String) -> Result<SearchResults, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.search(&user, &q).await
}

// ---- Long lists, a page at a time (issue 16 item 6) -----------------------------------

/// A page of the destinations list, searched.
#[server(endpoint = "destination_list")]
pub async fn list_destination_page(query: ListQuery) -> Result<DestinationList, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?
        .destination_list(&user, &query)
        .await
}

/// The deliveries page's destination suggestions for what has been typed.
#[server(endpoint = "destination_choices")]
pub async fn destination_choices(
    space: String,
    typed: String,
) -> Result<Vec<Choice>, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?
        .destination_choices(&user, &space, &typed)
        .await
}

/// A page of the spaces, searched by name.
#[server(endpoint = "space_page_list")]
pub async fn list_space_page(query: ListQuery) -> Result<ListPage<SpaceView>, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.space_list(&user, &query).await
}

/// A page of the console users, searched by email.
#[server(endpoint = "user_page")]
pub async fn list_user_page(query: ListQuery) -> Result<ListPage<UserView>, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.user_list(&user, &query).await
}

/// A page of the incoming webhooks, searched by name.
#[server(endpoint = "incoming_page")]
pub async fn list_incoming_page(query: ListQuery) -> Result<IncomingList, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.incoming_list(&user, &query).await
}

/// A page of the event types, searched by name or description.
#[server(endpoint = "event_type_page")]
pub async fn list_event_type_page(
    query: ListQuery,
) -> Result<ListPage<CatalogEntry>, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.event_type_list(&user, &query).await
}

/// A space with a page of each of its channels, bots and API keys.
#[server(endpoint = "space_lists")]
pub async fn get_space_page(id: String, query: SpaceListQuery) -> Result<SpacePage, ConsoleError> {
    let user = crate::guard::signed_in().await?;
    crate::port::backend()?.space_page(&user, &id, &query).await
}
