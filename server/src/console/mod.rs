//! The server side of the Leptos console: the console's ports ([`app::port`]) over
//! storage, each implemented in the module of its area, the database-backed session
//! store, and the guard that keeps every console page behind sign-in.
//!
//! - this file: [`Backend`], the role rule ([`require_role`]), [`SessionPort`] (sign-in,
//!   first-run setup), and the sign-in guard for pages;
//! - [`throttle`]: the sign-in throttling rule (per email and source address);
//! - [`views`]: domain records → the console's wire types (and the two `Role`s);
//! - [`read`]: [`app::port::ReadPort`], what every role may read (deliveries,
//!   destinations, notifications, …);
//! - [`overview`]: [`app::port::OverviewPort`], the charts' numbers;
//! - [`bulk`]: [`app::port::BulkPort`], Send again and Cancel, one or many, in chunks;
//! - [`manage`]: [`app::port::AdminPort`], the admins' changes (destination status and
//!   secret, incoming webhooks, spaces, channels, bots, keys, new users);
//! - [`settings`]: [`app::port::SettingsPort`], the destination form (create and edit)
//!   and test events;
//! - [`users`]: [`app::port::UserPort`], the list of users; disabling, enabling and
//!   deleting them, which ends their sessions;
//! - [`catalog`]: [`app::port::CatalogPort`], the event-type catalog (read by every role,
//!   changed by admins);
//! - [`audit`]: [`app::port::AuditPort`], the audit log (admins: all; support: their own).
//! - [`search`]: [`app::port::SearchPort`], the search box (IDs, keys, URL fragments).
//! - [`lists`]: [`app::port::ListPort`], long lists a page at a time, with a search.
//!
//! Every change a port makes records its audit entry ([`audit_entry`]: the user's
//! email and role and the request's TCP peer) in the change's own transaction.

use std::net::IpAddr;
use std::sync::Arc;

use app::error::ConsoleError;
use app::port::{SessionPort, SESSION_USER_KEY};
use app::types::*;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use tower_sessions::Session;

use crate::auth;
use crate::clock::now_ms;
use crate::domain::{AuditAction, AuditEntry, Role, SpaceId, User, UserId};
use crate::http::AppState;
use crate::ops::audit::Author;
use crate::ops::OpsError;
use crate::storage::{Slot, Storage, StorageError};

mod alerts;
mod audit;
mod bulk;
mod catalog;
mod lists;
mod manage;
mod overview;
mod read;
mod search;
pub mod sessions;
mod settings;
pub mod throttle;
mod users;
mod views;

/// The console's view of the server.
pub struct Backend {
    storage: Arc<dyn Storage>,
    /// Tells the dispatch engine about deliveries the console writes (resend, re-enable).
    engine: crate::dispatch::engine::EngineHandle,
    config: Arc<crate::config::Config>,
    /// The base of the URLs the console shows (an incoming webhook's).
    public_url: crate::config::PublicUrl,
    /// The session store, to end a user's sessions when the user is disabled or deleted.
    sessions: sessions::AnyStore,
    /// Where transformations are checked before a destination is saved.
    sandbox: crate::sandbox::Sandbox,
    /// The event types' compiled schemas (test events are checked against them).
    schemas: crate::ops::event_types::SchemaCache,
}

impl Backend {
    pub fn new(
        storage: Arc<dyn Storage>,
        engine: crate::dispatch::engine::EngineHandle,
        config: Arc<crate::config::Config>,
        public_url: crate::config::PublicUrl,
        sessions: sessions::AnyStore,
        sandbox: crate::sandbox::Sandbox,
        schemas: crate::ops::event_types::SchemaCache,
    ) -> Self {
        Self {
            storage,
            engine,
            config,
            public_url,
            sessions,
            sandbox,
            schemas,
        }
    }
}

/// Whether `actor` may do what needs `need`: admins may do everything, support staff
/// only what needs [`Role::Support`] (reading, Send again, cancel, marking read).
pub fn require_role(actor: &SessionUser, need: Role) -> Result<(), ConsoleError> {
    match (Role::from(actor.role), need) {
        (Role::Admin, _) | (Role::Support, Role::Support) => Ok(()),
        (Role::Support, Role::Admin) => {
            tracing::warn!(user.id = %actor.id, "refused a console action the role does not allow");
            Err(ConsoleError::Forbidden)
        }
    }
}

/// Who the audit log names for `actor`'s changes: their email and role, and the
/// request's TCP peer (docs D14).
fn author(actor: &SessionUser) -> Author {
    Author::user(
        &actor.id,
        &actor.email,
        Role::from(actor.role),
        actor.source,
    )
}

/// The audit entry of `actor` doing `action` to `target_id` (in `space`, or install-wide), now.
fn audit_entry(
    actor: &SessionUser,
    action: AuditAction,
    space: Option<SpaceId>,
    target_id: impl ToString,
    detail: serde_json::Value,
) -> AuditEntry {
    author(actor).entry(action, space, target_id, detail, now_ms())
}

