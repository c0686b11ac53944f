//! Disabling, enabling and deleting console users (admins only). Nobody may do
//! it to themselves, and the last active admin stays: storage checks that in the
//! same statement as the change. A disabled or deleted user's sessions end at
//! once; a disabled user's sign-in fails like a wrong password.

use app::error::ConsoleError;
use app::port::UserPort;
use app::types::*;

use super::manage::invalid;
use super::{internal, parse_id, require_role, storage_error, views, Backend};
use crate::clock::now_ms;
use crate::domain::Role;
use crate::domain::*;
use crate::storage::UserChange;

impl Backend {
    /// The user `id`, refused when it is the actor.
    async fn other_user(
        &self,
        actor: &SessionUser,
        id: &str,
        doing: &str,
    ) -> Result<User, ConsoleError> {
        let id: UserId = parse_id(id, "user")?;
        if id.to_string() == actor.id {
            return Err(invalid(format!(
                "You cannot {doing} your own account; another admin can."
            )));
        }
        self.storage
            .get_user(id)
            .await
            .map_err(|e| storage_error(e, "user"))
    }
}

#[async_trait::async_trait]
impl UserPort for Backend {
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

    async fn set_user_disabled(
        &self,
        actor: &SessionUser,
        id: &str,
        disabled: bool,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let user = self
            .other_user(actor, id, if disabled { "disable" } else { "enable" })
            .await?;
        let action = if disabled {
            AuditAction::UserDisable
        } else {
            AuditAction::UserEnable
        };
        let detail = serde_json::json!({ "email": user.email });
        let entry = super::audit_entry(actor, action, None, user.id, detail);
        let change = self
            .storage
            .set_user_disabled(user.id, disabled.then(now_ms), Some(&entry))
            .await
            .map_err(internal)?;
        match change {
            UserChange::Done => {}
            UserChange::NotFound => return Err(ConsoleError::NotFound("user".into())),
            UserChange::LastAdmin => return Err(last_admin(&user)),
        }
        tracing::info!(user.id = %actor.id, target.id = %user.id, disabled, "console: user status changed");
        if !disabled {
            return Ok(Notice::new(format!(
                "Enabled {}: they can sign in again.",
                user.email
            )));
        }
        let ended = self
            .sessions
            .end_sessions_of(user.id)
            .await
            .map_err(internal)?;
        Ok(Notice::new(format!(
            "Disabled {}: they can no longer sign in{}.",
            user.email,
            ended_text(ended)
        )))
    }

    async fn delete_user(&self, actor: &SessionUser, id: &str) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let user = self.other_user(actor, id, "delete").await?;
        // The index of their sessions goes with the user: read it first.
        let sessions = self
            .storage
            .user_sessions(user.id)
            .await
            .map_err(internal)?;
        let detail = serde_json::json!({ "email": user.email });
        let entry = super::audit_entry(actor, AuditAction::UserDelete, None, user.id, detail);
        match self
            .storage
            .delete_user(user.id, Some(&entry))
            .await
            .map_err(internal)?
        {
            UserChange::Done => {}
            UserChange::NotFound => return Err(ConsoleError::NotFound("user".into())),
            UserChange::LastAdmin => return Err(last_admin(&user)),
        }
        self.sessions
            .end_sessions(&sessions)
            .await
            .map_err(internal)?;
        tracing::info!(user.id = %actor.id, target.id = %user.id, "console: user deleted");
        Ok(Notice::new(format!(
            "Deleted {}{}.",
            user.email,
            ended_text(sessions.len())
        )))
    }
}

fn last_admin(user: &User) -> ConsoleError {
    invalid(format!(
        "{} is the last active admin; create another admin first.",
        user.email
    ))
}

fn ended_text(n: usize) -> String {
    match n {
        0 => String::new(),
        1 => "; their session was ended".into(),
        n => format!("; their {n} sessions were ended"),
    }
}
