//! Creating spaces (each with its first API key) and console users: shared by the
//! command line (`partyflow space create`, `user create`, `user bootstrap`) and the
//! console (the spaces and users pages, first-run setup).

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

/// Creates a space with a first API key.
pub async fn create_space(
    store: &dyn Storage,
    name: &str,
    plan: Plan,
) -> Result<CreatedSpace, OpsError> {
    let now = now_ms();
    let space = Space {
        id: SpaceId::new(),
        name: names::parse(NameKind::Space, name)?,
        plan,
        created_at: now,
        retention: None,
    };
    store.create_space(&space).await?;
    let (_, minted) = credentials::create_api_key(store, space.id, FIRST_API_KEY_NAME, now).await?;
    Ok(CreatedSpace {
        space,
        api_key: minted.secret,
    })
}

/// Creates a console user after checking the email and the password rules.
pub async fn create_user(
    store: &dyn Storage,
    email: &str,
    password: &str,
    role: Role,
) -> Result<User, OpsError> {
    let user = new_user(email, password, role)?;
    match store.create_user(&user).await {
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