fn session_user(u: &User) -> SessionUser {
    SessionUser {
        id: u.id.to_string(),
        email: u.email.clone(),
        role: u.role.into(),
        source: None,
    }
}

fn internal(err: impl std::fmt::Display) -> ConsoleError {
    tracing::error!(error = %err, "console request failed");
    ConsoleError::Internal
}

/// A storage error in words people can act on; `what` names the thing looked for.
fn storage_error(err: StorageError, what: &str) -> ConsoleError {
    match err {
        StorageError::NotFound => ConsoleError::NotFound(what.to_owned()),
        StorageError::Conflict(_) => {
            ConsoleError::Invalid(format!("{what} conflicts with an existing one"))
        }
        other => internal(other),
    }
}

/// The operations layer's refusals in the console's words: its messages are written
/// for people (shown as a sentence); failures of ours are logged and answered generically.
/// A refusal about one field names it first ("Name: a channel name needs …."), so the
/// form shows it beside that field (`app::components::FieldError`), with JavaScript or without.
fn refused(err: OpsError) -> ConsoleError {
    match err {
        OpsError::Invalid { code, message } | OpsError::Conflict { code, message } => {
            ConsoleError::Invalid(worded(code, &message))
        }
        OpsError::Violations { message, .. } => ConsoleError::Invalid(sentence(&message)),
        OpsError::NotFound { what, id } => ConsoleError::NotFound(format!("{what} {id:?}")),
        OpsError::Storage(e) => internal(e),
        OpsError::Internal(e) => internal(format!("{e:#}")),
    }
}

/// The field (as the console's forms label their refusals) an operations-layer code is
/// about, when it is about one field.
fn field_of(code: &str) -> Option<&'static str> {
    Some(match code {
        "invalid_name" => "Name",
        "invalid_email" | "email_taken" => "Email",
        "invalid_password" => "Password",
        "invalid_event_type" => "Event type",
        "invalid_schema" => "Schema",
        "invalid_example" => "Example",
        "invalid_description" => "Description",
        _ => return None,
    })
}

/// A refusal in the console's words: "Name: a channel name needs …." for a field's
/// code ([`field_of`]), otherwise the message as a sentence.
fn worded(code: &str, message: &str) -> String {
    match field_of(code) {
        Some(field) => format!("{field}: {message}."),
        None => sentence(message),
    }
}

/// "a name needs …" → "A name needs ….".
fn sentence(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).chain(['.']).collect())
        .unwrap_or_default()
}

/// Parses an ID from a form or URL; a malformed one is simply not found.
fn parse_id<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, ConsoleError> {
    s.trim()
        .parse()
        .map_err(|_| ConsoleError::NotFound(format!("{what} {s:?}")))
}

#[async_trait::async_trait]
impl SessionPort for Backend {
    async fn authenticate(
        &self,
        email: &str,
        password: &str,
        peer: IpAddr,
    ) -> Result<SessionUser, ConsoleError> {
        let email = email.to_lowercase();
        // Counted per email and source, and per email, in the database (the rule holds
        // across instances): see `throttle`.
        let (pair_key, email_key) = throttle::keys(&email, peer);
        let now = now_ms();
        let failures = throttle::Failures {
            from_source: self
                .storage
                .count_rate_events(&pair_key, throttle::WINDOW_MS, now)
                .await
                .map_err(internal)?,
            everywhere: self
                .storage
                .count_rate_events(&email_key, throttle::WINDOW_MS, now)
                .await
                .map_err(internal)?,
        };
        match throttle::gate(failures) {
            throttle::Gate::Refuse => {
                tracing::warn!(source = %throttle::source(peer), "console sign-in throttled");
                return Err(ConsoleError::Throttled);
            }
            throttle::Gate::Check { wait } if !wait.is_zero() => {
                tracing::info!(
                    wait_ms = wait.as_millis() as u64,
                    failures = failures.everywhere,
                    "console sign-in slowed: many failures for this email"
                );
                tokio::time::sleep(wait).await;
            }
            throttle::Gate::Check { .. } => {}
        }
        let user = match self.storage.find_user_by_email(&email).await {
            Ok(u) => Some(u),
            Err(StorageError::NotFound) => None,
            Err(e) => return Err(internal(e)),
        };
        let password = password.to_owned();
        let ok = match &user {
            Some(u) => {
                let hash = u.password_hash.clone();
                tokio::task::spawn_blocking(move || auth::verify_password(&password, &hash))
                    .await
                    .map_err(internal)?
            }
            None => {
                let _ = tokio::task::spawn_blocking(move || {
                    auth::verify_password_against_nothing(&password)
                })
                .await;
                false
            }
        };
        match user {
            Some(u) if ok && u.disabled_at.is_none() => Ok(session_user(&u)),
            _ => {
                let now = now_ms();
                self.storage
                    .take_rate_slot(
                        &email_key,
                        throttle::EMAIL_FAILURES_KEPT,
                        throttle::WINDOW_MS,
                        now,
                    )
                    .await
                    .map_err(internal)?;
                let slot = self
                    .storage
                    .take_rate_slot(
                        &pair_key,
                        throttle::PAIR_FAILURES_ALLOWED,
                        throttle::WINDOW_MS,
                        now,
                    )
                    .await
                    .map_err(internal)?;
                Err(match slot {
                    Slot::Granted => ConsoleError::BadCredentials,
                    Slot::Wait(_) => ConsoleError::Throttled,
                })
            }
        }
    }

