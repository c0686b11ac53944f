//! The server side of the Leptos console: the [`app::port::ConsoleBackend`]
//! implementation over storage, the database-backed session store, and the
//! guard that keeps every console page behind sign-in.
//!
//! - this file: [`Backend`], the role rule ([`require_role`]), sign-in, first-run setup,
//!   and the sign-in guard for pages;
//! - [`throttle`]: the sign-in throttling rule (per email and source address);
//! - [`views`]: domain records → the console's wire types;
//! - [`read`]: what every role may read (deliveries, destinations, notifications, …);
//! - [`overview`]: the charts' numbers;
//! - [`bulk`]: Send again and Cancel, one or many, in chunks;
//! - [`manage`]: the admins' changes (destinations, incoming webhooks, spaces, keys, users);
//! - [`settings`]: the destination form (create and edit) and test events;
//! - [`users`]: disabling, enabling and deleting users, which ends their sessions.

use std::net::IpAddr;
use std::sync::Arc;

use app::error::ConsoleError;
use app::port::{ConsoleBackend, SESSION_USER_KEY};
use app::types::*;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use tower_sessions::Session;

use crate::auth;
use crate::clock::now_ms;
use crate::domain::{Role, User, UserId};
use crate::startup::AppState;
use crate::storage::{Slot, Storage, StorageError};

mod bulk;
mod manage;
mod overview;
mod read;
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
}

impl Backend {
    pub fn new(
        storage: Arc<dyn Storage>,
        engine: crate::dispatch::engine::EngineHandle,
        config: Arc<crate::config::Config>,
        public_url: crate::config::PublicUrl,
        sessions: sessions::AnyStore,
        sandbox: crate::sandbox::Sandbox,
    ) -> Self {
        Self {
            storage,
            engine,
            config,
            public_url,
            sessions,
            sandbox,
        }
    }
}

/// Whether `actor` may do what needs `need`: admins may do everything, support staff
/// only what needs [`Role::Support`] (reading, Send again, cancel, marking read).
pub fn require_role(actor: &SessionUser, need: Role) -> Result<(), ConsoleError> {
    let role: Role = actor.role.parse().map_err(|_| ConsoleError::Forbidden)?;
    match (role, need) {
        (Role::Admin, _) | (Role::Support, Role::Support) => Ok(()),
        (Role::Support, Role::Admin) => {
            tracing::warn!(user.id = %actor.id, "refused a console action the role does not allow");
            Err(ConsoleError::Forbidden)
        }
    }
}

