//! Creating spaces (each with its first API key) and console users: shared by the
//! command line (`partyflow space create`, `user create`, `user bootstrap`) and the
//! console (the spaces and users pages, first-run setup).

use serde_json::json;

use super::audit::Author;
use super::credentials;
use super::names::{self, NameKind};
use super::OpsError;
use crate::auth;
use crate::clock::now_ms;
use crate::domain::*;
use crate::storage::{Storage, StorageError};

/// The name of a space's first API key.
pub const FIRST_API_KEY_NAME: &str = "default";

pub struct CreatedSpace {
    pub space: Space,
    /// The API key in clear text; shown once, only its hash is kept.
    pub api_key: String,
}

/// Creates a space with a first API key (the command line's: recorded by no one).
pub async fn create_space(
    store: &dyn Storage,
    name: &str,
    plan: Plan,
) -> Result<CreatedSpace, OpsError> {
    create_space_as(store, name, plan, None).await
}

/// Creates a space with a first API key, the creation recorded in the audit log as
/// `author`'s (one entry: the space, naming its first key).
pub async fn create_space_as(
    store: &dyn Storage,
    name: &str,
    plan: Plan,
    author: Option<&Author>,
) -> Result<CreatedSpace, OpsError> {
    let now = now_ms();
    let space = Space {
        id: SpaceId::new(),
        name: names::parse(NameKind::Space, name)?,
        plan,
        created_at: now,
        retention: None,
    };
    let (key, minted) = credentials::new_api_key(space.id, FIRST_API_KEY_NAME, now)?;
    let audit = author.map(|a| {
        let detail =
            json!({ "name": space.name, "plan": plan.as_str(), "firstApiKey": key.id.to_string() });
        a.entry(
            AuditAction::SpaceCreate,
            Some(space.id),
            space.id,
            detail,
            now,
        )
    });
    store.create_space(&space, audit.as_ref()).await?;
    store.create_api_key(&key, &minted.hash, None).await?;
    Ok(CreatedSpace {
        space,
        api_key: minted.secret,
    })
}

/// Creates a console user after checking the email and the password rules (the command
/// line's: recorded by no one).
pub async fn create_user(
    store: &dyn Storage,
    email: &str,
    password: &str,
    role: Role,
) -> Result<User, OpsError> {
    create_user_as(store, email, password, role, None).await
}

/// Creates a console user, recorded in the audit log as `author`'s.
pub async fn create_user_as(
    store: &dyn Storage,
    email: &str,
    password: &str,
    role: Role,
    author: Option<&Author>,
) -> Result<User, OpsError> {
    let user = new_user(email, password, role)?;
    let audit = author.map(|a| {
        let detail = json!({ "email": user.email, "role": role.as_str() });
        a.entry(
            AuditAction::UserCreate,
            None,
            user.id,
            detail,
            user.created_at,
        )
    });
    match store.create_user(&user, audit.as_ref()).await {
        Ok(()) => Ok(user),
        Err(StorageError::Conflict(_)) => Err(OpsError::Conflict {
            code: "email_taken",
            message: format!("a user with the email {} already exists", user.email),
        }),
        Err(e) => Err(e.into()),
    }
}

/// A console user, not stored yet: the email and the password rules checked, the
/// password hashed.
pub fn new_user(email: &str, password: &str, role: Role) -> Result<User, OpsError> {
    let email = check_email(email)?;
    auth::check_new_password(password).map_err(|why| OpsError::invalid("invalid_password", why))?;
    Ok(User {
        id: UserId::new(),
        email,
        password_hash: auth::hash_password(password).map_err(OpsError::Internal)?,
        role,
        created_at: now_ms(),
        disabled_at: None,
    })
}

/// A user's email as kept: trimmed, lowercase, something `@` something with a dot.
fn check_email(raw: &str) -> Result<String, OpsError> {
    let email = raw.trim().to_lowercase();
    let plausible = email.len() <= 254
        && email
            .split_once('@')
            .is_some_and(|(a, b)| !a.is_empty() && b.contains('.'));
    if !plausible {
        return Err(OpsError::invalid(
            "invalid_email",
            format!("{email:?} is not an email address"),
        ));
    }
    Ok(email)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_is_kept_trimmed_and_lowercase() {
        assert_eq!(
            check_email("  Ops@Example.COM ").unwrap(),
            "ops@example.com"
        );
        for bad in ["", "ops", "@example.com", "ops@localhost"] {
            assert!(check_email(bad).is_err(), "{bad:?}");
        }
        assert!(check_email(&format!("{}@example.com", "a".repeat(250))).is_err());
    }

    #[test]
    fn a_new_user_needs_a_good_password() {
        assert!(matches!(
            new_user("ops@example.com", "short", Role::Admin),
            Err(OpsError::Invalid {
                code: "invalid_password",
                ..
            })
        ));
    }
}