    async fn user(&self, id: &str) -> Result<Option<SessionUser>, ConsoleError> {
        let Ok(id) = id.parse::<UserId>() else {
            return Ok(None);
        };
        match self.storage.get_user(id).await {
            Ok(u) if u.disabled_at.is_none() => Ok(Some(session_user(&u))),
            Ok(_) | Err(StorageError::NotFound) => Ok(None),
            Err(e) => Err(internal(e)),
        }
    }

    async fn needs_setup(&self) -> Result<bool, ConsoleError> {
        Ok(self.storage.count_users().await.map_err(internal)? == 0)
    }

    async fn create_first_admin(
        &self,
        email: &str,
        password: &str,
    ) -> Result<SessionUser, ConsoleError> {
        let set_up_already = || {
            tracing::warn!("refused first-run setup: users exist");
            ConsoleError::Invalid("The console is set up already; sign in instead.".into())
        };
        // A cheap early answer; the insert below is what decides.
        if !self.needs_setup().await? {
            return Err(set_up_already());
        }
        let user = crate::ops::tenants::new_user(email, password, Role::Admin).map_err(refused)?;
        // The first admin creates themselves (no request address reaches this port).
        let first = session_user(&user);
        let entry = audit_entry(
            &first,
            AuditAction::UserCreate,
            None,
            user.id,
            serde_json::json!({ "email": user.email, "role": "admin", "firstRun": true }),
        );
        if !self
            .storage
            .create_first_user(&user, Some(&entry))
            .await
            .map_err(internal)?
        {
            return Err(set_up_already());
        }
        Ok(session_user(&user))
    }
}

/// Paths of the console that anyone may load: the sign-in and first-run pages, their
/// assets and the server functions (each of which checks the session itself).
fn is_public(path: &str) -> bool {
    path == "/login"
        || path == "/setup"
        || path.starts_with("/pkg/")
        || path.starts_with("/api/")
        || path == "/favicon.ico"
}

/// Sends anyone not signed in to `/login?next=…` before a console page renders.
pub async fn require_login(
    State(state): State<AppState>,
    session: Session,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    if is_public(&path) {
        return next.run(req).await;
    }
    let user_id: Option<String> = session.get(SESSION_USER_KEY).await.ok().flatten();
    let signed_in = match user_id {
        Some(id) => matches!(state.console.user(&id).await, Ok(Some(_))),
        None => false,
    };
    if signed_in {
        next.run(req).await
    } else {
        let target = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let encoded: String = form_urlencoded::byte_serialize(target.as_bytes()).collect();
        Redirect::to(&format!("/login?next={encoded}")).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(role: &str) -> SessionUser {
        SessionUser {
            id: "usr_x".into(),
            email: "x@example.com".into(),
            role: serde_json::from_value(serde_json::json!(role)).expect("a role"),
            source: None,
        }
    }

    #[test]
    fn support_may_read_and_resend_but_not_change_settings() {
        assert!(require_role(&user("support"), Role::Support).is_ok());
        assert_eq!(
            require_role(&user("support"), Role::Admin),
            Err(ConsoleError::Forbidden)
        );
        assert!(require_role(&user("admin"), Role::Admin).is_ok());
        assert!(require_role(&user("admin"), Role::Support).is_ok());
        // An unknown role never becomes a signed-in user: it does not cross the wire.
        assert!(serde_json::from_value::<app::types::Role>(serde_json::json!("root")).is_err());
    }

    #[test]
    fn a_refusal_about_one_field_names_it_first() {
        assert_eq!(
            worded("invalid_name", "a channel name needs 1 to 80 characters"),
            "Name: a channel name needs 1 to 80 characters."
        );
        assert_eq!(
            worded("invalid_schema", "the schema is not a valid JSON Schema"),
            "Schema: the schema is not a valid JSON Schema."
        );
        assert_eq!(
            worded("invalid_window", "from is after to"),
            "From is after to."
        );
        // A retention's message names its field already ("retention: …").
        assert_eq!(
            worded(
                crate::ops::retention::INVALID_RETENTION,
                "retention: \"soon\" is not a duration"
            ),
            "Retention: \"soon\" is not a duration."
        );
    }
}