fn session_user(u: &User) -> SessionUser {
    SessionUser {
        id: u.id.to_string(),
        email: u.email.clone(),
        role: u.role.as_str().to_owned(),
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

/// Parses an ID from a form or URL; a malformed one is simply not found.
fn parse_id<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, ConsoleError> {
    s.trim()
        .parse()
        .map_err(|_| ConsoleError::NotFound(format!("{what} {s:?}")))
}

#[async_trait::async_trait]
impl ConsoleBackend for Backend {
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
        let user =
            crate::admin::new_user(email, password, Role::Admin).map_err(manage::user_error)?;
        if !self
            .storage
            .create_first_user(&user)
            .await
            .map_err(internal)?
        {
            return Err(set_up_already());
        }
        Ok(session_user(&user))
    }

    async fn unread_count(&self, actor: &SessionUser) -> Result<i64, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.storage
            .count_unread_notifications()
            .await
            .map_err(internal)
    }

    async fn spaces(&self, actor: &SessionUser) -> Result<Vec<SpaceView>, ConsoleError> {
        require_role(actor, Role::Support)?;
        Ok(self
            .storage
            .list_all_spaces()
            .await
            .map_err(internal)?
            .iter()
            .map(views::space)
            .collect())
    }

    async fn overview(&self, actor: &SessionUser, window: &str) -> Result<Overview, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.overview_of(window).await
    }

    async fn deliveries(
        &self,
        actor: &SessionUser,
        query: &DeliveryQuery,
    ) -> Result<DeliveryPage, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.delivery_page(query).await
    }

    async fn delivery(
        &self,
        actor: &SessionUser,
        id: &str,
    ) -> Result<DeliveryDetail, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.delivery_detail(id).await
    }

    async fn destinations(
        &self,
        actor: &SessionUser,
        space: &str,
    ) -> Result<Vec<DestinationView>, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.destination_list(space).await
    }

    async fn destination(
        &self,
        actor: &SessionUser,
        id: &str,
    ) -> Result<DestinationDetail, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.destination_detail(id, actor.is_admin()).await
    }

    async fn incoming_webhooks(
        &self,
        actor: &SessionUser,
        space: &str,
    ) -> Result<IncomingPage, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.incoming_list(space).await
    }

    async fn notifications(
        &self,
        actor: &SessionUser,
        unread_only: bool,
        before: &str,
    ) -> Result<NotificationPage, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.notification_page(unread_only, before).await
    }

    async fn bulk_preview(
        &self,
        actor: &SessionUser,
        selection: &BulkSelection,
    ) -> Result<BulkPreview, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.preview(selection).await
    }

    async fn bulk_run(
        &self,
        actor: &SessionUser,
        selection: &BulkSelection,
        cursor: Option<String>,
        totals: BulkTotals,
        expected: i64,
    ) -> Result<BulkProgress, ConsoleError> {
        require_role(actor, Role::Support)?;
        tracing::info!(user.id = %actor.id, op = %selection.op, all = selection.all, "console bulk action");
        self.run_bulk(selection, cursor, totals, expected).await
    }

    async fn resend_failed(
        &self,
        actor: &SessionUser,
        destination: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.resend_all_failed(destination).await
    }

    async fn mark_read(
        &self,
        actor: &SessionUser,
        id: Option<&str>,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.mark_notifications_read(id).await
    }

    async fn set_destination_active(
        &self,
        actor: &SessionUser,
        id: &str,
        active: bool,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.destination_status(actor, id, active).await
    }

    async fn create_destination(
        &self,
        actor: &SessionUser,
        form: &DestinationForm,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.new_destination(form).await
    }

    async fn rotate_secret(&self, actor: &SessionUser, id: &str) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.rotate(id).await
    }

    async fn set_incoming_active(
        &self,
        actor: &SessionUser,
        id: &str,
        active: bool,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.incoming_status(id, active).await
    }

    async fn create_incoming_webhook(
        &self,
        actor: &SessionUser,
        channel: &str,
        name: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.new_incoming_webhook(channel, name).await
    }

    async fn space(&self, actor: &SessionUser, id: &str) -> Result<SpaceDetail, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.space_detail(id).await
    }

    async fn create_space(
        &self,
        actor: &SessionUser,
        name: &str,
        plan: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.new_space(name, plan).await
    }

    async fn create_channel(
        &self,
        actor: &SessionUser,
        space: &str,
        name: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.new_channel(space, name).await
    }

    async fn create_bot(
        &self,
        actor: &SessionUser,
        space: &str,
        name: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.new_bot(space, name).await
    }

    async fn revoke_bot(
        &self,
        actor: &SessionUser,
        space: &str,
        id: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.bot_revoke(space, id).await
    }

    async fn create_api_key(
        &self,
        actor: &SessionUser,
        space: &str,
        name: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.new_api_key(space, name).await
    }

    async fn revoke_api_key(
        &self,
        actor: &SessionUser,
        space: &str,
        id: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.api_key_revoke(space, id).await
    }

    async fn users(&self, actor: &SessionUser) -> Result<Vec<UserView>, ConsoleError> {
        require_role(actor, Role::Admin)?;
        Ok(self
            .storage
            .list_all_users()
            .await
            .map_err(internal)?
            .iter()
            .map(views::user)
            .collect())
    }

    async fn create_user(
        &self,
        actor: &SessionUser,
        email: &str,
        password: &str,
        role: &str,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.new_user(email, password, role).await
    }

    async fn destination_edit(
        &self,
        actor: &SessionUser,
        id: &str,
    ) -> Result<DestinationEdit, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.edit_form(id).await
    }

    async fn update_destination(
        &self,
        actor: &SessionUser,
        form: &DestinationForm,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.change_destination(actor, form).await
    }

    async fn send_test_event(&self, actor: &SessionUser, id: &str) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.test_event(actor, id).await
    }

    async fn set_user_disabled(
        &self,
        actor: &SessionUser,
        id: &str,
        disabled: bool,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.user_disabled(actor, id, disabled).await
    }

    async fn delete_user(&self, actor: &SessionUser, id: &str) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        self.user_delete(actor, id).await
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
            role: role.into(),
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
        assert_eq!(
            require_role(&user("root"), Role::Support),
            Err(ConsoleError::Forbidden)
        );
    }
}
